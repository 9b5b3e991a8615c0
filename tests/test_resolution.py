"""A descendant at another patch size or input resolution than its ancestry's (issue 46 item 3).

The one rule (learngene.vit.transfer.inherit_non_block): a patch-embedding kernel is resized as FlexiViT does
(timm's ``resample_patch_embed``), an absolute position table's patch rows are resampled to the new grid (timm's
``resample_abs_pos_embed``; the prefix tokens' rows kept), and RoPE needs nothing (the architecture computes it for
the grid). Every method that copies these tensors copies them through it.

Ancestries are random and tiny (depth 2, width 32, 2 heads, 16-px images of 8-px patches), moved away from timm's
initialization so that a tensor taken from the wrong place shows.
"""

from __future__ import annotations

import copy

import pytest
import timm
import torch
from safetensors.torch import load_file
from timm.layers import resample_abs_pos_embed, resample_patch_embed

from learngene.binding import bind_gene
from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.pipeline import expand
from learngene.registry import get_method, list_methods
from learngene.training.loop import TrainConfig, seed_everything
from learngene.vit.model_spec import spec_from_model
from tests.conftest import SMALL_OPTIONS, cli_ok, make_images

SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=8)
FAMILIES = {
    "deit3": "deit3_small_patch16_224",  # absolute positions without prefix rows, layer scale
    "dinov2_reg4": "vit_small_patch14_reg4_dinov2",  # registers
    "clip": "vit_base_patch16_clip_224",  # a class token's position row, pre-norm (no patch bias)
    "dinov3": "vit_small_patch16_dinov3",  # RoPE alone: no position table to resample
    "rope_mixed_ape": "vit_base_patch16_rope_mixed_ape_224",  # positions and per-layer RoPE frequencies
}
CHANGES = {
    "resolution": dict(img_size=32),  # a 4 x 4 grid of the same patches
    "patch": dict(patch_size=4),  # a 4 x 4 grid of smaller patches: FlexiViT's resize of the kernel
    "both": dict(img_size=24, patch_size=4),  # a 6 x 6 grid
}
DATA = make_images(8, num_classes=10, size=16, chans=3)
QUICK = TrainConfig(epochs=1, max_steps=1, batch_size=8, distill_lambda=0.5, progress=False)
# the methods that make these tensors for the size asked instead of copying them: mimetic and structured draw the
# position table at the target grid (their attention is solved on it), tal's and pith's hypernetworks predict every
# tensor for the graph of the size asked (pith fuses the ancestry's, resampled, into its prediction)
MADE_FOR_THE_SIZE = {"mimetic", "structured", "tal", "pith"}


def ancestry_of(family: str) -> Ancestry:
    torch.manual_seed(0)
    model = timm.create_model(FAMILIES[family], pretrained=False, num_classes=10, **SIZE)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return Ancestry(model.eval(), spec_from_model(model))


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method", ["pretrained", "weight_selection"])
def test_a_copied_descendant_at_another_resolution_is_the_ancestry_as_timm_resamples_it(method, family, change):
    """The bound is 0: the descendant at the ancestry's depth and width holds the ancestry's blocks and its embeddings
    resampled by timm's own functions, which is what timm's ``set_input_size`` makes of the ancestry; the same
    tensors in the same modules compute the same features, bit for bit, on the same images."""
    ancestry = ancestry_of(family)
    spec = ancestry.spec.replace(**CHANGES[change])
    gene = get_method(method)().condense(ancestry)
    descendant = make_descendant(gene, spec).eval()
    reference = copy.deepcopy(ancestry.model)
    reference.set_input_size(img_size=spec.img_size, patch_size=spec.patch_size)
    ours, timms = descendant.state_dict(), reference.state_dict()
    assert ours.keys() == timms.keys() and all(torch.equal(ours[k], timms[k]) for k in ours)
    x = torch.randn(3, 3, spec.img_size, spec.img_size)
    with torch.no_grad():
        assert torch.equal(descendant.forward_features(x), reference.forward_features(x))
        assert torch.equal(descendant(x), reference(x))


