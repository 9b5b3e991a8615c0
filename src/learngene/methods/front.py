"""FRONT (FRequency dOmain kNowledge Transfer; "Breaking the Scale Barrier: One-Shot Knowledge Transfer via
Frequency Transform", ICML 2026, arXiv 2603.07523). Training-free.

The default is the rule of the authors' script (``front_init_deit.py`` of their public repository),
re-typed here with their option names and defaults:

1. Every parameter tensor is seen as a matrix (a 4-D kernel ``(a, b, c, d)`` as ``(a·b, c·d)``, a 3-D
   token tensor ``(a, b, c)`` as ``(a·b, c)``; an axis of length 1 is left alone) and z-scored by its own
   mean and (unbiased) std: ``z = (w − μ) / (σ + 1e-8)``.
2. ``z`` goes through an unnormalised DCT-II along each axis, ``X_k = Σ_n z_n cos(π k (2n+1) / 2N)``, and
   ``⌊keep_ratio · N⌋`` low frequencies of each axis are kept (the top-left corner). With
   ``mlp_dct_dim=1d`` only the MLP hidden axis of ``fc1`` / ``fc2`` is transformed; their other axis is
   kept in the weight domain.
3. Block tensors are stacked over the ancestry's ``L_s`` layers and transformed along depth by the
   same DCT. For a target of ``L_t`` layers the first ``n = min(select_n, L_t, L_s)`` depth frequencies
   are kept and the depth axis is filled by ``dct_mode``: ``zero`` pads zeros, ``random`` draws the
   rest from a normal with the kept coefficients' mean and std, ``consistence`` repeats each kept
   frequency over a run of target rows, ``repeat`` pads zeros to the ancestry's depth. The inverse
   along depth is taken at that length.
4. Each axis's coefficients are truncated or zero-padded to the target's length and inverted by the
   unnormalised DCT-III at that length, ``z_n = (X_0 + 2 Σ_{k≥1} X_k cos(π k (2n+1) / 2M)) / M``. A
   truncated or padded axis therefore comes out scaled by ``N / M`` (and depth by ``L_s / L_t``:
   12 → 4 layers triples the z-scores); ``use_ratio`` multiplies by ``M / kept`` per width axis (not
   depth) to undo it, as their script does.
5. Target layer ``i`` gets source layer ``i``'s mean and std back (the last source layer's for
   ``i ≥ L_s``); every other tensor its own. ``skip`` leaves tensors to timm's initialization:
   ``qkv`` (``qkv.``), ``o`` (``attn.proj.``), ``mlp`` (``.mlp.``), ``norm`` (any name with ``norm``).

The learngene stores, per block tensor, the depth-transformed coefficients of every layer (``dct.*``)
and each layer's mean and std (``stats.*``); with ``keep_ratio = 1`` that is the whole ancestry.

Where we depart from their script (each one where it cannot run or runs into a quirk):

- depth growth: their script hands every target layer ``i ≥ L_s`` the same dictionary as source layer
  ``L_s − 1``, so target layers ``L_s − 1 … L_t − 1`` all end up with the coefficients written last
  (row ``L_t − 1``). Here target layer ``i`` gets row ``i`` of the inverse along depth, as the rule
  intends; with ``dct_mode=repeat`` (whose inverse has ``L_s`` rows and which their script cannot
  grow at all) layer ``i ≥ L_s`` repeats row ``L_s − 1``;
- a target of depth 1 (their script fails on it) is the depth axis of length 1 like any other;
- ``⌊keep_ratio · N⌋`` is at least 1 (their script would keep nothing of a short axis);
- ``random`` draws with a generator seeded by ``seed`` (the descendant's seed), not the global one;
- tensors outside the blocks (their script groups them by the name's third part, which collides for
  a MAP head's ``attn_pool.*``) are each transformed alone, at the ancestry's token count and kernel
  size; another image or patch size is then resampled by timm's resamplers, and the classifier is
  carried only for the same label space, as for every method here.

``variant=orthonormal`` is our earlier reading (written before their script could be read): an
orthonormal 3-D DCT of the stacked layers with ``√(target/source)`` rescaling, q/k/v and SwiGLU halves
transformed apart, no z-scoring; ``depth_ratio`` sets its kept share along depth.

Authors' code: the public repository named above (``front_init_deit.py``) could not be located in this
session's search, so no repository name or commit is recorded here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..errors import LearngeneError, named
from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Method, Paper
from ..registry import register_method
from ..settings import field
from ..validate import CONDENSE, EXPAND
from ..vit.spec import ViTSpec, block_key
from ..vit.transfer import CLASSES, KEEP, Axis, StateDict, block_axes, carried, inherit_non_block, non_block_axes

PREFIX, STATS = "dct.", "stats."
LAYER, FREQ = "layer", "freq"
EPS = 1e-8  # their z-score's guard against a zero std


# ---- the authors' rule ----------------------------------------------------------------------------------
def dct_ii(n: int, dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> Tensor:
    """Their unnormalised DCT-II: ``X = C x`` with ``C[k, i] = cos(π k (2i + 1) / 2n)``."""
    i = torch.arange(n, dtype=dtype, device=device)
    return torch.cos(math.pi * i[:, None] * (2 * i + 1) / (2 * n))


def idct_basis(n: int, kept: int, dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> Tensor:
    """The inverse of :func:`dct_ii` at length ``n`` from its first ``kept`` coefficients (the rest zero):
    ``x = B X[:kept]``, ``B[i, k] = w_k cos(π k (2i + 1) / 2n) / n`` with ``w_0 = 1``, ``w_k = 2``."""
    weight = torch.full((kept,), 2.0, dtype=dtype, device=device)
    weight[0] = 1.0
    return dct_ii(n, dtype, device)[:kept].T * weight / n


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """How their script sees a tensor: a 4-D kernel as (a·b, c·d), a 3-D token tensor as (a·b, c)."""
    if len(shape) == 4:
        return shape[0] * shape[1], shape[2] * shape[3]
    if len(shape) == 3:
        return shape[0] * shape[1], shape[2]
    return tuple(shape)


def transformed_axes(key: str, ndim: int, mlp_dct_dim: str) -> tuple[bool, ...]:
    """Which axes of the matrix view are DCT'd: all, or only the MLP hidden axis with ``mlp_dct_dim=1d``."""
    if ndim == 2 and mlp_dct_dim == "1d":
        if "mlp.fc1" in key:
            return True, False
        if "mlp.fc2" in key:
            return False, True
    return (True,) * ndim


