"""LeTs (Xia, Zu, Yang & Geng, "Initializing Variable-sized Vision Transformers from Learngene with Learnable
Transformation", NeurIPS 2024; public code ``eddiexia98/LeTs``, built on LiGO). Not on arXiv.

The learngene is a compact net (``gene_depth`` layers of width ``gene_embed_dim``, MLP ``gene_mlp_dim``; by
default half the aux net's depth (rounded up to an even number), width and MLP) plus learnable transformation
matrices:

- width, ``F``: a weight ``W`` of the compact net (``n_out × n_in``) becomes ``[I; F_out] W [I; F_in]ᵀ``:
  the new rows are ``F_out W``, the new columns ``W F_inᵀ`` (their ``TransWidthParams``: ``F`` holds only the
  rows for the new channels). One ``F_emb`` for the residual stream everywhere (their ``g_e``), one ``F_q``,
  ``F_k``, ``F_v`` (``F_v`` also for ``W_O``'s columns) and ``F_ffn`` per compact layer, one ``F_cls`` for
  the classifier's input;
- depth, ``G``: aux layer ``a`` is ``Σ_k G_k · widen(compact layer g_k(a))`` over a pair of compact layers
  (layers ``2p, 2p+1`` with ``p = ⌊a·P/L_aux⌋``, ``P = gene_depth/2``: their ``8_16`` scheme, aux layer
  ``a`` of 16 from compact pair ``⌊a/4⌋`` of 8), with one coefficient vector per module (norm1, q, k, v,
  proj, norm2, fc1, fc2) for weights and one for biases (their ``TransDepthParams`` with a bias), shared by
  ``tie`` consecutive aux layers (their ``e2`` scheme: 2).

All of it is trained in the aux net by distillation (their defaults: compact net, ``F`` and ``G`` all tuned).
A descendant of width ``D'`` takes the first ``D' − gene_embed_dim`` rows of every ``F`` and, for each of
its layers ``t``, the compact pair of aux layer ``mapping_layer[t]`` mixed by the ``G`` of aux layer
``mapping_layer_coeff[t]`` (their options of the same name, comma-separated aux layer indices; default: aux
layer ``⌊t·L_aux/L_t⌋`` for both). Any depth; widths from ``gene_embed_dim`` up to the aux net's.

Initial values (their defaults ``--trans_init_scheme stackbert_noisy rand``, noise 0.03): ``G`` of aux layer
``i`` is uniform(0, 0.03) noise with 1 at ``i mod 2``, normalised to sum 1 (``stackbert_noisy``; also
``stackbert``, ``rand``, ``rand_softmax``); ``F`` rows uniform(0, 1) normalised to sum 1 (``rand``; also
``rand_softmax``, ``sel``, ``sel_noisy``); the compact net as timm initializes it.

Departures: timm's fused qkv is split into their separate q, k, v; the classifier keeps its own ``F_cls``
as theirs; position embedding, class and other tokens are the aux net's own full-width tensors, sliced to a
descendant's width (their ``pos_embed[..., :D']``; their aux net has no class token); tensors their DeiT
has not (layer-scale gammas, q/k norms: per-head, not widened; the MAP head, whose MLP gets its own ``F``)
follow the same rules with their own ``G``; ``interlace`` (accepted by their code but never initialized) is
refused.

Authors' code: github.com/eddiexia98/LeTs (snapshot read at 11ea578).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..errors import LearngeneError, Remedy, named
from ..gene import Learngene
from ..method import Paper
from ..registry import register_method
from ..settings import field
from ..training.auxnet import AuxConfig, AuxNetMethod, aux_size, initial_non_block
from ..validate import CONDENSE, EXPAND
from ..vit.spec import ViTSpec, block_key
from ..vit.timm_keys import CLASSES, HEAD_DIM, HEADS, HEADS_IN, HIDDEN, HIDDEN_IN, KEEP, TOKENS
from ..vit.transfer import StateDict, block_axes, carried, inherit_non_block, non_block_axes
from ._option_lists import int_list

SMALL, AUX, F_, G_ = "small.", "aux.", "F.", "G."


@dataclass(frozen=True)
class LeTsConfig(AuxConfig):
    AUTO_OPTIONS = (*AuxConfig.AUTO_OPTIONS, "gene_depth", "gene_embed_dim", "gene_mlp_dim")

    gene_depth: int = field(
        0, phase=CONDENSE, help="compact layers; 0: half the aux net's (their 8 for a 16-layer aux net)"
    )
    gene_embed_dim: int = field(0, phase=CONDENSE, help="compact width; 0: half the aux net's (their 384 for 768)")
    gene_mlp_dim: int = field(0, phase=CONDENSE, help="compact MLP hidden size; 0: half the aux net's")
    tie: int = field(
        2, at_least=1, phase=CONDENSE, help="consecutive aux layers sharing one G (their coeff_mapping e2)"
    )
    depth_init: Literal["stackbert_noisy", "stackbert", "rand", "rand_softmax"] = field(
        "stackbert_noisy", phase=CONDENSE, help="G's start"
    )
    width_init: Literal["rand", "rand_softmax", "sel", "sel_noisy"] = field("rand", phase=CONDENSE, help="F's start")
    init_noise: float = field(0.03, phase=CONDENSE, help="scale of the uniform noise in the *_noisy starts of G and F")
    mapping_layer: str = field(
        "",
        phase=(CONDENSE, EXPAND),
        help='per descendant layer, the aux layer whose compact pair it mixes ("": stretched)',
    )
    mapping_layer_coeff: str = field(
        "", phase=(CONDENSE, EXPAND), help='per descendant layer, the aux layer whose G it uses ("": mapping_layer)'
    )


def _kind(name: str) -> str:
    """Which of a module's two ``G`` (weights or biases) mixes block tensor ``name``."""
    return "bias" if name.endswith("bias") else "weight"


