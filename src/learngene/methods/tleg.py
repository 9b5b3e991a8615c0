"""TLEG (Xia et al., "Transformer as Linear Expansion of Learngene", AAAI 2024) and Share-Init.

The learngene is two layers' worth of tensors, θ_A and θ_B, plus the embeddings, final norm and
head. A net of any depth L is built by linear expansion: block l (1-indexed) is θ_B + (l−1)/L · θ_A
(Eq. 1-4). θ_A and θ_B are condensed by training an aux net built this way by distillation from the
ancestry (Eq. 5-6); any classifier can be the ancestry. Share-Init (ALBERT-style, Lan et al. 2020) is
the special case θ_A ≡ 0: one shared layer, condensed the same way.

Authors' code: TLEG, github.com/AlphaXia/TLEG (snapshot read at 6e30a5c). Share-Init is the TLEG paper's
baseline (ALBERT's cross-layer sharing); ALBERT's own code is for text and was not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..errors import LearngeneError, Remedy, assigned
from ..gene import Learngene
from ..method import Paper
from ..registry import register_method
from ..settings import field
from ..training.auxnet import DrawnStartConfig, aux_size, block_params_per_layer, vector_start
from ..validate import CONDENSE, EXPAND
from ..vit.spec import ViTSpec, block_key
from ..vit.timm_keys import LAYER_SCALE, MLP, MSA, NORM, block_names, has_tag, per_head
from ..vit.transfer import StateDict
from ._drawn_start import DrawnStartMethod

# TLEG Table 4's module groups, in timm's block-tensor names (those a family has). A family's other
# per-channel block vectors (layer-scale gammas, q/k norms) are expanded like the LayerNorms.
MODULES: dict[str, tuple[str, ...]] = {
    "msa": block_names(sublayer=MSA, without=NORM),
    "mlp": block_names(sublayer=MLP, without=NORM),
    # LayerNorms, then layer-scale gammas, then q/k norms: the order TLEG's gene tensors have always been built in
    "ln": tuple(sorted(block_names(tag=NORM), key=lambda n: (per_head(n), has_tag(n, LAYER_SCALE)))),
}


@dataclass(frozen=True)
class TLEGConfig(DrawnStartConfig):
    """Options of TLEG / Share-Init.

    Attributes:
        modules: module groups built by linear expansion (Table 4: ``msa``, ``mlp``, ``ln``); in the
            aux net the others are ordinary per-layer parameters, in a descendant they keep timm's init.
        layers: 1-indexed layers built from the gene, ``"all"``, ``"1-3"`` or ``"1,4,6"`` (Table 5 for
            descendants; in the aux net the other layers are ordinary parameters, Table 6).
    """

    modules: tuple[Literal["msa", "mlp", "ln"], ...] = field(
        ("msa", "mlp", "ln"), nonempty=True, phase=CONDENSE, help="module groups built by linear expansion (Table 4)"
    )
    layers: str = field(
        "all", phase=(CONDENSE, EXPAND), help='1-indexed layers built from the gene: "all", "1-3" or "1,4,6" (Table 5)'
    )


def parse_layers(layers: str | int | tuple[int, ...], depth: int) -> list[int]:
    """0-indexed layer numbers from ``"all"``, ``"a-b"``, ``"a,b,c"`` or a tuple of 1-indexed layers."""
    if isinstance(layers, str) and layers.strip().lower() == "all":
        return list(range(depth))
    try:
        if isinstance(layers, str):
            chosen: set[int] = set()
            for part in layers.split(","):
                first, _, last = part.partition("-")
                chosen.update(range(int(first), int(last or first) + 1))
        else:
            chosen = {int(layers)} if isinstance(layers, int) else {int(x) for x in layers}
    except ValueError:
        raise LearngeneError(f"layers={layers!r} is not 'all', 'a-b' or 'a,b,c' with 1-indexed layer numbers") from None
    outside = sorted(x for x in chosen if not 1 <= x <= depth)
    if outside or not chosen:
        raise LearngeneError(
            f"layers={layers!r} names layers outside 1..{depth} of this depth-{depth} net; "
            f"pass {assigned('layers', 'all', flag='--opt')} or a range inside it"
        )
    return sorted(x - 1 for x in chosen)


@register_method
class TLEG(DrawnStartMethod):
    name = "tleg"
    stores = "two layers θ_A, θ_B distilled through an aux net; layer l = θ_B + (l−1)/L·θ_A"
    expands_to = "any depth at the aux net's width"
    summary = "θ_B + (l−1)/L·θ_A per layer, condensed through an aux net by distillation; any depth"
    paper = Paper("Transformer as Linear Expansion of Learngene", "Xia et al.", "AAAI", 2024, "2312.05614")
    Config = TLEGConfig
    needs_data = True
    needs_vit_ancestry = False
    has_slope = True  # Share-Init stores θ_B only (θ_A ≡ 0)
    distill_lambda = 1.0  # Eq. 6 with the authors' released recipe: pure KL

    @classmethod
    def cannot_reach(cls, config: TLEGConfig, ancestry: ViTSpec, target: ViTSpec) -> str:
        aux = aux_size(config, ancestry)
        if (target.embed_dim, target.num_heads, target.mlp_hidden) == (aux.embed_dim, aux.num_heads, aux.mlp_hidden):
            return ""
        return (
            f"{cls.name} expands in depth only: its aux net's blocks have width {aux.embed_dim}, {aux.num_heads} "
            f"heads and MLP {aux.mlp_hidden}, {target.short()} asks {target.embed_dim}, {target.num_heads} and "
            f"{target.mlp_hidden}"
        )

    def tensor_names(self, spec: ViTSpec) -> list[str]:
        """The block tensors of ``spec`` built by linear expansion."""
        return [name for module in self.config.modules for name in MODULES[module] if name in spec.block_shapes()]

    def initial_blocks(self, aux: ViTSpec) -> StateDict:
        """The authors' start: θ_A and θ_B trunc-normal(0.02) for weight matrices, zero biases,
        LayerNorm θ_B = (1, 0) and θ_A = 0; embeddings, final norm and head as timm initializes them."""
        parse_layers(self.config.layers, aux.depth)  # refuse layers the aux net lacks before any training
        tensors: StateDict = {}
        for name in self.tensor_names(aux):
            shape = aux.block_shapes()[name]
            for part in ("theta_b", "theta_a") if self.has_slope else ("theta_b",):
                if len(shape) == 1 and part == "theta_b":
                    tensors[f"{part}.{name}"] = torch.full(shape, vector_start(aux, name))
                elif len(shape) == 1:
                    tensors[f"{part}.{name}"] = torch.zeros(shape)
                else:
                    tensors[f"{part}.{name}"] = torch.nn.init.trunc_normal_(
                        torch.empty(shape), std=self.config.init_std
                    )
        return tensors

    def expand_blocks(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """Eq. 1-4: block l (1-indexed) of a depth-L net is θ_B + (l−1)/L · θ_A, for every tensor of
        the chosen modules in the chosen layers (L = the depth of the net being built, as the authors)."""
        source = gene.require_layout()
        if (spec.embed_dim, spec.num_heads, spec.mlp_hidden) != (source.embed_dim, source.num_heads, source.mlp_hidden):
            # another head count would silently re-split the trained attention into other heads
            size: dict[str, float] = {"embed_dim": source.embed_dim, "num_heads": source.num_heads}
            if spec.mlp_ratio != source.mlp_ratio:
                size["mlp_ratio"] = source.mlp_ratio
            same = Remedy(size=size)
            raise LearngeneError(
                f"{self.name} expands in depth only: this gene's blocks have width {source.embed_dim}, "
                f"{source.num_heads} heads and MLP {source.mlp_hidden}, the target asks {spec.embed_dim}, "
                f"{spec.num_heads} and {spec.mlp_hidden}; {same.text}"
                " (`learngene methods` says which methods expand to other widths)",
                advice=[same],
            )
        layers = parse_layers(self.config.layers, spec.depth)
        # One batched op per tensor builds all chosen layers at once (the aux step stays as cheap as a plain one).
        position = torch.tensor(layers, dtype=torch.float32) / spec.depth
        out: StateDict = {}
        for name in self.tensor_names(spec):
            base = self._stored(gene, f"theta_b.{name}")
            if self.has_slope:
                slope = self._stored(gene, f"theta_a.{name}")
                stack = base + position.to(base).view(-1, *[1] * base.ndim) * slope
                for layer, tensor in zip(layers, stack.unbind(0)):
                    out[block_key(layer, name)] = tensor
            else:
                for layer in layers:
                    out[block_key(layer, name)] = base
        return out

    def _stored(self, gene: Learngene, key: str) -> Tensor:
        try:
            return gene.tensors[key]
        except KeyError:
            have = sorted({m for m, names in MODULES.items() if any(f"theta_b.{n}" in gene.tensors for n in names)})
            raise LearngeneError(
                f"this {gene.method} gene was condensed with modules {','.join(have)}, so it cannot "
                f"build {key.split('.', 1)[1]}; pass {assigned('modules', tuple(have), flag='--opt')}"
            ) from None

    def describe(self, gene: Learngene) -> list[str]:
        source = gene.require_layout()
        blocks = sum(t.numel() for k, t in gene.tensors.items() if k.startswith("theta_"))
        rest = gene.num_stored_params - blocks
        per_layer = block_params_per_layer(source)
        rule = "θ_B + (l−1)/L·θ_A" if self.has_slope else "one shared θ_B"
        return [
            f"aux net: {source.short()} (width {source.embed_dim}, {source.num_heads} heads); "
            f"{rule} for modules {', '.join(self.config.modules)}, layers {self.config.layers}",
            f"block tensors stored: {blocks:,} = {blocks / per_layer:.2f} layers' worth at this width "
            f"(one layer: {per_layer:,}), expanding to any depth",
            f"embeddings, final norm and head stored: {rest:,}",
        ]


@register_method
class ShareInit(TLEG):
    name = "share_init"
    stores = "one shared layer distilled through an aux net (TLEG with θ_A ≡ 0)"
    expands_to = "any depth at the aux net's width"
    summary = "one shared layer (TLEG with θ_A ≡ 0), condensed through an aux net; any depth"
    paper = Paper(
        "ALBERT: A Lite BERT for Self-supervised Learning of Language Representations",
        "Lan et al.",
        "ICLR",
        2020,
        "1909.11942",
        "as a learngene baseline in Xia et al., AAAI 2024",
    )
    has_slope = False
