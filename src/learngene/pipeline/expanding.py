"""``expand``: a learngene into a descendant, a timm ViT of any size or an output its method declares."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..binding import BoundMethod, bind_gene
from ..descendant import build_descendant, fit_gene_to_budget
from ..errors import LearngeneError, assigned, named
from ..formats.hub import describe_source, is_hub_name
from ..formats.labels import describe as describe_labels
from ..formats.model_file import header_tag
from ..formats.weights import is_regular_file
from ..gene import Learngene, check_values
from ..host.rng import seeded_draws
from ..method import Ancestry, ExpandOutput, Method, citations
from ..registry import get_method, list_methods
from ..validate import EXPAND
from ..vit.spec import ViTSpec
from ..vit.transfer import kept_layers
from .inputs import (
    Say,
    SizeArg,
    check_path,
    descendant_spec,
    input_paths,
    method_options,
    quiet,
    size_argument,
    size_fields,
    speaker,
)
from .requests import AncestryRequest, ExpandChoices
from .results import Descendant, descendant_origin, head_label_space


def expand(
    gene: Learngene | str | os.PathLike,
    size: SizeArg | None = None,
    *,
    options: Mapping[str, Any] | Sequence[str] | None = None,
    say: Say = quiet,
    **choices: Any,
) -> Descendant:
    """The descendant of ``gene`` (a gene, or its file) that ``learngene expand`` makes.

    Args:
        size: the descendant's size: a ViTSpec, a preset's name, or fields over the ancestry's size (``{"depth":
            6}``; ``"preset"`` among them starts from a preset); None: the ancestry's. A gene that records no
            ancestry size (one condensed from a teacher no spec describes) reads the fields over its own layout (an
            aux net's), or, holding none (scratch), over a ViTSpec's defaults once depth, embed_dim and num_heads
            are given.
        options: the method's options for this expansion, by name or as a list of ``KEY=VALUE`` texts (``--opt``); an
            option only condensing or adapting reads is refused.
        say: called with each line about what was decided (the size a budget picked), e.g. ``print``.
        **choices: the fields of :class:`~learngene.pipeline.requests.ExpandChoices`, by name: ``seed``, ``top_up``,
            the budgets ``max_params`` and ``max_flops`` (``say`` tells which size they picked and why),
            ``license``, ``layers`` (which ancestry layers a shallower descendant keeps: ``"spread"``, ``[0, 2, 5]``,
            recorded in its origin ``layers``), ``verify`` (the ancestry, run beside the descendant where the method
            promises its function: the largest output difference said and recorded in its origin ``verify``), and
            an output the gene's method declares instead of a timm ViT (pool's ``stitch="0:1-2:0"``), which refuses
            a size, options and the choices that do not apply to it.
    """
    chosen = ExpandChoices.of(choices)
    output = chosen.output()
    loaded, source = gene_argument(gene)
    cls = get_method(loaded.method)
    opts, say, size = method_options(cls.Config, options), speaker(say), size_argument(size)
    if output is not None:  # what the gene's method declares (its name and value), not a timm ViT
        refused = [*size_fields(size), *(["options"] if opts else []), *chosen.beside_output()]
        declared = _find_output(cls, output[0], loaded)
        if refused:
            raise LearngeneError(
                f"{named(refused[0], '--opt' if refused[0] == 'options' else None)} does not apply with "
                f"{named(output[0])}: {declared.what} has {declared.sizes}; leave it out"
            )
        bound = bind_gene(loaded, EXPAND, source=source, method=cls, check=False)
        return _declared_output(bound, declared, output[1], chosen)
    spec = descendant_spec(size, loaded.ancestry or loaded.layout, source)
    plan = plan_descendant(loaded, source, cls, (size, spec), opts, chosen, say)
    return _descendant(plan, chosen, say)


@dataclass(frozen=True)
class Plan:
    """What a descendant is made at and from, decided before it is built: ``spec`` (a budget's pick, where one is
    given), the ``bound`` gene, the ancestry layers ``kept`` (``layers``) and the gene reduced to them
    (``expanded``), and the ancestry loaded to ``verify`` against."""

    bound: BoundMethod
    spec: ViTSpec
    kept: list[int] | None
    expanded: BoundMethod
    ancestry: Ancestry | None


def plan_descendant(
    gene: Learngene,
    source: str | os.PathLike | None,
    cls: type[Method],
    sizes: tuple[SizeArg | None, ViTSpec],
    options: dict[str, Any],
    chosen: ExpandChoices,
    say: Say,
) -> Plan:
    """The size, the bound gene, the layers kept and the ancestry to verify against of ``gene``'s descendant, each
    refused in one line before anything is built: ``sizes`` (the size asked for and its spec,
    :func:`~learngene.pipeline.inputs.descendant_spec`) replaced by a budget's pick (said), then ``layers`` and
    ``verify``."""
    size, spec = sizes
    bound = bind_gene(gene, EXPAND, source=source, method=cls, seed=chosen.seed, check=False, options=options)
    if chosen.max_params is not None or chosen.max_flops is not None:
        spec, picked = _fit_to_budget(bound, spec, size, chosen)
        say(picked, banner=True)
    kept = _kept_layers(bound, spec, chosen) if chosen.layers is not None else None
    ancestry = _verify_ancestry(bound, spec, chosen) if chosen.verify is not None else None
    expanded = bound.keeping(kept) if kept is not None else bound  # the gene reduced to the layers kept
    return Plan(bound, spec, kept, expanded, ancestry)


def _descendant(plan: Plan, chosen: ExpandChoices, say: Say) -> Descendant:
    """The descendant ``plan`` makes, built (seeded and topped up by ``chosen``): its origin, summary and model card,
    with the layers kept and the verified difference (said) where they were asked for."""
    bound, spec, kept, loaded = plan.bound, plan.spec, plan.kept, plan.bound.gene
    model, provided = build_descendant(plan.expanded, spec, chosen.seed, chosen.top_up)
    origin = _origin(bound, provided, chosen)
    top_up = chosen.top_up
    summary = (
        f"{spec.short()} timm ViT ({spec.num_params:,} params), {len(provided)}/{len(spec.state_shapes())} tensors "
        f"from the {loaded.method} gene" + (f", the rest topped up by {top_up} where it has weights" if top_up else "")
    )
    card = _card(bound, spec, provided, chosen)
    if kept is not None:
        rule = chosen.layers if isinstance(chosen.layers, str) else "list"
        origin["layers"] = {"rule": rule, "kept": kept}
        card["ancestry layers kept"] = f"{', '.join(map(str, kept))} of 0..{loaded.require_layout().depth - 1} ({rule})"
        summary += f", ancestry layers {','.join(map(str, kept))}"
    if plan.ancestry is not None:
        origin["verify"], card["verified"] = _verified(plan.ancestry, model, spec, chosen)
        say(card["verified"])
    inputs = input_paths(bound.source)
    return Descendant(model, spec, origin, loaded.preprocessing, summary, provided, card, inputs=inputs)


def _kept_layers(bound: BoundMethod, spec: ViTSpec, chosen: ExpandChoices) -> list[int]:
    """The ancestry layers ``spec``'s descendant keeps by ``chosen.layers``
    (:func:`~learngene.vit.transfer.kept_layers`); one line for a method whose math fixes them, or whose own option
    that picks them (:attr:`~learngene.method.Method.layers_option`) names another rule."""
    cls, gene = type(bound.method), bound.gene
    if not cls.selects_layers:
        pickers = [m for m in list_methods() if get_method(m).selects_layers]
        raise LearngeneError(
            f"{named('layers')} picks which ancestry layers a descendant keeps, but a {gene.method} descendant's layers "
            f"are fixed by its method; leave layers out, or condense with a method that picks them: {', '.join(pickers)}"
        )
    option, rule = cls.layers_option, chosen.layers
    assert rule is not None  # asked for
    if option and option in bound.options and bound.options[option] != rule:
        shown = rule if isinstance(rule, str) else ",".join(map(str, rule))
        raise LearngeneError(
            f"{gene.method}'s {option}={bound.options[option]!r} (--opt {option}={bound.options[option]}) and "
            f"{assigned('layers', shown)} both pick the layers a descendant keeps, differently; give one of them"
        )
    return kept_layers(rule, gene.require_layout().depth, spec.depth)


# verify's probe batch: a few images of standard-normal pixels, always the same
PROBE_IMAGES, PROBE_SEED = 4, 0


def _verify_ancestry(bound: BoundMethod, spec: ViTSpec, chosen: ExpandChoices) -> Ancestry:
    """The ancestry ``chosen.verify`` names, loaded, where the gene's method promises the ancestry's function at
    ``spec`` (:meth:`~learngene.method.Method.preserves_function`); one line where it promises nothing, or for an
    ancestry of another size than the gene's."""
    method, gene = bound.method, bound.gene
    if not method.preserves_function(gene, spec):
        promise = type(method).preserves
        why = (
            f"{gene.method} promises the ancestry's function only {promise}, and {spec.short()} here is not that"
            if promise
            else f"{gene.method} promises no descendant the ancestry's function, so there is nothing to verify"
        )
        raise LearngeneError(f"{why}; leave {named('verify')} out")
    assert chosen.verify is not None  # asked for
    ancestry = _verify_request(chosen.verify, gene).load()
    want = gene.ancestry.to_dict() if gene.ancestry is not None else {}
    got = ancestry.spec.to_dict() if ancestry.spec is not None else {}
    differ = next((k for k in want if got.get(k) != want[k]), None)
    if differ is not None:
        raise LearngeneError(
            f"the ancestry given to {named('verify')} has {differ} {got.get(differ)!r}, the one the gene was condensed "
            f"from {want[differ]!r}: give that ancestry"
        )
    return ancestry


