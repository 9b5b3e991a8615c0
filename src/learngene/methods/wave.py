"""WAVE (Feng, Xie et al., "WAVE: Weight Templates for Adaptive Initialization of Variable-sized Models", 2024).

The learngene is a set of weight templates shared by all layers. Layer l's weight of kind ⋆ (qkv,
proj, fc1, fc2) is ``W^(l) = Σ_t kron(S^(l,t), T^(t))`` (Eq. 4): the w×w template tiled over the
matrix's block grid, block (a, b) weighted by the scaler entry ``S^(l,t)[a, b]``. (The paper writes
T ⊗ S; only ``kron(S, T)`` builds the matrix from weighted copies of the template, as it describes.)
Biases and norms may get 1-D templates the same way (Table 4, optional). Templates and the aux net's
scalers are condensed through an aux net by distillation (Eq. 5-6). A target of another depth or
width gets fresh scalers by linear padding (Eq. 7) and, with ``adapt``, trains only those scalers on
a little data with the templates frozen; widths must be multiples of the template size.

Template counts: two per w×w block of the aux tensor ("base" and "per-layer slope"; Table 8's
6/2/8/8 for qkv/proj/fc1/fc2 at w = D), so that TLEG is the special case of Appendix A.

Vector templates depart from Table 8, on purpose. Table 8 gives each bias and norm 4 templates as
long as the whole vector (576 for DeiT-Ti's qkv bias, 768 for fc1's). A template that long cannot
make a vector of another width: it is longer than a narrower model's bias, and tiling it over a
wider one would put the aux's key biases into the wider model's query rows. Ours are w long and
tiled like the matrices (two per w-block, base and slope), so biases and norms follow every width
the weights can take, and a TLEG gene cut into blocks is still a WAVE gene (Appendix A). At the aux
width the difference is only the count: 2 per w-block instead of 4 per vector.

Authors' code: github.com/fu-feng/WAVE (named in the literature); no snapshot could be fetched in this
session, so no commit was read.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from ..errors import LearngeneError, Remedy, named
from ..gene import Learngene
from ..method import AdaptInputs, Paper, refused_by
from ..registry import register_method
from ..settings import field
from ..training.auxnet import DrawnStartConfig, aux_size, block_params_per_layer, vector_start
from ..training.genenet import GeneNet
from ..training.loop import TrainResult, train
from ..validate import ADAPT, CONDENSE, EXPAND
from ..vit.spec import ViTSpec, block_key
from ..vit.timm_keys import MATRIX, block_names
from ..vit.transfer import HEAD_DIM, StateDict, block_axes, segments
from ._drawn_start import DrawnStartMethod

MATRIX_NAMES = block_names(tag=MATRIX)  # every family's block weight matrices


def matrix_kind(name: str) -> str:
    """qkv, proj, fc1 or fc2: the option ``n_<kind>`` counting its templates (an unpacked SwiGLU's fc1_g and
    fc1_x are fc1s)."""
    return name.split(".")[-2].split("_")[0]


MATRICES = {matrix_kind(name): name for name in MATRIX_NAMES if matrix_kind(name) == name.split(".")[-2]}


def vector_names(spec: ViTSpec) -> list[str]:
    """The block vectors that get 1-D templates: biases, norms, layer-scale gammas (the family's); the
    per-head q/k norms (head-size vectors) do not tile the width and keep timm's init."""
    head_sized = {name for name, axes in block_axes(spec).items() if axes[0].role == HEAD_DIM}
    return [name for name, shape in spec.block_shapes().items() if len(shape) == 1 and name not in head_sized]


@dataclass(frozen=True)
class WAVEConfig(DrawnStartConfig):
    """Options of WAVE.

    Attributes:
        template_size: w, the side of the templates (0 = the aux width; Table 8 uses D×D).
        n_qkv, n_proj, n_fc1, n_fc2: templates per weight kind (0 = two per w×w block of the aux
            matrix, i.e. Table 8's 6, 2, 8, 8 at w = D); even, first half "base", second half "slope".
        vector_templates: 1-D templates for biases and norms (Table 4); off: they keep timm's init.
        scaler_init: ``auto`` uses the scalers stored in the gene when they fit the target (the aux
            net's, or those ``adapt`` trained), else linear padding; ``padding`` always uses Eq. 7.
        padding_eps: ε of Eq. 7.
        padding_offset: Eq. 7 weights the slope templates by l/L (0); TLEG's Eq. 1 uses (l−1)/L (1).
        padding_seed: seed of Eq. 7's noise (expansion is a pure function of gene and options).
        adapt_steps: scaler-training steps of ``adapt`` when the training config sets no ``max_steps``.
    """

    AUTO_OPTIONS = DrawnStartConfig.AUTO_OPTIONS + ("template_size", "n_qkv", "n_proj", "n_fc1", "n_fc2")

    template_size: int = field(
        0, phase=CONDENSE, help="w, the side of the templates (0: the aux width; Table 8 uses DxD)"
    )
    n_qkv: int = field(
        0,
        at_least=0,
        multiple_of=2,
        phase=CONDENSE,
        help="qkv templates (0: two per wxw block of the aux matrix); even: half base, half slope",
    )
    n_proj: int = field(
        0, at_least=0, multiple_of=2, phase=CONDENSE, help="proj templates (0: two per wxw block); even"
    )
    n_fc1: int = field(0, at_least=0, multiple_of=2, phase=CONDENSE, help="fc1 templates (0: two per wxw block); even")
    n_fc2: int = field(0, at_least=0, multiple_of=2, phase=CONDENSE, help="fc2 templates (0: two per wxw block); even")
    vector_templates: bool = field(
        True, phase=CONDENSE, help="1-D templates for biases and norms (Table 4); off: they keep timm's init"
    )
    scaler_init: Literal["auto", "padding"] = field(
        "auto",
        phase=(CONDENSE, EXPAND),
        help="auto: the gene's scalers where they fit the target, else linear padding; padding: always Eq. 7",
    )
    padding_eps: float = field(1e-6, phase=(CONDENSE, EXPAND, ADAPT), help="epsilon of Eq. 7")
    padding_offset: int = field(
        0,
        phase=(CONDENSE, EXPAND, ADAPT),
        help="Eq. 7 weights slope templates by l/L (0) or (l-1)/L as TLEG's Eq. 1 (1)",
    )
    padding_seed: int = field(0, phase=(CONDENSE, EXPAND, ADAPT), help="seed of Eq. 7's noise")
    adapt_steps: int = field(
        300, phase=ADAPT, help="scaler-training steps of adapt when the training sets no max_steps"
    )


def block_grid(spec: ViTSpec, name: str, w: int) -> tuple[int, ...]:
    """How many w-wide blocks tile block tensor ``name`` of ``spec`` along each dimension."""
    shape = spec.block_shapes()[name]
    if any(s % w for s in shape):
        words, remedies = _tiling_advice(spec, w)
        raise LearngeneError(
            f"wave tiles {w}-wide templates, but {name} of {spec.short()} has shape {shape} "
            f"(width {spec.embed_dim}, MLP {spec.mlp_hidden}); {words}",
            advice=remedies,
        )
    return tuple(s // w for s in shape)


def _tiles(spec: ViTSpec, w: int) -> bool:
    return all(side % w == 0 for shape in spec.block_shapes().values() for side in shape)


def _tiling_advice(spec: ViTSpec, w: int) -> tuple[str, list[Remedy]]:
    """What makes ``spec``'s tensors tile into w-wide templates, in words and as remedies: the nearest width (at its
    head count) whose every tensor tiles, where the width is the obstacle; where the width already is a multiple of w,
    its MLP is, and no width helps: templates as wide as the common divisor of every tensor's sides (condensed again),
    or an MLP size that is a multiple of w."""
    if spec.embed_dim % w:
        nearest = max(1, round(spec.embed_dim / w))
        for times in sorted(range(1, nearest + 4), key=lambda k: (abs(k - nearest), k)):
            try:
                other = spec.replace(embed_dim=w * times)
            except LearngeneError:
                continue
            if _tiles(other, w):
                width = Remedy(size={"embed_dim": w * times})
                return f"choose a width whose every tensor is a multiple of {w}: {width.text}", [width]
        return f"no width near {spec.embed_dim} at {spec.num_heads} heads tiles, so it cannot make this size", []
    common = math.gcd(*(side for shape in spec.block_shapes().values() for side in shape))
    templates = Remedy(options={"template_size": common})
    return (
        f"its MLP's {spec.mlp_hidden} is no multiple of {w}: condense with templates that tile every tensor, "
        f"{templates.text}, or give the descendant an MLP size that is a multiple of {w} ({named('mlp_ratio')})",
        [templates],
    )


def _place(index: int, aux_blocks: int, target_blocks: int, segments: int) -> int | None:
    """Where aux block ``index`` sits in the target: same offset inside the same segment (None: cut off)."""
    per_aux, per_target = aux_blocks // segments, target_blocks // segments
    segment, offset = divmod(index, per_aux)
    return segment * per_target + offset if offset < per_target else None


def linear_padding(
    n: int,
    aux_grid: tuple[int, ...],
    grid: tuple[int, ...],
    depth: int,
    segments: tuple[int, ...],
    eps: float,
    offset: int,
    generator: torch.Generator,
) -> Tensor:
    """Scalers ``(depth, n, *grid)`` by linear padding, WAVE Eq. 7.

    ``S^(l,t) = (l/L)^{H(t − n/2)} · E_pos(t) + ε·N(0, 1)``: template t (0-indexed) marks one block
    position of the aux tensor (row-major, ``t mod n/2``), with weight 1 for the first half of the
    templates and l/L for the second (``(l − offset)/L``; offset 1 is TLEG's (l−1)/L). For a wider
    target each aux block keeps its offset inside its segment (q, k, v of the fused qkv; whole tensor
    otherwise): Eq. 7 taken literally would put the aux's key template into the wider net's query rows.
    """
    scalers = eps * torch.randn((depth, n, *grid), generator=generator)
    slope = (torch.arange(1, depth + 1, dtype=torch.float32) - offset) / depth
    half, positions = n // 2, math.prod(aux_grid)
    for t in range(n):
        aux_index = torch.unravel_index(torch.tensor((t % half) % positions), aux_grid)
        index = [_place(int(i), a, g, s) for i, a, g, s in zip(aux_index, aux_grid, grid, segments)]
        if None not in index:
            scalers[(slice(None), t, *index)] += slope if t >= half else 1.0
    return scalers


@register_method
class WAVE(DrawnStartMethod):
    name = "wave"
    stores = (
        "w×w weight templates + per-layer Kronecker scalers, trained in an aux net; scalers adapted per size (`adapt`)"
    )
    expands_to = "any depth; widths (and MLP sizes) that tile w"
    summary = "w×w weight templates + per-layer Kronecker scalers via an aux net; any depth and tiling width (adapt)"
    paper = Paper(
        "WAVE: Weight Templates for Adaptive Initialization of Variable-sized Models",
        "Feng, Xie et al.",
        "CVPR",
        2025,
        "2406.17503",
    )
    Config = WAVEConfig
    needs_data = True
    needs_vit_ancestry = False
    adaptable = True
    distill_lambda = 0.5  # Eq. 6: KL + CE, i.e. λ = 0.5 up to a factor 2

    @classmethod
    def cannot_reach(cls, config: WAVEConfig, ancestry: ViTSpec, target: ViTSpec) -> str:
        w = config.template_size or aux_size(config, ancestry).embed_dim
        method = cls(config)
        return refused_by(lambda: [block_grid(target, name, w) for name in method.template_names(target)])

    @classmethod
    def bench_options(cls, sizes: Sequence[ViTSpec]) -> dict[str, Any]:
        # one gene for the whole grid: templates as wide as the narrowest size tile the widths that are its multiples
        return {"template_size": min(s.embed_dim for s in sizes)} if sizes else {}

    # ---- the gene -----------------------------------------------------------------------------
    def template_names(self, spec: ViTSpec) -> list[str]:
        names = [name for name in MATRIX_NAMES if name in spec.block_shapes()]
        return names + vector_names(spec) if self.config.vector_templates else names

    def template_count(self, name: str, aux: ViTSpec, w: int) -> int:
        kind = matrix_kind(name) if name in MATRIX_NAMES else None
        chosen = getattr(self.config, f"n_{kind}") if kind else 0
        return chosen or 2 * math.prod(block_grid(aux, name, w))

    def initial_blocks(self, aux: ViTSpec) -> StateDict:
        """Templates start like TLEG's θ: trunc-normal(0.02) matrices; 1-D base templates 1 for norm
        weights and 0 for biases, slope templates 0."""
        w = self.config.template_size or aux.embed_dim
        tensors: StateDict = {}
        for name in self.template_names(aux):
            n = self.template_count(name, aux, w)
            if name in MATRIX_NAMES:
                tensors[f"templates.{name}"] = torch.nn.init.trunc_normal_(
                    torch.empty(n, w, w), std=self.config.init_std
                )
            else:
                base = vector_start(aux, name)
                tensors[f"templates.{name}"] = torch.cat([torch.full((n // 2, w), base), torch.zeros(n - n // 2, w)])
        return tensors

    def initial_tensors(self, aux: ViTSpec) -> StateDict:
        """The templates, embeddings, final norm and head; then scalers for them, Eq. 7 for the aux net (Algorithm 1)."""
        tensors = super().initial_tensors(aux)
        w = self.config.template_size or aux.embed_dim
        generator = torch.Generator().manual_seed(self.config.padding_seed)
        for name in self.template_names(aux):
            grid = block_grid(aux, name, w)
            tensors[f"scalers.{name}"] = linear_padding(
                tensors[f"templates.{name}"].shape[0],
                grid,
                grid,
                aux.depth,
                segments(aux, name),
                self.config.padding_eps,
                self.config.padding_offset,
                generator,
            )
        return tensors

    # ---- expansion ----------------------------------------------------------------------------
    def scalers(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """The scalers for ``spec``: the stored ones when they fit (and ``scaler_init=auto``), else Eq. 7."""
        names = [k.removeprefix("templates.") for k in gene.tensors if k.startswith("templates.")]
        w = gene.tensors[f"templates.{names[0]}"].shape[-1]
        wanted = {
            name: (spec.depth, gene.tensors[f"templates.{name}"].shape[0], *block_grid(spec, name, w)) for name in names
        }
        stored = {name: gene.tensors[f"scalers.{name}"] for name in names if f"scalers.{name}" in gene.tensors}
        if (
            self.config.scaler_init == "auto"
            and len(stored) == len(names)
            and all(tuple(s.shape) == wanted[name] for name, s in stored.items())
        ):
            return stored
        source = gene.require_layout()
        generator = torch.Generator().manual_seed(self.config.padding_seed)
        return {
            name: linear_padding(
                shape[1],
                block_grid(source, name, w),
                shape[2:],
                spec.depth,
                segments(spec, name),
                self.config.padding_eps,
                self.config.padding_offset,
                generator,
            )
            for name, shape in wanted.items()
        }

    def expand_blocks(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """Eq. 4 for every layer at once: ``W[l] = Σ_t kron(S[l, t], T[t])`` as one einsum per tensor kind."""
        out: StateDict = {}
        for name, scalers in self.scalers(gene, spec).items():
            templates = gene.tensors[f"templates.{name}"]
            scalers = scalers.to(templates)
            if templates.ndim == 3:
                stack = torch.einsum("ltab,tij->laibj", scalers, templates)
            else:
                stack = torch.einsum("lta,ti->lai", scalers, templates)
            stack = stack.reshape(spec.depth, *spec.block_shapes()[name])
            for layer, tensor in enumerate(stack.unbind(0)):
                out[block_key(layer, name)] = tensor
        return out

    # ---- inheritance --------------------------------------------------------------------------
    def adapt(self, gene: Learngene, spec: ViTSpec, inputs: AdaptInputs) -> tuple[Learngene, TrainResult]:
        """WAVE's inheritance: templates frozen, scalers for ``spec`` (Eq. 7, or the stored ones when
        they fit) trained alone for ``adapt_steps`` steps (unless ``train_cfg.max_steps`` says) on a
        little data. Parts the gene does not provide (a new head, embeddings of another width) train
        along. Returns the gene specialized to ``spec`` (its layout): ``expand(spec)`` gives the adapted weights."""
        train_cfg = inputs.train_cfg
        tensors = {k: v for k, v in gene.tensors.items() if not k.startswith("scalers.")}
        tensors.update({f"scalers.{k}": v for k, v in self.scalers(gene, spec).items()})
        start = dataclasses.replace(gene, tensors=tensors)
        torch.manual_seed(train_cfg.seed)
        # the net trains the scalers ``start`` holds (Eq. 7's where scaler_init=padding asked for them): with
        # ``padding`` its expansion would make new ones each step, and nothing it trains would reach the loss
        trainer = type(self)(self.config, scaler_init="auto")
        net = GeneNet(trainer, start, spec, trainable=lambda key: key.startswith("scalers."))
        for name, p in net.skeleton.named_parameters():
            if name.startswith("blocks."):  # without vector templates biases/norms stay timm's, as in the descendant
                p.requires_grad_(False)
        cfg = train_cfg if train_cfg.max_steps else train_cfg.replace(max_steps=self.config.adapt_steps)
        result = train(net, inputs.train, cfg, inputs.eval, run_dir=inputs.run_dir, resume=inputs.resume)
        with torch.no_grad():
            provided, own = net.expanded(), net.skeleton.state_dict()
            adapted = {
                k: v.detach().cpu().clone()
                for k, v in net.gene().tensors.items()
                if k.startswith(("templates.", "scalers."))
            }
            adapted.update(
                {k: (provided[k] if k in provided else own[k]).detach().cpu().clone() for k in spec.non_block_shapes()}
            )
        cost = {
            **gene.cost,
            "adapt": {
                "spec": spec.short(),
                **result.cost,
                "images": len(inputs.train),
                "eval_acc": result.final_acc,
            },
        }
        config = {**gene.config, "scaler_init": "auto"}
        return dataclasses.replace(gene, tensors=adapted, config=config, layout=spec, cost=cost), result

    def describe(self, gene: Learngene) -> list[str]:
        source = gene.require_layout()
        templates = {k: t for k, t in gene.tensors.items() if k.startswith("templates.")}
        w = next(iter(templates.values())).shape[-1]
        counts = ", ".join(f"{k.removeprefix('templates.')} {t.shape[0]}" for k, t in templates.items() if t.ndim == 3)
        n_templates = sum(t.numel() for t in templates.values())
        n_scalers = sum(t.numel() for k, t in gene.tensors.items() if k.startswith("scalers."))
        rest = gene.num_stored_params - n_templates - n_scalers
        vectors = "with" if any(t.ndim == 2 for t in templates.values()) else "without"
        return [
            f"templates: {w}x{w} ({counts}), {vectors} 1-D templates for biases/norms: {n_templates:,} params "
            f"= {n_templates / block_params_per_layer(source):.2f} layers' worth at width {source.embed_dim}",
            f"scalers stored for {source.short()}: {n_scalers:,}; other sizes start from linear padding (Eq. 7)",
            f"embeddings, final norm and head stored: {rest:,} (for {source.short()}, {source.num_classes} classes)",
        ]