@pytest.mark.parametrize("family", ["deit3", "rope_mixed_ape"])
@pytest.mark.parametrize("method", list_methods())
def test_every_method_resamples_the_embeddings_it_copies_and_nothing_else(method, family):
    """At another patch size and resolution the descendant's kernel and position table are timm's resamples of those
    the method gives at the ancestry's, and every other tensor is the one it gives there (a resolution changes the
    embeddings alone); the methods that make these tensors for the size asked are the ones named above."""
    ancestry = ancestry_of(family)
    cls = get_method(method)
    seed_everything(0)
    inputs = CondenseInputs(train=DATA, train_cfg=QUICK) if cls.needs_data else None
    gene = cls(**SMALL_OPTIONS.get(method, {})).condense(ancestry, inputs)
    own = ancestry.spec
    other = own.replace(img_size=24, patch_size=4)
    bound = bind_gene(gene, check=False)
    with torch.no_grad():  # what the method gives (a layer's RoPE frequencies apart: timm's draw fills the others)
        a, b = bound.method.expand(gene, own), bound.method.expand(gene, other)
    assert a.keys() == b.keys()
    expected = {}
    if "patch_embed.proj.weight" in a:
        expected["patch_embed.proj.weight"] = resample_patch_embed(a["patch_embed.proj.weight"], [4, 4], verbose=False)
    if "pos_embed" in a:
        prefix = own.family.pos_prefix_tokens
        grid = resample_abs_pos_embed(a["pos_embed"][:, prefix:], [6, 6], [2, 2], num_prefix_tokens=0, verbose=False)
        expected["pos_embed"] = torch.cat([a["pos_embed"][:, :prefix], grid], dim=1)
    same = all(torch.equal(b[k], v) for k, v in expected.items()) and all(
        torch.equal(a[k], b[k]) for k in a if k not in expected
    )
    assert same == (method not in MADE_FOR_THE_SIZE), method
    at_other = make_descendant(gene, other)
    timm_model = timm.create_model(other.arch, pretrained=False, **other.timm_kwargs())
    timm_model.load_state_dict(at_other.state_dict(), strict=True)
    with torch.no_grad():
        assert torch.isfinite(at_other.eval()(torch.randn(2, 3, 24, 24))).all()


def test_expand_takes_a_patch_size_and_resolution_from_python_and_the_command_line(tmp_path):
    ancestry = ancestry_of("deit3")
    gene = get_method("weight_selection")().condense(ancestry)
    descendant = expand(gene, {"img_size": 32, "patch_size": 4, "depth": 1})
    assert (descendant.spec.img_size, descendant.spec.patch_size, descendant.spec.grid_size) == (32, 4, 8)
    gene.save(tmp_path / "g.safetensors")
    cli_ok(
        "expand", tmp_path / "g.safetensors", "--img-size", 32, "--patch-size", 4, "--depth", 1, "--quiet",
        "--out", tmp_path / "d.safetensors",
    )  # fmt: skip
    model = timm.create_model(
        FAMILIES["deit3"], pretrained=False, **{**SIZE, "depth": 1, "img_size": 32, "patch_size": 4, "num_classes": 10}
    )
    model.load_state_dict(load_file(str(tmp_path / "d.safetensors")), strict=True)
    assert torch.equal(model.pos_embed, descendant.model.pos_embed)


def test_a_patch_size_that_does_not_divide_the_resolution_or_other_channels_is_one_line():
    gene = get_method("weight_selection")().condense(ancestry_of("deit3"))
    with pytest.raises(LearngeneError, match=r"patch_size=5 does not divide img_size=16; choose a patch size"):
        expand(gene, {"patch_size": 5})
    with pytest.raises(LearngeneError, match=r"takes 3-channel images but the target asks for 1; keep in_chans=3"):
        expand(gene, {"in_chans": 1})