def _along(t: Tensor, axis: int, matrix: Tensor) -> Tensor:
    """``matrix`` (out × in) applied along ``axis`` of ``t``."""
    return torch.movedim(torch.movedim(t, axis, -1) @ matrix.T, -1, axis)


def _fit(t: Tensor, axis: int, n: int) -> Tensor:
    """``t`` truncated or zero-padded to length ``n`` along ``axis`` (an axis kept in the weight domain)."""
    if t.shape[axis] >= n:
        return t.narrow(axis, 0, n)
    pad = list(t.shape)
    pad[axis] = n - t.shape[axis]
    return torch.cat([t, t.new_zeros(pad)], dim=axis)


def to_coefficients(w: Tensor, key: str, keep_ratio: float, mlp_dct_dim: str) -> tuple[Tensor, Tensor]:
    """Steps 1–2: the kept low-frequency coefficients of ``w``'s z-scores, and ``[mean, std]``."""
    w = w.double()
    mean, std = w.mean(), w.std()
    out = ((w - mean) / (std + EPS)).reshape(matrix_shape(tuple(w.shape)))
    for axis, on in enumerate(transformed_axes(key, out.ndim, mlp_dct_dim)):
        n = out.shape[axis]
        if on and n > 1:
            out = _along(out, axis, dct_ii(n)[: max(1, int(n * keep_ratio))])
    return out, torch.stack([mean, std])


def from_coefficients(coeffs: Tensor, key: str, shape: tuple[int, ...], use_ratio: bool, mlp_dct_dim: str) -> Tensor:
    """Step 4 (without the stats): coefficients ``(..., *matrix)`` inverted to z-scores of ``(..., *shape)``;
    leading axes (layers) are carried along."""
    target = matrix_shape(shape)
    lead = coeffs.ndim - len(target)
    out, scale = coeffs, 1.0
    for axis, on in enumerate(transformed_axes(key, len(target), mlp_dct_dim)):
        dim, n, kept = lead + axis, target[axis], coeffs.shape[lead + axis]
        if not on:
            out = _fit(out, dim, n)
            continue
        out = _along(out.narrow(dim, 0, min(kept, n)), dim, idct_basis(n, min(kept, n), out.dtype, out.device))
        scale *= n / kept
    out = out * scale if use_ratio else out
    return out.reshape(*coeffs.shape[:lead], *shape)


