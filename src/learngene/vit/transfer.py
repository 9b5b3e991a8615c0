"""Every rule that moves tensors between sizes: layers, residual width, MLP size, heads, embeddings.

Methods pick or build the tensors a descendant needs; how those tensors are carried to another size
is written once, here. Per-tensor rules are data, as torchtune writes its key mappings: for every
state_dict key of any ViT family a :class:`~learngene.vit.spec.ViTSpec` describes, :func:`block_axes` and
:func:`non_block_axes` (read from the tables of :mod:`learngene.vit.timm_keys`) name what each axis is: the residual stream (written, or read by a Linear's
input columns), the MLP's hidden channels (SwiGLU's fc1: gate and value segments), attention heads
(q/k/v rows in segments, W_O columns), channels inside a head (q/k norms), classes, or something left
as it is (tokens, kernels). A family's extra tensors are rows like any other, so every method moves
them by the rule their axes call for, written once: layer-scale gammas, norms, biases, register and
distillation tokens are residual-stream vectors like a LayerNorm's weight; the MAP attention-pool head
``attn_pool.*`` is attention (``q``: 1 segment of heads, ``kv``: 2, ``proj``: columns per head) plus an
MLP, sliced head by head with :mod:`learngene.vit.heads`' layout exactly like a block's; ``head_dist`` is a
classifier.

Carrying an axis of ``n_src`` coordinates to ``n_dst`` (:func:`axis_map`):

- shrinking keeps evenly spaced coordinates (every k-th when the sizes divide: Weight Selection, Xu
  et al. 2024);
- growing repeats the coordinates cyclically, and every weight that *reads* a repeated coordinate
  is divided by its number of copies (Net2Net's widening), so the sum it computes is unchanged.

With an exact multiple this is function preserving (a LayerNorm over ``k`` copies of a vector has
the same statistics; ``tests/test_families.py`` checks it for every family); otherwise it is the
nearest such map. Neither head paper says how these axes are carried (PEG App. B only says W_O is
"pruned or expanded"): this is our one rule for all of them. Depth is stretched: descendant layer
``l`` of ``L_d`` takes source layer ``⌊l·L_s/L_d⌋``. A method that picks coordinates its own way
(Weight Selection's evenly spaced heads, an importance order, a prefix) passes a :data:`Rule`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import LearngeneError, assigned, named
from ..formats.weights import StateDict as StateDict  # the one alias, where modules that move tensors import it
from .heads import join_heads, split_heads
from .naflex import MODEL_KEYS as NAFLEX_MODEL_KEYS
from .naflex import VIT_KEYS as NAFLEX_KEYS
from .naflex import model_axes
from .spec import ViTSpec, block_key
from .timm_keys import (
    CLASSES,
    HEAD_DIM,
    HEADS,
    HEADS_IN,
    HIDDEN,
    HIDDEN_IN,
    KEEP,
    NON_BLOCK_TENSORS,
    READERS,
    WIDTH,
    WIDTH_GAIN,
    WIDTH_IN,
    Axis,
    family_axes,
)


def block_axes(spec: ViTSpec) -> dict[str, tuple[Axis, ...]]:
    """The axes of every tensor of one block of ``spec`` (in-block names): the rows of the one block table,
    :data:`~learngene.vit.timm_keys.BLOCK_TENSORS`, that ``spec``'s family has."""
    return family_axes(spec.family)


_WIDTH_GAINS = [key for key, row in NON_BLOCK_TENSORS.items() if WIDTH_GAIN in row.tags]
# the norms over the width outside the blocks, under a ViT's keys and a NaFlexVit's
NON_BLOCK_NORMS = tuple(
    dict.fromkeys(
        key.removesuffix(".weight") for key in [*_WIDTH_GAINS, *(NAFLEX_MODEL_KEYS.get(k, k) for k in _WIDTH_GAINS)]
    )
)


def non_block_axes(spec: ViTSpec) -> dict[str, tuple[Axis, ...]]:
    """The axes of every tensor outside the blocks of ``spec``: the rows of the one table,
    :data:`~learngene.vit.timm_keys.NON_BLOCK_TENSORS`, that ``spec`` has (under its model's keys, as
    :meth:`~learngene.vit.spec.ViTSpec.non_block_shapes`)."""
    axes = {key: row.axes for key, row in NON_BLOCK_TENSORS.items() if row.present(spec)}
    return model_axes(axes) if spec.family.model_class == "naflex" else axes