def _verify_request(given: str | os.PathLike | AncestryRequest, gene: Learngene) -> AncestryRequest:
    """How ``verify``'s ancestry is read: as given; a plain checkpoint (a ``.pth``, or safetensors without learngene's
    header) as timm's architecture with the sizes the gene records of its ancestry, which a checkpoint does not record
    and ``expand`` has no flags for (condense took them as timm_model and timm_kwargs)."""
    if isinstance(given, AncestryRequest):
        return given
    spec = gene.ancestry
    if spec is not None and not is_hub_name(given) and is_regular_file(given) and header_tag(given) is None:
        return AncestryRequest(given, timm_model=spec.arch, timm_kwargs=spec.timm_kwargs())
    return AncestryRequest(given)


def _verified(ancestry: Ancestry, model: nn.Module, spec: ViTSpec, chosen: ExpandChoices) -> tuple[dict[str, Any], str]:
    """What the descendant's file records of ``verify`` (the ancestry given, the probe, the largest absolute
    difference of the two models' outputs on it and the largest absolute output of the ancestry, their scale) and the
    line that says it."""
    generator = torch.Generator().manual_seed(PROBE_SEED)
    probe = torch.randn((PROBE_IMAGES, spec.in_chans, spec.img_size, spec.img_size), generator=generator)
    modes = ancestry.model.training, model.training
    try:
        with torch.no_grad():
            expected, got = ancestry.model.eval()(probe), model.eval()(probe)
    finally:
        ancestry.model.train(modes[0]), model.train(modes[1])
    if expected.shape != got.shape:  # the promise holds outputs of one shape (preserves_function)
        raise LearngeneError(f"verify compares outputs of one shape: {tuple(expected.shape)} and {tuple(got.shape)}")
    given = chosen.verify
    record = {
        "ancestry": str(given.path if isinstance(given, AncestryRequest) else given),
        "probe": f"{PROBE_IMAGES} images of standard-normal pixels, seed {PROBE_SEED}",
        "max_abs_diff": float((expected - got).abs().max()),
        "max_abs_output": float(expected.abs().max()),
    }
    line = (
        f"verified against {record['ancestry']}: on a probe batch of {PROBE_IMAGES} random images (seed {PROBE_SEED}) "
        f"the outputs differ by at most {record['max_abs_diff']:.3g} (largest absolute difference; the ancestry's "
        f"outputs reach {record['max_abs_output']:.3g})"
    )
    return record, line


