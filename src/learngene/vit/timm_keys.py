"""timm's names for the tensors of a ViT, in two tables: what each axis is and what the tensor does.

Every other list of block keys derives from :data:`BLOCK_TENSORS`: the shapes of a size
(:meth:`~learngene.vit.spec.ViTSpec.block_shapes`), the rules that carry tensors between sizes
(:func:`learngene.vit.transfer.block_axes`) and the groups methods work on (TLEG's ``msa`` / ``mlp`` /
``ln`` modules, PEG's per-layer parts, the residual writers G_stack zeros, the LayerNorm gains weight
subcloning rescales, WAVE's weight matrices, Cluster-Learngene's heads and FFN). A family that adds a
per-block tensor adds one row here. The tensors outside the blocks (tokens, embeddings, norms, the attention
pooling head, classifiers) are the rows of :data:`NON_BLOCK_TENSORS`, each with its shape at a size and whether
a model has it: :meth:`~learngene.vit.spec.ViTSpec.non_block_shapes` and :func:`learngene.vit.transfer.non_block_axes`
read it. Nothing of learngene is imported: :mod:`learngene.vit.spec` reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

# ---- what an axis is (the rules of :mod:`learngene.vit.transfer` move each kind its own way) ----------------
WIDTH = "width"  # the residual stream, written: Linear rows, vectors, tokens
WIDTH_IN = "width_in"  # the residual stream, read: Linear input columns
HIDDEN = "hidden"  # MLP hidden channels, written (fc1 rows; SwiGLU: gate and value segments)
HIDDEN_IN = "hidden_in"  # MLP hidden channels, read (fc2 columns)
HEADS = "heads"  # segments x heads x head_dim rows (qkv: 3 segments, the MAP head's kv: 2, q: 1)
HEADS_IN = "heads_in"  # heads x head_dim columns of an output projection
HEAD_DIM = "head_dim"  # channels inside one head (qk_norm)
CLASSES = "classes"
KEEP = "keep"  # carried as it is (batch and token axes, input channels, patch kernel)

READERS = (WIDTH_IN, HIDDEN_IN, HEADS_IN)


class Axis(NamedTuple):
    role: str
    segments: int = 1


GLU = 0  # segments of fc1's hidden axis: the family's MLP says (SwiGLU: 2, gate and value; else 1)

# ---- what a block tensor is --------------------------------------------------------------------------------
MSA, MLP = "msa", "mlp"  # its sub-layer: attention (with norm1, ls1, q/k norms) or the MLP (with norm2, ls2)
NORM = "norm"  # a per-channel vector scaled like a LayerNorm gain or bias: LayerNorms, layer-scale gammas, q/k norms
WRITER = "writer"  # writes its sub-layer's output into the residual stream: zeroed, the sub-layer adds nothing
WIDTH_GAIN = "width_gain"  # a LayerNorm gain over the residual width (not the per-head q/k norms)
MATRIX = "matrix"  # a Linear weight
LAYER_SCALE = "layer_scale"  # a layer-scale gamma (DeiT III, DINOv2)


class BlockTensor(NamedTuple):
    """One row of the table: the tensor's axes, its sub-layer, its tags, and whether a family has it."""

    axes: tuple[Axis, ...]
    sublayer: str
    tags: frozenset[str] = frozenset()
    present: Callable[[Any], bool] = lambda family: True  # family: a ViTFamily


def _row(
    axes: tuple[Axis, ...], sublayer: str, *tags: str, present: Callable[[Any], bool] | None = None
) -> BlockTensor:
    return BlockTensor(axes, sublayer, frozenset(tags), present or (lambda family: True))


_VECTOR = (Axis(WIDTH),)


def _qkv_bias(family) -> bool:
    return family.qkv_bias


def _qk_norm(family) -> bool:
    return family.qk_norm


def _layer_scale(family) -> bool:
    return family.init_values is not None and getattr(family, "model_class", "vit") != "eva"  # ViT, NaFlexVit


def _eva_layer_scale(family) -> bool:  # timm's Eva names its gammas gamma_1 / gamma_2
    return family.init_values is not None and getattr(family, "model_class", "vit") == "eva"


def _norm_bias(family) -> bool:  # an RmsNorm (AIMv2) has a gain only
    return getattr(family, "norm_layer", "layernorm") == "layernorm"


def _proj_bias(family) -> bool:  # AIMv2 has no biases on W_O and the MLP
    return getattr(family, "proj_bias", True)


