"""What a hub folder's model card says of a model, read from what its model file records (its ``origin``).

Every model learngene writes records where it comes from: an ancestry (``learngene ancestry``) the data it was trained
on, for how long and its accuracy; a descendant (``learngene expand``) its gene's method and file; an adapted
descendant (``learngene adapt``) that and the adaptation's data and steps; a fine-tuned model (``learngene train``)
all of its base's and the fine-tuning's data, length and accuracy. :func:`card_from_origin` turns that record into
the entries of :func:`learngene.formats.export.model_card`, so that a card tells what the model is, kind first
(:func:`model_kind`), and says nothing its file does not record: a model never trained says so, a fine-tuned one
says what it was fine-tuned on, and a fact not recorded reads "not recorded".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import LearngeneError
from ..vit.spec import ViTSpec
from .hub import describe_source
from .labels import describe as describe_labels

ANCESTRY, DESCENDANT, ADAPTED, FINE_TUNED = "ancestry", "descendant", "adapted descendant", "fine-tuned"
NOT_RECORDED = "not recorded"


def model_kind(origin: Mapping[str, Any]) -> str:
    """What the model is, by its origin: ``ancestry``, ``descendant`` or ``adapted descendant``, prefixed by
    ``fine-tuned`` once ``learngene train`` trained it (``finetuned_on``)."""
    base = str(origin.get("kind") or "model").removeprefix(f"{FINE_TUNED} ")
    if origin.get("adapted_on") is not None and base == DESCENDANT:
        base = ADAPTED
    return f"{FINE_TUNED} {base}" if origin.get("finetuned_on") is not None else base


def card_from_origin(origin: Mapping[str, Any], spec: ViTSpec) -> dict[str, Any]:
    """The model card's entries (:func:`learngene.formats.export.export_hub_folder`'s ``card``) of a model whose file
    records ``origin`` and whose size is ``spec``."""
    kind = model_kind(origin)
    card: dict[str, Any] = {"kind": kind}
    if kind.endswith(ANCESTRY):
        card |= _ancestry_facts(origin, tuned=kind != ANCESTRY)
        if spec.num_classes and kind == ANCESTRY:
            card["head"] = f"trained with the rest, on {_data(origin, 'data')}"
    elif kind.removeprefix(f"{FINE_TUNED} ") in (DESCENDANT, ADAPTED):
        card |= _descendant_facts(origin, spec)
    else:  # a kind learngene does not make (a file saved by hand): nothing is known of where it comes from
        card |= {"method": NOT_RECORDED, "gene": NOT_RECORDED, "ancestry": NOT_RECORDED}
    if kind.startswith(FINE_TUNED):
        card["fine-tuned"] = _run(origin.get("finetuned_on"), origin, "epochs", "steps", "seconds", "eval_acc")
        card["head"] = _tuned_head(origin, spec)
    elif kind == ADAPTED:
        card["head"] = _gene_head(origin, spec, "trained for this size during the adaptation")
    elif kind == DESCENDANT:
        card["head"] = _gene_head(
            origin,
            spec,
            f"fresh: timm's initialization of a {spec.num_classes}-way head, untrained (fine-tune before use)",
        )
    if origin.get("license"):
        card["licence"] = f"{origin['license']} (recorded in the model file)"
        card["license_id"] = origin["license"]
    return card


def _ancestry_facts(origin: Mapping[str, Any], tuned: bool) -> dict[str, Any]:
    """An ancestry's: no method nor gene (it was trained from scratch), the data, and, unless a fine-tuning replaced
    them in its file, its training's length and accuracy."""
    facts: dict[str, Any] = {
        "method": "none: trained from scratch (`learngene ancestry`), not expanded from a learngene",
        "gene": "none",
        "ancestry": "itself"
        if not tuned
        else f"a ViT trained from scratch by learngene on {_data(origin, 'data', classes=False)}",
    }
    if not tuned:
        facts["trained on"] = _data(origin, "data")
        facts["training"] = _length(origin, "epochs", "steps", "seconds")
        facts["test accuracy"] = _accuracy(origin.get("eval_acc"))
    return facts


