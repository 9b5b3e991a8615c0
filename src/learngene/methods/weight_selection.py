"""Weight Selection (Xu et al., "Initializing Models with Larger Ones", ICLR 2024).

A smaller descendant takes the ancestry's first ``L_d`` layers (or those expand's ``layers`` picks), and
from every tensor the evenly spaced indices of every dimension (every k-th when the sizes divide, else a rounded
linspace). The
authors select rows of the fused qkv matrix without regard to heads; with ``head_aware=True``
(default) whole heads are selected consistently across q, k, v, their biases and the matching W_O
columns, and the same within-head dimensions in every head, so each selected head stays a head.

Authors' code: github.com/OscarXZQ/weight-selection (snapshot read at e9b6d0c).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LearngeneError, Remedy
from ..gene import Learngene
from ..host.memory import give_back
from ..method import Ancestry, CondenseInputs, Method, Paper, same_size
from ..registry import carrier, register_method
from ..settings import field
from ..validate import EXPAND
from ..vit.spec import ViTSpec, block_key
from ..vit.transfer import (
    HEADS,
    HEADS_IN,
    WIDTH,
    Axis,
    StateDict,
    block_axes,
    block_state,
    carried,
    evenly,
    inherit_non_block,
    move_state,
    non_block_axes,
)


@dataclass(frozen=True)
class WeightSelectionConfig:
    head_aware: bool = field(
        True, phase=EXPAND, help="whole heads, the same within-head dims in each; false: plain evenly spaced rows"
    )


@register_method
class WeightSelection(Method):
    name = "weight_selection"
    stores = "the whole ancestry; a descendant takes the first N layers, evenly spaced elements, whole heads"
    expands_to = "any depth, equal or narrower widths"
    summary = "first-N layers + evenly spaced elements (head-aware); shrinks depth and width"
    paper = Paper("Initializing Models with Larger Ones", "Xu et al.", "ICLR", 2024, "2311.18823")
    Config = WeightSelectionConfig
    same_as_at_ancestry_width = "pretrained"  # the first layers and, at full width, every element
    selects_layers = True  # the first N by the paper; expand's layers picks others
    preserves = "at the ancestry's own size (a same-size copy)"

    @classmethod
    def cannot_reach(cls, config: WeightSelectionConfig, ancestry: ViTSpec, target: ViTSpec) -> str:
        if target.embed_dim > ancestry.embed_dim or target.mlp_inner > ancestry.mlp_inner:
            instead = carrier(ancestry, target, cls.name)
            return (
                f"weight_selection only shrinks: {target.short()} (MLP {target.mlp_hidden}) is wider than the "
                f"ancestry's {ancestry.embed_dim} (MLP {ancestry.mlp_hidden})"
                + (f"; {instead.text} for a wider model" if instead else "")
            )
        if config.head_aware and (target.num_heads > ancestry.num_heads or target.head_dim > ancestry.head_dim):
            return (
                f"head-aware weight_selection needs at most {ancestry.num_heads} heads of at most "
                f"{ancestry.head_dim} dims, {target.short()} asks {target.num_heads} x {target.head_dim}; "
                f"{Remedy(options={'head_aware': False}).text}"
            )
        return ""

    def preserves_function(self, gene: Learngene, spec: ViTSpec) -> bool:
        return same_size(gene, spec)

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        ancestry, spec = self.require_vit_ancestry(ancestry)
        return self.new_gene(ancestry.state(), spec, spec)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """Every axis of every tensor (the family's too) by :mod:`learngene.vit.transfer`'s table, evenly spaced;
        head axes whole heads and the same within-head dims in each (or, ``head_aware=false``, plain rows)."""
        src = gene.require_layout()
        for n_src, n_dst in ((src.embed_dim, spec.embed_dim), (src.mlp_inner, spec.mlp_inner)):
            if n_dst > n_src:
                instead = carrier(gene.ancestry, spec, self.name)
                raise LearngeneError(
                    f"weight_selection can only shrink a dimension, asked {n_src} -> {n_dst}; "
                    + (f"{instead.text} for a wider model" if instead else "it cannot make a wider model"),
                    advice=[instead] if instead else [],
                )
        if self.config.head_aware and (spec.num_heads > src.num_heads or spec.head_dim > src.head_dim):
            plain = Remedy(options={"head_aware": False})
            raise LearngeneError(
                f"head-aware weight_selection needs at most {src.num_heads} heads of at most "
                f"{src.head_dim} dims, asked {spec.num_heads} x {spec.head_dim}; {plain.text}",
                advice=[plain],
            )
        blocks, non_blocks = block_axes(src), non_block_axes(src)
        if not self.config.head_aware:  # the authors' rule: q, k, v rows and W_O columns as plain coordinates
            blocks, non_blocks = _without_heads(blocks), _without_heads(non_blocks)
        heads = (src.num_heads, spec.num_heads)
        out: StateDict = {}
        for layer in range(min(spec.depth, src.depth)):
            block = block_state(gene.tensors, layer)
            # a mapped gene (a whole ancestry) is read once, layer by layer: its pages may go
            selected = give_back(block.values(), move_state(block, blocks, spec.block_shapes(), heads, evenly))
            out.update({block_key(layer, k): v for k, v in selected.items()})
        narrow = carried(src, spec)
        state = {k: gene.tensors[k] for k in src.non_block_shapes()}
        out.update(
            inherit_non_block(move_state(state, non_blocks, narrow.non_block_shapes(), heads, evenly), narrow, spec)
        )
        return out


def _without_heads(table: dict[str, tuple[Axis, ...]]) -> dict[str, tuple[Axis, ...]]:
    return {k: tuple(Axis(WIDTH) if a.role in (HEADS, HEADS_IN) else a for a in axes) for k, axes in table.items()}
