"""The one table of timm's block tensors (``learngene.vit.timm_keys``) and the lists derived from it."""

from __future__ import annotations

import itertools

import pytest

from learngene.methods.cluster import ATTENTION, FFN
from learngene.methods.growth import WRITERS
from learngene.methods.importance import width_norm_gains
from learngene.methods.peg import FFN_PARTS, MSA_LAYER_PARTS
from learngene.methods.tleg import MODULES
from learngene.methods.wave import MATRICES
from learngene.vit.spec import ViTFamily, ViTSpec
from learngene.vit.timm_keys import BLOCK_TENSORS
from learngene.vit.transfer import block_axes

FAMILIES = [
    ViTFamily(qkv_bias=b, qk_norm=n, init_values=iv, mlp_layer=m, act_layer="silu" if m != "mlp" else "gelu")
    for b, n, iv, m in itertools.product([True, False], [True, False], [None, 1e-5], ["mlp", "swiglu_packed"])
]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.short())
def test_shapes_and_axes_are_the_same_rows_of_the_table(family):
    spec = ViTSpec(depth=2, embed_dim=48, num_heads=3, img_size=16, patch_size=4, family=family)
    shapes, axes = spec.block_shapes(), block_axes(spec)
    assert list(shapes) == list(axes) == [n for n in BLOCK_TENSORS if n in shapes]  # timm's order
    assert all(len(shapes[n]) == len(axes[n]) for n in shapes)
    if family.mlp_layer == "mlp":  # (a SwiGLU family needs its own timm architecture: tests/test_families.py)
        model_shapes = {
            k.removeprefix("blocks.0."): tuple(v.shape)
            for k, v in spec.create_model().state_dict().items()
            if k.startswith("blocks.0.")
        }
        assert list(shapes.items()) == list(model_shapes.items())


def test_tleg_modules_split_every_block_tensor_once():
    grouped = [n for names in MODULES.values() for n in names]
    assert sorted(grouped) == sorted(BLOCK_TENSORS)


def test_peg_part_names_are_stable():
    """PEG's gene files store these names (``msa.proj_bias``, ``ffn.norm_weight``): deriving them must not rename."""
    assert MSA_LAYER_PARTS == {
        "proj_bias": "attn.proj.bias",
        "norm_weight": "norm1.weight",
        "norm_bias": "norm1.bias",
        "ls_gamma": "ls1.gamma",
        "q_norm_weight": "attn.q_norm.weight",
        "q_norm_bias": "attn.q_norm.bias",
        "k_norm_weight": "attn.k_norm.weight",
        "k_norm_bias": "attn.k_norm.bias",
        "gamma_1": "gamma_1",
    }  # the last: timm's Eva
    assert FFN_PARTS == {
        "fc1_weight": "mlp.fc1.weight",
        "fc1_bias": "mlp.fc1.bias",
        "fc2_weight": "mlp.fc2.weight",
        "fc2_bias": "mlp.fc2.bias",
        "norm_weight": "norm2.weight",
        "norm_bias": "norm2.bias",
        "ls_gamma": "ls2.gamma",
        # AIMv2's and EVA-02's unpacked SwiGLU, Eva's MLP sub-norm and gamma
        "fc1_g_weight": "mlp.fc1_g.weight",
        "fc1_g_bias": "mlp.fc1_g.bias",
        "fc1_x_weight": "mlp.fc1_x.weight",
        "fc1_x_bias": "mlp.fc1_x.bias",
        "inner_norm_weight": "mlp.norm.weight",
        "inner_norm_bias": "mlp.norm.bias",
        "gamma_2": "gamma_2",
    }


def test_derived_groups():
    assert WRITERS == ("attn.proj.weight", "attn.proj.bias", "mlp.fc2.weight", "mlp.fc2.bias")
    assert MATRICES == {
        "qkv": "attn.qkv.weight",
        "proj": "attn.proj.weight",
        "fc1": "mlp.fc1.weight",
        "fc2": "mlp.fc2.weight",
    }
    # with Eva's head-sliced q/v biases and sub-norm, mixed RoPE's per-head frequencies, and AIMv2's and EVA-02's
    # unpacked SwiGLU
    assert ATTENTION == (
        "attn.q_bias",
        "attn.v_bias",
        "attn.qkv.weight",
        "attn.qkv.bias",
        "attn.norm.weight",
        "attn.norm.bias",
        "attn.proj.weight",
        "rope.freqs",
    )
    assert FFN == (
        "mlp.fc1.weight",
        "mlp.fc1.bias",
        "mlp.fc1_g.weight",
        "mlp.fc1_g.bias",
        "mlp.fc1_x.weight",
        "mlp.fc1_x.bias",
        "mlp.fc2.weight",
        "mlp.fc2.bias",
    )
    keys = [
        "blocks.0.norm1.weight",
        "blocks.0.norm2.weight",
        "blocks.0.attn.q_norm.weight",
        "blocks.3.norm1.bias",
        "norm.weight",
        "norm.bias",
        "fc_norm.weight",
        "norm_pre.weight",
        "attn_pool.norm.weight",
    ]
    assert width_norm_gains(keys) == [
        "blocks.0.norm1.weight",
        "blocks.0.norm2.weight",
        "norm.weight",
        "fc_norm.weight",
        "norm_pre.weight",
        "attn_pool.norm.weight",
    ]
