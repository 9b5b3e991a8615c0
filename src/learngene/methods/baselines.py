"""The baselines the learngene papers compare against: scratch, pre-trained, Heru-LG, Auto-LG.

All but scratch copy whole ancestry blocks (so the descendant's blocks must have the ancestry's
width, heads and MLP size; depth is free). The gene stores only what the rule uses, so its
stored-parameter count is the rule's real storage cost.

``--opt untrained_attention=mimetic`` (pretrained, auto_lg, heru_lg; default ``keep``, the papers'
baselines): where the stored attention was never trained (judged from the weights alone, by
:func:`~learngene.vit.attention_init.mimetic_where_untrained`), the descendant takes mimetic's attention and sin-cos positions
instead and keeps the ancestry's MLPs, norms and patch embedding. An ancestry trained 2 epochs has
near-uniform attention and its descendants lose to mimetic on unseen classes; this recovers mimetic's
level (docs/RESULTS.md, ``benchmarks/transfer_why.py``). With ``keep``, ``learngene condense`` says so
when the stored attention looks untrained.

Authors' code: Heru-LG, github.com/BruceQFWang/learngene (the AAAI 2022 paper's code, snapshot read at
d145a5e); Auto-LG: none found; scratch and pretrained are timm's own ViT, no method code applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Method, Paper, refused_by, same_size
from ..registry import register_method
from ..settings import field
from ..validate import CONDENSE, EXPAND
from ..vit.attention_init import UntrainedAttentionOptions, mimetic_where_untrained, untrained_attention_note
from ..vit.spec import ViTSpec
from ..vit.transfer import StateDict, inherit_non_block, place_blocks, require_block_shape


@register_method
class Scratch(Method):
    """timm's default initialization: the empty learngene."""

    name = "scratch"
    stores = "nothing: timm's default initialization"
    expands_to = "any size"
    summary = "timm default init (no learngene)"
    paper = Paper(
        "An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale",
        "Dosovitskiy et al.",
        "ICLR",
        2021,
        "2010.11929",
        "the ViT, trained from timm's initialization",
    )
    needs_vit_ancestry = False

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        return self.new_gene({}, None, ancestry.spec if ancestry else None)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        return {}


@register_method
class ScratchFixInit(Method):
    """timm's initialization with ``fix_init=True``: scratch's draws, each block's output projections (the
    attention's ``proj`` and the MLP's ``fc2``) then divided by sqrt(2 (l + 1)) for block l = 0, 1, ...
    (``VisionTransformer.fix_init_weight``, BEiT's rescaling): a second random start beside scratch, the same seed
    drawing the same weights. The empty learngene: the descendant is timm's model built with that flag
    (:meth:`timm_init`). timm's Eva rescales so always and its NaFlexVit by default: in those families this start is
    scratch's."""

    name = "scratch_fix_init"
    stores = "nothing: timm's initialization with fix_init=True"
    expands_to = "any size"
    summary = "timm init with fix_init: each block's attn.proj and mlp.fc2 ÷ √(2(l+1)) (no learngene)"
    paper = Paper(
        "BEiT: BERT Pre-Training of Image Transformers",
        "Bao et al.",
        "ICLR",
        2022,
        "2106.08254",
        "timm's fix_init",
    )
    needs_vit_ancestry = False

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        return self.new_gene({}, None, ancestry.spec if ancestry else None)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        return {}

    def timm_init(self, spec: ViTSpec) -> dict[str, Any]:
        # only timm's VisionTransformer takes the flag off by default (Eva has no flag: it always rescales)
        return {"fix_init": True} if spec.family.model_class == "vit" else {}


