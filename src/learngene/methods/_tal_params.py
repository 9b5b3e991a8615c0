"""TAL's rules of their GHN3 as functions of tensors: the size an axis is predicted at, a node's LoRA block, its
slicing or tiling to the parameter's shape and its normalization (:mod:`learngene.methods.tal` explains them)."""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import Tensor

from ..errors import LearngeneError, Remedy


def group_size(n: int, max_n: int) -> int:
    """The size a tensor axis is predicted at (``GHN3._map_net_params``' ``min_sz``): capped at ``max_n``, a multiple
    of 3 predicted as 4/3 of it, at least half of ``max_n`` as ``max_n``."""
    n = min(n, max_n)
    if n % 3 == 0:
        n = n // 3 * 4
    if n >= max_n / 2:
        n = max_n
    return n


class RowExpansion(Protocol):
    """What widens each row of the decoder's factor matrix from ``r`` to ``out_features`` (ck) values, row by row:
    TAL's ``l2`` (one Linear), PITH's gradual ``r → 2r → 4r → ck``."""

    out_features: int

    def __call__(self, rows: Tensor) -> Tensor: ...


def lora_block(factors: Tensor, l2: RowExpansion, r: int, shape: tuple[int, int, int, int], n_dim: int) -> Tensor:
    """One node's parameter block from its decoder MLP output ``factors`` (``2r·r`` values), as their
    ``ConvDecoder3LoRA.forward``: ``X = l2(relu(factors as 2r × r))`` (2r × ck) read in memory order as 2ck × r,
    ``A`` = its first ck rows, ``B`` = the next ck rows transposed, ``W = A[:c_out·k_out] @ B[:, :c_in·k_in]``.
    Only the rows of ``X`` that ``A`` and ``B``'s slices read are computed (the values are the same: ``l2`` acts on
    each row alone)."""
    need_a, need_b = lora_rows(shape, r, l2.out_features)
    y = torch.relu(factors.view(2 * r, r))
    return lora_product(l2(y[:need_a]), l2(y[r : r + need_b]), r, shape, n_dim)


def lora_blocks(
    factors: Tensor, l2: RowExpansion, r: int, wanted: list[tuple[tuple[int, int, int, int], int] | None]
) -> list[Tensor | None]:
    """:func:`lora_block` of many nodes (``factors``: one row each; ``wanted``: each node's ``(shape, n_dim)``, None
    for none), the rows of every ``X`` widened by one call of ``l2``: a wide ``l2`` is then read from memory once,
    not twice per node (the values are the same, up to the order of float sums a kernel picks for another batch)."""
    inputs: list[Tensor] = []
    for f, want in zip(factors, wanted, strict=True):
        if want is not None:
            need_a, need_b = lora_rows(want[0], r, l2.out_features)
            y = torch.relu(f.view(2 * r, r))
            inputs += [y[:need_a], y[r : r + need_b]]
    if not inputs:
        return [None] * len(wanted)
    widened = iter(l2(torch.cat(inputs)).split([len(x) for x in inputs]))
    return [None if want is None else lora_product(next(widened), next(widened), r, *want) for want in wanted]


def lora_rows(shape: tuple[int, int, int, int], r: int, ck: int) -> tuple[int, int]:
    """How many rows of ``X`` (each ``ck`` values) ``A`` and ``B`` read for a block of ``shape``; one line when a side
    needs more than the ``ck`` rows the decoder has."""
    c_out, c_in, k_out, k_in = shape
    rows_a, rows_b = c_out * k_out, c_in * k_in
    if max(rows_a, rows_b) > ck:
        more = Remedy(options={"max_ck": max(rows_a, rows_b)})
        raise LearngeneError(
            f"a parameter needs {max(rows_a, rows_b)} rows of the hypernetwork's decoder but max_ck is {ck}; "
            f"{more.text} or more",
            advice=[more],
        )
    return math.ceil(rows_a * r / ck), math.ceil(rows_b * r / ck)


def lora_product(x_a: Tensor, x_b: Tensor, r: int, shape: tuple[int, int, int, int], n_dim: int) -> Tensor:
    """The block ``A[:c_out·k_out] @ B[:, :c_in·k_in]`` from the rows of ``X`` that ``A`` (``x_a``) and ``B``
    (``x_b``) read, shaped as ``n_dim`` says: 1 a vector, 2 a matrix, 4 a kernel ``(c_out, c_in, k_out, k_in)``."""
    c_out, c_in, k_out, k_in = shape
    rows_a, rows_b = c_out * k_out, c_in * k_in
    a = x_a.reshape(-1)[: rows_a * r].view(rows_a, r)
    b = x_b.reshape(-1)[: rows_b * r].view(rows_b, r).t()
    w = a @ b
    if n_dim == 1:
        return w.reshape(c_out)
    if n_dim == 2:
        return w
    return w.reshape(c_out, k_out, c_in, k_in).transpose(1, 2)


