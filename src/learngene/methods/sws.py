"""SWS, stage-wise weight sharing (Xia, Zhu, Yang & Geng, "Exploring Learngene via Stage-wise Weight Sharing for
Initializing Variable-sized Models", IJCAI 2024, arXiv 2404.16897).

The learngene is one layer per stage plus the embeddings, final norm and head. The aux net is split into
stages of consecutive layers (``stages``: aux layers per stage); every layer of a stage is that stage's one
layer (weights shared), and the whole net is trained by distillation from the ancestry. A descendant
expands each stage's layer to that stage's depth in it (``descendant_stages``: layers per stage, summing to
its depth), so the stage information learned in the aux net is where the descendant uses it.

Authors' code: github.com/AlphaXia/SWS, read at commit 2ad3b64. Their set-up, our defaults:

- aux net (their ``aux_deit_*_L16_33433``): 16 layers in 5 stages of 3, 3, 4, 3, 3 layers, for 12-layer
  descendants; no class token, average pooling; 12 heads at both of their widths (Aux-S is 384 wide with
  12 heads of 32 where DeiT-S has 6 of 64; Aux-B is 768 wide with 12, as DeiT-B);
- descendant (their ``gene_tranfer_1`` with ``--layers-source 0,0,0,1,1,1,2,2,3,3,4,4``): layer ``t`` is a
  copy of stage ``layers_source[t]``'s layer; embeddings shared; the aux net's final norm becomes the
  descendant's; the head only where the label space is the aux net's.

How the defaults generalise to other depths (ours: their code fixes only the 16/12-layer case):

- ``aux_depth`` 0: ``round(4·L/3)`` for an ``L``-layer ancestry (their 16 for 12);
- ``stages`` "": their 3,3,4,3,3 at 16 aux layers; otherwise five stages (fewer for a shallower aux net),
  as even as possible, the layers left over going to the middle stages first (their 16 gives its one
  extra layer to the middle stage);
- ``descendant_stages`` "": the descendant's layers spread over the stages as evenly as possible, earlier
  stages one layer longer. At 12 layers and five stages this is their mapping (3,3,2,2,2 layers:
  0,0,0,1,1,1,2,2,3,3,4,4); a descendant of the aux net's depth has the aux net's stages. Given, it is
  one count per stage summing to the descendant's depth, and a 0 skips that stage: the descendant uses no copy
  of its layer (the even spread does the same to the last stages of a descendant with fewer layers than
  stages). While condensing it lays out the aux net's layers instead, where every stage needs a layer: a
  stage of 0 there would store a layer that never trains, and is refused;
- ``aux_num_heads`` 0: 12 where the aux width is one of theirs (384, 768), else the ancestry's count;
- ``aux_pool`` "": average pooling without a class token (their aux net) where the ancestry's family can
  pool so (a distilled DeiT cannot: then the ancestry's pooling). Our aux net averages, then normalizes
  (timm's ``fc_norm``); theirs normalizes, then averages.

Initial values as TLEG's (the same group's, and their ``_init_weights``): trunc-normal(0.02) matrices,
zero biases, unit norm weights. Depth only: a descendant has the aux net's width.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch

from ..errors import LearngeneError, SpecError
from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Paper
from ..registry import register_method
from ..settings import field
from ..training.auxnet import DrawnStartConfig, aux_size, resolve_aux_spec, vector_start
from ..validate import CONDENSE, EXPAND
from ..vit.spec import ViTSpec, block_key
from ..vit.transfer import StateDict, require_block_shape
from ._drawn_start import DrawnStartMethod
from ._option_lists import int_list

PREFIX = "stage."
AUTHORS_STAGES = (3, 3, 4, 3, 3)  # their aux net's stages (aux_models.py, get_repeated_schedule_*)
AUTHORS_HEADS = {384: 12, 768: 12}  # their aux nets' heads by width (models.py, deit_*_patch16_224_L16)


@dataclass(frozen=True)
class SWSConfig(DrawnStartConfig):
    aux_pool: Literal["", "token", "avg"] = field(
        "", phase=CONDENSE, help='"": avg (theirs: no class token) where the family allows it'
    )
    stages: str = field(
        "",
        phase=CONDENSE,
        help='aux layers per stage, e.g. "3,3,4,3,3"; "": theirs at 16 layers, else see the docstring',
    )
    descendant_stages: str = field(
        "",
        phase=(CONDENSE, EXPAND),
        help="a descendant's layers per stage, summing to its depth; 0 skips a stage (its layer unused); "
        '"": spread as evenly as possible',
    )


def parse_counts(text: str, what: str) -> list[int] | None:
    counts = int_list(text, f"sws {what}={text!r} is not comma-separated layer counts, e.g. 3,3,4,3,3")
    if counts is None:
        return None
    # an aux stage of no layers is no stage; a descendant may skip a stage (0 layers: its gene layer unused)
    least = 0 if what == "descendant_stages" else 1
    if not counts or min(counts) < least or sum(counts) == 0:
        raise LearngeneError(
            f"sws {what}={text!r} needs {'non-negative' if least == 0 else 'positive'} layer counts with a "
            f"positive sum, one per stage, e.g. 3,3,4,3,3"
        )
    return counts


def middle_first_stages(depth: int, count: int = 5) -> list[int]:
    """``depth`` layers in ``min(count, depth)`` stages as even as possible, the extra layers in the middle stages."""
    count = min(count, depth)
    counts = [depth // count] * count
    centre = (count - 1) / 2
    for s in sorted(range(count), key=lambda s: (abs(s - centre), s))[: depth % count]:
        counts[s] += 1
    return counts


def default_aux_stages(depth: int) -> list[int]:
    return list(AUTHORS_STAGES) if depth == sum(AUTHORS_STAGES) else middle_first_stages(depth)


def spread(depth: int, count: int) -> list[int]:
    """``depth`` descendant layers over ``count`` stages as evenly as possible, earlier stages one longer (a
    descendant shallower than ``count`` takes one layer of each of the first stages)."""
    return [depth // count + (s < depth % count) for s in range(count)]


def stage_of_layers(counts: list[int]) -> list[int]:
    return [s for s, n in enumerate(counts) for _ in range(n)]


@register_method
class SWS(DrawnStartMethod):
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
    distill_lambda = 1.0  # their --distillation-alpha 1.0: pure (soft) distillation

    @classmethod
    def cannot_reach(cls, config: SWSConfig, ancestry: ViTSpec, target: ViTSpec) -> str:
        aux = aux_size(config, ancestry)
        if aux.block_shapes() == target.block_shapes():  # another head count alone is fine
            return ""
        return (
            f"sws copies whole blocks: the target's blocks must have the shapes of its aux net's (width "
            f"{aux.embed_dim}, MLP {aux.mlp_hidden}), {target.short()} asks width {target.embed_dim}, MLP "
            f"{target.mlp_hidden}"
        )

    def aux_spec(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> ViTSpec:
        """The aux net: the options, else the authors' depth ratio and head count (see the module docstring)."""
        cfg = self.config
        base = ancestry.spec if ancestry is not None else None
        if base is not None:
            width = cfg.aux_embed_dim or base.embed_dim
            cfg = dataclasses.replace(
                cfg,
                aux_depth=cfg.aux_depth or max(1, round(4 * base.depth / 3)),
                aux_num_heads=cfg.aux_num_heads or AUTHORS_HEADS.get(width, 0),  # 0: the ancestry's
            )
        if not cfg.aux_pool:
            try:
                return resolve_aux_spec(dataclasses.replace(cfg, aux_pool="avg"), ancestry, inputs, self.name)
            except SpecError:  # e.g. a distilled DeiT reads its class and distillation tokens
                pass
        return resolve_aux_spec(cfg, ancestry, inputs, self.name)

    def aux_stages(self, aux: ViTSpec) -> list[int]:
        counts = parse_counts(self.config.stages, "stages") or default_aux_stages(aux.depth)
        if sum(counts) != aux.depth or 0 in counts:
            raise LearngeneError(
                f"sws stages={self.config.stages!r} must be positive layer counts summing to the aux "
                f"net's depth {aux.depth}"
            )
        return counts

    def initial_blocks(self, aux: ViTSpec) -> StateDict:
        count = len(self.aux_stages(aux))
        counts = self.given_counts(count, aux.depth)
        if counts is not None and 0 in counts:  # while condensing they lay out the aux net, which trains every stage
            raise LearngeneError(
                f"sws descendant_stages={self.config.descendant_stages!r} while condensing lays out the aux net's "
                f"layers, and stage {counts.index(0)} would get none: its stored layer would never train; give "
                f"every stage a layer, or pass descendant_stages with its 0s when expanding"
            )
        tensors: StateDict = {}
        for name, shape in aux.block_shapes().items():
            if len(shape) == 1:
                tensors[PREFIX + name] = torch.full((count, *shape), vector_start(aux, name))
            else:
                tensors[PREFIX + name] = torch.nn.init.trunc_normal_(
                    torch.empty(count, *shape), std=self.config.init_std
                )
        return tensors

    def layer_stages(self, gene: Learngene, spec: ViTSpec) -> list[int]:
        """The stage of each of ``spec``'s layers (their ``layers_source``)."""
        aux = gene.require_layout()
        aux_stage = stage_of_layers(self.aux_stages(aux))
        count = len(set(aux_stage))
        counts = self.given_counts(count, spec.depth)
        if counts is None:
            if spec.depth == aux.depth:  # the aux net's depth (the aux net itself while condensing): its stages
                return aux_stage
            counts = spread(spec.depth, count)
        return stage_of_layers(counts)

    def given_counts(self, count: int, depth: int) -> list[int] | None:
        """``descendant_stages`` checked against ``count`` stages and a ``depth``-layer net (None when not given)."""
        counts = parse_counts(self.config.descendant_stages, "descendant_stages")
        if counts is not None and (len(counts) != count or sum(counts) != depth):
            raise LearngeneError(
                f"sws descendant_stages={self.config.descendant_stages!r} needs {count} layer counts (one per "
                f"stage) summing to the descendant's depth {depth}"
            )
        return counts

    def expand_blocks(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        layout = gene.require_layout()
        if (
            layout.block_shapes() != spec.block_shapes()
        ):  # another head count alone is fine: their Aux-S has 12, DeiT-S 6
            require_block_shape(layout, spec, self.name, gene.ancestry)
            raise LearngeneError(
                f"sws copies whole blocks: the target's blocks must have the shapes of {layout.short()}'s"
            )
        out: StateDict = {}
        stages = self.layer_stages(gene, spec)
        for name in spec.block_shapes():
            stack = gene.tensors[PREFIX + name]
            for layer, stage in enumerate(stages):
                out[block_key(layer, name)] = stack[stage]
        return out

    def describe(self, gene: Learngene) -> list[str]:
        aux = gene.require_layout()
        return [
            f"aux net {aux.short()} in stages of {', '.join(map(str, self.aux_stages(aux)))} layers, "
            f"one shared layer per stage"
        ]