class BlockCopier(Method):
    """A method that copies whole ancestry blocks: its gene holds the ancestry layers :meth:`stored_layers` picks
    (renumbered 0..) and the non-block ``stored_parts``; its Config is an :class:`UntrainedAttentionOptions`."""

    seed_option = "seed"  # mimetic's draws (untrained_attention=mimetic)
    stored_parts: ClassVar[tuple[str, ...]]

    @classmethod
    def cannot_reach(cls, config: UntrainedAttentionOptions, ancestry: ViTSpec, target: ViTSpec) -> str:
        return refused_by(require_block_shape, ancestry, target, cls.name)

    def stored_layers(self, depth: int) -> range:
        """The layers the gene stores of an ancestry ``depth`` layers deep."""
        raise NotImplementedError

    def placement(self, stored: int, depth: int) -> dict[int, int]:
        """Which stored layer (of ``stored``) each layer of a descendant ``depth`` layers deep gets; the layers it
        leaves out keep timm's initialization."""
        raise NotImplementedError

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        ancestry, spec = self.require_vit_ancestry(ancestry)
        state = ancestry.state()
        tensors = place_blocks(state, dict(enumerate(self.stored_layers(spec.depth))))
        tensors.update(inherit_non_block(state, spec, spec, self.stored_parts))
        return self.new_gene(tensors, spec, spec)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        require_block_shape(gene.require_layout(), spec, self.name, gene.ancestry)
        self.require_stored(gene)
        out = place_blocks(gene.tensors, self.placement(_stored_layers(gene), spec.depth))
        out.update(inherit_non_block(gene.tensors, gene.require_layout(), spec, self.stored_parts))
        return self.with_untrained_attention(out, spec)

    def require_stored(self, gene: Learngene) -> None:
        """Refuse a gene that lacks a tensor this method's condensation stores for its layout, or holds one in another
        shape: the copy would skip it without a word (a gene whose tensors were cleared expanded into timm's
        initialization). Found on ``meta`` tensors of the layout's shapes: nothing is allocated."""
        layout = gene.require_layout()
        state = layout.split_layers({k: torch.empty(s, device="meta") for k, s in layout.state_shapes().items()})
        stored = place_blocks(state, dict(enumerate(self.stored_layers(layout.depth))))
        stored.update(inherit_non_block(state, layout, layout, self.stored_parts))
        missing = sorted(set(stored) - set(gene.tensors))
        if missing:
            more = f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ValueError(f"it lacks tensor {missing[0]!r}{more}, which its condensation stores")
        for key, tensor in stored.items():
            if gene.tensors[key].shape != tensor.shape:
                raise ValueError(
                    f"its tensor {key!r} has shape {tuple(gene.tensors[key].shape)}, its layout's {tuple(tensor.shape)}"
                )

    def with_untrained_attention(self, state: StateDict, spec: ViTSpec) -> StateDict:
        """``untrained_attention=mimetic``: mimetic's attention and sin-cos positions instead of the ancestry's when
        the ancestry's attention was never trained (a rule on the stored weights, see ``mimetic_where_untrained``)."""
        if self.config.untrained_attention == "keep":
            return state
        return mimetic_where_untrained(state, spec, self.config.seed)

    def condense_note(self, gene: Learngene) -> str | None:
        if self.config.untrained_attention != "keep" or gene.layout is None:
            return None
        return untrained_attention_note(gene.tensors, gene.layout)


def _stored_layers(gene: Learngene) -> int:
    layers = {int(k.split(".")[1]) for k in gene.tensors if k.startswith("blocks.")}
    return max(layers) + 1 if layers else 0


@dataclass(frozen=True)
class PretrainedConfig(UntrainedAttentionOptions):
    variant: Literal["first", "last", "middle"] = field(
        "first", phase=EXPAND, help="which layers line up when depths differ (Pre-Fin #1/#2/#3)"
    )


