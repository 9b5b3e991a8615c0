"""Weight Selection (Xu et al., "Initializing Models with Larger Ones", ICLR 2024).

A smaller descendant takes the ancestry's first ``L_d`` layers, and from every tensor the evenly
spaced indices of every dimension (every k-th when the sizes divide, else a rounded linspace). The
authors select rows of the fused qkv matrix without regard to heads; with ``head_aware=True``
(default) whole heads are selected consistently across q, k, v, their biases and the matching W_O
columns, and the same within-head dimensions in every head, so each selected head stays a head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..axes import (
    HEADS,
    HEADS_IN,
    WIDTH,
    Axis,
    block_axes,
    carried,
    move_state,
    non_block_axes,
)
from ..errors import LearngeneError
from ..gene import Learngene, register_method
from ..spec import ViTSpec, block_key
from .base import (
    Ancestry,
    CondenseInputs,
    Method,
    StateDict,
    block_state,
    inherit_non_block,
)


def evenly_spaced(n_src: int, n_dst: int) -> Tensor:
    """``n_dst`` evenly spaced indices into ``n_src`` (every k-th if ``n_dst`` divides ``n_src``)."""
    if not 0 < n_dst <= n_src:
        raise LearngeneError(f"weight_selection can only shrink a dimension, asked {n_src} -> {n_dst}")
    if n_src % n_dst == 0:
        return torch.arange(0, n_src, n_src // n_dst)
    return torch.linspace(0, n_src - 1, n_dst).round().long()


def _selector(n_src: int, n_dst: int) -> Tensor | slice:
    """``evenly_spaced`` as a strided slice when the sizes divide: a view, so the identity and integer
    ratios copy nothing (a ViT-B expands in milliseconds instead of seconds)."""
    if 0 < n_dst <= n_src and n_src % n_dst == 0:
        return slice(None, None, n_src // n_dst)
    return evenly_spaced(n_src, n_dst)


@dataclass(frozen=True)
class WeightSelectionConfig:
    head_aware: bool = True


@register_method
class WeightSelection(Method):
    name = "weight_selection"
    summary = "first-N layers + evenly spaced elements (head-aware); shrinks depth and width"
    paper = "Xu et al., ICLR 2024"
    Config = WeightSelectionConfig

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        ancestry.require_vit(self.name)
        return self.new_gene(ancestry.state(), ancestry.spec)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        src: ViTSpec = gene.ancestry
        for n_src, n_dst in ((src.embed_dim, spec.embed_dim), (src.mlp_inner, spec.mlp_inner)):
            _selector(n_src, n_dst)  # refuses to grow, before the head check can say less
        if self.config.head_aware and (spec.num_heads > src.num_heads or spec.head_dim > src.head_dim):
            raise LearngeneError(f"head-aware weight_selection needs at most {src.num_heads} heads of at most "
                                 f"{src.head_dim} dims, asked {spec.num_heads} x {spec.head_dim}; "
                                 f"or pass --opt head_aware=false")
        blocks, non_blocks = block_axes(src), non_block_axes(src)
        if not self.config.head_aware:  # the authors' rule: q, k, v rows and W_O columns as plain coordinates
            blocks, non_blocks = _without_heads(blocks), _without_heads(non_blocks)
        heads = (src.num_heads, spec.num_heads)
        out: StateDict = {}
        for layer in range(min(spec.depth, src.depth)):
            selected = move_state(block_state(gene.tensors, layer), blocks, spec.block_shapes(), heads, pick_evenly)
            out.update({block_key(layer, k): v for k, v in selected.items()})
        narrow = carried(src, spec)
        state = {k: gene.tensors[k] for k in src.non_block_shapes()}
        out.update(inherit_non_block(move_state(state, non_blocks, narrow.non_block_shapes(), heads, pick_evenly),
                                     narrow, spec))
        return out


def pick_evenly(role: str, n_src: int, n_dst: int) -> tuple[Tensor | slice, None]:
    """Weight Selection's rule for every axis: evenly spaced coordinates, never a copy (no reader scaling)."""
    return _selector(n_src, n_dst), None


def _without_heads(table: dict[str, tuple[Axis, ...]]) -> dict[str, tuple[Axis, ...]]:
    return {k: tuple(Axis(WIDTH) if a.role in (HEADS, HEADS_IN) else a for a in axes) for k, axes in table.items()}
