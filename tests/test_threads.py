"""Thread-safe, seed-exact use cases (issue 56): the same call gives the same bytes from 4 threads at once, from other
processes, and one after another, and leaves the caller's global generators where they were.

timm initializes a model from torch's global generator; learngene's sections that draw from it take turns under one
lock with the generators seeded by the call and given back after (:mod:`learngene.host.rng`). Before, 4 threads
expanding one gene at once drew each other's numbers (the layers a gene does not hold came out different).
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest
import torch

import learngene as lg
from learngene.method import Ancestry
from tests.conftest import TINY, make_images

THREADS = 4


@functools.cache
def _ancestry() -> Ancestry:
    """Built once, before any thread starts: its timm build draws from the global generator outside learngene's lock,
    which would move another thread's draws (a caller's own global draws are its own to order:
    learngene.host.rng); the threads share it, read only."""
    gen = torch.Generator().manual_seed(0)
    model = TINY.create_model()
    with torch.no_grad():  # weights of the test's own draw, not of the global generator
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return Ancestry(model.eval(), TINY)


def _digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(key.encode())
        h.update(state[key].detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _expand(method: str, seed: int) -> str:
    """A descendant deeper than the gene (pretrained: its third layer is timm's initialization; mimetic: every tensor
    drawn), by seed; its bytes' digest."""
    gene = lg.condense(method, _ancestry()).gene
    return _digest(lg.expand(gene, {"depth": 3}, seed=seed).model.state_dict())


def _train(seed: int) -> str:
    """A fine-tuning run, as a compare cell's: a descendant with a fresh head trained a few steps (dropout-free, but
    its data order, augmentation and the head's initialization are drawn)."""
    descendant = lg.expand(lg.condense("pretrained", _ancestry()).gene, seed=seed)
    cfg = {"epochs": 1, "batch_size": 16, "seed": seed, "augment": True, "progress": False, "eval_images": 16}
    return _digest(lg.train(descendant, make_images(n=32), train_cfg=cfg, new_head=True).model.state_dict())


CASES = [("pretrained", 1), ("pretrained", 2), ("mimetic", 1), ("mimetic", 3)]


def test_expand_from_four_threads_at_once_equals_sequential_calls():
    _ancestry()
    sequential = [_expand(method, seed) for method, seed in CASES]
    assert len(set(sequential)) == len(sequential)  # the seeds and methods give different descendants
    with ThreadPoolExecutor(THREADS) as pool:
        at_once = list(pool.map(lambda case: _expand(*case), CASES * 2))
    assert at_once == sequential * 2


def test_fine_tuning_from_threads_at_once_equals_sequential_runs():
    _ancestry()
    sequential = [_train(seed) for seed in (0, 1)]
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(_train, (0, 1, 0, 1))) == sequential * 2


def _condense(seed: int) -> str:
    """A condensation that trains (tleg's aux net, initialized by timm and distilled a few steps), by seed."""
    cfg = {"epochs": 1, "max_steps": 2, "batch_size": 16, "seed": seed, "progress": False, "eval_images": 16}
    gene = lg.condense("tleg", _ancestry(), data=make_images(n=32), train_cfg=cfg).gene
    return _digest(gene.tensors)


def test_a_trained_condensation_from_threads_at_once_equals_sequential_runs():
    _ancestry()
    sequential = [_condense(seed) for seed in (0, 1)]
    assert sequential[0] != sequential[1]
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(_condense, (0, 1, 0, 1))) == sequential * 2


@pytest.mark.integration  # two spawned interpreters that import torch: end to end
def test_other_processes_give_the_same_bytes():
    """The seed alone fixes the result: a fresh process (another start of the global generators) gives the bytes this
    one gives."""
    here = [_expand(method, seed) for method, seed in CASES[:2]]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        there = list(pool.map(_expand, *zip(*CASES[:2], strict=True)))
    assert there == here


@pytest.mark.parametrize("call", ["expand", "condense", "train"])
def test_a_call_leaves_the_callers_global_generators_where_they_were(call):
    torch.manual_seed(123)
    np.random.seed(123)
    before = torch.get_rng_state(), np.random.get_state()[1].copy()
    if call == "expand":
        lg.expand(lg.condense("pretrained", _ancestry()).gene, {"depth": 3}, seed=5)
    elif call == "condense":
        lg.condense("mimetic", _ancestry())
    else:
        _train(0)
    assert torch.equal(torch.get_rng_state(), before[0])
    assert np.array_equal(np.random.get_state()[1], before[1])