def g_module(name: str) -> str:
    """Which ``G`` mixes block tensor ``name`` (their module groups; extra vectors get their own)."""
    for prefix, module in (
        ("norm1.", "norm1"),
        ("attn.proj.", "proj"),
        ("norm2.", "norm2"),
        ("mlp.fc1.", "fc1"),
        ("mlp.fc2.", "fc2"),
        ("ls1.", "ls1"),
        ("ls2.", "ls2"),
        ("attn.q_norm.", "q_norm"),
        ("attn.k_norm.", "k_norm"),
        # AIMv2's and EVA-02's unpacked SwiGLU (gate and value: fc1), Eva's rows
        ("mlp.fc1_g.", "fc1"),
        ("mlp.fc1_x.", "fc1"),
        ("attn.q_bias", "q"),
        ("attn.v_bias", "v"),
        ("attn.norm.", "attn_norm"),
        ("mlp.norm.", "mlp_norm"),
        ("gamma_1", "ls1"),
        ("gamma_2", "ls2"),
        ("rope.freqs", "rope"),  # mixed RoPE's frequencies of the layer
    ):
        if name.startswith(prefix):
            return module
    raise LearngeneError(f"lets has no depth rule for block tensor {name}")


def f_label(key: str, role: str, segment: int, block: bool) -> str | None:
    """Which ``F`` widens an axis of ``role`` (None: the axis is not widened)."""
    if role in (CLASSES, KEEP, HEAD_DIM):
        return None
    if block:
        if role == HEADS:  # Eva's v bias and its sub-norm over the heads' outputs go with v's rows
            return "v" if key.endswith(("attn.v_bias", "attn.norm.weight", "attn.norm.bias")) else "qkv"[segment]
        return {HEADS_IN: "v", HIDDEN: "ffn", HIDDEN_IN: "ffn"}.get(role, "emb")
    if key.startswith("head"):
        return "cls"
    return "pool_ffn" if role in (HIDDEN, HIDDEN_IN) else "emb"


# the starts of G and F that are the uniform draw itself, made rows of convex weights
RANDOM_STARTS: dict[str, Callable[[Tensor], Tensor]] = {
    "rand": lambda draw: draw / draw.sum(-1, keepdim=True),
    "rand_softmax": lambda draw: draw.softmax(-1),
}


def init_depth(rows: int, group: int, tie: int, scheme: str, noise: float, generator: torch.Generator) -> Tensor:
    """``G``'s start for owner aux layers ``0, tie, 2·tie, …`` (TransDepthParams.reset_parameters)."""
    draw = torch.rand(rows, group, generator=generator)
    if scheme in RANDOM_STARTS:
        return RANDOM_STARTS[scheme](draw)
    start = draw * noise if scheme == "stackbert_noisy" else torch.zeros(rows, group)
    start[torch.arange(rows), (torch.arange(rows) * tie) % group] = 1.0
    return start / start.sum(-1, keepdim=True)


