"""Benchmark profiles: the budgets of a run, as data.

A profile fixes every size and budget of the protocol (ancestry, condensation, descendants,
fine-tuning); the protocol itself (:mod:`learngene.bench.protocol`) has one code path for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import LearngeneError
from ..spec import ViTSpec, get_preset


@dataclass(frozen=True)
class Profile:
    """Sizes and budgets of one benchmark run.

    Attributes:
        name: profile key.
        ancestry: spec of the ancestry trained on Fashion-MNIST.
        ancestry_epochs, ancestry_images: its training budget (``None`` images = the whole train split).
        condense_epochs, condense_images: budget of methods that train a gene (aux nets).
        depths: descendant depths (width and heads of the ancestry).
        finetune_epochs, finetune_images: budget of every descendant, identical for every method.
        eval_images: test images used for accuracy (``None`` = the whole test split).
        adapt_steps: steps of the ``adapt`` stage of adaptable methods (WAVE scalers, PEG φ).
        seeds: descendant seeds (init of what the gene does not provide, data order).
        methods: registered methods to run (``None`` = all).
        method_options: per-method ``Config`` overrides.
        batch_size, lr: shared by every training stage.
    """

    name: str
    ancestry: ViTSpec
    ancestry_epochs: int
    ancestry_images: int | None
    condense_epochs: int
    condense_images: int | None
    depths: tuple[int, ...]
    finetune_epochs: int
    finetune_images: int | None
    eval_images: int | None
    adapt_steps: int
    seeds: tuple[int, ...] = (0,)
    methods: tuple[str, ...] | None = None
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch_size: int = 128
    lr: float = 1e-3


PROFILES: dict[str, Profile] = {
    # `learngene demo`: the whole job in minutes on a 2-core CPU; one seed, no claims beyond the table.
    "demo": Profile(
        name="demo",
        ancestry=get_preset("cpu_tiny"),
        ancestry_epochs=3, ancestry_images=20_000,
        condense_epochs=2, condense_images=10_000,
        depths=(2, 4, 6),
        finetune_epochs=1, finetune_images=8_000, eval_images=5_000,
        adapt_steps=60,
    ),
    # a pipeline check in seconds (tests, CI): numbers mean nothing
    "quick": Profile(
        name="quick",
        ancestry=get_preset("cpu_tiny").replace(depth=2, embed_dim=32, num_heads=2),
        ancestry_epochs=1, ancestry_images=1_000,
        condense_epochs=1, condense_images=500,
        depths=(1, 3),
        finetune_epochs=1, finetune_images=500, eval_images=500,
        adapt_steps=3,
    ),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise LearngeneError(f"unknown benchmark profile {name!r}; choose one of {', '.join(PROFILES)}") from None
