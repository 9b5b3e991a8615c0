"""SWS, stage-wise weight sharing (Xia, Zhu, Yang & Geng, "Exploring Learngene via Stage-wise Weight Sharing for
Initializing Variable-sized Models", IJCAI 2024, arXiv 2404.16897).

The learngene is one layer per stage plus the embeddings, final norm and head. The aux net is split into
stages of consecutive layers (``stages``: aux layers per stage); every layer of a stage is that stage's one
layer (weights shared), and the whole net is trained by distillation from the ancestry. A descendant
expands each stage's layer to that stage's depth in it (``descendant_stages``: layers per stage, summing to
its depth), so the stage information learned in the aux net is where the descendant uses it.

No public code of the authors could be read, so the configuration is ours where the paper's text does not
fix it (it says both the number of stages and their lengths are configurable): by default three stages
(fewer for a shallower aux net) splitting the aux net as evenly as possible, earlier stages one layer
longer; a descendant's layer ``t`` of ``L`` belongs to the stage of aux layer ``⌊t·L_aux/L⌋`` unless
``descendant_stages`` says otherwise. Initial values as TLEG's (the same group's): trunc-normal(0.02)
matrices, zero biases, unit norm weights. Depth only: a descendant has the aux net's width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..auxnet import AuxConfig, AuxNetMethod, expand_non_block, initial_non_block, vector_start
from ..errors import LearngeneError
from ..gene import Learngene
from ..method import Paper
from ..registry import register_method
from ..vit.spec import ViTSpec, block_key
from ..vit.transfer import StateDict, require_block_shape

PREFIX = "stage."


@dataclass(frozen=True)
class SWSConfig(AuxConfig):
    stages: str = ""  # aux layers per stage, e.g. "2,1,1"; "": three stages as even as possible
    descendant_stages: str = ""  # a descendant's layers per stage ("": its layers follow the aux net's stages)


def parse_counts(text: str, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        counts = [int(x) for x in str(text).split(",")]
    except ValueError:
        raise LearngeneError(f"sws {what}={text!r} is not comma-separated layer counts, e.g. 2,1,1") from None
    if not counts or min(counts) < 0 or sum(counts) == 0:
        raise LearngeneError(f"sws {what}={text!r} needs non-negative layer counts with a positive sum")
    return counts


def even_stages(depth: int, count: int = 3) -> list[int]:
    """``depth`` layers in ``min(count, depth)`` stages as even as possible, earlier stages longer."""
    count = min(count, depth)
    return [depth // count + (s < depth % count) for s in range(count)]


def stage_of_layers(counts: list[int]) -> list[int]:
    return [s for s, n in enumerate(counts) for _ in range(n)]


@register_method
class SWS(AuxNetMethod):
    name = "sws"
    stores = "one layer per stage, shared by that stage's layers in an aux net trained by distillation"
    expands_to = "any depth (`descendant_stages` sets each stage's layers)"
    summary = "one layer per stage, shared by that stage's layers in an aux net trained by distillation; any depth"
    paper = Paper(
        "Exploring Learngene via Stage-wise Weight Sharing for Initializing Variable-sized Models",
        "Xia, Zhu, Yang & Geng",
        "IJCAI",
        2024,
        "2404.16897",
    )
    Config = SWSConfig
    needs_data = True
    needs_vit_ancestry = False
    distill_lambda = 1.0  # pure distillation, as TLEG's recipe of the same group

    def aux_stages(self, aux: ViTSpec) -> list[int]:
        counts = parse_counts(self.config.stages, "stages") or even_stages(aux.depth)
        if sum(counts) != aux.depth or 0 in counts:
            raise LearngeneError(
                f"sws stages={self.config.stages!r} must be positive layer counts summing to the aux "
                f"net's depth {aux.depth}"
            )
        return counts

    def initial_tensors(self, aux: ViTSpec) -> StateDict:
        count = len(self.aux_stages(aux))
        tensors: StateDict = {}
        for name, shape in aux.block_shapes().items():
            if len(shape) == 1:
                tensors[PREFIX + name] = torch.full((count, *shape), vector_start(aux, name))
            else:
                tensors[PREFIX + name] = torch.nn.init.trunc_normal_(
                    torch.empty(count, *shape), std=self.config.init_std
                )
        tensors.update(initial_non_block(aux))
        return tensors

    def layer_stages(self, gene: Learngene, spec: ViTSpec) -> list[int]:
        """The stage of each of ``spec``'s layers."""
        aux = gene.require_layout()
        aux_stage = stage_of_layers(self.aux_stages(aux))
        counts = parse_counts(self.config.descendant_stages, "descendant_stages")
        if counts is None:
            return [aux_stage[t * aux.depth // spec.depth] for t in range(spec.depth)]
        if len(counts) != len(set(aux_stage)) or sum(counts) != spec.depth:
            raise LearngeneError(
                f"sws descendant_stages={self.config.descendant_stages!r} needs {len(set(aux_stage))} "
                f"layer counts (one per stage) summing to the descendant's depth {spec.depth}"
            )
        return stage_of_layers(counts)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        require_block_shape(gene.require_layout(), spec, self.name)
        out: StateDict = {}
        stages = self.layer_stages(gene, spec)
        for name in spec.block_shapes():
            stack = gene.tensors[PREFIX + name]
            for layer, stage in enumerate(stages):
                out[block_key(layer, name)] = stack[stage]
        out.update(expand_non_block(gene, spec))
        return out

    def describe(self, gene: Learngene) -> list[str]:
        aux = gene.require_layout()
        return [
            f"aux net {aux.short()} in stages of {', '.join(map(str, self.aux_stages(aux)))} layers, "
            f"one shared layer per stage"
        ]
