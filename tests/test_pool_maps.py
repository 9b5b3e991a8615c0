"""Learngene Pool's stitch start as its paper states it (``stitch_init=learned``): the mean of each instance's three
learned teacher→student maps, transposed, no bias (:mod:`learngene.methods._pool_maps`)."""

from __future__ import annotations

import pytest
import torch

from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.methods import _pool_maps, pool
from learngene.methods._pool_maps import learned_stitches, third_ends
from learngene.methods.pool import paired_stitches
from learngene.registry import get_method
from learngene.training.loop import TrainConfig
from learngene.vit.spec import ViTSpec
from tests.conftest import make_images

SPEC = ViTSpec(depth=4, embed_dim=32, num_heads=4, img_size=16, patch_size=4, in_chans=1, num_classes=4)
QUICK = TrainConfig(max_steps=2, batch_size=8, progress=False)


def test_the_thirds_end_at_their_blocks():
    assert third_ends(12) == [3, 7, 11]  # their teacher blocks 4, 8 and 12
    assert third_ends(6) == [1, 3, 5]


def test_the_stitch_start_is_the_mean_of_three_maps_transposed_without_bias():
    """The rule typed again from the description (and the port's mode 'ours': stack, mean over dim 0,
    permute(1, 0), no bias), against learned_stitches fed each instance's mean map."""
    torch.manual_seed(0)
    teacher, widths = 32, [8, 16, 32]
    maps = {w: [torch.randn(w, teacher) for _ in range(3)] for w in widths}
    tensors = learned_stitches([torch.stack(maps[w]).mean(0) for w in widths], teacher, depth=3)
    into_widest = torch.stack(maps[8]).mean(dim=0).permute(1, 0)
    for layer in {layer for *_, layer in paired_stitches(3)}:
        assert torch.equal(tensors[f"stitch0_2.{layer}.weight"], into_widest)
        assert not tensors[f"stitch0_2.{layer}.bias"].any() and not tensors[f"stitch0_1.{layer}.bias"].any()
        # into an instance narrower than the teacher: through the teacher's width, the wider one's mean map after
        middle = torch.stack(maps[16]).mean(0) @ into_widest
        assert torch.equal(tensors[f"stitch0_1.{layer}.weight"], middle)
        assert tensors[f"stitch1_2.{layer}.weight"].shape == (32, 16)


def test_a_condensed_pool_starts_its_stitches_from_its_trained_maps(monkeypatch):
    seen = {}

    def keep(maps, teacher_width, depth):
        seen.update(maps=maps, width=teacher_width)
        return learned_stitches(maps, teacher_width, depth)

    monkeypatch.setattr(pool, "learned_stitches", keep)
    starts = []
    original = _pool_maps.MappedStudent.__init__

    def record(self, net, teacher_width, teacher_classes):
        original(self, net, teacher_width, teacher_classes)
        starts.append(self.mean_map().clone())

    monkeypatch.setattr(_pool_maps.MappedStudent, "__init__", record)
    torch.manual_seed(0)
    ancestry = Ancestry(SPEC.create_model().eval(), SPEC)
    inputs = CondenseInputs(train=make_images(16, num_classes=4, size=16), train_cfg=QUICK)
    gene = get_method("pool")(design="authors").condense(ancestry, inputs)
    assert [tuple(m.shape) for m in seen["maps"]] == [(8, 32), (16, 32), (32, 32)] and seen["width"] == 32
    assert all(not torch.equal(a, b) for a, b in zip(starts, seen["maps"]))  # the maps trained with the instances
    first_layer = paired_stitches(2)[0][2]
    assert torch.equal(gene.tensors[f"stitch0_2.{first_layer}.weight"], seen["maps"][0].T)
    assert gene.config["stitch_init"] == "learned"


def test_the_least_squares_start_stays_an_option_and_equal_width_refuses_it():
    torch.manual_seed(0)
    ancestry = Ancestry(SPEC.create_model().eval(), SPEC)
    inputs = CondenseInputs(train=make_images(16, num_classes=4, size=16), train_cfg=QUICK)
    gene = get_method("pool")(design="authors", stitch_init="least_squares").condense(ancestry, inputs)
    assert any(gene.tensors[k].any() for k in gene.tensors if k.startswith("stitch") and k.endswith("bias"))
    with pytest.raises(LearngeneError, match="stitch_init applies to design=authors"):
        get_method("pool")(stitch_init="least_squares")