def depth_rows(coeffs: Tensor, target_depth: int, select_n: int, mode: str, generator: torch.Generator) -> Tensor:
    """Step 3: the depth frequencies ``coeffs`` (``L_s`` rows) to the z-scores of ``target_depth`` layers."""
    source_depth = coeffs.shape[0]
    n = min(target_depth, source_depth, select_n or source_depth)
    kept = coeffs[:n]
    if mode == "zero":
        return _along(kept, 0, idct_basis(target_depth, n, kept.dtype, kept.device))
    if mode == "repeat":  # inverse at the ancestry's depth; past it, its last row again
        rows = _along(kept, 0, idct_basis(source_depth, n, kept.dtype, kept.device))
        return rows[torch.arange(target_depth).clamp(max=source_depth - 1)]
    if mode == "consistence":  # frequency i fills ⌈L_t / n⌉ or ⌊L_t / n⌋ consecutive rows, the longer runs first
        runs = [target_depth // n + (i < target_depth % n) for i in range(n)]
        full = kept[torch.repeat_interleave(torch.arange(n), torch.tensor(runs))]
    else:  # random: the rows past n drawn from N(mean, std) of the kept coefficients
        noise = torch.randn((target_depth - n, *kept.shape[1:]), generator=generator, dtype=kept.dtype)
        full = torch.cat([kept, noise.to(kept.device) * kept.std() + kept.mean()])
    return _along(full, 0, idct_basis(target_depth, target_depth, kept.dtype, kept.device))


def skipped(key: str, skip: tuple[str, ...]) -> bool:
    """Their ``dct_skip_list`` test on a timm key."""
    marks = {"qkv": "qkv.", "o": "attn.proj.", "mlp": ".mlp.", "norm": "norm"}
    return any(marks[s] in key for s in skip if s in marks)


# ---- our earlier orthonormal reading (variant=orthonormal) ------------------------------------------------
def dct_matrix(n: int, dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> Tensor:
    """Orthonormal DCT-II matrix ``C[k, i] = a_k cos(π (2i + 1) k / 2n)``: ``X = C x``, ``x = Cᵀ X`` (DCT-III)."""
    c = dct_ii(n, dtype, device) * math.sqrt(2 / n)
    c[0] = c[0] / math.sqrt(2)
    return c


def front_axes(axes: tuple[Axis, ...]) -> tuple[str | None, ...]:
    """Axes the orthonormal variant transforms (segments split off): widths, MLP hidden and heads; not
    across q/k/v segments or SwiGLU's halves, not token counts, kernels or classes."""
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


def low_frequencies(t: Tensor, axes: tuple[str | None, ...], keep: Callable[[str, int], int]) -> Tensor:
    """Orthonormal DCT-II of ``t`` along every named axis, cropped to its first ``keep(name, length)`` coefficients."""
    out = t.double()
    for axis, name in enumerate(axes):
        if name is not None:
            n = out.shape[axis]
            out = _along(out, axis, dct_matrix(n)[: min(keep(name, n), n)])
    return out.to(t.dtype)


def resample(coeffs: Tensor, axes: tuple[str | None, ...], sizes: tuple[tuple[int, int], ...]) -> Tensor:
    """Orthonormal inverse DCT of kept coefficients at each named axis's target length (``sizes[axis] =
    (source, target)``), scaled by ``√(target/source)``: a band-limited resampling that keeps magnitudes."""
    out = coeffs
    for axis, name in enumerate(axes):
        if name is None:
            continue
        src, dst = sizes[axis]
        kept = min(out.shape[axis], dst)
        out = out.narrow(axis, 0, kept)
        out = _along(out, axis, dct_matrix(dst, dtype=out.dtype, device=out.device)[:kept].T * math.sqrt(dst / src))
    return out


@dataclass(frozen=True)
class FrontConfig:
    AUTO_OPTIONS = ("select_n", "depth_ratio")  # 0: automatic

    keep_ratio: float = field(
        1.0, above=0, at_most=1, phase=CONDENSE, help="share of the frequencies kept per width axis (theirs: all)"
    )
    use_ratio: bool = field(
        False,
        phase=EXPAND,
        help="multiply by target / kept length per width axis (undoes the unnormalised DCT's scaling)",
    )
    select_n: int = field(0, phase=EXPAND, help="depth frequencies kept; 0: min(target depth, ancestry depth)")
    dct_mode: Literal["zero", "random", "consistence", "repeat"] = field(
        "zero", phase=EXPAND, help="how the target's depth axis is filled"
    )
    mlp_dct_dim: Literal["1d", "2d"] = field(
        "2d", phase=CONDENSE, help="1d: fc1/fc2 transformed only along the MLP hidden axis"
    )
    skip: tuple[Literal["qkv", "o", "mlp", "norm", "none"], ...] = field((), phase=EXPAND, help="left to timm's init")
    seed: int = field(0, phase=EXPAND, help="dct_mode=random's draws (the descendant's seed)")
    variant: Literal["authors", "orthonormal"] = field(
        "authors", phase=CONDENSE, help="authors: their script's rule; orthonormal: our 3-D DCT"
    )
    depth_ratio: float = field(
        0.0, at_least=0, at_most=1, phase=CONDENSE, help="orthonormal variant: share kept along depth; 0: keep_ratio"
    )


@register_method
class Front(Method):
    name = "front"
    stores = "DCT coefficients of each z-scored weight matrix, stacked over layers and transformed along depth"
    expands_to = "any depth and width, smaller or larger"
    summary = "DCT low frequencies of z-scored, layer-stacked weights (the authors' rule); any depth and width"
    paper = Paper(
        "Breaking the Scale Barrier: One-Shot Knowledge Transfer via Frequency Transform (FRONT)",
        "",
        "ICML",
        2026,
        "2603.07523",
    )
    Config = FrontConfig
    seed_option = "seed"
    selects_layers = True  # the authors' rule keeps every layer's depth frequency: a layer can be taken back out

    def keep_layers(self, gene: Learngene, layers: list[int]) -> Learngene:
        """Ancestry layers ``layers`` taken back out of the depth transform (every depth frequency is stored: its
        inverse at the ancestry's depth gives each layer's width coefficients) and transformed along depth again at
        their number, in float64; their mean and std picked. A descendant of that depth takes exactly those rows
        (``depth_rows`` keeps all ``len(layers)`` frequencies), width-resampled as any front descendant's."""
        cfg, layout = self.config, gene.require_layout()
        if cfg.variant == "orthonormal":
            raise LearngeneError(
                f"front picks a descendant's layers from genes of its authors' rule only; this gene is "
                f"variant=orthonormal (one 3-D transform): condense with variant=authors, or leave {named('layers')} out"
            )
        if 0 < cfg.select_n < len(layers):
            raise LearngeneError(
                f"front's select_n={cfg.select_n} (--opt select_n={cfg.select_n}) keeps {cfg.select_n} depth frequencies, so "
                f"the {len(layers)} layers would not be the ancestry's; give {named('layers')} or select_n, not both"
            )
        index, tensors = torch.tensor(layers), dict(gene.tensors)
        for name in block_axes(layout):
            coeffs = gene.tensors[PREFIX + name].double()
            rows = _along(coeffs, 0, idct_basis(layout.depth, layout.depth, coeffs.dtype, coeffs.device))[index]
            tensors[PREFIX + name] = _along(rows, 0, dct_ii(len(layers), rows.dtype, rows.device))
            tensors[STATS + name] = gene.tensors[STATS + name][index]
        return dataclasses.replace(gene, tensors=tensors, layout=layout.replace(depth=len(layers)))

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        ancestry, spec = self.require_vit_ancestry(ancestry)
        if self.config.variant == "orthonormal":
            return self.new_gene(self._orthonormal_coefficients(spec, ancestry.state()), spec, spec)
        # their script reads tensors as a ViT stores them: a NaFlexVit's embeddings in that layout (learngene.vit.naflex)
        state, cfg = spec.vit_layout(ancestry.state()), self.config
        tensors: StateDict = {}
        for name in block_axes(spec):
            pairs = [
                to_coefficients(state[block_key(layer, name)], block_key(layer, name), cfg.keep_ratio, cfg.mlp_dct_dim)
                for layer in range(spec.depth)
            ]
            stack = torch.stack([c for c, _ in pairs])
            tensors[PREFIX + name] = _along(stack, 0, dct_ii(spec.depth)).float()
            tensors[STATS + name] = torch.stack([s for _, s in pairs]).float()
        for key in spec.non_block_shapes(vit_layout=True):
            coeffs, stats = to_coefficients(state[key], key, cfg.keep_ratio, cfg.mlp_dct_dim)
            tensors[PREFIX + key], tensors[STATS + key] = coeffs.float(), stats.float()
        return self.new_gene(tensors, spec, spec)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        if self.config.variant == "orthonormal":
            return self._orthonormal_expand(gene, spec)
        src = gene.require_layout()
        cfg, out = self.config, {}
        generator = torch.Generator().manual_seed(cfg.seed)
        for name, shape in spec.block_shapes().items():
            coeffs, stats = gene.tensors[PREFIX + name], gene.tensors[STATS + name]
            rows = depth_rows(coeffs.double(), spec.depth, cfg.select_n, cfg.dct_mode, generator)
            z = from_coefficients(rows, block_key(0, name), shape, cfg.use_ratio, cfg.mlp_dct_dim)
            layer_stats = stats.double()[torch.arange(spec.depth).clamp(max=src.depth - 1)]
            weights = z * _expand_as(layer_stats[:, 1], z) + _expand_as(layer_stats[:, 0], z)
            for layer in range(spec.depth):  # in the stored weights' dtype (a gene of picked layers holds float64)
                out[block_key(layer, name)] = weights[layer].to(stats.dtype)
        narrow = carried(src, spec)
        non_block = {}
        for key, shape in narrow.non_block_shapes(vit_layout=True).items():
            coeffs, stats = gene.tensors[PREFIX + key], gene.tensors[STATS + key].double()
            z = from_coefficients(coeffs.double(), key, shape, cfg.use_ratio, cfg.mlp_dct_dim)
            non_block[key] = (z * stats[1] + stats[0]).to(coeffs.dtype)
        out.update(inherit_non_block(non_block, narrow, spec))
        return {k: v for k, v in out.items() if not skipped(k, cfg.skip)}

    # ---- variant=orthonormal ---------------------------------------------------------------------------
    def _count(self, name: str, n: int) -> int:
        ratio = (self.config.depth_ratio or self.config.keep_ratio) if name == LAYER else self.config.keep_ratio
        return math.ceil(ratio * n)

    def _orthonormal_coefficients(self, spec: ViTSpec, state: StateDict) -> StateDict:
        tensors: StateDict = {}
        for name, axes in block_axes(spec).items():
            stack = torch.stack([state[block_key(layer, name)] for layer in range(spec.depth)])
            stack = stack.reshape(spec.depth, *split_shape(stack.shape[1:], axes))
            tensors[PREFIX + name] = low_frequencies(stack, (LAYER, *front_axes(axes)), self._count)
        for key, axes in non_block_axes(spec).items():
            t = state[key].reshape(split_shape(state[key].shape, axes))
            tensors[PREFIX + key] = low_frequencies(t, front_axes(axes), self._count)
        return tensors

    def _orthonormal_expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        src = gene.require_layout()
        out: StateDict = {}
        src_shapes, dst_shapes = src.block_shapes(), spec.block_shapes()
        for name, axes in block_axes(src).items():
            sizes = tuple(
                zip(
                    (src.depth, *split_shape(src_shapes[name], axes)),
                    (spec.depth, *split_shape(dst_shapes[name], axes)),
                )
            )
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
        src = gene.require_layout()
        cfg = self.config
        if cfg.variant == "orthonormal":
            kept = (
                f"layers {self._count(LAYER, src.depth)}/{src.depth}, width {self._count(FREQ, src.embed_dim)}/"
                f"{src.embed_dim}, MLP {self._count(FREQ, src.mlp_inner)}/{src.mlp_inner}"
            )
        else:
            kept = (
                f"all {src.depth} depth frequencies, width {max(1, int(src.embed_dim * cfg.keep_ratio))}/"
                f"{src.embed_dim}, MLP {max(1, int(src.mlp_inner * cfg.keep_ratio))}/{src.mlp_inner}"
            )
        return [
            f"kept DCT coefficients per axis ({cfg.variant} rule): {kept} (keep_ratio {cfg.keep_ratio})",
            (
                f"stored {gene.num_stored_params:,} of the ancestry's {src.num_params:,} parameters "
                f"({gene.num_stored_params / src.num_params:.1%})"
            ),
        ]


def _expand_as(per_layer: Tensor, like: Tensor) -> Tensor:
    return per_layer.view(-1, *[1] * (like.ndim - 1))
