"""Descendants: the models a learngene becomes.

:func:`make_descendant` builds the final plain timm ViT of a spec from a gene (with an optional
top-up from a method without a learngene). :class:`GeneNet` is a timm ViT whose parameters are
``expand(gene, spec)`` recomputed on every forward: gradients reach the gene's tensors, which is how
TLEG/WAVE/Share-Init condense (train the gene through an aux net, :mod:`learngene.auxnet`) and how
WAVE's scalers and PEG's φ adapt (train some gene tensors on downstream data).
:func:`fit_gene_to_budget` picks the size a gene should expand to under a parameter/FLOP budget.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call

from .errors import LearngeneError
from .gene import Learngene, expand_on_meta
from .io import check_state_shapes
from .method import Method
from .registry import get_method
from .spec import ViTSpec, fit_to_budget
from .transfer import StateDict


def make_descendant(gene: Learngene, spec: ViTSpec, seed: int = 0, top_up: str | None = None,
                    pos_embed: str | None = None, blend_mimetic: float | None = None, **options: Any) -> nn.Module:
    """The plain timm ViT of ``spec`` initialized from ``gene``.

    Keys the method provides come from ``expand``; the keys it leaves out come from the ``top_up``
    method when one is named (e.g. ``"mimetic"`` for the attention weights), all others keep timm's
    default initialization. ``seed`` draws everything random: timm's initialization and the draws of a
    method (or top-up) that draws at expansion, such as mimetic. Every provided key must exist in the
    model with the same shape. Two changes for ablations: ``pos_embed="sincos"`` replaces the position
    embedding with the 2-D sin-cos one, ``"learned"`` leaves it to timm (trained either way);
    ``blend_mimetic=α`` makes every head's ``W_q W_kᵀ`` ``α·gene + (1−α)·mimetic`` where the gene gives
    the attention weights.
    """
    if pos_embed not in (None, "learned", "sincos"):
        raise LearngeneError(f"pos_embed must be learned or sincos, not {pos_embed!r}")
    cls = get_method(gene.method)
    seed_option = getattr(cls, "seed_option", None)
    if seed_option:  # a method that draws at expansion (mimetic) draws with the descendant's seed
        options = {seed_option: seed, **options}
    method = cls.from_gene(gene, **options)
    spec.require_memory()
    check_state_shapes(expand_on_meta(method, gene, spec), spec, f"the {gene.method} gene")  # before allocating
    torch.manual_seed(seed)
    model = spec.create_model()
    with torch.no_grad():
        state = method.expand(gene, spec)
        if blend_mimetic is not None:
            state = get_method("mimetic").blend_query_key(state, spec, blend_mimetic, seed)
        if top_up:
            state = {**top_up_state(top_up, spec, seed), **state}
        if pos_embed == "sincos":
            state["pos_embed"] = get_method("mimetic").sincos_pos_embed(spec)
        elif pos_embed == "learned":  # timm's own initialization, whatever the method gives
            state.pop("pos_embed", None)
    check_state_shapes(state, spec, f"the {gene.method} gene")
    result = model.load_state_dict(state, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    return model


def top_up_state(name: str, spec: ViTSpec, seed: int = 0) -> StateDict:
    """Everything the empty-gene method ``name`` (e.g. mimetic) gives a model of ``spec``; a method that
    draws random numbers at expansion draws them with ``seed``."""
    cls = get_method(name)
    if cls.needs_data or cls.needs_vit_ancestry:
        raise LearngeneError(f"a top-up must be a method without a learngene (e.g. mimetic), not {name}")
    seed_option = getattr(cls, "seed_option", None)
    filler = cls(**({seed_option: seed} if seed_option else {}))
    return filler.expand(filler.condense(None), spec)


def fit_gene_to_budget(gene: Learngene, base: ViTSpec, max_params: int | None = None, max_flops: int | None = None,
                       depth: int | None = None, num_heads: int | None = None,
                       refused: list[tuple[ViTSpec, str]] | None = None, **options: Any) -> ViTSpec:
    """The deepest, then widest, size near ``base`` under the budget that the gene's method can expand.

    Depth and head count range up to the ancestry's (when the gene records one); ``depth`` or
    ``num_heads`` pin that axis; ``options`` are the method's expand-time options. A size counts as
    supported when the method's ``expand`` gives it the timm shapes of that size, tried on the ``meta``
    device (:func:`~learngene.gene.expand_on_meta`), so no candidate allocates its weights. ``refused``,
    when given, receives each size within the budget that the method refused (deepest first) and why.
    See :func:`~learngene.spec.fit_to_budget`.
    """
    method = get_method(gene.method).from_gene(gene, **options)

    def supports(spec: ViTSpec) -> bool:
        try:
            check_state_shapes(expand_on_meta(method, gene, spec), spec, f"the {gene.method} gene")
        except LearngeneError as exc:
            if refused is not None:
                refused.append((spec, " ".join(str(exc).split())))
            return False
        return True

    return fit_to_budget(base, max_params, max_flops, supports, depth=depth, num_heads=num_heads,
                         max_depth=gene.ancestry.depth if gene.ancestry else None,
                         max_heads=gene.ancestry.num_heads if gene.ancestry else None)


class GeneNet(nn.Module):
    """A timm ViT of ``spec`` whose provided parameters are ``method.expand(gene, spec)`` on every forward.

    Gradients flow into the gene's tensors (those selected by ``trainable``); keys the method does not
    provide are the skeleton's own ordinary parameters (trained too, e.g. a new classifier head).
    Every weight is materialized once per forward, then the stock timm forward runs on it. The
    training loop checks data against ``skeleton`` (see :func:`learngene.train.check_data_fits`).
    """

    def __init__(self, method: Method, gene: Learngene, spec: ViTSpec, trainable: Callable[[str], bool] | None = None):
        super().__init__()
        self.method, self.spec = method, spec
        self._meta = dataclasses.replace(gene, tensors={})
        self.gene_tensors = nn.ParameterDict({
            _param_name(k): nn.Parameter(v.detach().clone(), requires_grad=trainable(k) if trainable else True)
            for k, v in gene.tensors.items()
        })
        self.skeleton = spec.create_model()
        provided = set(method.provided_keys(gene, spec))
        for name, p in self.skeleton.named_parameters():
            if name in provided:
                p.requires_grad_(False)

    def gene(self) -> Learngene:
        """The current gene (tensors detached)."""
        return dataclasses.replace(self._meta, tensors={k: p.detach().cpu().clone() for k, p in self._tensors().items()})

    def _tensors(self) -> StateDict:
        return {_key_name(k): p for k, p in self.gene_tensors.items()}

    def expanded(self) -> StateDict:
        return self.method.expand(dataclasses.replace(self._meta, tensors=self._tensors()), self.spec)

    def forward(self, x: Tensor) -> Tensor:
        return functional_call(self.skeleton, self.expanded(), (x,), strict=False)

    def no_weight_decay(self) -> set[str]:
        return {f"skeleton.{k}" for k in getattr(self.skeleton, "no_weight_decay", lambda: set())()}


def _param_name(key: str) -> str:
    return key.replace(".", "::")  # nn.ParameterDict keys may not contain dots


def _key_name(param: str) -> str:
    return param.replace("::", ".")
