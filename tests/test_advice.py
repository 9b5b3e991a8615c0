"""Advice before compute: each method's declared reach (``Method.cannot_reach``) against what its ``expand`` does."""

from __future__ import annotations

import pytest
import torch

from learngene.binding import bind_gene
from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.registry import get_method
from learngene.training.loop import TrainConfig
from learngene.vit.spec import check_state_shapes

from .conftest import SMALL_OPTIONS, TINY, make_images, own_methods

# shallower, as deep and deeper than TINY (L2-D32-H2), each at narrower, the same, wider and other head counts
TARGETS = [
    TINY.replace(depth=depth, embed_dim=width, num_heads=heads)
    for depth in (1, 2, 3)
    for width, heads in ((16, 1), (32, 1), (32, 2), (32, 4), (48, 3), (64, 2), (64, 4))
]


def condensed(name: str, options: dict):
    """A gene of ``name`` from TINY with ``options``; a method that reads data sees 16 toy images for one step."""
    cls = get_method(name)
    method = cls(**options)
    inputs = None
    if cls.needs_data:
        inputs = CondenseInputs(
            train=make_images(16, num_classes=TINY.num_classes, size=TINY.img_size),
            train_cfg=TrainConfig(epochs=1, max_steps=1, batch_size=8, progress=False, distill_lambda=1.0),
        )
    torch.manual_seed(0)
    ancestry = Ancestry(TINY.create_model().eval(), TINY)
    return method, method.condense(ancestry, inputs)


def refusal(gene, spec) -> str:
    """What expanding ``gene`` to ``spec`` refuses with (on ``meta``, as compare's grid decides), "" where it makes it."""
    try:
        bound = bind_gene(gene)
        check_state_shapes(bound.expand_on_meta(spec), spec, f"the {gene.method} gene")
    except LearngeneError as exc:
        return str(exc)
    return ""


# options that change a method's reach, beyond what compare gives it
OTHER_OPTIONS = [
    ("pool", {"design": "authors"}),
    ("wave", {"template_size": 32}),
    ("grow", {"width": "net2net"}),
    ("weight_selection", {"head_aware": False}),
    ("tleg", {"aux_embed_dim": 64, "aux_num_heads": 4}),
]


@pytest.mark.parametrize(("name", "given"), [(name, {}) for name in own_methods()] + OTHER_OPTIONS)
def test_declared_reach_is_what_expand_does(name, given):
    """For every size of the grid, a method declares a size out of reach exactly where expanding a real gene of it
    (condensed with the options compare gives it for these sizes) is refused: advice and ``compare``'s skipping
    rely on the declaration instead of condensing first."""
    cls = get_method(name)
    options = {**cls.bench_options(TARGETS), **SMALL_OPTIONS.get(name, {}), **given}
    method, gene = condensed(name, options)
    for spec in TARGETS:
        declared = cls.cannot_reach(method.config, TINY, spec)
        real = refusal(gene, spec)
        assert bool(declared) == bool(real), (spec.short(), declared, real)
