"""Descendants: the models a learngene becomes, and the check that a gene fits its method.

:func:`load_gene` reads a gene file and checks it against its method (:func:`check_gene_fits_method`:
the method reads the stored options and expands the tensors into their own layout on ``meta``).
:func:`make_descendant` builds the final plain timm ViT of a spec from a gene (with an optional
top-up from a method without a learngene). :func:`fit_gene_to_budget` picks the size a gene should expand to under a parameter/FLOP budget.
Each finds the gene's method through the registry; the methods themselves import
:class:`~learngene.training.genenet.GeneNet` (re-exported here) and never this module, so no import circle
runs through the registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .binding import BoundMethod, bind_gene
from .errors import LearngeneError, require_argument
from .gene import Learngene
from .host.rng import seeded_draws
from .host.threads import one_thread
from .registry import get_method
from .training.genenet import GeneNet  # noqa: F401  (re-exported: learngene.descendant.GeneNet)
from .validate import EXPAND
from .vit.spec import ViTSpec, check_state_shapes, fit_to_budget
from .vit.transfer import StateDict


def load_gene(path: str | os.PathLike) -> Learngene:
    """The gene in file ``path``, checked against its method (:func:`~learngene.binding.bind_gene`)."""
    return bind_gene(Learngene.load(path), source=path).gene


def make_descendant(
    gene: Learngene | BoundMethod,
    spec: ViTSpec,
    seed: int = 0,
    top_up: str | None = None,
    *,
    source: str | os.PathLike | None = None,
    options: Mapping[str, Any] | None = None,
    **more_options: Any,
) -> nn.Module:
    """The plain timm ViT of ``spec`` initialized from ``gene``.

    Keys the method provides come from ``expand``; the keys it leaves out come from the ``top_up``
    method when one is named (e.g. ``"mimetic"`` for the attention weights), all others keep timm's
    default initialization. ``seed`` draws everything random: timm's initialization and the draws of a
    method (or top-up) that draws at expansion, such as mimetic. Every provided key must exist in the
    model with the same shape: the gene is expanded once on ``meta`` to check that before anything is
    allocated (a gene its method cannot read is refused in one line naming ``source``, its file), then
    once for real (:func:`build_descendant`, which also returns the keys the gene's method filled).

    ``options`` (and keyword arguments ``more_options``) are the method's expand-time options (``--opt``); one
    named as a parameter here, such as tal's or front's ``seed``, can be given in ``options`` alone. A method that
    draws at expansion draws with ``seed`` unless its seed option is given: ``seed`` then seeds timm's
    initialization of the keys the gene leaves out, the option the method's draws.
    """
    require_argument(gene, (Learngene, BoundMethod), "gene", "a Learngene (learngene.Learngene.load(PATH))")
    require_argument(spec, ViTSpec, "spec", "a ViTSpec (e.g. gene.ancestry.replace(depth=6))")
    require_argument(seed, int, "seed", "an integer")
    require_argument(options, (dict, Mapping, type(None)), "options", "a dict of the method's options or None")
    options = {**(options or {}), **more_options}
    if isinstance(gene, Learngene):  # seeded by the descendant's seed where the method draws at expansion (mimetic)
        bound = bind_gene(gene, EXPAND, source=source, seed=seed, at=spec, options=options)
    elif options:
        raise LearngeneError("a bound gene carries its options; bind them with it (bind_gene(gene, options={...}))")
    else:
        bound = gene
    return build_descendant(bound, spec, seed, top_up)[0]


def build_descendant(
    bound: BoundMethod, spec: ViTSpec, seed: int = 0, top_up: str | None = None
) -> tuple[nn.Module, list[str]]:
    """:func:`make_descendant` of a gene bound to its method (its draws seeded by ``seed``), and the keys the method
    filled (before any top-up; the benchmark's ablations change them after: :func:`learngene.bench.cells.ablate`)."""
    bound = bound.seeded(seed)
    spec.require_memory()
    provided = bound.check(spec)  # on meta, once per size
    with seeded_draws(seed):  # timm draws its initialization from the global generator (learngene.host.rng)
        # timm's initialization of every tensor (with the method's flags): the keys the gene leaves out keep it
        model = spec.create_model(**bound.method.timm_init(spec))
    # a tensor timm stacks across layers (mixed RoPE's) keeps timm's values for the layers the gene leaves out
    own = {k: v.detach().clone() for k, v in model.state_dict().items() if k in spec.stacked_keys}
    release_storage(model, provided)  # what the gene gives is overwritten: give its memory back before expanding
    # on one thread: the same bytes at any --threads (a hypernetwork's matmuls, an SVD split their sums by the count)
    with torch.no_grad(), one_thread():
        state = bound.expand(spec, own)
        provided = list(state)
        if top_up:  # the gene's tensors win
            state = {**spec.join_layers(top_up_state(top_up, spec, seed)), **state}
    check_state_shapes(state, spec, f"the {bound.gene.method} gene")
    fill_released(model, state)
    result = model.load_state_dict(state, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    return model, provided


def release_storage(model: nn.Module, keys: list[str]) -> None:
    """Give back the memory of ``model``'s tensors ``keys`` (left empty until :func:`fill_released`): a large
    descendant is then never held twice, once as timm initialized it and once as expanded."""
    tensors = dict(model.state_dict(keep_vars=True))
    for key in keys:
        tensors[key].data = torch.empty(0, dtype=tensors[key].dtype)


def fill_released(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Copy ``state``'s tensors into those :func:`release_storage` emptied, one at a time, each popped from
    ``state`` once copied, so the expanded copy is freed as the model's grows; the rest stays in ``state``."""
    for key, tensor in model.state_dict(keep_vars=True).items():
        if tensor.numel() == 0 and key in state and state[key].numel() > 0:
            tensor.data = torch.empty(state[key].shape, dtype=tensor.dtype).copy_(state.pop(key))


def top_up_state(name: str, spec: ViTSpec, seed: int = 0) -> StateDict:
    """Everything the empty-gene method ``name`` (e.g. mimetic) gives a model of ``spec``; a method that
    draws random numbers at expansion draws them with ``seed``."""
    cls = get_method(name)
    if cls.needs_data or cls.needs_vit_ancestry:
        raise LearngeneError(f"a top-up must be a method without a learngene (e.g. mimetic), not {name}")
    filler = cls(**({cls.seed_option: seed} if cls.seed_option else {}))
    return filler.expand(filler.condense(None), spec)


def fit_gene_to_budget(
    gene: Learngene | BoundMethod,
    base: ViTSpec,
    max_params: int | None = None,
    max_flops: int | None = None,
    depth: int | None = None,
    num_heads: int | None = None,
    refused: list[tuple[ViTSpec, str]] | None = None,
    **options: Any,
) -> ViTSpec:
    """The deepest, then widest, size near ``base`` under the budget that the gene's method can expand.

    Depth and head count range up to the ancestry's (when the gene records one); ``depth`` or
    ``num_heads`` pin that axis; ``options`` are the method's expand-time options (bound with ``gene`` when it is a
    :class:`~learngene.binding.BoundMethod`). A size counts as supported when the method's ``expand`` gives it the
    timm shapes of that size, tried on the ``meta`` device (:meth:`~learngene.binding.BoundMethod.expand_on_meta`),
    so no candidate allocates its weights. ``refused``,
    when given, receives each size within the budget that the method refused (deepest first) and why.
    See :func:`~learngene.vit.spec.fit_to_budget`.
    """
    require_argument(gene, (Learngene, BoundMethod), "gene", "a Learngene (learngene.Learngene.load(PATH))")
    require_argument(base, ViTSpec, "base", "a ViTSpec (e.g. gene.ancestry)")
    for name, value in dict(max_params=max_params, max_flops=max_flops, depth=depth, num_heads=num_heads).items():
        require_argument(value, (int, type(None)), name, "an integer or None (e.g. 5_000_000)")
    bound = gene if isinstance(gene, BoundMethod) else bind_gene(gene, EXPAND, options=options)
    ancestry = bound.gene.ancestry
    return fit_to_budget(
        base,
        max_params,
        max_flops,
        _expands_to(bound, refused),
        depth=depth,
        num_heads=num_heads,
        max_depth=ancestry.depth if ancestry else None,
        max_heads=ancestry.num_heads if ancestry else None,
    )


def _expands_to(bound: BoundMethod, refused: list[tuple[ViTSpec, str]] | None) -> Callable[[ViTSpec], bool]:
    """Whether ``bound``'s method expands its gene to a size's timm shapes, tried on ``meta``; ``refused`` receives
    each size it refuses and why."""

    def supports(spec: ViTSpec) -> bool:
        try:
            check_state_shapes(bound.expand_on_meta(spec), spec, f"the {bound.gene.method} gene")
        except LearngeneError as exc:
            if refused is not None:
                refused.append((spec, " ".join(str(exc).split())))
            return False
        return True

    return supports
