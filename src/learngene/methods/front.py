"""FRONT (FRequency dOmain kNowledge Transfer; "One-for-All Model Initialization with Frequency-Domain
Knowledge", ICML 2026, arXiv 2603.07523). Training-free.

Learngene. Every block tensor kind (qkv, W_O, fc1, fc2 weights, their biases, the norms) is stacked
over the ancestry's layers and transformed by an orthonormal DCT-II along the layer axis and along
each width axis of the weight (a 3-D DCT for the matrices: layer × rows × columns). Only the
low-frequency corner is kept: ``⌈r·N⌉`` coefficients of every transformed axis of length ``N``
(``r = keep_ratio``; ``depth_ratio`` may set another ratio for the layer axis). The embeddings, final
norm and classifier are transformed along their width axis the same way. The learngene IS these
coefficients, so a matrix stack stores about ``r³`` of its entries and the gene's size is set by ``r``
(``learngene inspect`` prints it).

Expansion. For a target of depth ``L'``, width ``D'`` and MLP size ``M'``, each axis's coefficients are
truncated or zero-padded to the target length and inverted by the orthonormal DCT-III of that
length. The inverse is scaled by ``√(target/source)`` per axis, so that it is a band-limited
resampling that keeps the weights' magnitude (without it a 12 → 4 layer stack would come out √3
times larger); at the ancestry's own sizes the factor is 1 and ``keep_ratio = 1`` gives back the
ancestry exactly. Smaller and larger depths and widths both work: growing an axis interpolates the
kept band (no new frequencies are invented). Every step is a matrix product (``expand`` stays
differentiable in the coefficients).

Readings of ours (the authors' script ``front_init_deit.py`` could not be found in any stored source,
so the facts above come from the issue text and the paper's public OpenReview abstract and reviews:
a 3-D DCT over layer/input/output, a frequency ratio ``r``, truncation or zero padding, training-free):
timm's fused qkv weight and bias are transformed as three separate ``D × D`` matrices and ``D`` vectors (a DCT across the [Q; K; V]
boundary would mix unrelated weights); the position embedding's token axis and the patch kernel are
not transformed (the grid and patch size are resampled by timm's resamplers, as every method here
does); the classifier is inherited only for the same label space; FRONT+ (the optional spectral
regularised refinement) is not implemented.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Method, Paper
from ..registry import register_method
from ..spec import ViTSpec, block_key
from ..transfer import (
    CLASSES,
    KEEP,
    Axis,
    StateDict,
    block_axes,
    carried,
    inherit_non_block,
    non_block_axes,
)
from ..validate import option

PREFIX = "dct."
LAYER, FREQ = "layer", "freq"


def front_axes(axes: tuple[Axis, ...]) -> tuple[str | None, ...]:
    """Which axes of a tensor (segments split off, see :func:`split_segments`) are transformed: every width,
    MLP-hidden and head axis (its table in :mod:`learngene.axes`); not across the q/k/v segments of a fused
    qkv or SwiGLU's two halves (that would mix unrelated weights), not token counts, kernels or classes."""
    names: list[str | None] = []
    for axis in axes:
        if axis.segments > 1:
            names.append(None)
        names.append(None if axis.role in (KEEP, CLASSES) else FREQ)
    return tuple(names)


