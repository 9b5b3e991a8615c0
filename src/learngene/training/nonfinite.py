"""Stopping a run whose loss or gradients stop being finite, with one line naming the step where it happened.

On the CPU every step is looked at before its update: reading a CPU tensor costs nothing. On CUDA reading a value
waits until the GPU has finished everything queued so far; doing that every step would stall the host once per
step, so that the next batch could not be prepared while the GPU works (nanoGPT reads its loss only at its log
interval, timm's train.py at its own). There the step's flags stay on the device and are read every
``CUDA_CHECK_EVERY`` steps, before every checkpoint and at the end of each epoch: the run stops at most
``CUDA_CHECK_EVERY - 1`` steps after the first non-finite value, says at which step that value appeared, and
never writes a checkpoint after it (the last good one stays, as on the CPU). Under DDP every rank reads at the
same steps and all stop together.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import named
from . import distributed as dist
from .checkpoint import NonFiniteError

CUDA_CHECK_EVERY = 20  # steps between reads of the flags on CUDA (each read waits for the GPU)


class NonFiniteWatch:
    """Watches one run's loss and gradient norm; ``every`` steps between reads (default: 1 on the CPU,
    :data:`CUDA_CHECK_EVERY` on CUDA). Steps are counted over the run from 0; ``steps_per_epoch`` names them.
    ``last_good`` ends a stop's message (where the run may resume from, as ``checkpoint.last_good`` says it)."""

    def __init__(
        self,
        device: torch.device,
        steps_per_epoch: int,
        every: int | None = None,
        *,
        last_good: Callable[[], str],
    ):
        self.device, self.steps_per_epoch, self.last_good = device, steps_per_epoch, last_good
        self.every = every if every is not None else CUDA_CHECK_EVERY if device.type == "cuda" else 1
        # deferred: (step, loss, gradient norm) of the first step with a non-finite one, on the device; step -1: none
        self._first: Tensor | None = None

    @property
    def deferred(self) -> bool:
        return self.every > 1

    def where(self, step: int) -> str:
        epoch, in_epoch = divmod(step, self.steps_per_epoch)
        return f"at epoch {epoch + 1}, step {in_epoch + 1}"

    def loss(self, loss: Tensor, step: int) -> None:
        """Before the backward pass: at once, stop if ``loss`` is not finite (on any rank)."""
        if self.deferred:
            return
        finite = bool(torch.isfinite(loss))
        # every rank must learn of it, or the others would wait for this one in backward forever
        if dist.count_true(not finite, loss.device) if dist.is_distributed() else not finite:
            value = loss.item() if not finite else "non-finite on another process"
            raise NonFiniteError(
                f"loss became {value} {self.where(step)}; lower {named('lr')} or check the data{self.last_good()}"
            )

    def gradients(self, grad_norm: Tensor, step: int) -> None:
        """After clipping, before the update: at once, stop if the gradient norm is not finite."""
        if self.deferred:
            return
        if not torch.isfinite(grad_norm):  # the same on every rank: DDP has already averaged the gradients
            raise NonFiniteError(
                f"gradients became {grad_norm.item()} {self.where(step)}; lower {named('lr')} or check the data"
                f"{self.last_good()}"
            )

    def note(self, loss: Tensor, grad_norm: Tensor | None, step: int) -> None:
        """Deferred: remember (on the device, without waiting for it) whether step ``step`` was the first bad one."""
        if not self.deferred:
            return
        loss = loss.detach().double()
        grad = grad_norm.detach().double() if grad_norm is not None else torch.zeros_like(loss)
        if self._first is None:
            self._first = torch.full((3,), -1.0, dtype=torch.float64, device=loss.device)
        first_bad = ~(torch.isfinite(loss) & torch.isfinite(grad)) & (self._first[0] < 0)
        self._first = torch.where(first_bad, torch.stack([torch.full_like(loss, step), loss, grad]), self._first)

    def check(self, steps_done: int) -> None:
        """Deferred: stop if any step so far (on any rank) had a non-finite loss or gradient norm."""
        if not self.deferred or self._first is None:
            return
        found = self._first[:1] >= 0
        anywhere = int(dist.all_reduce_sum(found.long()).item()) if dist.is_distributed() else 0
        step, loss, grad = self._first.tolist()
        if step < 0 and not anywhere:
            return
        if step < 0:
            what = "the loss or gradients became non-finite on another process"
        else:
            what = f"loss became {loss}" if not math.isfinite(loss) else f"gradients became {grad}"
            what += f" {self.where(int(step))}"
        raise NonFiniteError(
            f"{what}; the run stopped after {self.where(steps_done - 1)[3:]}, where it reads the GPU's check (every "
            f"{self.every} steps); lower {named('lr')} or check the data{self.last_good()}"
        )