def _descendant_facts(origin: Mapping[str, Any], spec: ViTSpec) -> dict[str, Any]:
    """A descendant's: its gene's method, file and options, the tensors the gene gave, where its ancestry came from,
    and an adaptation's data, length and accuracy."""
    gene = origin.get("gene")
    facts: dict[str, Any] = {
        "method": origin.get("method") or NOT_RECORDED,
        "citation": _citation(origin.get("method")),
        "ancestry": f"from the {describe_source(origin['ancestry_source'])}"
        if isinstance(origin.get("ancestry_source"), dict)
        else "not recorded in the model file (the learngene's header names it)",
        "gene": f"`{Path(str(gene)).name}`" if gene else "made in Python (no file)",
    }
    if origin.get("provided_keys") is not None:
        top_up = origin.get("top_up")
        facts["tensors from the gene"] = f"{origin['provided_keys']} of {len(spec.state_shapes())}" + (
            f", the rest topped up by {top_up}" if top_up else ", the rest timm's init"
        )
    if origin.get("options"):
        facts["options"] = ", ".join(f"{k}={v!r}" for k, v in dict(origin["options"]).items())
    if origin.get("adapted_on") is not None:
        facts["adapted"] = _run(origin["adapted_on"], origin, None, "adapt_steps", "adapt_seconds", "adapt_acc")
    return facts


def _run(data: Any, origin: Mapping[str, Any], epochs: str | None, steps: str, seconds: str, acc: str) -> str:
    """One training run: its data, length and accuracy, as the card's sentence and facts name it."""
    return f"on {data}: {_length(origin, epochs, steps, seconds)}; test accuracy {_accuracy(origin.get(acc))}"


def _data(origin: Mapping[str, Any], key: str, classes: bool = True) -> str:
    """The data a model was trained on, and its classes where the file records them (``classes``: the label space
    recorded is that data's, the last the model was trained on)."""
    name = origin.get(key)
    if name is None:
        return NOT_RECORDED
    space = origin.get("label_space") if classes else None
    names = space.get("classes") if isinstance(space, dict) else None
    return f"{name} ({describe_labels(space, len(names))})" if names else str(name)


def _length(origin: Mapping[str, Any], epochs: str | None, steps: str, seconds: str) -> str:
    """How long a run trained: its epochs, optimizer steps and seconds, those its file records."""
    parts = []
    if epochs is not None and origin.get(epochs) is not None:
        parts.append(f"{origin[epochs]} epoch{'s' if origin[epochs] != 1 else ''}")
    if origin.get(steps) is not None:
        parts.append(f"{origin[steps]:,} optimizer step{'s' if origin[steps] != 1 else ''}")
    if origin.get(seconds) is not None:
        parts.append(f"{origin[seconds]:g} s")
    return ", ".join(parts) or f"length {NOT_RECORDED}"


def _accuracy(acc: Any) -> str:
    """Top-1 accuracy on the data's test split at the end of the run, or why there is none."""
    return f"{acc:.4f} (top-1 on the data's test split, at the end of the run)" if acc is not None else NOT_RECORDED


def _citation(method: Any) -> str | None:
    """The papers of ``method``, where this version knows it."""
    from ..method import citations
    from ..registry import get_method

    try:
        return "; ".join(map(str, citations(get_method(str(method))))) if method else None
    except LearngeneError:  # a method of a plugin not installed here
        return None


def _gene_head(origin: Mapping[str, Any], spec: ViTSpec, otherwise: str) -> str | None:
    """A descendant's classifier: the ancestry's where the gene gave it (it records the head's label space), else
    ``otherwise`` (or a top-up's)."""
    if not spec.num_classes:
        return None
    space = origin.get("label_space")
    if space:
        return f"the ancestry's, carried by the gene ({describe_labels(space, spec.num_classes)})"
    if origin.get("top_up"):
        return f"topped up by {origin['top_up']} where it has one of this shape, else {otherwise}"
    return f"not the gene's: {otherwise}"


def _tuned_head(origin: Mapping[str, Any], spec: ViTSpec) -> str | None:
    """A fine-tuned model's classifier: fresh for the data's classes, or the one it had (``learngene train`` keeps it
    for the same classes, and for a model that records none: the file does not say which)."""
    if not spec.num_classes:
        return None
    data = _data(origin, "finetuned_on")
    if origin.get("new_head"):
        return f"fresh for {data}, trained in the fine-tuning"
    return f"the model's own, kept and fine-tuned on {data} with the rest"
