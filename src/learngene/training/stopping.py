"""Stopping a training run on SIGINT / SIGTERM at a step boundary: a signal handler asks (:func:`request_stop`),
the running loop checkpoints after its current step and raises :class:`RunInterrupted`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import distributed as dist

STOP_CHECK_EVERY = 20  # steps between the ranks' agreement on a stop under DDP (one tiny all-reduce each)
_pending_stop: list[str] = []  # the signal a running loop is asked to stop for ("SIGINT" / "SIGTERM")
_running_loops = [0]


class RunInterrupted(KeyboardInterrupt):
    """A signal stopped a training loop between two optimizer steps; ``checkpoint`` is where it saved the
    run (None without a run dir). ``--resume`` continues from it bit for bit."""

    def __init__(self, signame: str, step: int, checkpoint: Path | None):
        super().__init__(signame)
        self.signame, self.step, self.checkpoint = signame, step, checkpoint


def request_stop(signame: str) -> bool:
    """For a signal handler: ask the running training loop to checkpoint and stop after its current step.
    False when no loop runs or a stop was already asked (a second Ctrl-C): then the caller stops at once."""
    if not _running_loops[0] or _pending_stop:
        return False
    _pending_stop.append(signame)
    return True


def stop_now(global_step: int, device: torch.device) -> bool:
    """Whether every rank stops after this step. One process reads a flag; ranks agree every
    STOP_CHECK_EVERY steps, so a signal that reaches only some of them stops all at the same step."""
    if not dist.is_distributed():
        return bool(_pending_stop)
    return global_step % STOP_CHECK_EVERY == 0 and dist.count_true(bool(_pending_stop), device) > 0
