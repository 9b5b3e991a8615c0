"""Weight Selection (Xu et al., "Initializing Models with Larger Ones", ICLR 2024).

A smaller descendant takes the ancestry's first ``L_d`` layers, and from every tensor the evenly
spaced indices of every dimension (every k-th when the sizes divide, else a rounded linspace). The
authors select rows of the fused qkv matrix without regard to heads; with ``head_aware=True``
(default) whole heads are selected consistently across q, k, v, their biases and the matching W_O
columns, and the same within-head dimensions in every head, so each selected head stays a head.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LearngeneError
from ..gene import Learngene
from ..heads import join_proj, join_qkv, split_proj, split_qkv
from ..method import Ancestry, CondenseInputs, Method
from ..registry import register_method
from ..spec import ViTSpec, block_key
from ..transfer import StateDict, axis_map, block_state, carry_non_block, evenly_spaced_index, resize_block


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
        spec = ancestry.require_vit(self.name)
        return self.new_gene(ancestry.state(), spec, spec)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """Heads (or qkv rows) picked here; the width and MLP axes by :mod:`learngene.transfer`'s evenly spaced rule."""
        src: ViTSpec = gene.layout
        for n_src, n_dst in ((src.embed_dim, spec.embed_dim), (src.mlp_hidden, spec.mlp_hidden)):
            if n_dst > n_src:
                raise LearngeneError(f"weight_selection can only shrink a dimension, asked {n_src} -> {n_dst}")
        width, hidden = axis_map(src.embed_dim, spec.embed_dim), axis_map(src.mlp_hidden, spec.mlp_hidden)
        if self.config.head_aware:
            if spec.num_heads > src.num_heads or spec.head_dim > src.head_dim:
                raise LearngeneError(f"head-aware weight_selection needs at most {src.num_heads} heads of at most "
                                     f"{src.head_dim} dims, asked {spec.num_heads} x {spec.head_dim}; "
                                     f"or pass --opt head_aware=false")
            heads = evenly_spaced_index(src.num_heads, spec.num_heads)
            head_dims = evenly_spaced_index(src.head_dim, spec.head_dim)
        out: StateDict = {}
        for layer in range(min(spec.depth, src.depth)):
            b = block_state(gene.tensors, layer)
            if self.config.head_aware:  # whole heads, the same dims in each: q, k, v rows and W_O columns
                b["attn.qkv.weight"] = join_qkv(*(t[heads][:, head_dims] for t in split_qkv(b["attn.qkv.weight"], src.num_heads)))
                b["attn.qkv.bias"] = join_qkv(*(t[heads][:, head_dims] for t in split_qkv(b["attn.qkv.bias"], src.num_heads)))
                b["attn.proj.weight"] = join_proj(split_proj(b["attn.proj.weight"], src.num_heads)[heads][:, :, head_dims])
            else:  # the authors' rule: evenly spaced rows of the fused qkv, W_O columns like any width axis
                rows = evenly_spaced_index(3 * src.embed_dim, 3 * spec.embed_dim)
                b["attn.qkv.weight"], b["attn.qkv.bias"] = b["attn.qkv.weight"][rows], b["attn.qkv.bias"][rows]
                b["attn.proj.weight"] = b["attn.proj.weight"][:, width.index]
            out.update({block_key(layer, k): v for k, v in resize_block(b, width, hidden).items()})
        out.update(carry_non_block(gene.tensors, src, spec))
        return out
