"""Stopping a training run on SIGINT / SIGTERM at a step boundary: a signal handler asks (:func:`request_stop`),
the running loop checkpoints after its current step and raises :class:`RunInterrupted`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

from . import distributed as dist

STOP_CHECK_EVERY = 20  # steps between the ranks' agreement on a stop under DDP (one tiny all-reduce each)


class RunInterrupted(KeyboardInterrupt):
    """A signal stopped a training loop between two optimizer steps; ``checkpoint`` is where it saved the
    run (None without a run dir). ``--resume`` continues from it bit for bit."""

    def __init__(self, signame: str, step: int, checkpoint: Path | None):
        super().__init__(signame)
        self.signame, self.step, self.checkpoint = signame, step, checkpoint


class StopRequests:
    """What a signal handler asked of this process's training loops: how many run now (an aux net's inside a
    condensation's: the outermost one raises once the inner ones are done) and the signal of the one request."""

    def __init__(self) -> None:
        self.loops = 0
        self.signame: str | None = None

    def request(self, signame: str) -> bool:
        """Ask the running loop to checkpoint and stop after its current step. False when no loop runs or a stop
        was already asked (a second Ctrl-C): then the caller stops at once."""
        if not self.loops or self.signame is not None:
            return False
        self.signame = signame
        return True

    def now(self, device: torch.device, global_step: int | None = None) -> bool:
        """Whether every rank stops after this step. One process reads its flag; ranks agree (a collective every
        rank calls) at every ``STOP_CHECK_EVERY``-th ``global_step`` (None: now), so a signal that reaches only some
        of them stops all at the same step."""
        asked = self.signame is not None
        if not dist.is_distributed():
            return asked
        if global_step is not None and global_step % STOP_CHECK_EVERY:
            return False
        return dist.count_true(asked, device) > 0

    @contextlib.contextmanager
    def running(self) -> Iterator[bool]:
        """While one training loop runs; yields whether it is the outermost. The request ends with the last loop."""
        self.loops += 1
        try:
            yield self.loops == 1
        finally:
            self.loops -= 1
            if not self.loops:
                self.signame = None

    def interrupted(self, step: int, checkpoint: Path | None) -> RunInterrupted:
        return RunInterrupted(self.signame or "stop", step, checkpoint)


STOPS = StopRequests()  # the process's: a signal handler reaches the running loop only through it


def request_stop(signame: str) -> bool:
    """For a signal handler: :meth:`StopRequests.request` of the process's loops."""
    return STOPS.request(signame)
