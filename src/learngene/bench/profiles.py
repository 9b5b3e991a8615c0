"""Benchmark profiles: the sizes and budgets of a run, as data.

A profile fixes every size and budget of the protocol (ancestry, condensation, descendant sizes,
tasks, seeds); the protocol itself (:mod:`learngene.bench.protocol`) has one code path for all of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..errors import LearngeneError
from ..spec import ViTSpec, get_preset


@dataclass(frozen=True)
class Task:
    """A downstream task every descendant is fine-tuned on with the same budget.

    Attributes:
        name: key in tables and file names.
        data: ``fashion_mnist`` or ``digits`` (loaded at the ancestry's image size and channels).
        epochs: fine-tuning epochs (top-1 is measured after each).
        train_images: a fixed random subset of the training split (``None``: all of it).
        shots: labelled images per class instead (the few-shot tasks).
        eval_images: a fixed subset of the test split for accuracy (``None``: all of it).
        new_head: every method gets the same freshly initialized classifier (another label space:
            the gene's Fashion-MNIST head would mean nothing there).
        scratch_factor: scratch is also trained for this many times the epochs (the papers' "same
            accuracy at a fraction of the training" claim); 1 = no such run.
    """

    name: str
    data: str
    epochs: int
    train_images: int | None = None
    shots: int | None = None
    eval_images: int | None = None
    new_head: bool = False
    scratch_factor: int = 1


@dataclass(frozen=True)
class Profile:
    """Sizes and budgets of one benchmark run.

    Attributes:
        name: profile key.
        ancestry: spec of the ancestry trained on Fashion-MNIST.
        ancestry_epochs, ancestry_images: its training budget (``None`` images = the whole train split).
        condense_epochs, condense_images: budget (and the upstream data) of methods that train or
            measure a gene; adaptable methods adapt on the same upstream images.
        sizes: descendant sizes as ``(depth, embed_dim, num_heads)``; other fields follow the ancestry.
        tasks: what every descendant is fine-tuned on.
        adapt_steps: optimizer steps of the ``adapt`` stage of adaptable methods (WAVE scalers, PEG φ).
        seeds: descendant seeds (initialization of what the gene does not provide, data order).
        methods: registered methods to run (``None`` = all).
        method_options: per-method ``Config`` overrides (WAVE's templates are as wide as the narrowest
            size, so that it can make every width of the grid).
        condense_lambda: distillation λ of trained condensations, per method, where it should differ
            from the method's paper (``Method.distill_lambda``: TLEG's pure KL, WAVE's KL + CE).
        batch_size, lr: shared by every training stage.
    """

    name: str
    ancestry: ViTSpec
    ancestry_epochs: int
    ancestry_images: int | None
    condense_epochs: int
    condense_images: int | None
    sizes: tuple[tuple[int, int, int], ...]
    tasks: tuple[Task, ...]
    adapt_steps: int
    seeds: tuple[int, ...] = (0,)
    methods: tuple[str, ...] | None = None
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    condense_lambda: dict[str, float] = field(default_factory=dict)
    batch_size: int = 128
    lr: float = 1e-3

    def specs(self) -> list[ViTSpec]:
        """The descendant sizes, in table order."""
        return [self.ancestry.replace(depth=d, embed_dim=w, num_heads=h) for d, w, h in self.sizes]

    def replace(self, **changes: Any) -> "Profile":
        return dataclasses.replace(self, **changes)


def grid(depths: tuple[int, ...], widths: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int, int], ...]:
    """Every depth at every ``(embed_dim, num_heads)`` width."""
    return tuple((d, w, h) for w, h in widths for d in depths)


_TINY = get_preset("cpu_tiny")
_CPU_ANCESTRY = get_preset("cpu_tiny").replace(depth=6)  # L6-D64-H4, 16-dim heads

PROFILES: dict[str, Profile] = {
    # `learngene demo`: the whole job in minutes on a 2-core CPU; one seed, one task, no claims beyond the table.
    "demo": Profile(
        name="demo",
        ancestry=_TINY,
        ancestry_epochs=3, ancestry_images=20_000,
        condense_epochs=2, condense_images=10_000,
        sizes=grid((2, 4, 6), ((64, 4),)),
        tasks=(Task("fashion_mnist", "fashion_mnist", epochs=1, train_images=8_000, eval_images=5_000),),
        adapt_steps=60,
    ),
    # a pipeline check in well under two minutes (tests, CI): every stage and task, numbers mean nothing
    "quick": Profile(
        name="quick",
        ancestry=_TINY.replace(depth=2, embed_dim=32, num_heads=2),
        ancestry_epochs=1, ancestry_images=1_000,
        condense_epochs=1, condense_images=500,
        sizes=((1, 32, 2), (3, 32, 2), (2, 16, 1)),
        tasks=(Task("fashion_mnist", "fashion_mnist", epochs=1, train_images=300, eval_images=300, scratch_factor=2),
               Task("digits", "digits", epochs=1, train_images=200, eval_images=200, new_head=True),
               Task("fashion_mnist_5shot", "fashion_mnist", epochs=1, shots=5, eval_images=300)),
        adapt_steps=3,
        method_options={"wave": {"template_size": 16}},
    ),
    # the evidence run: about an hour on 2 CPU cores (sized from the measured throughputs, see docs/RESULTS.md)
    "cpu": Profile(
        name="cpu",
        ancestry=_CPU_ANCESTRY,
        # condensation gets half the ancestry's training (2 of its 4 epochs): with 2 epochs on 10k images
        # (158 steps) the aux nets reached only 50-56 % against the ancestry's 83 %
        ancestry_epochs=4, ancestry_images=None,
        condense_epochs=2, condense_images=None,
        sizes=grid((2, 4, 6), ((64, 4),)) + grid((2, 6), ((32, 2),)),
        tasks=(Task("fashion_mnist", "fashion_mnist", epochs=3, train_images=2_000, eval_images=1_000, scratch_factor=10),
               Task("digits", "digits", epochs=3, new_head=True),
               Task("fashion_mnist_20shot", "fashion_mnist", epochs=5, shots=20, eval_images=1_000)),
        adapt_steps=50,
        seeds=(0, 1, 2),
        method_options={"wave": {"template_size": 32}},
    ),
    # bigger models and the full data for a GPU (bf16); resumable, so `--time-limit` splits it into short commands
    "gpu": Profile(
        name="gpu",
        ancestry=ViTSpec(depth=12, embed_dim=384, num_heads=6, img_size=28, patch_size=4, in_chans=1, num_classes=10),
        ancestry_epochs=30, ancestry_images=None,
        condense_epochs=10, condense_images=None,
        sizes=grid((3, 6, 12), ((384, 6), (192, 3))),
        tasks=(Task("fashion_mnist", "fashion_mnist", epochs=2, train_images=None, scratch_factor=10),
               Task("digits", "digits", epochs=20, new_head=True),
               Task("fashion_mnist_20shot", "fashion_mnist", epochs=20, shots=20)),
        adapt_steps=300,
        seeds=(0, 1, 2),
        method_options={"wave": {"template_size": 192}},
        batch_size=256,
    ),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise LearngeneError(f"unknown benchmark profile {name!r}; choose one of {', '.join(PROFILES)}") from None