@register_method
class Pretrained(BlockCopier):
    """The ancestry's own weights (Pre-Fin). For another depth L_d, the ancestry's L_a layers line up
    with the descendant's first, last or middle layers (TLEG Sec. 4, Fig. 4: Pre-Fin #1/#2/#3): when
    L_d < L_a those L_d ancestry layers are used, when L_d > L_a the other layers stay random."""

    name = "pretrained"
    stores = "the whole ancestry; the first, last or middle layers for other depths (`variant`)"
    expands_to = "any depth at the ancestry's width"
    summary = "ancestry weights; first/last/middle layers when depths differ"
    paper = Paper(
        "Transformer as Linear Expansion of Learngene",
        "Xia et al.",
        "AAAI",
        2024,
        "2312.05614",
        "its Pre-Fin baselines",
    )
    Config = PretrainedConfig
    stored_parts = ("embed", "norm", "head")
    selects_layers = True
    layers_option = "variant"  # first and last are expand's layers=first and last; middle is its own
    preserves = "at the ancestry's own size with untrained_attention=keep (a same-size copy)"

    def preserves_function(self, gene: Learngene, spec: ViTSpec) -> bool:
        return same_size(gene, spec) and self.config.untrained_attention == "keep"

    def stored_layers(self, depth: int) -> range:
        return range(depth)

    def placement(self, stored: int, depth: int) -> dict[int, int]:
        offset = {"first": 0, "last": abs(stored - depth), "middle": abs(stored - depth) // 2}[self.config.variant]
        if depth <= stored:  # pick `depth` of the stored layers
            return {i: offset + i for i in range(depth)}
        return {offset + i: i for i in range(stored)}  # place every stored layer inside the deeper descendant


@dataclass(frozen=True)
class HeruConfig(UntrainedAttentionOptions):
    layers: int = field(3, at_least=1, phase=CONDENSE, help="ancestry layers kept at the top")


@register_method
class HeruLG(BlockCopier):
    """Heru-LG (Wang et al. 2022): the last ancestry layers (3 by default) become the descendant's top
    layers, with the final norm and, for the same label space, the classifier above them; the layers
    below and the embeddings are random (they are the 'lower layers' this rule does not inherit)."""

    name = "heru_lg"
    stores = "the ancestry's last 3 layers (`layers`), put on top of randomly initialized layers"
    expands_to = "any depth at the ancestry's width"
    summary = "last 3 ancestry layers on top of random lower layers"
    paper = Paper("Learngene: From Open-World to Your Learning Task", "Wang et al.", "AAAI", 2022, "2106.06788")
    Config = HeruConfig
    stored_parts = ("norm", "head")

    def stored_layers(self, depth: int) -> range:
        return range(depth - min(self.config.layers, depth), depth)

    def placement(self, stored: int, depth: int) -> dict[int, int]:
        used = min(stored, depth)
        return {depth - used + i: stored - used + i for i in range(used)}


@dataclass(frozen=True)
class AutoConfig(UntrainedAttentionOptions):
    fraction: float = field(
        0.5,
        above=0,
        at_most=1,
        phase=CONDENSE,
        help="share of the ancestry's layers kept at the bottom (6 of 12 in the papers)",
    )


@register_method
class AutoLG(BlockCopier):
    """Auto-LG (Wang et al. 2023): the first half of the ancestry's layers, with the patch/position
    embeddings and class token below them, initialize the descendant's bottom; layers above are random."""

    name = "auto_lg"
    stores = "the ancestry's first half of layers (`fraction`) and its embeddings"
    expands_to = "any depth at the ancestry's width"
    summary = "first half of the ancestry layers, random layers above"
    paper = Paper(
        "Learngene: Inheriting Condensed Knowledge from the Ancestry Model to Descendant Models",
        "Wang et al.",
        "arXiv preprint",
        2023,
        "2305.02279",
    )
    Config = AutoConfig
    stored_parts = ("embed",)

    def stored_layers(self, depth: int) -> range:
        return range(max(1, round(depth * self.config.fraction)))

    def placement(self, stored: int, depth: int) -> dict[int, int]:
        return {i: i for i in range(min(stored, depth))}
