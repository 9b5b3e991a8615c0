"""Descendants: the models a learngene becomes, and the check that a gene fits its method.

:func:`load_gene` reads a gene file and checks it against its method (:func:`check_gene_fits_method`:
the method reads the stored options and expands the tensors into their own layout on ``meta``).
:func:`make_descendant` builds the final plain timm ViT of a spec from a gene (with an optional
top-up from a method without a learngene). :func:`fit_gene_to_budget` picks the size a gene should expand to under a parameter/FLOP budget.
Each finds the gene's method through the registry; the methods themselves import
:class:`~learngene.genenet.GeneNet` (re-exported here) and never this module, so no import circle
runs through the registry.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Literal, overload

import torch
from torch import Tensor, nn

from .errors import GeneFormatError, LearngeneError, require_argument
from .formats.model_file import check_state_shapes
from .gene import SAVE_CHECKS, Learngene, invalid_gene
from .genenet import GeneNet  # noqa: F401  (re-exported: learngene.descendant.GeneNet)
from .method import Method, refuse_unread
from .registry import get_method
from .validate import EXPAND
from .vit.attention_init import blend_query_key, sincos_pos_embed
from .vit.spec import ViTSpec, fit_to_budget
from .vit.transfer import StateDict


def load_gene(path: str | os.PathLike) -> Learngene:
    """The gene in file ``path``, checked against its method (:func:`check_gene_fits_method`)."""
    gene = Learngene.load(path)
    check_gene_fits_method(gene, path)
    return gene


def gene_method(gene: Learngene, source: str | os.PathLike | None = None, **options: Any) -> Method:
    """``gene``'s method with the options stored in the gene, then ``options`` (the caller's, e.g. ``--opt``).

    A stored option the method refuses refuses the gene (one line naming ``source``, the gene's file);
    a method this version does not know is refused by :func:`~learngene.registry.get_method`; an option
    expansion does not read (e.g. one only ``condense`` reads) is refused, naming the step that reads it.
    """
    cls = get_method(gene.method)
    refuse_unread(cls, options, EXPAND)
    try:
        method = cls.from_gene(gene)
    except LearngeneError as exc:
        raise invalid_gene(gene, source, exc) from None
    return cls(method.config, **options) if options else method


def check_gene_fits_method(gene: Learngene, source: str | os.PathLike | None = None) -> Method:
    """Refuse a gene whose stored options or tensors its method cannot read, before anything is built from it.

    The method must take the stored options and expand the tensors into their own layout with that
    size's shapes. The expansion runs on the ``meta`` device (:func:`expand_on_meta`), so it allocates
    nothing; any failure is one line. Returns the method with the gene's options.
    """
    method = gene_method(gene, source)
    if gene.layout is not None:
        try:
            check_expansion(method, gene, gene.layout, source)
        except GeneFormatError:
            raise
        except LearngeneError:
            # the method refuses this size in its own words (e.g. a PEG gene whose φ was adapted to another size
            # than its layout): expanding to the size asked for says so in one line
            pass
    return method


_SAVE_PROBE = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=2)


def check_gene_before_saving(gene: Learngene) -> None:
    """A gene is saved only if its method can read it: a registered method whose options it takes and, for
    a gene with a layout, whose expansion uses its tensors (:func:`check_gene_fits_method`); a gene without
    one must expand (on ``meta``) to a small size, which refuses e.g. a tleg gene of no tensors."""
    method = gene_method(gene, "the gene to save")
    if gene.layout is not None:
        check_gene_fits_method(gene, "the gene to save")
        return
    try:
        expand_on_meta(method, gene, _SAVE_PROBE)
    except GeneFormatError:
        raise
    except (LearngeneError, KeyError, IndexError) as exc:
        raise GeneFormatError(
            f"this {gene.method} gene cannot be expanded ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}); "
            f"make it with the method's condense (learngene condense)"
        ) from None


SAVE_CHECKS.append(check_gene_before_saving)


def check_expansion(
    method: Method, gene: Learngene, spec: ViTSpec, source: str | os.PathLike | None = None, judge_unused: bool = True
) -> list[str]:
    """Expand ``gene`` to ``spec`` on ``meta`` and return the keys it gives; the method's own refusal of the size
    passes through, tensors it cannot read or that come out in other shapes than ``spec``'s refuse the gene.

    Expanded into its own layout (``spec == gene.layout``, with the gene's stored options: ``judge_unused``),
    a gene must use every floating tensor it holds but its method's ``record_tensors``: one it never uses is
    e.g. another method's tensor under this method's name, which would be dropped without a word.
    """
    used: set[str] = set()
    try:
        state = expand_on_meta(method, gene, spec, used)
    except LearngeneError:
        raise
    except Exception as exc:  # noqa: BLE001  tensors the method's code cannot read: missing, misnamed, misshapen
        raise invalid_gene(gene, source, exc) from None
    try:
        check_state_shapes(state, spec, "its tensors")
    except LearngeneError as exc:
        raise invalid_gene(gene, source, exc) from None
    unused = sorted(
        k for k, t in gene.tensors.items() if t.is_floating_point() and k not in used and not method.kept_for_record(k)
    )
    if judge_unused and spec == gene.layout and unused:
        raise invalid_gene(
            gene,
            source,
            f"its expansion does not use {len(unused)} of its tensors, e.g. "
            f"{unused[0]!r}: the header's method does not match its tensors",
        )
    return list(state)


def expand_on_meta(method: Method, gene: Learngene, spec: ViTSpec, used: set[str] | None = None) -> dict[str, Tensor]:
    """``method.expand(gene, spec)`` on ``meta`` tensors: the shapes it gives, without allocating their memory.

    A method that must read the gene's values (e.g. Cluster-Learngene's centroids) is expanded for real.
    ``used``, when given, receives the names of the gene's tensors the output depends on: expansion is
    differentiable in them (:meth:`~learngene.method.Method.expand`), so on ``meta`` they are autograd leaves
    and the output's graph reaches exactly those (no memory either way); expanded for real, all are counted.
    """
    track = used is not None
    used = used if used is not None else set()
    leaves = {k: v.to("meta").requires_grad_(track and v.is_floating_point()) for k, v in gene.tensors.items()}
    try:
        with torch.set_grad_enabled(track):
            state = method.expand(dataclasses.replace(gene, tensors=leaves), spec)
    except (RuntimeError, NotImplementedError) as exc:
        if "meta" not in str(exc):
            raise
        spec.require_memory()
        with torch.no_grad():
            state = method.expand(gene, spec)
        if track:
            used.update(gene.tensors)
        return state
    if track:
        used.update(_graph_leaves(state, leaves))
        state = {k: v.detach() for k, v in state.items()}
    return state


def _graph_leaves(state: dict[str, Tensor], leaves: dict[str, Tensor]) -> set[str]:
    """Names of ``leaves`` that the tensors of ``state`` depend on (passed through, or through their graph)."""
    reached = {id(t) for t in state.values()}
    seen: set[int] = set()
    stack: list[Any] = [t.grad_fn for t in state.values() if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if hasattr(fn, "variable"):  # AccumulateGrad: a leaf
            reached.add(id(fn.variable))
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return {k for k, v in leaves.items() if id(v) in reached}


@overload
def make_descendant(
    gene: Learngene,
    spec: ViTSpec,
    seed: int = ...,
    top_up: str | None = ...,
    pos_embed: str | None = ...,
    blend_mimetic: float | None = ...,
    *,
    source: str | os.PathLike | None = ...,
    return_keys: Literal[False] = ...,
    options: Mapping[str, Any] | None = ...,
    **more_options: Any,
) -> nn.Module: ...


@overload
def make_descendant(
    gene: Learngene,
    spec: ViTSpec,
    seed: int = ...,
    top_up: str | None = ...,
    pos_embed: str | None = ...,
    blend_mimetic: float | None = ...,
    *,
    source: str | os.PathLike | None = ...,
    return_keys: Literal[True],
    options: Mapping[str, Any] | None = ...,
    **more_options: Any,
) -> tuple[nn.Module, list[str]]: ...


def make_descendant(
    gene: Learngene,
    spec: ViTSpec,
    seed: int = 0,
    top_up: str | None = None,
    pos_embed: str | None = None,
    blend_mimetic: float | None = None,
    *,
    source: str | os.PathLike | None = None,
    return_keys: bool = False,
    options: Mapping[str, Any] | None = None,
    **more_options: Any,
) -> nn.Module | tuple[nn.Module, list[str]]:
    """The plain timm ViT of ``spec`` initialized from ``gene``.

    Keys the method provides come from ``expand``; the keys it leaves out come from the ``top_up``
    method when one is named (e.g. ``"mimetic"`` for the attention weights), all others keep timm's
    default initialization. ``seed`` draws everything random: timm's initialization and the draws of a
    method (or top-up) that draws at expansion, such as mimetic. Every provided key must exist in the
    model with the same shape: the gene is expanded once on ``meta`` to check that before anything is
    allocated (a gene its method cannot read is refused in one line naming ``source``, its file), then
    once for real. Two changes for ablations: ``pos_embed="sincos"`` replaces the position
    embedding with the 2-D sin-cos one, ``"learned"`` leaves it to timm (trained either way);
    ``blend_mimetic=α`` makes every head's ``W_q W_kᵀ`` ``α·gene + (1−α)·mimetic`` where the gene gives
    the attention weights. ``return_keys=True`` returns ``(model, keys)``, the keys the gene's method
    filled (before any top-up or ablation).

    ``options`` (and keyword arguments ``more_options``) are the method's expand-time options (``--opt``); one
    named as a parameter here, such as tal's or front's ``seed``, can be given in ``options`` alone. A method that
    draws at expansion draws with ``seed`` unless its seed option is given: ``seed`` then seeds timm's
    initialization of the keys the gene leaves out, the option the method's draws.
    """
    require_argument(gene, Learngene, "gene", "a Learngene (learngene.Learngene.load(PATH))")
    require_argument(spec, ViTSpec, "spec", "a ViTSpec (e.g. gene.ancestry.replace(depth=6))")
    require_argument(seed, int, "seed", "an integer")
    if pos_embed not in (None, "learned", "sincos"):
        raise LearngeneError(f"pos_embed must be learned or sincos, not {pos_embed!r}")
    require_argument(options, (dict, Mapping, type(None)), "options", "a dict of the method's options or None")
    options = {**(options or {}), **more_options}
    seed_option = get_method(gene.method).seed_option
    if seed_option:  # a method that draws at expansion (mimetic) draws with the descendant's seed
        options = {seed_option: seed, **options}
    method = gene_method(gene, source, **options)
    spec.require_memory()
    provided = check_expansion(method, gene, spec, source, judge_unused=not set(options) - {seed_option})  # on meta
    torch.manual_seed(seed)
    model = spec.create_model()  # timm's initialization of every tensor: the keys the gene leaves out keep it
    # what the gene gives is overwritten: give its memory back before expanding (not a position table that
    # pos_embed="learned" leaves to timm)
    release_storage(model, [k for k in provided if not (pos_embed == "learned" and k == spec.key("pos_embed"))])
    with torch.no_grad():
        state = method.expand(gene, spec)
        provided = list(state)
        if blend_mimetic is not None:
            state = blend_query_key(state, spec, blend_mimetic, seed)
        if top_up:
            state = {**top_up_state(top_up, spec, seed), **state}
        if pos_embed == "sincos":
            state.update(spec.model_layout({"pos_embed": sincos_pos_embed(spec)}))
        elif pos_embed == "learned":  # timm's own initialization, whatever the method gives
            state.pop(spec.key("pos_embed"), None)
    check_state_shapes(state, spec, f"the {gene.method} gene")
    fill_released(model, state)
    result = model.load_state_dict(state, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    return (model, provided) if return_keys else model


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
    gene: Learngene,
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
    ``num_heads`` pin that axis; ``options`` are the method's expand-time options. A size counts as
    supported when the method's ``expand`` gives it the timm shapes of that size, tried on the ``meta``
    device (:func:`expand_on_meta`), so no candidate allocates its weights. ``refused``,
    when given, receives each size within the budget that the method refused (deepest first) and why.
    See :func:`~learngene.vit.spec.fit_to_budget`.
    """
    require_argument(gene, Learngene, "gene", "a Learngene (learngene.Learngene.load(PATH))")
    require_argument(base, ViTSpec, "base", "a ViTSpec (e.g. gene.ancestry)")
    for value, name in (
        (max_params, "max_params"),
        (max_flops, "max_flops"),
        (depth, "depth"),
        (num_heads, "num_heads"),
    ):
        if value is not None:
            require_argument(value, int, name, "an integer or None (e.g. 5_000_000)")
    method = gene_method(gene, **options)

    def supports(spec: ViTSpec) -> bool:
        try:
            check_state_shapes(expand_on_meta(method, gene, spec), spec, f"the {gene.method} gene")
        except LearngeneError as exc:
            if refused is not None:
                refused.append((spec, " ".join(str(exc).split())))
            return False
        return True

    return fit_to_budget(
        base,
        max_params,
        max_flops,
        supports,
        depth=depth,
        num_heads=num_heads,
        max_depth=gene.ancestry.depth if gene.ancestry else None,
        max_heads=gene.ancestry.num_heads if gene.ancestry else None,
    )