def tile_params(w: Tensor, target: tuple[int, ...], class_row: Tensor | None = None) -> Tensor:
    """A predicted block ``w`` sliced or tiled to ``target`` (``GHN3._tile_params``, the GHN-3 branch).

    ``class_row``: the (1, 1, D) row put in front of a position embedding built from a 4-D block (theirs draws it
    from N(0, 0.02²) there). A position embedding longer than that row plus the block's ``s²`` patch rows is tiled
    along the tokens (their code fails there)."""
    return tiled(sliced(w, target, class_row), target)


def sliced(w: Tensor, t: tuple[int, ...], class_row: Tensor | None = None) -> Tensor:
    """``w`` cut to at most ``t`` along each axis of ``t`` (the first half of ``_tile_params``): extra trailing axes
    read at their centre, a 4-D block for a position embedding read as its tokens after ``class_row``."""
    s = w.shape
    if len(t) == 1:
        if len(s) == 1:
            w = w[: min(t[0], s[0])]
        elif len(s) == 2:
            w = w[: min(t[0], s[0]), 0]
        else:
            w = w[: min(t[0], s[0]), 0, s[-2] // 2, s[-1] // 2]
    elif len(t) == 2:
        if len(s) == 2:
            w = w[: min(t[0], s[0]), : min(t[1], s[1])]
        else:
            w = w[: min(t[0], s[0]), : min(t[1], s[1]), s[-2] // 2, s[-1] // 2]
    elif len(t) == 3:
        if len(s) == 3:
            w = w[: min(t[0], s[0]), : min(t[1], s[1]), : min(t[2], s[2])]
        else:  # a position embedding predicted as (1, D, s, s)
            w = w.reshape(*s[:2], -1).permute(0, 2, 1)
            w = w[: min(t[0], w.shape[0]), : min(t[1], w.shape[1]), : min(t[2], w.shape[2])]
            if class_row is None:
                raise ValueError("a position embedding from a 4-D block needs its class row")
            w = torch.cat((class_row.to(w), w), dim=1)
    else:
        s2 = min(t[2], s[2]) if len(s) > 2 else 1
        s3 = min(t[3], s[3]) if len(s) > 3 else 1
        if len(s) > 2:
            o2, o3 = s[-2] // 2, s[-1] // 2
            w = w[
                : min(t[0], s[0]),
                : min(t[1], s[1]),
                o2 - s2 // 2 : o2 + math.ceil(s2 / 2),
                o3 - s3 // 2 : o3 + math.ceil(s3 / 2),
            ]
        else:
            w = w[: min(t[0], s[0]), : min(t[1], s[1])].unsqueeze(2).unsqueeze(3)
    return w


def tiled(w: Tensor, t: tuple[int, ...]) -> Tensor:
    """``w`` (at most ``t``) repeated along its channels up to ``t``, then cut to it (the second half of
    ``_tile_params``; a kernel's sides at their centre)."""
    s = w.shape
    if t[0] > s[0]:  # tile the output channels
        w = w.repeat((math.ceil(t[0] / s[0]),) + (1,) * (len(t) - 1))[: t[0]]
    if len(t) > 1 and t[1] > s[1]:  # tile the input channels (the tokens of a position embedding: ours)
        w = w.repeat((1, math.ceil(t[1] / s[1])) + (1,) * (len(t) - 2))[:, : t[1]]
    elif len(t) == 3 and len(s) == 3 and t[2] > s[2]:
        w = w.repeat((1, 1, math.ceil(t[2] / s[2])))[:, :, : t[2]]
    if len(t) == 1:
        return w[: t[0]]
    if len(t) == 2:
        return w[: t[0], : t[1]]
    if len(t) == 3:
        return w[: t[0], : t[1], : t[2]]
    o2, o3 = w.shape[-2] // 2, w.shape[-1] // 2
    return w[: t[0], : t[1], o2 - t[2] // 2 : o2 + math.ceil(t[2] / 2), o3 - t[3] // 2 : o3 + math.ceil(t[3] / 2)]


def normalize(p: Tensor, is_weight: bool) -> Tensor:
    """``GHN3._normalize``: fan-in scaling ``p·√(β / fan_in)`` of a matrix or kernel (β = 1 for a kernel with one
    input channel or a wide-not-tall kernel, else 2), a position embedding (``(1, N, D)``; theirs: D ≥ 11) left as it is; a norm
    gain ``2·sigmoid(p/2)`` in (0, 2); a bias ``tanh(p/5)`` in (-1, 1)."""
    if p.dim() > 1:
        sz = p.shape
        if len(sz) == 3:  # a position embedding (1, N, D): theirs only for D ≥ 11, a narrower one fails there
            return p
        beta = 1.0 if len(sz) > 2 and (sz[1] == 1 or sz[2] < sz[3]) else 2.0
        return p * (beta / p[0].numel()) ** 0.5
    return 2 * torch.sigmoid(0.5 * p) if is_weight else torch.tanh(0.2 * p)