def init_width(
    extra: int, small: int, scheme: str, noise: float, generator: torch.Generator, layers: int | None = None
) -> Tensor:
    """``F``'s start, ``(extra, small)`` (per compact layer: ``(layers, extra, small)``; TransWidthParams)."""
    shape = (layers, extra, small) if layers else (extra, small)
    draw = torch.rand(shape, generator=generator)
    if scheme in RANDOM_STARTS:
        return RANDOM_STARTS[scheme](draw)
    start = draw * noise if scheme == "sel_noisy" else torch.zeros(shape)
    pick = torch.randint(0, small, shape[:-1], generator=generator)
    return start.scatter(-1, pick.unsqueeze(-1), 1.0)


def out_of_range(small: ViTSpec, aux: ViTSpec, spec: ViTSpec) -> LearngeneError | None:
    """Why a lets gene whose compact net is ``small`` and aux net ``aux`` cannot make ``spec`` (each axis widens from
    the compact net's channels up to the aux net's: the width, and the MLP's hidden channels), with the size within
    that range nearest to the one asked; None where it can."""
    if _in_range(small, aux, spec):
        return None
    width = min(max(spec.embed_dim, small.embed_dim), aux.embed_dim)
    size: dict[str, float] = {"embed_dim": width} if width != spec.embed_dim else {}
    if width % spec.num_heads:  # the heads asked do not divide that width: the aux net's do
        size["num_heads"] = aux.num_heads
    # mlp_ratio reads fc1's outputs (both halves of a packed SwiGLU) in timm's ViT, each half in Eva: as spec's own
    per_ratio = int(spec.embed_dim * spec.mlp_ratio) / max(1, spec.mlp_inner)
    inner = min(max(int(int(width * spec.mlp_ratio) / per_ratio), small.mlp_inner), aux.mlp_inner)
    size["mlp_ratio"] = inner * per_ratio / width
    remedies = []
    try:
        within = spec.replace(**size)
    except LearngeneError:
        within = None
    if within is not None and _in_range(small, aux, within):
        remedies = [Remedy(size={k: v for k, v in size.items() if v != getattr(spec, k)})]
    return LearngeneError(
        f"lets makes widths from its compact net's {small.embed_dim} up to the aux net's {aux.embed_dim} and MLPs "
        f"of {small.mlp_inner} to {aux.mlp_inner} hidden channels, asked {spec.embed_dim} and {spec.mlp_inner}; "
        + (remedies[0].text if remedies else "it cannot make this size"),
        advice=remedies,
    )


def _in_range(small: ViTSpec, aux: ViTSpec, spec: ViTSpec) -> bool:
    return small.embed_dim <= spec.embed_dim <= aux.embed_dim and small.mlp_inner <= spec.mlp_inner <= aux.mlp_inner


def widen(t: Tensor, dim: int, n: int, f: Tensor | None) -> Tensor:
    """Axis ``dim`` of ``t`` (length ``s``) to ``n`` channels: ``[I; F[:n − s]]`` applied along it; ``f`` is
    ``(extra, s)`` or, per compact layer, ``(L, extra, s)`` matched to ``t``'s first axis."""
    s = t.shape[dim]
    if n == s:
        return t
    if f is None or not 0 < n - s <= f.shape[-2]:
        have = s + (0 if f is None else f.shape[-2])
        raise LearngeneError(
            f"lets widens this axis from the learngene's {s} channels up to the aux net's {have}, "
            f"asked {n}; choose {named('embed_dim')} and {named('mlp_ratio')} so that the width and the MLP size "
            "lie in that range"
        )
    moved = torch.movedim(t, dim, -1)
    rows = f[..., : n - s, :].to(t.dtype)  # a gene may hold tensors of mixed precision
    if rows.ndim == 3:  # one F per compact layer
        extra = torch.einsum("l...s,les->l...e", moved, rows)
    else:
        extra = moved @ rows.T
    return torch.movedim(torch.cat([moved, extra], -1), -1, dim)


def parse_indices(text: str, count: int, limit: int, what: str) -> list[int] | None:
    values = int_list(text, f"lets {what}={text!r} is not comma-separated aux layer numbers")
    if values is None:
        return None
    if len(values) != count or not all(0 <= v < limit for v in values):
        raise LearngeneError(
            f"lets {what} needs {count} aux layer numbers (one per descendant layer) in 0..{limit - 1}, got {text!r}"
        )
    return values


