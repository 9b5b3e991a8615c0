"""Draws from the process's global random generators, made seed-exact and thread-safe: :func:`seeded_draws`.

Every draw learngene makes on its own takes a ``torch.Generator`` seeded by the call. Two kinds of draws cannot: timm
initializes a model it builds with torch's global generator (``timm.create_model`` takes no generator), and a
training run draws its dropout, drop-path and mixup from the global generators (torch's, numpy's, Python's) that
:func:`~learngene.training.steps.seed_everything` seeds. Two calls in two threads would interleave those draws, and a
call would leave the caller's generators somewhere else than it found them.

So each such section runs inside :func:`seeded_draws`: under one process-wide lock (a second thread's section waits
for the first to end), with the generators seeded by the call, and given back to the caller's states after. Why a
lock, not timm's initialization redone with a generator of our own: every descendant, every cell and the bytes the
fingerprints record (``benchmarks/fingerprints_methods.py``) stay those of timm's own initialization, whichever family
and timm version; the cost is that two threads' model builds and training runs take turns. A caller's own thread
that draws from torch's global generator without the lock while one of these sections runs can still move it: draw
with a generator of your own (``torch.Generator().manual_seed(...)``) beside learngene.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator

import numpy as np
import torch

_LOCK = threading.RLock()  # reentrant: a condensation (a section) builds its aux net (a section) inside


@contextlib.contextmanager
def seeded_draws(seed: int | None) -> Iterator[None]:
    """Inside: this thread alone draws from the global generators, torch's CPU generator, numpy's and Python's seeded
    by ``seed`` (None: left where the enclosing section has them); after: the states they had before, the caller's.
    CUDA generators are left alone (what learngene draws on its own is drawn on the CPU)."""
    with _LOCK:
        torch_state = torch.random.get_rng_state()
        numpy_state, python_state = np.random.get_state(), random.getstate()
        try:
            if seed is not None:
                torch.random.default_generator.manual_seed(seed)
                np.random.seed(seed % 2**32)
                random.seed(seed)
            yield
        finally:
            torch.random.set_rng_state(torch_state)
            np.random.set_state(numpy_state)
            random.setstate(python_state)
