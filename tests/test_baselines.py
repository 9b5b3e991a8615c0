import math

import pytest
import torch

from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry
from learngene.registry import get_method
from learngene.vit.heads import split_proj, split_qkv
from learngene.vit.spec import block_key
from learngene.vit.transfer import evenly_spaced


def _deep_ancestry(tiny_spec, depth=6):
    torch.manual_seed(1)
    spec = tiny_spec.replace(depth=depth)
    return Ancestry(spec.create_model().eval(), spec)


def _block(state, layer):
    prefix = f"blocks.{layer}."
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _grow(name, ancestry, depth, **opts):
    gene = get_method(name)(**opts).condense(ancestry)
    model = make_descendant(gene, ancestry.spec.replace(depth=depth), seed=123)
    return gene, model.state_dict()


def test_scratch_is_timm_default_init(tiny_ancestry, tiny_spec):
    gene, state = _grow("scratch", tiny_ancestry, 2)
    torch.manual_seed(123)
    assert _same(state, tiny_spec.create_model().state_dict()) and gene.num_stored_params == 0


def test_auto_lg_keeps_the_bottom_half_and_embeddings(tiny_spec):
    anc = _deep_ancestry(tiny_spec)
    src = anc.model.state_dict()
    gene, state = _grow("auto_lg", anc, 5)
    for layer in range(3):
        assert _same(_block(state, layer), _block(src, layer))
    assert not torch.equal(state[block_key(3, "attn.qkv.weight")], src[block_key(3, "attn.qkv.weight")])
    assert torch.equal(state["pos_embed"], src["pos_embed"]) and torch.equal(
        state["patch_embed.proj.weight"], src["patch_embed.proj.weight"]
    )
    assert not torch.equal(state["head.weight"], src["head.weight"])
    assert (
        gene.num_stored_params
        == 3 * sum(v.numel() for v in _block(src, 0).values())
        + src["pos_embed"].numel()
        + src["cls_token"].numel()
        + src["patch_embed.proj.weight"].numel()
        + src["patch_embed.proj.bias"].numel()
    )


def test_heru_lg_puts_the_last_three_layers_on_top(tiny_spec):
    anc = _deep_ancestry(tiny_spec)
    src = anc.model.state_dict()
    _, state = _grow("heru_lg", anc, 5)
    for i in range(3):
        assert _same(_block(state, 2 + i), _block(src, 3 + i))
    assert not torch.equal(state[block_key(0, "mlp.fc1.weight")], src[block_key(0, "mlp.fc1.weight")])
    assert torch.equal(state["head.weight"], src["head.weight"]) and not torch.equal(
        state["pos_embed"], src["pos_embed"]
    )
    _, shallow = _grow("heru_lg", anc, 2)  # only the last two fit
    assert _same(_block(shallow, 0), _block(src, 4)) and _same(_block(shallow, 1), _block(src, 5))


@pytest.mark.parametrize(
    "variant, depth, expected",
    [
        ("first", 3, {0: 0, 1: 1, 2: 2}),
        ("last", 3, {0: 3, 1: 4, 2: 5}),
        ("middle", 2, {0: 2, 1: 3}),
        ("first", 8, {i: i for i in range(6)}),
        ("last", 8, {2 + i: i for i in range(6)}),
        ("middle", 8, {1 + i: i for i in range(6)}),
    ],
)
def test_pretrained_lines_up_layers_as_pre_fin(tiny_spec, variant, depth, expected):
    anc = _deep_ancestry(tiny_spec)
    src = anc.model.state_dict()
    _, state = _grow("pretrained", anc, depth, variant=variant)
    for target, source in expected.items():
        assert _same(_block(state, target), _block(src, source))
    for target in set(range(depth)) - set(expected):
        assert not any(
            torch.equal(_block(state, target)["attn.qkv.weight"], _block(src, s)["attn.qkv.weight"]) for s in range(6)
        )


def test_pretrained_at_the_ancestry_size_is_the_ancestry(tiny_ancestry, tiny_spec):
    _, state = _grow("pretrained", tiny_ancestry, tiny_spec.depth)
    assert _same(state, tiny_ancestry.model.state_dict())


def test_block_copying_methods_refuse_another_width(tiny_ancestry, tiny_spec):
    gene = get_method("pretrained")().condense(tiny_ancestry)
    with pytest.raises(LearngeneError, match="use weight_selection"):
        make_descendant(gene, tiny_spec.replace(embed_dim=16))