def segments(spec: ViTSpec, name: str) -> tuple[int, ...]:
    """Segments per axis of block tensor ``name`` (q, k, v of the fused qkv rows; gate and value of SwiGLU's fc1)."""
    return tuple(axis.segments for axis in block_axes(spec)[name])


def carried(source: ViTSpec, target: ViTSpec) -> ViTSpec:
    """``source`` at ``target``'s width, heads and MLP ratio: the shapes of ``source``'s tensors once their
    width axes are moved (token counts, patch kernel and classes are moved afterwards by ``inherit_non_block``)."""
    return source.replace(embed_dim=target.embed_dim, num_heads=target.num_heads, mlp_ratio=target.mlp_ratio)


# ---- one axis ------------------------------------------------------------------------------------------
def evenly_spaced(n_src: int, n_dst: int) -> Tensor:
    """``n_dst`` evenly spaced indices into ``n_src`` (every k-th if ``n_dst`` divides ``n_src``)."""
    if not 0 < n_dst <= n_src:
        raise LearngeneError(f"evenly spaced selection can only shrink an axis, asked {n_src} -> {n_dst}")
    if n_src % n_dst == 0:
        return torch.arange(0, n_src, n_src // n_dst)
    return torch.linspace(0, n_src - 1, n_dst).round().long()


def evenly_spaced_index(n_src: int, n_dst: int) -> Tensor | slice:
    """:func:`evenly_spaced` as a strided slice when the sizes divide: a view, so the identity and integer
    ratios copy nothing (a ViT-B expands in milliseconds instead of seconds)."""
    if 0 < n_dst <= n_src and n_src % n_dst == 0:
        return slice(None, None, n_src // n_dst)
    return evenly_spaced(n_src, n_dst)


def cyclic(n_src: int, n_dst: int) -> Tensor:
    """Source of each of ``n_dst`` targets repeating ``n_src`` sources in turn: ``i mod n_src``."""
    return torch.arange(n_dst) % n_src


def stretch(n_src: int, n_dst: int) -> Tensor:
    """Source layer of each of ``n_dst`` target layers: ``⌊l·n_src/n_dst⌋`` (evenly spread, in order)."""
    return torch.arange(n_dst) * n_src // n_dst


@dataclass(frozen=True)
class AxisMap:
    """``index``: the source coordinate of each target coordinate (a slice where that is a view);
    ``reader_scale[i]``: what a weight reading target coordinate ``i`` is multiplied by (1 / its copies;
    None: nothing); ``repeats``: the scale is applied; ``is_identity``: the map changes nothing."""

    index: Tensor | slice
    reader_scale: Tensor | None
    is_identity: bool = False
    repeats: bool = True


def pick(index: Tensor | slice) -> AxisMap:
    """The map that takes source coordinates ``index`` (a permutation, a prefix) and scales nothing."""
    return AxisMap(index, None, False, False)


def axis_map(n_src: int, n_dst: int) -> AxisMap:
    """Evenly spaced source coordinates when shrinking, a cyclic repeat when growing."""
    if n_src < 1 or n_dst < 1:
        raise LearngeneError(f"cannot map an axis of {n_src} coordinates onto {n_dst}")
    if n_dst <= n_src:
        return AxisMap(evenly_spaced_index(n_src, n_dst), torch.ones(n_dst), n_dst == n_src, False)
    index = cyclic(n_src, n_dst)
    copies = torch.bincount(index, minlength=n_src).to(torch.float32)
    return AxisMap(index, 1.0 / copies[index], False, True)


KEPT = AxisMap(slice(None), None, True, False)
# (role, source size, target size) -> the map of that axis
Rule = Callable[[str, int, int], AxisMap]


def mapped(role: str, n_src: int, n_dst: int) -> AxisMap:
    """The rule above for every axis (:func:`axis_map`); heads keep their size."""
    if n_src == n_dst:
        return KEPT
    if role == HEAD_DIM:
        raise LearngeneError(f"whole-head methods keep heads of {n_src} dims, asked {n_dst}")
    return axis_map(n_src, n_dst)


def evenly(role: str, n_src: int, n_dst: int) -> AxisMap:
    """Weight Selection's rule for every axis: evenly spaced coordinates, never a copy."""
    return pick(evenly_spaced_index(n_src, n_dst))


def with_maps(width: AxisMap | None = None, hidden: AxisMap | None = None, heads: AxisMap | None = None) -> Rule:
    """:func:`mapped`, with these maps for the residual, MLP-hidden and head axes they fit (their target size)."""
    maps = {WIDTH: width, WIDTH_IN: width, HIDDEN: hidden, HIDDEN_IN: hidden, HEADS: heads}

    def rule(role: str, n_src: int, n_dst: int) -> AxisMap:
        chosen = maps.get(role)
        if chosen is not None and _length(chosen.index, n_src) == n_dst:
            return chosen
        return mapped(role, n_src, n_dst)  # e.g. the MAP head's MLP, whose hidden size is not the blocks'

    return rule


def given(
    width: Tensor | slice | None = None, hidden: Tensor | slice | None = None, heads: Tensor | slice | None = None
) -> Rule:
    """Fixed coordinates per kind of axis (an importance order, a prefix); other axes are kept."""
    chosen = {WIDTH: width, WIDTH_IN: width, HIDDEN: hidden, HIDDEN_IN: hidden, HEADS: heads}

    def rule(role: str, n_src: int, n_dst: int) -> AxisMap:
        index = chosen.get(role)
        if index is None:
            if n_src != n_dst:
                raise LearngeneError(f"no coordinates given to move a {role} axis from {n_src} to {n_dst}")
            return KEPT
        return pick(index)

    return rule


def _length(index: Tensor | slice, n: int) -> int:
    return len(range(n)[index]) if isinstance(index, slice) else len(index)


def _take(t: Tensor, dim: int, index: Tensor | slice) -> Tensor:
    if isinstance(index, slice):
        return t[(slice(None),) * dim + (index,)]
    return t.index_select(dim, index.to(t.device))


def move_tensor(
    t: Tensor, axes: tuple[Axis, ...], shape: tuple[int, ...], heads: tuple[int, int], rule: Rule
) -> Tensor:
    """``t`` carried to ``shape`` axis by axis: ``rule(role, n_src, n_dst)`` maps each; head axes are split
    into (segments, heads, head_dim) (:func:`~learngene.vit.heads.split_heads`) and both parts mapped; readers
    are scaled by the map's 1/copies. Token counts and patch kernels are left as they are (timm's
    resamplers move them in :func:`inherit_non_block`)."""
    h_src, h_dst = heads
    for dim, (axis, n_dst) in enumerate(zip(axes, shape)):
        n_src, s = t.shape[dim], axis.segments
        if axis.role in (KEEP, CLASSES):
            if axis.role == CLASSES and n_src != n_dst:
                raise LearngeneError(f"a classifier of {n_src} classes cannot become one of {n_dst}")
            continue
        if axis.role in (HEADS, HEADS_IN):
            if n_dst % (s * h_dst):
                raise LearngeneError(f"{n_dst} head channels do not split into {s} x {h_dst} heads")
            split = split_heads(t, h_src, s, dim)
            parts = [(HEADS, h_src, h_dst), (HEAD_DIM, split.shape[dim + 2], n_dst // (s * h_dst))]
        else:
            split = t.reshape(*t.shape[:dim], s, n_src // s, *t.shape[dim + 1 :])
            parts = [(axis.role, n_src // s, n_dst // s)]
        for offset, (role, n_from, n_to) in enumerate(parts, start=dim + 1):
            chosen = rule(role, n_from, n_to)
            if chosen.is_identity:
                continue
            split = _take(split, offset, chosen.index)
            if axis.role in READERS and chosen.repeats and chosen.reader_scale is not None:
                split = split * chosen.reader_scale.to(split).view(-1, *[1] * (split.ndim - offset - 1))
        t = join_heads(split, dim) if len(parts) == 2 else split.reshape(*t.shape[:dim], n_dst, *t.shape[dim + 1 :])
    return t


def mix_block_heads(block: StateDict, axes: dict[str, tuple[Axis, ...]], mixing: Tensor) -> StateDict:
    """``block`` (in-block names) with its heads replaced by combinations of them: new head ``o`` is
    ``Σ_h mixing[o, h]·head h`` in every tensor with a head axis (q/k/v rows and their biases, W_O's columns,
    any family's rows such as Eva's q/v biases and sub-norm), as :func:`~learngene.vit.heads.mix_heads` does for
    qkv and W_O. A one-hot ``mixing`` ``(H_new, H)`` selects or repeats heads."""
    heads = mixing.shape[1]
    out = dict(block)
    for name, t in block.items():
        for dim, axis in enumerate(axes[name]):
            if axis.role in (HEADS, HEADS_IN):
                split = split_heads(t, heads, axis.segments, dim)
                mixed = torch.tensordot(mixing.to(split), split, dims=([1], [dim + 1])).movedim(0, dim + 1)
                out[name] = join_heads(mixed, dim)
    return out


def move_state(
    state: StateDict,
    axes: dict[str, tuple[Axis, ...]],
    shapes: dict[str, tuple[int, ...]],
    heads: tuple[int, int],
    rule: Rule = mapped,
) -> StateDict:
    """Every tensor of ``state`` carried to the target's shape (``shapes``; keys the target lacks are left out)."""
    out = {}
    for key, t in state.items():
        if key not in axes:
            raise LearngeneError(f"no rule carries {key} to another size; add its row to learngene.vit.transfer")
        if key in shapes:
            out[key] = move_tensor(t, axes[key], shapes[key], heads, rule)
    return out


def resize_block(
    block: StateDict, source: ViTSpec, target: ViTSpec, width: AxisMap | None = None, hidden: AxisMap | None = None
) -> StateDict:
    """One block's tensors (in-block names; heads already ``target``'s count) moved to ``target``'s width and
    MLP size: rows that write the residual stream (W_O, fc2, biases, norms, layer-scale gammas) picked,
    columns that read it (qkv, fc1) picked and divided by their copies; head axes left as they are."""
    return move_state(
        block, block_axes(source), target.block_shapes(), (target.num_heads,) * 2, with_maps(width, hidden)
    )


def resize_non_block(state: StateDict, source: ViTSpec, target: ViTSpec, rule: Rule = mapped) -> StateDict:
    """Tokens, embeddings, norms, the MAP head and classifiers (timm keys, those present) moved to
    ``target``'s width and head count; token counts, patch kernels and classes stay ``source``'s."""
    return move_state(
        state,
        non_block_axes(source),
        carried(source, target).non_block_shapes(),
        (source.num_heads, target.num_heads),
        rule,
    )


# ---- non-block parts ----------------------------------------------------------------------------------
ALL_PARTS = ("embed", "norm", "head")


# which of ``inherit_non_block``'s parts each non-block tensor belongs to (the MAP pooling head goes with the
# final norm: both sit between the last block and the classifier, and neither depends on the label space)
PART_OF = {
    "cls_token": "embed",
    "reg_token": "embed",
    "dist_token": "embed",
    "pos_embed": "embed",
    "patch_embed.proj.weight": "embed",
    "patch_embed.proj.bias": "embed",
    "patch_embed.norm.weight": "embed",
    "patch_embed.norm.bias": "embed",
    "norm_pre.weight": "embed",
    **{key: "embed" for key in NAFLEX_KEYS},
    "norm_pre.bias": "embed",
    "head.weight": "head",
    "head.bias": "head",
    "head_dist.weight": "head",
    "head_dist.bias": "head",
}


def part_of(key: str) -> str:
    return PART_OF.get(key, "norm")  # norm, fc_norm, attn_pool.*


def inherit_non_block(
    state: StateDict, source: ViTSpec, target: ViTSpec, parts: tuple[str, ...] = ALL_PARTS
) -> StateDict:
    """Carry tokens, embeddings, norms, the pooling head and the classifiers from ``source`` to ``target`` where they fit.

    Position embeddings are resampled to the target grid and patch embeddings to the target patch size
    (timm's resamplers, differentiable); the prefix tokens' position rows are kept when both specs have
    the same ones (``no_embed_class`` families have none); classifiers only when the label spaces agree;
    the final norm moves between timm's ``norm`` and ``fc_norm`` with the pooling. Every other tensor of
    ``parts`` (class, register and distillation tokens, ``norm_pre``, the MAP head) is copied when the
    target has it with the same shape. Another width is left to the target's own initialization
    (methods that change width move these tensors first, by the axes of :func:`non_block_axes`); another input
    channel count is an error. A NaFlexVit's embeddings are moved in a ViT's layout (:meth:`ViTSpec.vit_layout`).
    """
    out: StateDict = {}
    if source.embed_dim != target.embed_dim:
        return out
    state, shapes = source.vit_layout(state), target.non_block_shapes(vit_layout=True)
    renamed = {
        f"{source.final_norm_key}.{p}": f"{target.final_norm_key}.{p}"
        for p in ("weight", "bias")
        if source.final_norm_key and target.final_norm_key
    }
    for key, tensor in state.items():
        if part_of(key) not in parts or key.startswith("blocks."):
            continue
        if key == "pos_embed":
            positions = _positions_for(tensor, source, target)
            if positions is not None:
                out[key] = positions
            continue
        if key == "patch_embed.proj.weight":
            tensor = _patch_kernel_for(tensor, source, target)
        key = renamed.get(key, key)
        if key in shapes and tuple(tensor.shape) == shapes[key]:
            out[key] = tensor
    return target.model_layout(out)


def _positions_for(pos_embed: Tensor, source: ViTSpec, target: ViTSpec) -> Tensor | None:
    """``source``'s position table for ``target``: the patch rows resampled to its grid (timm's resampler), the
    prefix tokens' rows kept when both specs have the same ones; None when ``target`` has other prefix rows."""
    from timm.layers import resample_abs_pos_embed  # timm takes seconds to import: on use only

    src_prefix, dst_prefix = source.family.pos_prefix_tokens, target.family.pos_prefix_tokens
    patches = pos_embed[:, src_prefix:]
    if source.grid_size != target.grid_size:
        patches = resample_abs_pos_embed(
            patches,
            new_size=[target.grid_size] * 2,
            old_size=[source.grid_size] * 2,
            num_prefix_tokens=0,
            verbose=False,
        )
    if dst_prefix == src_prefix:
        return torch.cat([pos_embed[:, :src_prefix], patches], dim=1)
    return patches if dst_prefix == 0 else None


def _patch_kernel_for(kernel: Tensor, source: ViTSpec, target: ViTSpec) -> Tensor:
    """``source``'s patch-embedding kernel resampled to ``target``'s patch size; another channel count is an error."""
    from timm.layers import resample_patch_embed  # timm takes seconds to import: on use only

    if source.in_chans != target.in_chans:
        raise LearngeneError(
            f"the ancestry takes {source.in_chans}-channel images but the target asks for "
            f"{target.in_chans}; keep in_chans={source.in_chans} (data are converted to it)"
        )
    if source.patch_size != target.patch_size:
        return resample_patch_embed(kernel, [target.patch_size] * 2, verbose=False)
    return kernel


def carry_non_block(
    state: StateDict,
    source: ViTSpec,
    target: ViTSpec,
    parts: tuple[str, ...] = ALL_PARTS,
    width: AxisMap | None = None,
    heads: AxisMap | None = None,
) -> StateDict:
    """The non-block tensors of ``state`` (shaped for ``source``) carried to ``target``: the width and heads
    by ``width``/``heads`` (default: :func:`axis_map`'s rule; :func:`resize_non_block`), the rest by
    :func:`inherit_non_block`."""
    resized = resize_non_block(
        {k: v for k, v in state.items() if k in source.non_block_shapes()},
        source,
        target,
        with_maps(width, None, heads),
    )
    return inherit_non_block(resized, carried(source, target), target, parts)


# ---- whole blocks -------------------------------------------------------------------------------------
def block_state(state: StateDict, layer: int) -> StateDict:
    """The tensors of block ``layer`` of a timm state_dict, keyed by their in-block names."""
    prefix = block_key(layer, "")
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def place_blocks(state: StateDict, placement: dict[int, int]) -> StateDict:
    """``{target_layer: source_layer}`` → the target's block tensors copied from the source layers."""
    out: StateDict = {}
    for target, source in placement.items():
        for name, tensor in block_state(state, source).items():
            out[block_key(target, name)] = tensor
    return out


# ---- the layers a descendant keeps (expand's ``layers``) ------------------------------------------------
LAYER_RULES = ("first", "last", "spread")


def spread_layers(n_src: int, n_dst: int) -> list[int]:
    """``n_dst`` of ``n_src`` layers evenly spaced, the first and the last among them: layer ``i`` keeps
    ``round(i·(n_src−1)/(n_dst−1))``, a half rounded up (one layer: layer 0, as ``linspace`` gives). 12 → 6 keeps
    0, 2, 4, 7, 9, 11: the layers DistilBERT's student was initialized from (Sanh et al. 2019, its extraction
    script); ``⌊i·n_src/n_dst⌋`` would keep 0, 2, ..., 10 and drop the last layer, the one the head reads."""
    if n_dst == 1:
        return [0]
    return [(2 * i * (n_src - 1) + n_dst - 1) // (2 * (n_dst - 1)) for i in range(n_dst)]


def kept_layers(rule: str | tuple[int, ...], n_src: int, n_dst: int) -> list[int]:
    """The ancestry layers (0-based, of ``n_src``) a descendant of ``n_dst`` layers keeps, in order, by ``rule``:
    ``first``, ``last``, ``spread`` (:func:`spread_layers`) or the indices themselves (strictly increasing: the
    request checked that); one line for a rule that cannot give ``n_dst`` of the ancestry's layers."""
    if isinstance(rule, tuple):
        shown = ",".join(map(str, rule))
        if rule[-1] >= n_src:
            raise LearngeneError(
                f"{named('layers')} {shown}: the ancestry has {n_src} layers, 0..{n_src - 1}; give indices among them"
            )
        if len(rule) != n_dst:
            raise LearngeneError(
                f"{named('layers')} {shown} keeps {len(rule)} layers, but the descendant has {n_dst}: give "
                f"{assigned('depth', len(rule))} or {n_dst} indices"
            )
        return list(rule)
    if n_dst > n_src:
        raise LearngeneError(
            f"{named('layers')} picks which of the ancestry's {n_src} layers a descendant keeps, so it needs at most "
            f"{n_src} (asked {named('depth')} {n_dst}): ask a shallower descendant, or leave layers out"
        )
    if rule == "first":
        return list(range(n_dst))
    if rule == "last":
        return list(range(n_src - n_dst, n_src))
    return spread_layers(n_src, n_dst)


def keep_blocks(state: StateDict, layers: list[int]) -> StateDict:
    """``state`` (timm keys) with only blocks ``layers``, renumbered 0.. in that order; every other tensor kept."""
    out = {k: v for k, v in state.items() if not k.startswith("blocks.")}
    out.update(place_blocks(state, dict(enumerate(layers))))
    return out


def require_block_shape(layout: ViTSpec, spec: ViTSpec, method: str, ancestry: ViTSpec | None = None) -> None:
    """Methods that copy whole blocks need the target's blocks to have the gene's shapes; the advice names a method
    that carries the ``ancestry``'s (default: ``layout``'s) blocks to the size asked, where one can
    (:func:`learngene.registry.carrier`)."""
    from ..registry import carrier  # the methods' reach, which knows this module: asked only on a refusal

    for attr in ("embed_dim", "num_heads", "mlp_hidden"):
        if getattr(layout, attr) != getattr(spec, attr):
            instead = carrier(ancestry or layout, spec, method)
            raise LearngeneError(
                f"{method} copies whole blocks, so the target's {attr} must be "
                f"{getattr(layout, attr)} (asked {getattr(spec, attr)}); "
                + (
                    f"{instead.text} to carry the ancestry's blocks to {spec.short()}"
                    if instead
                    else f"no method carries the ancestry's blocks to {spec.short()}, so this size cannot start from them"
                ),
                advice=[instead] if instead else [],
            )
