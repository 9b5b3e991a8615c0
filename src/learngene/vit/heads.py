"""The one place that knows how timm lays out attention heads.

timm fuses the input projections of a block into ``attn.qkv.weight`` of shape ``(3·D, D)``, rows laid
out ``[Q of all heads; K of all heads; V of all heads]``, i.e. ``view(3, H, d, D)``; the bias follows
the same rows. ``nn.Linear`` computes ``y = x Wᵀ + b``, so head ``h``'s queries are
``x @ q[h].T`` with ``q[h]`` of shape ``(d, D)``. The output projection ``attn.proj.weight`` has shape
``(D, H·d)``: its columns ``h·d:(h+1)·d`` read head ``h``'s output.

(Reshaping qkv as ``(H, 3·d, D)`` — as one author's code does — is wrong for this layout: "head 1"
would then hold queries of other heads.)
"""

from __future__ import annotations

import torch
from torch import Tensor


def split_heads(t: Tensor, num_heads: int, segments: int = 1, dim: int = 0) -> Tensor:
    """Axis ``dim`` of ``t``, ``segments·H·d`` channels laid out ``[segment 0 of all heads; segment 1; ...]``,
    as three axes ``(segments, H, d)`` (a view). Segments: 3 for timm's fused qkv rows, 2 for the MAP
    head's kv rows, 1 for its q rows and for the columns of any output projection ``W_O``."""
    n = t.shape[dim]
    if n % (segments * num_heads):
        raise ValueError(f"an axis of {n} channels does not split into {segments} x {num_heads} heads")
    return t.reshape(*t.shape[:dim], segments, num_heads, n // (segments * num_heads), *t.shape[dim + 1 :])


def join_heads(t: Tensor, dim: int = 0) -> Tensor:
    """Inverse of :func:`split_heads`: axes ``dim .. dim+2`` merged back into one."""
    return t.reshape(*t.shape[:dim], -1, *t.shape[dim + 3 :])


def split_qkv(qkv: Tensor, num_heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """Split a fused qkv weight ``(3·H·d, D)`` or bias ``(3·H·d,)`` into per-head q, k, v.

    Returns:
        q, k, v of shape ``(H, d, D)`` for a weight, ``(H, d)`` for a bias (views, no copy).
    """
    if qkv.shape[0] % (3 * num_heads):
        raise ValueError(f"qkv has {qkv.shape[0]} rows, not divisible by 3 x {num_heads} heads")
    q, k, v = split_heads(qkv, num_heads, 3).unbind(0)
    return q, k, v


def join_qkv(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Inverse of :func:`split_qkv`: per-head ``(H, d, ...)`` q, k, v back into timm's fused layout."""
    return torch.stack((q, k, v)).reshape(3 * q.shape[0] * q.shape[1], *q.shape[2:])


def split_proj(proj: Tensor, num_heads: int) -> Tensor:
    """The columns of the output projection ``W_O`` (``(D_out, H·d)``) that read each head.

    Returns:
        ``(H, D_out, d)``: entry ``h`` is ``proj[:, h·d:(h+1)·d]``.
    """
    out, cols = proj.shape
    if cols % num_heads:
        raise ValueError(f"proj has {cols} input columns, not divisible by {num_heads} heads")
    return proj.reshape(out, num_heads, cols // num_heads).permute(1, 0, 2)


def join_proj(per_head: Tensor) -> Tensor:
    """Inverse of :func:`split_proj`."""
    heads, out, d = per_head.shape
    return per_head.permute(1, 0, 2).reshape(out, heads * d)


def mix_heads(
    qkv_weight: Tensor, qkv_bias: Tensor | None, proj_weight: Tensor, mixing: Tensor
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Build new heads as linear combinations of old ones, W_O columns following their heads.

    New head ``o`` gets ``q_o = Σ_h M[o, h] q_h`` (likewise k, v, their biases and W_O columns).
    A one-hot ``mixing`` selects or copies heads; a row-stochastic one mixes them (PEG).

    Args:
        qkv_weight: ``(3·H·d, D)`` fused weight of ``H`` heads.
        qkv_bias: ``(3·H·d,)`` or None.
        proj_weight: ``(D_out, H·d)``.
        mixing: ``(H_new, H)``.

    Returns:
        ``(qkv_weight, qkv_bias, proj_weight)`` for ``H_new`` heads of the same size ``d``.
    """
    heads = mixing.shape[1]
    mixed = [torch.einsum("oh,h...->o...", mixing, t) for t in split_qkv(qkv_weight, heads)]
    new_bias = None
    if qkv_bias is not None:
        new_bias = join_qkv(*(torch.einsum("oh,h...->o...", mixing, t) for t in split_qkv(qkv_bias, heads)))
    new_proj = join_proj(torch.einsum("oh,h...->o...", mixing, split_proj(proj_weight, heads)))
    return join_qkv(*mixed), new_bias, new_proj


def select_matrix(indices: list[int] | Tensor, num_in: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """One-hot ``(len(indices), num_in)`` mixing matrix that picks rows ``indices`` (repeats allowed)."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    return torch.nn.functional.one_hot(idx, num_in).to(dtype)
