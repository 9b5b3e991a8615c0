"""``adapt``: a learngene specialized to one size on a little data (WAVE's scalers, PEG's φ), and its descendant."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..binding import BoundMethod, bind_gene
from ..data import preprocessing_cfg
from ..descendant import build_descendant
from ..formats.weights import digest
from ..gene import Learngene
from ..host.rng import seeded_draws
from ..method import AdaptInputs
from ..registry import get_method
from ..training.loop import TrainResult
from ..validate import ADAPT, EXPAND
from ..vit.spec import ViTSpec
from .expanding import gene_argument
from .inputs import (
    DataArg,
    Say,
    SizeArg,
    TrainArg,
    data_argument,
    input_paths,
    load_data,
    method_options,
    mixup_of,
    open_run_dir,
    quiet,
    resolve_spec,
    size_argument,
    size_input,
    speaker,
    train_config,
)
from .requests import AdaptChoices
from .results import Adapted, ModelOutput, descendant_origin, head_label_space


def adapt(
    gene: Learngene | str | os.PathLike,
    data: DataArg,
    size: SizeArg | None = None,
    *,
    options: Mapping[str, Any] | Sequence[str] | None = None,
    train_cfg: TrainArg | None = None,
    say: Say = quiet,
    **choices: Any,
) -> Adapted:
    """``gene`` (a gene, or its file) adapted to ``size`` on ``data``, and its descendant, as ``learngene adapt``
    makes them.

    Args:
        data: the downstream data (:data:`~learngene.pipeline.inputs.DataArg`), loaded at the ancestry's input size.
        size: the descendant's size (:func:`~learngene.pipeline.inputs.resolve_spec`): over the ancestry's, with the
            data's image size, channels and classes.
        options: the method's options for this step (``--opt``); an option adapting does not read is refused.
        train_cfg: the run's settings, a TrainConfig or a dict of them by name; a setting not given takes adapt's
            default (1 epoch, 2,000 test images: ``learngene adapt``'s); its ``seed`` also draws the descendant's
            initialization.
        say: called with a line about what is about to run, e.g. ``print``.
        **choices: the fields of :class:`~learngene.pipeline.requests.AdaptChoices`, by name: ``run_dir`` (where the
            run checkpoints), ``resume`` (continue from its checkpoint) and ``license`` (the adapted gene's and
            descendant's licence; default: the gene's).
    """
    chosen = AdaptChoices.of(choices)
    run_dir, resume = chosen.run_dir, chosen.resume
    loaded, source = gene_argument(gene)
    data = data_argument(data)
    size = size_argument(size)
    say = speaker(say)
    cfg = train_config(train_cfg, "adapt", f"adapt {loaded.method}", mixup=mixup_of(data))
    open_run_dir(chosen, cfg)
    cls = get_method(loaded.method)
    opts = method_options(cls.Config, options)
    bound = bind_gene(loaded, ADAPT, source=source, method=cls, options=opts)
    base = loaded.ancestry or loaded.layout  # a gene from a teacher no spec describes: its aux net's size
    model_in = size_input(size, base.img_size if base else None, base.in_chans if base else None)
    train, test = load_data(data, *model_in, loaded.preprocessing, cfg.seed)
    spec = resolve_spec(size, base, train)
    say(f"adapt {loaded.method} to {spec.short()} on {train.name}: {len(train)} images", banner=True)
    identity = _run_identity(bound, spec, digest(loaded.tensors) if run_dir else None)
    inputs = AdaptInputs(train, cfg.replace(identity=identity), eval=test, run_dir=run_dir, resume=resume)
    with seeded_draws(None):  # a method's adapt seeds and draws the global generators (PEG's new classifier)
        adapted, result = bound.method.adapt(loaded, spec, inputs)
    adapted.license = chosen.license or loaded.license
    return _adapted(Adaptation(bound, spec, inputs, data), adapted, result)


@dataclasses.dataclass(frozen=True)
class Adaptation:
    """One adaptation as :func:`adapt` runs it: the gene ``bound`` for it, the size it adapts to, what the method
    trains on (``inputs``: the data loaded and the run's settings, whose seed also draws the descendant) and the data
    argument given (``data``: its path is one the descendant must not be saved over)."""

    bound: BoundMethod
    spec: ViTSpec
    inputs: AdaptInputs
    data: DataArg


def _adapted(run: Adaptation, adapted: Learngene, result: TrainResult) -> Adapted:
    """The adapted gene and its descendant at the run's size, drawn with its seed, recording how it was adapted."""
    bound, spec, train, seed = run.bound, run.spec, run.inputs.train, run.inputs.train_cfg.seed
    loaded, source = bound.gene, bound.source
    expanding = bind_gene(adapted, EXPAND, method=type(bound.method), seed=seed, check=False)
    model, provided = build_descendant(expanding, spec, seed)
    facts = {
        "adapted_on": train.name,
        "adapt_steps": result.steps,
        "adapt_seconds": round(result.seconds, 2),
        "adapt_acc": result.final_acc,
        "options": bound.options,  # the caller's, as bound
        "label_space": head_label_space(loaded, provided),
    }
    origin = descendant_origin(loaded, source, adapted.license, facts)
    summary = f"{spec.short()} timm ViT adapted for {result.steps} steps" + (
        f", accuracy {result.final_acc:.4f}" if result.final_acc is not None else ""
    )
    descendant = ModelOutput(
        model, spec, origin, preprocessing_cfg(train), summary, inputs=input_paths(source, run.data)
    )
    return Adapted(adapted, descendant, result, expanding.method)


def _run_identity(bound: BoundMethod, spec: ViTSpec, gene_digest: str | None) -> dict[str, Any]:
    """What a resumed adaptation must agree on: the method and all its options, the size and (in a run directory)
    the gene's tensors."""
    return {
        "command": "adapt",
        "method": bound.gene.method,
        "options": dataclasses.asdict(bound.method.config),
        "spec": spec.to_dict(),
        "gene": gene_digest,
    }
