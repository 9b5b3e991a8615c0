"""The toy method: the gene is the ancestry's first block, every descendant layer starts from it."""

from __future__ import annotations

from dataclasses import dataclass

from learngene.gene import Learngene
from learngene.method import Ancestry, CondenseInputs, Method, Paper
from learngene.registry import register_method
from learngene.settings import field
from learngene.validate import EXPAND
from learngene.vit.spec import ViTSpec, block_key
from learngene.vit.transfer import StateDict


@dataclass(frozen=True)
class FirstBlockConfig:
    scale: float = field(1.0, phase=EXPAND, above=0, help="factor on the copied weights")


@register_method
class FirstBlock(Method):
    name = "toy_first_block"
    summary = "every layer starts as the ancestry's first block (a plugin's method)"
    paper = Paper("A toy plugin method", "", "tests", 2024)
    Config = FirstBlockConfig

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        spec = ancestry.require_vit(self.name)
        state = ancestry.state()
        first = {k: v for k, v in state.items() if k.startswith("blocks.0.")}
        return self.new_gene(first, spec, spec)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        if spec.embed_dim != gene.layout.embed_dim or spec.mlp_hidden != gene.layout.mlp_hidden:
            from learngene.errors import LearngeneError

            raise LearngeneError(f"{self.name} copies blocks of width {gene.layout.embed_dim}; keep that width")
        out: StateDict = {}
        for layer in range(spec.depth):
            for key, tensor in gene.tensors.items():
                out[block_key(layer, key.removeprefix("blocks.0."))] = tensor * self.config.scale
        return out