def gene_argument(gene: Any) -> tuple[Learngene, str | os.PathLike | None]:
    """``gene`` and the file it was read from (None for a gene given loaded)."""
    if isinstance(gene, Learngene):
        check_values(gene, None)  # what Learngene.load checks of a file
        return gene, None
    return Learngene.load(check_path(gene, "gene", "a Learngene or a learngene file's path")), gene


def _origin(bound: BoundMethod, provided: list[str], chosen: ExpandChoices) -> dict[str, Any]:
    """What the descendant's file records of where it comes from: the gene, its method and the options it was bound
    with, the tensors it gave, the top-up, the head's label space and the licence (default: the gene's)."""
    gene = bound.gene
    facts = {
        "options": bound.options,
        "provided_keys": len(provided),
        "top_up": chosen.top_up,
        "label_space": head_label_space(gene, provided),
    }
    origin = descendant_origin(gene, bound.source, chosen.license or gene.license, facts)
    return {**origin, **({"ancestry_source": gene.ancestry_source} if gene.ancestry_source else {})}


def _declared_output(bound: BoundMethod, declared: ExpandOutput, value: Any, chosen: ExpandChoices) -> Descendant:
    """``declared``, an output of the bound gene's method (:attr:`~learngene.method.Method.expand_outputs`), made
    for ``value`` (a text is read by the output's parser)."""
    gene, source = bound.gene, bound.source
    value = declared.parse(value) if isinstance(value, str) else value
    with seeded_draws(chosen.seed):  # e.g. a headless ancestry's instances have no head: the descendant draws one
        made = declared.build(bound.method, gene, value)
    kind = made.origin.get("kind", declared.name)
    origin = descendant_origin(gene, source, chosen.license or gene.license, made.origin, kind)
    return Descendant(made.model, None, origin, gene.preprocessing, made.summary, inputs=input_paths(source))


