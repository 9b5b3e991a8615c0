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

from ..errors import LearngeneError
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


def resize_block(block: StateDict, width: AxisMap, hidden: AxisMap) -> StateDict:
    """One block's tensors (in-block names) moved to another residual width and MLP hidden size.

    Rows that write the residual stream (W_O, fc2, their biases, the norms) are picked by ``width``;
    columns that read it (qkv, fc1) are picked and divided by their copies. The qkv rows and the W_O
    columns belong to heads and are left as they are.
    """
    if width.is_identity and hidden.is_identity:
        return dict(block)
    w, m = width, hidden
    rules = {
        "norm1.weight": lambda t: t[w.index],
        "norm1.bias": lambda t: t[w.index],
        "attn.qkv.weight": lambda t: t[:, w.index] * w.reader_scale,
        "attn.qkv.bias": lambda t: t,
        "attn.proj.weight": lambda t: t[w.index],
        "attn.proj.bias": lambda t: t[w.index],
        "norm2.weight": lambda t: t[w.index],
        "norm2.bias": lambda t: t[w.index],
        "mlp.fc1.weight": lambda t: t[m.index][:, w.index] * w.reader_scale,
        "mlp.fc1.bias": lambda t: t[m.index],
        "mlp.fc2.weight": lambda t: t[w.index][:, m.index] * m.reader_scale,
        "mlp.fc2.bias": lambda t: t[w.index],
    }
    return {name: rules[name](t) for name, t in block.items()}


def resize_non_block(state: StateDict, width: AxisMap) -> StateDict:
    """Embeddings, final norm and classifier (timm keys, those present) moved to another residual width."""
    if width.is_identity:
        return dict(state)
    out: StateDict = {}
    for key, t in state.items():
        if key in ("cls_token", "pos_embed"):
            out[key] = t[..., width.index]
        elif key == "head.weight":
            out[key] = t[:, width.index] * width.reader_scale
        elif key == "head.bias":
            out[key] = t
        else:  # patch embedding (output channels first) and the final norm
            out[key] = t[width.index]
    return out