def split_shape(shape: tuple[int, ...], axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """``shape`` with every segmented axis split into ``(segments, length / segments)``."""
    out: list[int] = []
    for n, axis in zip(shape, axes):
        out += [axis.segments, n // axis.segments] if axis.segments > 1 else [n]
    return tuple(out)


def dct_matrix(n: int, dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> Tensor:
    """Orthonormal DCT-II matrix ``C[k, i] = a_k cos(π (2i + 1) k / 2n)``: ``X = C x``, ``x = Cᵀ X`` (DCT-III)."""
    i = torch.arange(n, dtype=dtype, device=device)
    c = torch.cos(math.pi * (2 * i + 1) * i[:, None] / (2 * n)) * math.sqrt(2 / n)
    c[0] = c[0] / math.sqrt(2)
    return c


def _along(t: Tensor, axis: int, matrix: Tensor) -> Tensor:
    """``matrix`` (out × in) applied along ``axis`` of ``t``."""
    return torch.movedim(torch.movedim(t, axis, -1) @ matrix.T, -1, axis)


def low_frequencies(t: Tensor, axes: tuple[str | None, ...], keep: Callable[[str, int], int]) -> Tensor:
    """DCT-II of ``t`` along every named axis, cropped to its first ``keep(name, length)`` coefficients."""
    out = t.double()
    for axis, name in enumerate(axes):
        if name is not None:
            n = out.shape[axis]
            out = _along(out, axis, dct_matrix(n)[:min(keep(name, n), n)])
    return out.to(t.dtype)


def resample(coeffs: Tensor, axes: tuple[str | None, ...], sizes: tuple[tuple[int, int], ...]) -> Tensor:
    """Inverse DCT of kept coefficients to the target length of every named axis.

    ``sizes[axis] = (source length, target length)``. Coefficients beyond the target length are dropped,
    missing ones are zero (the basis simply has fewer rows); the result is scaled by ``√(target/source)``.
    """
    out = coeffs
    for axis, name in enumerate(axes):
        if name is None:
            continue
        src, dst = sizes[axis]
        kept = min(out.shape[axis], dst)
        out = out.narrow(axis, 0, kept)
        basis = dct_matrix(dst, dtype=out.dtype, device=out.device)[:kept].T * math.sqrt(dst / src)
        out = _along(out, axis, basis)
    return out


@dataclass(frozen=True)
class FrontConfig:
    AUTO_OPTIONS = ("depth_ratio",)  # 0: automatic

    keep_ratio: float = option(0.5, above=0, at_most=1)  # share of the coefficients kept along each transformed axis (1: lossless)
    depth_ratio: float = option(0.0, at_least=0, at_most=1)  # share kept along the layer axis; 0: keep_ratio


@register_method
class Front(Method):
    name = "front"
    summary = "low-frequency 3-D DCT coefficients of the stacked layers; truncate/pad + inverse DCT; any size"
    paper = Paper("One-for-All Model Initialization with Frequency-Domain Knowledge (FRONT)", "", "ICML", 2026, "2603.07523")
    Config = FrontConfig

    def _count(self, name: str, n: int) -> int:
        """Coefficients kept along an axis of length ``n``."""
        ratio = (self.config.depth_ratio or self.config.keep_ratio) if name == LAYER else self.config.keep_ratio
        return math.ceil(ratio * n)

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        """The low-frequency corner of every stacked block tensor and of every non-block tensor's width axes."""
        spec = ancestry.require_vit(self.name)
        state = ancestry.state()
        tensors: StateDict = {}
        for name, axes in block_axes(spec).items():
            stack = torch.stack([state[block_key(layer, name)] for layer in range(spec.depth)])
            stack = stack.reshape(spec.depth, *split_shape(stack.shape[1:], axes))
            tensors[PREFIX + name] = low_frequencies(stack, (LAYER, *front_axes(axes)), self._count)
        for key, axes in non_block_axes(spec).items():
            t = state[key].reshape(split_shape(state[key].shape, axes))
            tensors[PREFIX + key] = low_frequencies(t, front_axes(axes), self._count)
        return self.new_gene(tensors, spec, spec)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """Truncate or zero-pad every axis's coefficients to the target length, then inverse DCT."""
        src: ViTSpec = gene.layout
        out: StateDict = {}
        src_shapes, dst_shapes = src.block_shapes(), spec.block_shapes()
        for name, axes in block_axes(src).items():
            sizes = tuple(zip((src.depth, *split_shape(src_shapes[name], axes)),
                              (spec.depth, *split_shape(dst_shapes[name], axes))))
            stack = resample(gene.tensors[PREFIX + name], (LAYER, *front_axes(axes)), sizes)
            for layer, tensor in enumerate(stack.reshape(spec.depth, *dst_shapes[name]).unbind(0)):
                out[block_key(layer, name)] = tensor
        narrow = carried(src, spec)
        src_shapes, dst_shapes = src.non_block_shapes(), narrow.non_block_shapes()
        non_block = {}
        for key, axes in non_block_axes(src).items():
            sizes = tuple(zip(split_shape(src_shapes[key], axes), split_shape(dst_shapes[key], axes)))
            non_block[key] = resample(gene.tensors[PREFIX + key], front_axes(axes), sizes).reshape(dst_shapes[key])
        out.update(inherit_non_block(non_block, narrow, spec))
        return out

    def describe(self, gene: Learngene) -> list[str]:
        src: ViTSpec = gene.layout
        return [(f"kept DCT coefficients per axis: layers {self._count(LAYER, src.depth)}/{src.depth}, width "
                 f"{self._count(FREQ, src.embed_dim)}/{src.embed_dim}, MLP {self._count(FREQ, src.mlp_inner)}/"
                 f"{src.mlp_inner} (keep_ratio {self.config.keep_ratio})"),
                (f"stored {gene.num_stored_params:,} of the ancestry's {src.num_params:,} parameters "
                f"({gene.num_stored_params / src.num_params:.1%})")]
