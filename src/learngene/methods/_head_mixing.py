"""Mixing a block's heads (cluster keeps and shares centroid heads, PEG mixes them, grow copies them)."""

from __future__ import annotations

from torch import Tensor

from ..vit.spec import ViTSpec
from ..vit.transfer import StateDict, block_axes, mix_block_heads


def mix_heads(block: StateDict, spec: ViTSpec, mixing: Tensor) -> StateDict:
    """``block`` (in-block names, shaped for ``spec``) with its heads replaced by ``mixing`` ``(H_new, H)`` of them:
    q, k, v rows, their biases, W_O columns, every head row of the family. On a meta block (the load-time check)
    nothing is computed: the mixing moves there."""
    return mix_block_heads(block, block_axes(spec), mixing.to(block["attn.qkv.weight"].device))
