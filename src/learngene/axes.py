"""What every axis of every tensor of a timm ViT means, and the two rules that carry a tensor to another size.

One table (:func:`tensor_axes`) says, for each state_dict key of any family a :class:`~learngene.spec.ViTSpec`
describes, which axes are the residual stream (written or read), the MLP's hidden channels, attention
heads (q/k/v rows in segments, W_O columns), within-head channels, or classes. Every method that changes
a size moves tensors through it, so a family's extra tensors (layer-scale gammas, register and
distillation tokens, ``norm_pre``, ``fc_norm``, the MAP attention-pool head, ``head_dist``) are moved by
the rule their axes call for, written once:

- gammas, norms, biases and tokens are residual-stream vectors, like a LayerNorm's weight;
- the MAP head ``attn_pool.*`` is attention (``q``: 1 segment of heads, ``kv``: 2, ``proj``: columns per
  head) plus an MLP, sliced head-aware with :mod:`learngene.heads`' layout, exactly like a block's.

:func:`select_axes` picks evenly spaced coordinates (Weight Selection); :func:`map_axes` applies
:class:`~learngene.methods.resize.AxisMap` s, which also grow (Net2Net: a reader of a repeated
coordinate is divided by its copies). Position embeddings and patch kernels change size by timm's own
resamplers in ``inherit_non_block``, not here.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from torch import Tensor

from .errors import LearngeneError
from .heads import join_heads, split_heads
from .spec import ViTSpec

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


def _attention(prefix: str, qkv: str, segments: int) -> dict[str, tuple[Axis, ...]]:
    return {f"{prefix}{qkv}.weight": (Axis(HEADS, segments), Axis(WIDTH_IN)), f"{prefix}{qkv}.bias": (Axis(HEADS, segments),),
            f"{prefix}proj.weight": (Axis(WIDTH), Axis(HEADS_IN)), f"{prefix}proj.bias": (Axis(WIDTH),)}


def _mlp(prefix: str, segments: int) -> dict[str, tuple[Axis, ...]]:
    return {f"{prefix}fc1.weight": (Axis(HIDDEN, segments), Axis(WIDTH_IN)), f"{prefix}fc1.bias": (Axis(HIDDEN, segments),),
            f"{prefix}fc2.weight": (Axis(WIDTH), Axis(HIDDEN_IN)), f"{prefix}fc2.bias": (Axis(WIDTH),)}


VECTOR, TOKENS = (Axis(WIDTH),), (Axis(KEEP), Axis(KEEP), Axis(WIDTH))


def block_axes(spec: ViTSpec) -> dict[str, tuple[Axis, ...]]:
    """The axes of every tensor of one block of ``spec`` (in-block names)."""
    glu = 2 if spec.family.mlp_layer == "swiglu_packed" else 1
    table = {"norm1.weight": VECTOR, "norm1.bias": VECTOR, "norm2.weight": VECTOR, "norm2.bias": VECTOR,
             "ls1.gamma": VECTOR, "ls2.gamma": VECTOR, **_attention("attn.", "qkv", 3), **_mlp("mlp.", glu),
             **{f"attn.{n}_norm.{p}": (Axis(HEAD_DIM),) for n in "qk" for p in ("weight", "bias")}}
    return {name: table[name] for name in spec.block_shapes()}


def non_block_axes(spec: ViTSpec) -> dict[str, tuple[Axis, ...]]:
    """The axes of every tensor outside the blocks of ``spec``."""
    table = {"cls_token": TOKENS, "reg_token": TOKENS, "dist_token": TOKENS, "pos_embed": TOKENS,
             "patch_embed.proj.weight": (Axis(WIDTH), Axis(KEEP), Axis(KEEP), Axis(KEEP)),
             "patch_embed.proj.bias": VECTOR, "attn_pool.latent": TOKENS,
             **_attention("attn_pool.", "q", 1), **_attention("attn_pool.", "kv", 2), **_mlp("attn_pool.mlp.", 1)}
    for norm in ("norm_pre", "norm", "fc_norm", "attn_pool.norm"):
        table.update({f"{norm}.weight": VECTOR, f"{norm}.bias": VECTOR})
    for head in ("head", "head_dist"):
        table.update({f"{head}.weight": (Axis(CLASSES), Axis(WIDTH_IN)), f"{head}.bias": (Axis(CLASSES),)})
    return {key: table[key] for key in spec.non_block_shapes()}


def segments(spec: ViTSpec, name: str) -> tuple[int, ...]:
    """Segments per axis of block tensor ``name`` (q, k, v of the fused qkv rows; gate and value of SwiGLU's fc1)."""
    return tuple(axis.segments for axis in block_axes(spec)[name])


def carried(source: ViTSpec, target: ViTSpec) -> ViTSpec:
    """``source`` at ``target``'s width, heads and MLP ratio: the shapes of ``source``'s tensors once their
    width axes are moved (token counts, patch kernel and classes are moved afterwards by ``inherit_non_block``)."""
    return source.replace(embed_dim=target.embed_dim, num_heads=target.num_heads, mlp_ratio=target.mlp_ratio)


# ---- moving a tensor axis by axis ---------------------------------------------------------------------
Index = Tensor | slice
# (role, source size, target size) -> (source coordinate of each target coordinate, 1/copies or None);
# ``slice(None)`` for an axis left as it is (a view, no copy)
Picker = Callable[[str, int, int], tuple[Index, Tensor | None]]
KEPT = (slice(None), None)


def pick_given(width: Index | None = None, hidden: Index | None = None, heads: Index | None = None) -> Picker:
    """A picker with fixed coordinates per kind of axis (e.g. an importance order, a prefix); others kept."""
    chosen = {WIDTH: width, WIDTH_IN: width, HIDDEN: hidden, HIDDEN_IN: hidden, HEADS: heads}

    def pick(role: str, n_src: int, n_dst: int) -> tuple[Index, Tensor | None]:
        index = chosen.get(role)
        if index is None:
            if n_src != n_dst:
                raise LearngeneError(f"no rule moves a {role} axis from {n_src} to {n_dst} coordinates here")
            return KEPT
        return index, None

    return pick


def _take(t: Tensor, dim: int, index: Index) -> Tensor:
    if isinstance(index, slice):
        return t[(slice(None),) * dim + (index,)]
    return t.index_select(dim, index.to(t.device))


def move_tensor(t: Tensor, axes: tuple[Axis, ...], shape: tuple[int, ...], heads: tuple[int, int], pick: Picker) -> Tensor:
    """``t`` carried to ``shape`` axis by axis: ``pick(role, n_src, n_dst)`` says which coordinates; head axes
    are split into (segments, heads, head_dim) and both picked; readers are scaled by 1/copies. Token
    counts and patch kernels are left as they are (timm's resamplers move them)."""
    h_src, h_dst = heads
    for dim, (axis, n_dst) in enumerate(zip(axes, shape)):
        n_src, s = t.shape[dim], axis.segments
        if axis.role == KEEP or axis.role == CLASSES:
            if axis.role == CLASSES and n_src != n_dst:
                raise LearngeneError(f"a classifier of {n_src} classes cannot become one of {n_dst}")
            continue
        if axis.role in (HEADS, HEADS_IN):
            if n_dst % (s * h_dst):
                raise LearngeneError(f"{n_dst} head channels do not split into {s} x {h_dst} heads")
            split = split_heads(t, h_src, s, dim)
            parts = [(HEADS, h_src, h_dst), (HEAD_DIM, split.shape[dim + 2], n_dst // (s * h_dst))]
        else:
            split = t.reshape(*t.shape[:dim], s, n_src // s, *t.shape[dim + 1:])
            parts = [(axis.role, n_src // s, n_dst // s)]
        for offset, (role, n_from, n_to) in enumerate(parts, start=dim + 1):
            which, scale = pick(role, n_from, n_to)
            split = _take(split, offset, which)
            if axis.role in READERS and scale is not None:
                split = split * scale.to(split).view(-1, *[1] * (split.ndim - offset - 1))
        t = join_heads(split, dim) if len(parts) == 2 else split.reshape(*t.shape[:dim], n_dst, *t.shape[dim + 1:])
    return t


def move_state(state: dict[str, Tensor], axes: dict[str, tuple[Axis, ...]], shapes: dict[str, tuple[int, ...]],
               heads: tuple[int, int], pick: Picker) -> dict[str, Tensor]:
    """Every tensor of ``state`` whose key the target has (``shapes``) carried to the target's shape."""
    out = {}
    for key, t in state.items():
        if key in shapes and key in axes:
            out[key] = move_tensor(t, axes[key], shapes[key], heads, pick)
    return out