def _packed_mlp(family) -> bool:
    return family.mlp_layer != "swiglu"


def _unpacked_swiglu(family) -> bool:  # AIMv2's and EVA-02 B/L's SwiGLU: gate fc1_g and value fc1_x apart
    return family.mlp_layer == "swiglu"


def _qv_bias(family) -> bool:  # EVA-02's separate q and v biases (k has none)
    return getattr(family, "qv_bias", False)


def _attn_norm(family) -> bool:  # Eva's sub-LayerNorm on the heads' outputs before W_O
    return getattr(family, "attn_norm", False)


def _mlp_norm(family) -> bool:  # Eva's sub-LayerNorm on the MLP's hidden channels before fc2
    return getattr(family, "mlp_norm", False)


def _rope_mixed(family) -> bool:  # mixed RoPE's learned frequencies, this layer's (see ROPE_FREQS)
    return getattr(family, "rope_mixed", False)


def _both(*tests: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda family: all(test(family) for test in tests)


def _norm(
    name: str, axes: tuple[Axis, ...], sublayer: str, *tags: str, present: Callable[[Any], bool] | None = None
) -> dict[str, BlockTensor]:
    """A norm's rows: its gain, and its bias where the family's norms have one (a LayerNorm's, not an RmsNorm's)."""
    bias_present = _norm_bias if present is None else _both(present, _norm_bias)
    return {
        f"{name}.weight": _row(axes, sublayer, NORM, *tags, present=present),
        f"{name}.bias": _row(axes, sublayer, NORM, present=bias_present),
    }


# In timm's order within a block (``Block.state_dict()``).
BLOCK_TENSORS: dict[str, BlockTensor] = {
    **_norm("norm1", _VECTOR, MSA, WIDTH_GAIN),
    "attn.q_bias": _row((Axis(HEADS),), MSA, present=_qv_bias),
    "attn.v_bias": _row((Axis(HEADS),), MSA, present=_qv_bias),
    "attn.qkv.weight": _row((Axis(HEADS, 3), Axis(WIDTH_IN)), MSA, MATRIX),
    "attn.qkv.bias": _row((Axis(HEADS, 3),), MSA, present=_qkv_bias),
    **_norm("attn.q_norm", (Axis(HEAD_DIM),), MSA, present=_qk_norm),
    **_norm("attn.k_norm", (Axis(HEAD_DIM),), MSA, present=_qk_norm),
    # Eva's sub-norm: over W_O's input, heads x head_dim channels, so it moves head by head
    **_norm("attn.norm", (Axis(HEADS),), MSA, present=_attn_norm),
    "attn.proj.weight": _row((Axis(WIDTH), Axis(HEADS_IN)), MSA, MATRIX, WRITER),
    "attn.proj.bias": _row(_VECTOR, MSA, WRITER, present=_proj_bias),
    "ls1.gamma": _row(_VECTOR, MSA, NORM, LAYER_SCALE, present=_layer_scale),
    "gamma_1": _row(_VECTOR, MSA, NORM, LAYER_SCALE, present=_eva_layer_scale),
    **_norm("norm2", _VECTOR, MLP, WIDTH_GAIN),
    "mlp.fc1.weight": _row((Axis(HIDDEN, GLU), Axis(WIDTH_IN)), MLP, MATRIX, present=_packed_mlp),
    "mlp.fc1.bias": _row((Axis(HIDDEN, GLU),), MLP, present=_both(_packed_mlp, _proj_bias)),
    "mlp.fc1_g.weight": _row((Axis(HIDDEN), Axis(WIDTH_IN)), MLP, MATRIX, present=_unpacked_swiglu),
    "mlp.fc1_g.bias": _row((Axis(HIDDEN),), MLP, present=_both(_unpacked_swiglu, _proj_bias)),
    "mlp.fc1_x.weight": _row((Axis(HIDDEN), Axis(WIDTH_IN)), MLP, MATRIX, present=_unpacked_swiglu),
    "mlp.fc1_x.bias": _row((Axis(HIDDEN),), MLP, present=_both(_unpacked_swiglu, _proj_bias)),
    **_norm("mlp.norm", (Axis(HIDDEN),), MLP, present=_mlp_norm),
    "mlp.fc2.weight": _row((Axis(WIDTH), Axis(HIDDEN_IN)), MLP, MATRIX, WRITER),
    "mlp.fc2.bias": _row(_VECTOR, MLP, WRITER, present=_proj_bias),
    "ls2.gamma": _row(_VECTOR, MLP, NORM, LAYER_SCALE, present=_layer_scale),
    "gamma_2": _row(_VECTOR, MLP, NORM, LAYER_SCALE, present=_eva_layer_scale),
    # mixed RoPE's frequencies of this layer: each head's x then y frequencies, one per rotated channel pair, so
    # heads x head_dim values in all, moved head by head like the q rows they rotate (see ROPE_FREQS)
    "rope.freqs": _row((Axis(HEADS),), MSA, present=_rope_mixed),
}
# timm's Eva stacks mixed RoPE's frequencies of every layer in one tensor outside the blocks, ``rope.freqs`` of shape
# (2 (x, y), depth, heads, head_dim / 2); a spec holds layer l's as the block row ``blocks.{l}.rope.freqs``
# (:meth:`learngene.vit.spec.ViTSpec.split_layers`), so that every method moves them with their layer
ROPE_FREQS = "rope.freqs"


# ---- what a tensor outside the blocks is -----------------------------------------------------------------
TOKENS = (Axis(KEEP), Axis(KEEP), Axis(WIDTH))  # (1, tokens, D): the class, register and distillation tokens, positions


class NonBlockTensor(NamedTuple):
    """One row of the table of tensors outside the blocks: the tensor's axes, its shape at a size, whether a
    model of that size has it (``spec``: a ViTSpec), and its tags (a norm over the width: NORM, WIDTH_GAIN)."""

    axes: tuple[Axis, ...]
    shape: Callable[[Any], tuple[int, ...]]
    present: Callable[[Any], bool]
    tags: frozenset[str] = frozenset()


def _always(spec) -> bool:
    return True


def _abs_positions(spec) -> bool:  # DINOv3 and the RoPE ViTs have none
    return spec.family.abs_pos_embed


def _width(spec) -> tuple[int, ...]:
    return (spec.embed_dim,)


def _tokens(count: Callable[[Any], int]) -> Callable[[Any], tuple[int, ...]]:
    return lambda spec: (1, count(spec), spec.embed_dim)


def _norm_rows(key: str, present: Callable[[Any], bool]) -> dict[str, NonBlockTensor]:
    """A norm over the width: a LayerNorm's gain and bias, an RmsNorm's gain (AIMv2)."""
    return {
        f"{key}.weight": NonBlockTensor(_VECTOR, _width, present, frozenset({NORM, WIDTH_GAIN})),
        f"{key}.bias": NonBlockTensor(
            _VECTOR, _width, lambda spec: present(spec) and _norm_bias(spec.family), frozenset({NORM})
        ),
    }


def _map_pool(spec) -> bool:  # SigLIP's attention pooling head
    return spec.family.global_pool == "map"


def _pool_hidden(spec) -> int:  # the pool's MLP is timm's plain Mlp whatever the blocks use
    return int(spec.embed_dim * spec.mlp_ratio)


def _head(spec) -> bool:
    return spec.num_classes > 0


# In timm's order (``VisionTransformer.state_dict()`` without the blocks); a NaFlexVit's embeddings are moved to
# its own keys and shapes by :mod:`learngene.vit.naflex`.
NON_BLOCK_TENSORS: dict[str, NonBlockTensor] = {
    "cls_token": NonBlockTensor(TOKENS, _tokens(lambda spec: 1), lambda spec: spec.family.class_token),
    "reg_token": NonBlockTensor(
        TOKENS, _tokens(lambda spec: spec.family.reg_tokens), lambda spec: spec.family.reg_tokens > 0
    ),
    "dist_token": NonBlockTensor(TOKENS, _tokens(lambda spec: 1), lambda spec: spec.family.distilled),
    "pos_embed": NonBlockTensor(
        TOKENS, _tokens(lambda spec: spec.num_patches + spec.family.pos_prefix_tokens), _abs_positions
    ),
    "patch_embed.proj.weight": NonBlockTensor(
        (Axis(WIDTH), Axis(KEEP), Axis(KEEP), Axis(KEEP)),
        lambda spec: (spec.embed_dim, spec.in_chans, spec.patch_size, spec.patch_size),
        _always,
    ),
    # timm drops the patch bias when a norm follows the embeddings
    "patch_embed.proj.bias": NonBlockTensor(_VECTOR, _width, lambda spec: not spec.family.pre_norm),
    **_norm_rows("patch_embed.norm", lambda spec: spec.family.embed_norm),
    **_norm_rows("norm_pre", lambda spec: spec.family.pre_norm),
    **_norm_rows("norm", lambda spec: spec.family.final_norm_key == "norm"),
    "attn_pool.latent": NonBlockTensor(TOKENS, _tokens(lambda spec: 1), _map_pool),
    "attn_pool.q.weight": NonBlockTensor((Axis(HEADS), Axis(WIDTH_IN)), lambda spec: (spec.embed_dim,) * 2, _map_pool),
    "attn_pool.q.bias": NonBlockTensor((Axis(HEADS),), _width, _map_pool),
    "attn_pool.kv.weight": NonBlockTensor(
        (Axis(HEADS, 2), Axis(WIDTH_IN)), lambda spec: (2 * spec.embed_dim, spec.embed_dim), _map_pool
    ),
    "attn_pool.kv.bias": NonBlockTensor((Axis(HEADS, 2),), lambda spec: (2 * spec.embed_dim,), _map_pool),
    "attn_pool.proj.weight": NonBlockTensor(
        (Axis(WIDTH), Axis(HEADS_IN)), lambda spec: (spec.embed_dim,) * 2, _map_pool
    ),
    "attn_pool.proj.bias": NonBlockTensor(_VECTOR, _width, _map_pool),
    **_norm_rows("attn_pool.norm", _map_pool),
    "attn_pool.mlp.fc1.weight": NonBlockTensor(
        (Axis(HIDDEN), Axis(WIDTH_IN)), lambda spec: (_pool_hidden(spec), spec.embed_dim), _map_pool
    ),
    "attn_pool.mlp.fc1.bias": NonBlockTensor((Axis(HIDDEN),), lambda spec: (_pool_hidden(spec),), _map_pool),
    "attn_pool.mlp.fc2.weight": NonBlockTensor(
        (Axis(WIDTH), Axis(HIDDEN_IN)), lambda spec: (spec.embed_dim, _pool_hidden(spec)), _map_pool
    ),
    "attn_pool.mlp.fc2.bias": NonBlockTensor(_VECTOR, _width, _map_pool),
    **_norm_rows("fc_norm", lambda spec: spec.family.final_norm_key == "fc_norm"),
    "head.weight": NonBlockTensor(
        (Axis(CLASSES), Axis(WIDTH_IN)), lambda spec: (spec.num_classes, spec.embed_dim), _head
    ),
    "head.bias": NonBlockTensor((Axis(CLASSES),), lambda spec: (spec.num_classes,), _head),
    "head_dist.weight": NonBlockTensor(
        (Axis(CLASSES), Axis(WIDTH_IN)),
        lambda spec: (spec.num_classes, spec.embed_dim),
        lambda spec: _head(spec) and spec.family.distilled,
    ),
    "head_dist.bias": NonBlockTensor(
        (Axis(CLASSES),), lambda spec: (spec.num_classes,), lambda spec: _head(spec) and spec.family.distilled
    ),
}


def block_names(*, sublayer: str | None = None, tag: str | None = None, without: str | None = None) -> tuple[str, ...]:
    """The in-block names of every family's rows of ``sublayer`` carrying ``tag`` and not ``without``, in timm's order."""
    return tuple(
        name
        for name, row in BLOCK_TENSORS.items()
        if (sublayer is None or row.sublayer == sublayer)
        and (tag is None or tag in row.tags)
        and (without is None or without not in row.tags)
    )


def head_sliced(name: str) -> bool:
    """Whether block tensor ``name`` has an axis of whole heads (qkv's rows, the projection's columns)."""
    return any(axis.role in (HEADS, HEADS_IN) for axis in BLOCK_TENSORS[name].axes)


def per_head(name: str) -> bool:
    """Whether block tensor ``name`` holds channels inside one head (the q/k norms)."""
    return any(axis.role == HEAD_DIM for axis in BLOCK_TENSORS[name].axes)


def has_tag(name: str, tag: str) -> bool:
    return tag in BLOCK_TENSORS[name].tags


def family_axes(family) -> dict[str, tuple[Axis, ...]]:
    """The axes of every block tensor ``family`` has, fc1's gate/value segments resolved (in timm's order)."""
    glu = 2 if family.mlp_layer == "swiglu_packed" else 1
    return {
        name: tuple(Axis(a.role, glu) if a.segments == GLU else a for a in row.axes)
        for name, row in BLOCK_TENSORS.items()
        if row.present(family)
    }