def test_evenly_spaced_indices():
    assert evenly_spaced(8, 4).tolist() == [0, 2, 4, 6]
    assert evenly_spaced(5, 3).tolist() == [0, 2, 4]
    assert evenly_spaced(7, 7).tolist() == list(range(7))
    with pytest.raises(LearngeneError, match="only shrink"):
        evenly_spaced(4, 6)


def test_weight_selection_to_the_same_size_is_the_identity(tiny_ancestry, tiny_spec):
    _, state = _grow("weight_selection", tiny_ancestry, tiny_spec.depth)
    assert _same(state, tiny_ancestry.model.state_dict())


def test_weight_selection_keeps_whole_heads(tiny_spec):
    torch.manual_seed(0)
    big = tiny_spec.replace(embed_dim=48, num_heads=4, depth=3)  # heads of 12
    anc = Ancestry(big.create_model().eval(), big)
    gene = get_method("weight_selection")().condense(anc)
    small = big.replace(embed_dim=12, num_heads=2, depth=2)  # heads of 6
    state = make_descendant(gene, small).state_dict()
    src = anc.model.state_dict()
    heads, dims, cols = [0, 2], [0, 2, 4, 6, 8, 10], evenly_spaced(48, 12)
    for part in range(3):
        new = split_qkv(state["blocks.1.attn.qkv.weight"], 2)[part]
        old = split_qkv(src["blocks.1.attn.qkv.weight"], 4)[part]
        assert torch.equal(new, old[heads][:, dims][:, :, cols])
        assert torch.equal(
            split_qkv(state["blocks.1.attn.qkv.bias"], 2)[part],
            split_qkv(src["blocks.1.attn.qkv.bias"], 4)[part][heads][:, dims],
        )
    assert torch.equal(
        split_proj(state["blocks.1.attn.proj.weight"], 2),
        split_proj(src["blocks.1.attn.proj.weight"], 4)[heads][:, cols][:, :, dims],
    )
    assert torch.equal(state["head.weight"], src["head.weight"][:, cols])
    flat = get_method("weight_selection")(head_aware=False).expand(gene, small)
    assert flat["blocks.0.attn.qkv.weight"].shape == (36, 12)
    with pytest.raises(LearngeneError, match="head-aware"):
        make_descendant(gene, big.replace(num_heads=6, embed_dim=48))


def test_weight_picking_methods_need_a_vit(tiny_spec):
    anc = Ancestry(torch.nn.Linear(3, 3), None)
    for name in ("pretrained", "heru_lg", "auto_lg", "weight_selection"):
        with pytest.raises(LearngeneError, match="ViT ancestry"):
            get_method(name)().condense(anc)
    assert get_method("scratch")().condense(anc).num_stored_params == 0


def test_scratch_fix_init_is_timms_fix_init_of_scratchs_draws(tiny_spec):
    """The descendant is timm's VisionTransformer(fix_init=True) of the same seed, bit for bit: scratch's weights of
    that seed with each block's attn.proj and mlp.fc2 weights divided by sqrt(2 (l + 1)), retyped here from timm's
    fix_init_weight; every other tensor is scratch's."""
    from learngene.host.rng import seeded_draws

    spec = tiny_spec.replace(depth=3)
    fixed = make_descendant(get_method("scratch_fix_init")().condense(None), spec, seed=7).state_dict()
    scratch = make_descendant(get_method("scratch")().condense(None), spec, seed=7).state_dict()
    with seeded_draws(7):
        timm_own = spec.create_model(fix_init=True).state_dict()
    assert _same(fixed, timm_own)
    rescaled = {f"blocks.{layer}.{part}.weight" for layer in range(3) for part in ("attn.proj", "mlp.fc2")}
    for key, tensor in fixed.items():
        if key in rescaled:
            layer = int(key.split(".")[1])
            assert torch.equal(tensor, scratch[key] / math.sqrt(2.0 * (layer + 1))), key
        else:
            assert torch.equal(tensor, scratch[key]), key


def test_compare_takes_scratch_fix_init_as_a_reference():
    from learngene.comparison.choices import reference_labels

    assert reference_labels(["scratch", "scratch_fix_init", "scratch_x10"]) == (
        "scratch",
        "scratch_fix_init",
        "scratch ×10",
    )