@register_method
class LeTs(AuxNetMethod):
    name = "lets"
    stores = "a compact net (half the aux net's depth and width) plus learnable width (F) and depth (G) transformations, trained together by distillation"
    expands_to = "any depth; widths from the compact net's up to the aux net's"
    summary = "compact layers + learnable width (F) and depth (G) transformations, trained in an aux net; any depth"
    paper = Paper(
        "Initializing Variable-sized Vision Transformers from Learngene with Learnable Transformation",
        "Xia, Zu, Yang & Geng",
        "NeurIPS",
        2024,
    )
    Config = LeTsConfig
    needs_data = True
    needs_vit_ancestry = False
    distill_lambda = 1.0  # their stage 1: --distillation-type soft --distillation-alpha 1.0

    @classmethod
    def cannot_reach(cls, config: LeTsConfig, ancestry: ViTSpec, target: ViTSpec) -> str:
        aux = aux_size(config, ancestry)
        try:
            refusal = out_of_range(cls(config).small_spec(aux), aux, target)
        except LearngeneError as exc:
            return str(exc)
        return str(refusal) if refusal else ""

    def small_spec(self, aux: ViTSpec) -> ViTSpec:
        cfg = self.config
        depth = cfg.gene_depth or max(1, aux.depth // 2)
        if not cfg.gene_depth and depth > 1 and depth % 2:  # the pairs need an even depth: half of 6 is 3, take 4
            depth += 1
        width = cfg.gene_embed_dim or aux.embed_dim // 2
        heads = max(1, aux.num_heads // 2) if width % max(1, aux.num_heads // 2) == 0 else 1
        mlp = cfg.gene_mlp_dim or aux.mlp_hidden // 2
        if not cfg.gene_mlp_dim and aux.mlp_layer == "swiglu_packed":  # its two halves: an even width
            mlp -= mlp % 2
        if depth > 1 and depth % 2 or not 0 < width <= aux.embed_dim or not 0 < mlp <= aux.mlp_hidden:
            raise LearngeneError(
                f"lets: the compact net must have 1 or an even number of layers, a width up to the aux "
                f"net's {aux.embed_dim} and an MLP up to its {aux.mlp_hidden}; got {depth}, {width}, {mlp}"
            )
        return aux.replace(depth=depth, embed_dim=width, num_heads=heads, mlp_ratio=mlp / width)

    def initial_tensors(self, aux: ViTSpec) -> StateDict:
        cfg, small = self.config, self.small_spec(aux)
        generator = torch.Generator().manual_seed(torch.initial_seed() % 2**63)
        state = small.split_layers(small.create_model().state_dict())
        tensors = {
            SMALL + n: torch.stack([state[block_key(i, n)] for i in range(small.depth)]) for n in block_axes(small)
        }
        tokens = initial_non_block(aux)
        for key, axes in non_block_axes(small).items():
            tensors[(AUX + key) if axes == TOKENS else (SMALL + key)] = (tokens if axes == TOKENS else state)[key]
        for key, extra, length, per_layer in self._f_shapes(small, aux):
            tensors[F_ + key] = init_width(
                extra, length, cfg.width_init, cfg.init_noise, generator, small.depth if per_layer else None
            )
        rows, group = -(-aux.depth // cfg.tie), min(2, small.depth)
        # a G per module and kind the blocks hold: no bias G where a family has none (bias-free q/k/v/proj, layer
        # scale's one vector), so that every stored tensor is used when the gene expands
        kinds = {(m, _kind(n)) for n in block_axes(small) for m in self._modules(n)}
        for module in sorted({m for m, _ in kinds}):
            for kind in ("weight", "bias"):
                if (module, kind) in kinds:
                    tensors[f"{G_}{module}.{kind}"] = init_depth(
                        rows, group, cfg.tie, cfg.depth_init, cfg.init_noise, generator
                    )
        return tensors

    def _modules(self, name: str) -> tuple[str, ...]:
        return ("q", "k", "v") if name.startswith("attn.qkv") else (g_module(name),)

    def _f_shapes(self, small: ViTSpec, aux: ViTSpec):
        """(label, extra rows, compact length, per compact layer) of every F the aux net needs."""
        seen: dict[str, tuple] = {}
        for block, table, shapes, big in (
            (True, block_axes(small), small.block_shapes(), aux.block_shapes()),
            (False, non_block_axes(small), small.non_block_shapes(), aux.non_block_shapes()),
        ):
            for key, axes in table.items():
                if not block and axes == TOKENS:
                    continue
                for axis, n_small, n_big in zip(axes, shapes[key], big[key]):
                    for seg in range(axis.segments):
                        label = f_label(key, axis.role, seg, block)
                        s, b = n_small // axis.segments, n_big // axis.segments
                        if label and b > s:
                            seen.setdefault(label, (label, b - s, s, label in ("q", "k", "v", "ffn")))
        return list(seen.values())

    def mixing(self, gene: Learngene, spec: ViTSpec, module: str, kind: str) -> Tensor:
        """``C`` (target layers × compact layers): target layer ``t`` = Σ_l C[t, l] · widened compact layer ``l``."""
        aux = gene.require_layout()
        coeffs = gene.tensors[f"{G_}{module}.{kind}"]
        depth = gene.tensors[SMALL + "norm1.weight"].shape[0]
        stretched = [t * aux.depth // spec.depth for t in range(spec.depth)]
        maps = parse_indices(self.config.mapping_layer, spec.depth, aux.depth, "mapping_layer") or stretched
        owners = parse_indices(self.config.mapping_layer_coeff, spec.depth, aux.depth, "mapping_layer_coeff") or maps
        pairs = max(1, depth // 2)
        rows, cols, picks = [], [], []
        for t, (a, c) in enumerate(zip(maps, owners)):
            first = 2 * (a * pairs // aux.depth) if depth > 1 else 0
            for k in range(coeffs.shape[1]):
                rows.append(t)
                cols.append(first + k)
                picks.append((c // self.config.tie, k))
        values = coeffs[torch.tensor([p[0] for p in picks]), torch.tensor([p[1] for p in picks])]
        return torch.zeros(spec.depth, depth, dtype=coeffs.dtype, device=coeffs.device).index_put(
            (torch.tensor(rows), torch.tensor(cols)), values, accumulate=True
        )

    def _widened(self, t: Tensor, key: str, axes, shape: tuple[int, ...], gene: Learngene, block: bool) -> Tensor:
        lead = 1 if block else 0
        for dim, (axis, n) in enumerate(zip(axes, shape)):
            if axis.role in (CLASSES, KEEP):
                continue
            if axis.role == HEAD_DIM and n != t.shape[lead + dim]:
                raise LearngeneError(
                    f"lets keeps the learngene's head size {t.shape[lead + dim]} (q/k norms), asked {n}"
                )
            s = axis.segments
            parts = t.unflatten(lead + dim, (s, t.shape[lead + dim] // s)).unbind(lead + dim)
            parts = [
                widen(p, lead + dim, n // s, gene.tensors.get(F_ + (f_label(key, axis.role, i, block) or "")))
                for i, p in enumerate(parts)
            ]
            t = torch.cat(parts, lead + dim)
        return t

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        aux = gene.require_layout()
        ints = sorted(k for k, t in gene.tensors.items() if not t.is_floating_point())
        if ints:
            raise LearngeneError(
                f"this lets gene's tensor {ints[0]} is {gene.tensors[ints[0]].dtype}, not floating point; "
                f"create it again with `learngene condense`"
            )
        refusal = out_of_range(self.small_spec(aux), aux, spec)
        if refusal:
            raise refusal
        out: StateDict = {}
        for name, shape in spec.block_shapes().items():
            axes = block_axes(spec)[name]
            stack = self._widened(gene.tensors[SMALL + name], name, axes, shape, gene, block=True)
            # q, k and v each have their own depth map G; every other tensor its module's
            if name.startswith("attn.qkv"):
                modules, segs = tuple("qkv"), stack.unflatten(1, (3, shape[0] // 3)).unbind(1)
            else:
                modules, segs = (g_module(name),), (stack,)
            mixings = [self.mixing(gene, spec, m, _kind(name)).to(seg.dtype) for m, seg in zip(modules, segs)]
            mixed = torch.cat([torch.einsum("tl,l...->t...", g, seg) for g, seg in zip(mixings, segs)], 1)
            for layer in range(spec.depth):
                out[block_key(layer, name)] = mixed[layer]
        narrow = carried(aux, spec)
        non_block = {}
        for key, shape in narrow.non_block_shapes().items():
            axes = non_block_axes(narrow)[key]
            if axes == TOKENS:
                non_block[key] = gene.tensors[AUX + key][..., : shape[-1]]
            elif SMALL + key in gene.tensors:
                non_block[key] = self._widened(gene.tensors[SMALL + key], key, axes, shape, gene, block=False)
        out.update(inherit_non_block(non_block, narrow, spec))
        return out

    def describe(self, gene: Learngene) -> list[str]:
        aux = gene.require_layout()
        small = gene.tensors[SMALL + "norm1.weight"].shape
        learned = sum(t.numel() for k, t in gene.tensors.items() if k.startswith((F_, G_)))
        return [
            f"aux net {aux.short()} built from a compact net of {small[0]} layers, width {small[1]}",
            f"transformation parameters (F, G): {learned:,} of {gene.num_stored_params:,} stored",
        ]
