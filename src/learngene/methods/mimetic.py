"""Mimetic initialization (Trockman & Kolter, "Mimetic Initialization of Self-Attention Layers", ICML 2023).

No ancestry and no learngene: attention weights are set in closed form so that, as in pre-trained
ViTs, each head's query-key product is close to the identity and each layer's value-projection
product close to the negative identity, with 2-D sin-cos position embeddings. Every other weight
keeps timm's default initialization. Used alone (``--method mimetic``) or as a top-up that fills the
attention weights another method leaves to timm (``make_descendant(..., top_up="mimetic")``,
``learngene expand --top-up mimetic``). The closed form itself is :mod:`learngene.vit.attention_init`, which
the other methods and ``make_descendant`` import.

Authors' code: none was found in this session's search.
"""

from __future__ import annotations

from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Method, Paper
from ..registry import register_method
from ..vit.attention_init import (
    MimeticConfig,
    mimetic_attention,
)
from ..vit.spec import ViTSpec
from ..vit.transfer import StateDict


@register_method
class Mimetic(Method):
    """Closed-form attention initialization; the learngene is empty (any spec, no ancestry)."""

    name = "mimetic"
    stores = "nothing: closed-form attention (W_q W_kᵀ ≈ +I, W_v W_proj ≈ −I)"
    expands_to = "any size"
    summary = "closed-form attention init: W_q W_kᵀ ≈ +I, W_v W_proj ≈ −I, sin-cos positions (no ancestry)"
    paper = Paper("Mimetic Initialization of Self-Attention Layers", "Trockman & Kolter", "ICML", 2023, "2305.09828")
    Config = MimeticConfig
    needs_vit_ancestry = False
    seed_option = "seed"  # its draws; a descendant's seed sets it when mimetic tops up another gene

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        return self.new_gene({}, None, ancestry.spec if ancestry else None)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        return mimetic_attention(spec, self.config)