def _find_output(cls: type[Method], name: str, gene: Learngene) -> ExpandOutput:
    """The output ``name`` that ``gene``'s method declares; one line naming the methods that do, for one that does
    not."""
    found = next((o for o in cls.expand_outputs if o.name == name), None)
    if found is None:
        makers = [m for m in list_methods() if any(o.name == name for o in get_method(m).expand_outputs)]
        raise LearngeneError(
            f"{named(name)} is an output of {' and '.join(makers) or 'no'} genes only; this gene is {gene.method}"
        )
    return found


def _fit_to_budget(
    bound: BoundMethod, base: ViTSpec, size: SizeArg | None, chosen: ExpandChoices
) -> tuple[ViTSpec, str]:
    """The deepest, then widest, size under the budget that the gene's method can expand (the ``depth`` and, with a
    width, the ``num_heads`` that ``size`` gives pinned), and the line that says which and why."""
    fields, method = size_fields(size), bound.gene.method
    max_params, max_flops = chosen.max_params, chosen.max_flops
    depth = fields.get("depth")
    heads = fields.get("num_heads") or (base.num_heads if fields.get("embed_dim") else None)
    refused: list = []
    spec = fit_gene_to_budget(bound, base, max_params, max_flops, depth=depth, num_heads=heads, refused=refused)
    budget = ", ".join(
        f"{name} {value:,}" for name, value in (("params", max_params), ("FLOPs", max_flops)) if value is not None
    )
    why = (
        f"{named('depth')} {depth} kept (it wins over the budget), the widest size within the budget at that depth "
        f"that the {method} gene expands to"
        if depth
        else f"the deepest, then widest size within the budget that the {method} gene expands to"
    )
    if refused:
        first, reason = refused[0]
        why += (
            f"; {len(refused)} deeper or wider size(s) within the budget it refuses, e.g. {first.short()}: "
            f"{reason.split('; ')[0]}"
        )  # the reason without the advice to pass other sizes
    picked = (
        f"picked {spec.short()}: {spec.num_params:,} params, {spec.flops / 1e6:,.1f} MFLOPs per image "
        f"(budget: {budget}; {why})"
    )
    return spec, picked


def _head_status(bound: BoundMethod, spec: ViTSpec, provided: list[str], top_up: str | None) -> str | None:
    """Whether a descendant's classifier is the ancestry's (carried by the gene) or fresh; None: it has none."""
    if not spec.num_classes:
        return None
    if "head.weight" in provided:
        return f"the ancestry's, carried by the gene ({describe_labels(bound.gene.label_space, spec.num_classes)})"
    if top_up:
        return f"topped up by {top_up} where it has one of this shape, else fresh (timm's initialization)"
    return f"fresh: timm's initialization of a {spec.num_classes}-way head, untrained (fine-tune before use)"


def _card(bound: BoundMethod, spec: ViTSpec, provided: list[str], chosen: ExpandChoices) -> dict[str, Any]:
    """The facts of the descendant's model card (:func:`learngene.formats.export.export_hub_folder`); the licence:
    the one the caller chose (else the gene's); the options: those the gene was bound with."""
    gene, ancestry = bound.gene, bound.gene.ancestry
    top_up, license = chosen.top_up, chosen.license
    name = Path(bound.source).name if bound.source is not None else "made in Python"
    card = {
        "method": gene.method,
        "citation": "; ".join(map(str, citations(type(bound.method)))),
        "ancestry": (
            f"timm `{getattr(ancestry, 'arch', None) or 'ViT'}` {ancestry.short()}, {ancestry.num_params:,} parameters"
            if ancestry
            else "none recorded (a non-ViT teacher, or no ancestry)"
        )
        + (f", from the {describe_source(gene.ancestry_source)}" if gene.ancestry_source else ""),
        "gene": f"`{name}`, {gene.num_stored_params:,} stored parameters, made by learngene "
        f"{gene.library_version} on {gene.created}",
        "tensors from the gene": f"{len(provided)} of {len(spec.state_shapes())}"
        + (f", the rest topped up by {top_up}" if top_up else ", the rest timm's init"),
        "head": _head_status(bound, spec, provided, top_up),
        "licence": (
            f"{license} (stated with {named('license')})"
            if license
            else f"{gene.license} (the ancestry's, recorded in the learngene)"
            if gene.license
            else None
        ),
        "license_id": license or gene.license,
    }
    if bound.options:
        card["options"] = ", ".join(f"{k}={v!r}" for k, v in bound.options.items())
    return card
