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

from ..errors import LearngeneError
from ..gene import Learngene, register_method
from ..heads import join_proj, join_qkv, split_proj, split_qkv
from ..spec import ViTSpec, block_key
from .base import Ancestry, CondenseInputs, Method, StateDict, block_state, inherit_non_block


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
        idx_d = _selector(src.embed_dim, spec.embed_dim)
        idx_m = _selector(src.mlp_hidden, spec.mlp_hidden)
        if self.config.head_aware:
            if spec.num_heads > src.num_heads or spec.head_dim > src.head_dim:
                raise LearngeneError(f"head-aware weight_selection needs at most {src.num_heads} heads of at most "
                                     f"{src.head_dim} dims, asked {spec.num_heads} x {spec.head_dim}; "
                                     f"or pass --opt head_aware=false")
            heads = _selector(src.num_heads, spec.num_heads)
            head_dims = _selector(src.head_dim, spec.head_dim)
        out: StateDict = {}
        for layer in range(min(spec.depth, src.depth)):
            b = block_state(gene.tensors, layer)
            if self.config.head_aware:
                qkv_w = join_qkv(*(t[heads][:, head_dims][:, :, idx_d] for t in split_qkv(b["attn.qkv.weight"], src.num_heads)))
                qkv_b = join_qkv(*(t[heads][:, head_dims] for t in split_qkv(b["attn.qkv.bias"], src.num_heads)))
                proj_w = join_proj(split_proj(b["attn.proj.weight"], src.num_heads)[heads][:, idx_d][:, :, head_dims])
            else:
                rows = _selector(3 * src.embed_dim, 3 * spec.embed_dim)
                qkv_w, qkv_b = b["attn.qkv.weight"][rows][:, idx_d], b["attn.qkv.bias"][rows]
                proj_w = b["attn.proj.weight"][idx_d][:, idx_d]
            selected = {
                "norm1.weight": b["norm1.weight"][idx_d],
                "norm1.bias": b["norm1.bias"][idx_d],
                "attn.qkv.weight": qkv_w,
                "attn.qkv.bias": qkv_b,
                "attn.proj.weight": proj_w,
                "attn.proj.bias": b["attn.proj.bias"][idx_d],
                "norm2.weight": b["norm2.weight"][idx_d],
                "norm2.bias": b["norm2.bias"][idx_d],
                "mlp.fc1.weight": b["mlp.fc1.weight"][idx_m][:, idx_d],
                "mlp.fc1.bias": b["mlp.fc1.bias"][idx_m],
                "mlp.fc2.weight": b["mlp.fc2.weight"][idx_d][:, idx_m],
                "mlp.fc2.bias": b["mlp.fc2.bias"][idx_d],
            }
            out.update({block_key(layer, k): v for k, v in selected.items()})
        out.update(inherit_non_block(_narrow_non_block(gene.tensors, src, idx_d), src.replace(embed_dim=spec.embed_dim,
                                                                                               num_heads=1), spec))
        return out


def _narrow_non_block(state: StateDict, src: ViTSpec, idx_d: Tensor | slice) -> StateDict:
    """Embeddings, final norm and head with the width dimension reduced to ``idx_d``."""
    out: StateDict = {}
    for key in src.non_block_shapes():
        t = state[key]
        if key == "head.weight":
            out[key] = t[:, idx_d]
        elif key == "head.bias":
            out[key] = t
        elif key in ("cls_token", "pos_embed"):
            out[key] = t[..., idx_d]
        else:  # patch embedding (out channels first) and the final norm
            out[key] = t[idx_d]
    return out
