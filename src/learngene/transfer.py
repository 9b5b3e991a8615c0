"""Every rule that moves tensors between sizes: layers, residual width, MLP size, heads, embeddings.

Methods pick or build the tensors a descendant needs; how those tensors are carried to another size
is written once, here. Per-tensor rules are data, as torchtune writes its key mappings: a row of
:data:`BLOCK_AXES` or :data:`NON_BLOCK_AXES` names, for every axis of one timm tensor, which size it
follows. A new tensor (a layer-scale gamma, register tokens, an attention-pool head) is one more row.

Carrying an axis of ``n_src`` coordinates to ``n_dst`` (:func:`axis_map`):

- shrinking keeps evenly spaced coordinates (every k-th when the sizes divide: Weight Selection, Xu
  et al. 2024);
- growing repeats the coordinates cyclically, and every weight that *reads* a repeated coordinate
  is divided by its number of copies (Net2Net's widening), so the sum it computes is unchanged.

With an exact multiple this is function preserving (a LayerNorm over ``k`` copies of a vector has
the same statistics); otherwise it is the nearest such map. Neither head paper says how these axes
are carried (PEG App. B only says W_O is "pruned or expanded"): this is our one rule for all of them.
Depth is stretched: descendant layer ``l`` of ``L_d`` takes source layer ``⌊l·L_s/L_d⌋``. Head axes
(qkv rows, W_O columns) are the methods' own business (:mod:`learngene.heads`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from timm.layers import resample_abs_pos_embed, resample_patch_embed
from torch import Tensor

from .errors import LearngeneError
from .spec import ViTSpec, block_key

StateDict = dict[str, Tensor]

# ---- the rules as data -------------------------------------------------------------------------------
# Each tensor's axes, in order: "width" (the residual stream D), "hidden" (the MLP's hidden size), or
# "reads width" / "reads hidden" (an input axis: coordinates repeated there are divided by their copies);
# None: left as it is (head-structured axes, classes, pixels, tokens).
BLOCK_AXES: dict[str, tuple[str | None, ...]] = {
    "norm1.weight": ("width",),
    "norm1.bias": ("width",),
    "attn.qkv.weight": (None, "reads width"),  # rows belong to heads
    "attn.qkv.bias": (None,),
    "attn.proj.weight": ("width", None),  # columns belong to heads
    "attn.proj.bias": ("width",),
    "norm2.weight": ("width",),
    "norm2.bias": ("width",),
    "mlp.fc1.weight": ("hidden", "reads width"),
    "mlp.fc1.bias": ("hidden",),
    "mlp.fc2.weight": ("width", "reads hidden"),
    "mlp.fc2.bias": ("width",),
}
NON_BLOCK_AXES: dict[str, tuple[str | None, ...]] = {
    "cls_token": (None, None, "width"),
    "pos_embed": (None, None, "width"),
    "patch_embed.proj.weight": ("width", None, None, None),  # output channels first
    "patch_embed.proj.bias": ("width",),
    "norm.weight": ("width",),
    "norm.bias": ("width",),
    "fc_norm.weight": ("width",),
    "fc_norm.bias": ("width",),
    "head.weight": (None, "reads width"),
    "head.bias": (None,),
}


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


class AxisMap(NamedTuple):
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


def move_axes(tensor: Tensor, axes: tuple[str | None, ...], maps: dict[str, AxisMap]) -> Tensor:
    """``tensor`` with every axis named in ``axes`` (a row of the tables above) carried by its map."""
    for dim, kind in enumerate(axes):
        if kind is None:
            continue
        size = kind.removeprefix("reads ")
        axis = maps[size]
        tensor = tensor[(slice(None),) * dim + (axis.index,)]
        if size != kind and axis.repeats:
            tensor = tensor * axis.reader_scale.view(-1, *[1] * (tensor.ndim - dim - 1))
    return tensor


def _rule(table: dict[str, tuple[str | None, ...]], key: str, table_name: str) -> tuple[str | None, ...]:
    try:
        return table[key]
    except KeyError:
        raise LearngeneError(f"no rule carries {key} to another size; add its row to "
                             f"learngene.transfer.{table_name}") from None


def resize_block(block: StateDict, width: AxisMap, hidden: AxisMap) -> StateDict:
    """One block's tensors (in-block names) moved to another residual width and MLP hidden size
    (:data:`BLOCK_AXES`); head axes are left as they are."""
    if width.is_identity and hidden.is_identity:
        return dict(block)
    maps = {"width": width, "hidden": hidden}
    return {name: move_axes(t, _rule(BLOCK_AXES, name, "BLOCK_AXES"), maps) for name, t in block.items()}


def resize_non_block(state: StateDict, width: AxisMap) -> StateDict:
    """Embeddings, final norm and classifier (timm keys, those present) moved to another residual width
    (:data:`NON_BLOCK_AXES`)."""
    if width.is_identity:
        return dict(state)
    return {key: move_axes(t, _rule(NON_BLOCK_AXES, key, "NON_BLOCK_AXES"), {"width": width})
            for key, t in state.items()}


# ---- non-block parts ----------------------------------------------------------------------------------
ALL_PARTS = ("embed", "norm", "head")


def inherit_non_block(state: StateDict, source: ViTSpec, target: ViTSpec, parts: tuple[str, ...] = ALL_PARTS) -> StateDict:
    """Carry embeddings, final norm and classifier from ``source`` to ``target`` where they fit.

    Position embeddings are resampled to the target grid and patch embeddings to the target patch size
    (timm's resamplers, differentiable); the class token/prefix is kept only when both specs have one;
    the head only when the label spaces agree; the final norm moves between timm's ``norm`` and
    ``fc_norm`` with the pooling. Another width is left to the target's own initialization (methods
    that change width use :func:`carry_non_block`); another input channel count is an error.
    """
    out: StateDict = {}
    if source.embed_dim != target.embed_dim:
        return out
    if "embed" in parts:
        if source.class_token and target.class_token and "cls_token" in state:
            out["cls_token"] = state["cls_token"]
        if "pos_embed" in state:
            pos = state["pos_embed"]
            src_prefix = int(source.class_token)
            patches = pos[:, src_prefix:]
            if source.grid_size != target.grid_size:
                patches = resample_abs_pos_embed(patches, new_size=[target.grid_size] * 2,
                                                 old_size=[source.grid_size] * 2, num_prefix_tokens=0, verbose=False)
            if target.class_token:
                prefix = pos[:, :1] if source.class_token else None
                if prefix is not None:
                    out["pos_embed"] = torch.cat([prefix, patches], dim=1)
            else:
                out["pos_embed"] = patches
        if "patch_embed.proj.weight" in state:
            if source.in_chans != target.in_chans:
                raise LearngeneError(f"the ancestry takes {source.in_chans}-channel images but the target asks for "
                                     f"{target.in_chans}; keep in_chans={source.in_chans} (data are converted to it)")
            weight = state["patch_embed.proj.weight"]
            if source.patch_size != target.patch_size:
                weight = resample_patch_embed(weight, [target.patch_size] * 2, verbose=False)
            out["patch_embed.proj.weight"] = weight
            out["patch_embed.proj.bias"] = state["patch_embed.proj.bias"]
    if "norm" in parts:
        for suffix in ("weight", "bias"):
            key = f"{source.final_norm_key}.{suffix}"
            if key in state:
                out[f"{target.final_norm_key}.{suffix}"] = state[key]
    if "head" in parts and source.num_classes == target.num_classes and target.num_classes:
        for key in ("head.weight", "head.bias"):
            if key in state:
                out[key] = state[key]
    return out


def carry_non_block(state: StateDict, source: ViTSpec, target: ViTSpec, parts: tuple[str, ...] = ALL_PARTS,
                    width: AxisMap | None = None) -> StateDict:
    """The non-block tensors of ``state`` (shaped for ``source``) carried to ``target``: the width by
    ``width`` (default: :func:`axis_map`'s rule; :func:`resize_non_block`), the rest by :func:`inherit_non_block`."""
    width = width if width is not None else axis_map(source.embed_dim, target.embed_dim)
    resized = resize_non_block({k: v for k, v in state.items() if k in source.non_block_shapes()}, width)
    return inherit_non_block(resized, source.replace(embed_dim=target.embed_dim, num_heads=target.num_heads), target,
                             parts)


# ---- whole blocks -------------------------------------------------------------------------------------
def block_state(state: StateDict, layer: int) -> StateDict:
    """The tensors of block ``layer`` of a timm state_dict, keyed by their in-block names."""
    prefix = block_key(layer, "")
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def place_blocks(state: StateDict, placement: dict[int, int]) -> StateDict:
    """``{target_layer: source_layer}`` → the target's block tensors copied from the source layers."""
    out: StateDict = {}
    for target, source in placement.items():
        for name, tensor in block_state(state, source).items():
            out[block_key(target, name)] = tensor
    return out


def require_block_shape(layout: ViTSpec, spec: ViTSpec, method: str) -> None:
    """Methods that copy whole blocks need the target's blocks to have the gene's shapes."""
    for attr in ("embed_dim", "num_heads", "mlp_hidden"):
        if getattr(layout, attr) != getattr(spec, attr):
            raise LearngeneError(f"{method} copies whole blocks, so the target's {attr} must be "
                                 f"{getattr(layout, attr)} (asked {getattr(spec, attr)}); "
                                 f"use weight_selection for a narrower model")
