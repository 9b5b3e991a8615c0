"""Moving whole-head weights to a descendant of another width, MLP size or depth.

The head methods (PEG, Cluster-Learngene) keep heads of the ancestry's size ``d``, so a descendant
with ``H`` heads is ``H·d`` wide (a plain timm ViT has ``embed_dim = num_heads · head_dim``). Its
residual stream then has another width than the ancestry's, and its MLP another hidden size. Neither
paper says how those axes are carried over (PEG App. B only says W_O is "pruned or expanded"); we use
one fixed rule for every axis that is not a head axis:

- shrinking keeps evenly spaced coordinates (as Weight Selection does);
- growing repeats the coordinates cyclically, and every weight that *reads* a repeated coordinate
  is divided by its number of copies (Net2Net's widening), so the sum it computes is unchanged.

With an exact multiple this is function preserving (a LayerNorm over ``k`` copies of a vector has
the same statistics); otherwise it is the nearest such map. Depth is stretched: descendant layer
``l`` of ``L_d`` takes source layer ``⌊l·L_s/L_d⌋``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..axes import (
    HEAD_DIM,
    HEADS,
    HIDDEN,
    HIDDEN_IN,
    KEPT,
    WIDTH,
    WIDTH_IN,
    Picker,
    block_axes,
    carried,
    move_state,
    non_block_axes,
)
from ..errors import LearngeneError
from ..spec import ViTSpec
from .base import StateDict
from .weight_selection import evenly_spaced


class AxisMap(NamedTuple):
    """``index[i]``: the source coordinate of target coordinate ``i``; ``reader_scale[i]``: 1 / its copies."""

    index: Tensor
    reader_scale: Tensor

    @property
    def is_identity(self) -> bool:
        return bool(torch.equal(self.index, torch.arange(len(self.index))) and (self.reader_scale == 1).all())


def axis_map(n_src: int, n_dst: int) -> AxisMap:
    """Evenly spaced source coordinates when shrinking, a cyclic repeat when growing."""
    if n_src < 1 or n_dst < 1:
        raise LearngeneError(f"cannot map an axis of {n_src} coordinates onto {n_dst}")
    index = evenly_spaced(n_src, n_dst) if n_dst <= n_src else cyclic(n_src, n_dst)
    copies = torch.bincount(index, minlength=n_src).to(torch.float32)
    return AxisMap(index, 1.0 / copies[index])


def cyclic(n_src: int, n_dst: int) -> Tensor:
    """Source of each of ``n_dst`` targets repeating ``n_src`` sources in turn: ``i mod n_src``."""
    return torch.arange(n_dst) % n_src


def stretch(n_src: int, n_dst: int) -> Tensor:
    """Source layer of each of ``n_dst`` target layers: ``⌊l·n_src/n_dst⌋`` (evenly spread, in order)."""
    return torch.arange(n_dst) * n_src // n_dst


def pick_mapped(role: str, n_src: int, n_dst: int) -> tuple[Tensor | slice, Tensor | None]:
    """The rule above for every axis: :func:`axis_map`'s coordinates and reader scales. Heads keep their size."""
    if n_src == n_dst:
        return KEPT
    if role == HEAD_DIM:
        raise LearngeneError(f"whole-head methods keep heads of {n_src} dims, asked {n_dst}")
    return axis_map(n_src, n_dst)


def pick_maps(width: AxisMap, hidden: AxisMap, heads: AxisMap | None = None) -> Picker:
    """:func:`pick_mapped` with these maps for the residual, MLP-hidden (and head) axes of their sizes."""
    maps = {WIDTH: width, WIDTH_IN: width, HIDDEN: hidden, HIDDEN_IN: hidden, HEADS: heads}

    def pick(role: str, n_src: int, n_dst: int) -> tuple[Tensor | slice, Tensor | None]:
        chosen = maps.get(role)
        if chosen is not None and len(chosen.index) == n_dst:
            return chosen
        return pick_mapped(role, n_src, n_dst)  # e.g. the MAP head's MLP, whose hidden size is not the blocks'

    return pick


def resize_block(block: StateDict, source: ViTSpec, target: ViTSpec, pick: Picker = pick_mapped) -> StateDict:
    """One block's tensors (in-block names, heads already ``target``'s) moved to ``target``'s width and MLP size.

    Rows that write the residual stream (W_O, fc2, their biases, norms, layer-scale gammas) are picked;
    columns that read it (qkv, fc1) are picked and divided by their copies; the head axes are left as
    they are (see :mod:`learngene.axes` for every tensor's axes).
    """
    heads = (target.num_heads, target.num_heads)
    return move_state(block, block_axes(source), target.block_shapes(), heads, pick)


def resize_non_block(state: StateDict, source: ViTSpec, target: ViTSpec, pick: Picker = pick_mapped) -> StateDict:
    """Tokens, embeddings, norms, MAP pooling head and classifiers (timm keys, those present) moved to
    ``target``'s width and head count; token counts, patch kernels and classes stay ``source``'s."""
    return move_state(state, non_block_axes(source), carried(source, target).non_block_shapes(),
                      (source.num_heads, target.num_heads), pick)
