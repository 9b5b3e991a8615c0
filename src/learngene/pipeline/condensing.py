"""``condense``: an ancestry into a learngene by one method, with the provenance the gene records."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from ..ancestry import feed_size
from ..binding import check_before_saving
from ..data import Data, preprocessing_cfg
from ..errors import LearngeneError, assigned, named, require_argument
from ..formats.weights import digest
from ..host.rng import seeded_draws
from ..method import Ancestry, CondenseInputs, Method
from ..registry import get_method, list_methods
from ..training.config import TrainConfig
from ..vit.spec import ViTSpec
from .inputs import (
    DataArg,
    Say,
    TrainArg,
    ancestry_argument,
    data_argument,
    input_paths,
    load_data,
    method_options,
    mixup_of,
    open_run_dir,
    quiet,
    speaker,
    train_config,
)
from .requests import AncestryRequest, CondenseChoices
from .results import Condensed


def condense(
    method: str | Method,
    ancestry: Ancestry | AncestryRequest | str | os.PathLike,
    *,
    options: Mapping[str, Any] | Sequence[str] | None = None,
    data: DataArg | None = None,
    train_cfg: TrainArg | None = None,
    say: Say = quiet,
    **choices: Any,
) -> Condensed:
    """The learngene of ``ancestry`` by ``method``, as ``learngene condense`` makes it.

    The gene records the ancestry's label space and licence (``license`` replaces it) and the preprocessing its
    tensors expect: the data's, for a method that trains on data, else the ancestry's. It is checked against its
    method before it is returned, so that only genes the method can read are saved.

    Args:
        method: a registered method's name, or a method already made (``get_method(name)(**options)``).
        ancestry: a file, folder or Hub name (:func:`~learngene.ancestry.load_ancestry` reads it), an
            :class:`~learngene.pipeline.requests.AncestryRequest` (a checkpoint's ``timm_model``, ``drop_head``,
            ``timm_kwargs``), or an ancestry already loaded.
        options: the method's options by name, or a list of ``KEY=VALUE`` texts (``--opt``).
        data: what a method that trains or measures on data uses (:data:`~learngene.pipeline.inputs.DataArg`),
            loaded at the ancestry's input size.
        train_cfg: the run's settings, a TrainConfig or a dict of them by name; a setting not given takes condense's
            default (the method's distillation λ, 2,000 test images: ``learngene condense``'s); its ``seed`` seeds
            the condensation.
        say: called with a line about what is about to run (a method that trains on data), e.g. ``print``.
        **choices: the fields of :class:`~learngene.pipeline.requests.CondenseChoices`, by name: ``run_dir`` (where
            the run checkpoints), ``resume`` (continue from its checkpoint) and ``license`` (the gene's licence, an
            SPDX identifier; default: the ancestry's).
    """
    chosen = CondenseChoices.of(choices)
    say = speaker(say)
    made = _method(method, options)
    requested = ancestry_argument(ancestry)
    data = None if data is None else data_argument(data)
    cfg = train_config(train_cfg, "condense", f"condense {made.name}", **_phase_defaults(made, data))
    open_run_dir(chosen, cfg)
    source = requested.load() if isinstance(requested, AncestryRequest) else requested
    if source.spec is None and made.needs_vit_ancestry:
        raise LearngeneError(_not_a_vit(made, source))
    inputs, preprocessing = _condense_inputs(Condensation(made, source, data, cfg, chosen), say)
    with seeded_draws(cfg.seed):  # a condensation's initial tensors and training draw from the global generators
        gene = dataclasses.replace(made.condense(source, inputs), preprocessing=preprocessing)
    gene.label_space, gene.ancestry_source = source.label_space, source.source
    gene.license = chosen.license or source.license
    check_before_saving(gene, made)
    notes = [n for n in (made.condense_note(gene), _free_start_note(made, source)) if n]
    return Condensed(gene, "; ".join(notes) or None, inputs=input_paths(ancestry, data))


@dataclasses.dataclass(frozen=True)
class Condensation:
    """One condensation as :func:`condense` runs it: the ``method`` made, the ``ancestry`` loaded, the data argument
    (``data``: None where none was given), the run's settings (``cfg``) and the caller's choices (``chosen``: its run
    directory)."""

    method: Method
    ancestry: Ancestry
    data: DataArg | None
    cfg: TrainConfig
    chosen: CondenseChoices


def _condense_inputs(run: Condensation, say: Say) -> tuple[CondenseInputs | None, dict[str, Any] | None]:
    """What the method condenses the ancestry with, and the preprocessing its gene's tensors expect: for a method
    that trains on data, the data fed at the ancestry's input (said), the run's settings and directory, and the
    data's preprocessing; else nothing, and the ancestry's preprocessing."""
    made, source, cfg = run.method, run.ancestry, run.cfg
    if not made.needs_data:
        return None, source.preprocessing
    train, test = _fed_data(source, run.data, cfg.seed)
    say(f"condense {made.name} on {train.name}: {len(train)} images", banner=True)
    run_dir, resume = cast("str | Path | None", run.chosen.run_dir), run.chosen.resume
    run_cfg = cfg.replace(identity=_run_identity(made, source)) if run_dir else cfg
    inputs = CondenseInputs(train=train, eval=test, train_cfg=run_cfg, run_dir=run_dir, resume=resume)
    return inputs, preprocessing_cfg(train)  # the data's: what the gene's tensors were trained on


def _free_start_note(method: Method, ancestry: Ancestry) -> str | None:
    """What a start that takes nothing from the ancestry (mimetic, scratch, structured) gives when the ancestry is of a
    family no spec describes: a plain timm ViT of neither its family nor, unless told, its number of classes."""
    if ancestry.spec is not None or method.needs_data or method.needs_vit_ancestry:
        return None
    classes = getattr(ancestry.model, "num_classes", None)
    kept = f"give {assigned('num_classes', classes)} to keep the ancestry's" if isinstance(classes, int) else "give"
    return (
        f"{method.name} takes nothing from this ancestry ({ancestry.not_a_vit()}): its descendants are plain timm "
        f"ViTs, not that family, of the sizes given to expand, with {ViTSpec().num_classes} classes unless "
        f"{named('num_classes')} says otherwise ({kept} number of classes; which classes they mean is not carried)"
    )


def methods_for_any_teacher() -> tuple[list[str], list[str]]:
    """The registered methods that serve an ancestry no spec describes: those that distil it into an aux net, and
    those that need no ancestry."""
    serving = [get_method(name) for name in list_methods() if not get_method(name).needs_vit_ancestry]
    return [m.name for m in serving if m.aux_net], [m.name for m in serving if not m.needs_data]


def _not_a_vit(method: Method, ancestry: Ancestry) -> str:
    """The refusal of ``method``, which picks weights from a ViT, for an ancestry no spec describes: every registered
    method that serves it instead."""
    distil, free = methods_for_any_teacher()
    sizes = ", ".join(named(f"aux_{n}", f"--opt aux_{n}=N") for n in ("depth", "embed_dim", "num_heads"))
    return (
        f"method {method.name} picks weights from a ViT ancestry, but {ancestry.not_a_vit()}; use {', '.join(distil)} "
        f"(they distil any classifier into an aux net of the size you give: {sizes}) or {', '.join(free)} (no ancestry)"
    )


def _phase_defaults(method: Method, data: DataArg | None) -> dict[str, Any]:
    """What condensing with ``method`` on ``data`` runs with unless told otherwise: the method's paper's distillation
    λ, and DeiT's mixup with its augmentation."""
    return {"distill_lambda": method.distill_lambda, "mixup": mixup_of(data)}


def _method(method: Any, options: Any) -> Method:
    if isinstance(method, Method):
        return type(method)(method.config, **method_options(method.Config, options)) if options else method
    require_argument(method, str, "method", "a registered method's name or a Method")
    cls = get_method(method)
    return cls(**method_options(cls.Config, options))


def _fed_data(ancestry: Ancestry, data: DataArg | None, seed: int) -> tuple[Data, Data | None]:
    """The data of a condensation, fed to the ancestry: at its input size and channels (a non-ViT teacher's data keep
    their own size unless told otherwise)."""
    model_in = ancestry.spec
    chans = model_in.in_chans if model_in else None
    train, test = load_data(data, feed_size(ancestry, ancestry.preprocessing), chans, ancestry.preprocessing, seed)
    if model_in and train.in_chans != model_in.in_chans:
        flag = named("in_chans")
        raise LearngeneError(
            f"{flag} {train.in_chans}: condensing feeds the data to the ancestry, which reads "
            f"{model_in.in_chans}-channel images; leave {flag} out (the data follow the ancestry)"
        )
    return train, test


def _run_identity(method: Method, ancestry: Ancestry) -> dict[str, Any]:
    """What a resumed condensation must share with this one, besides what the loop sees."""
    return {
        "command": "condense",
        "method": method.name,
        "options": dataclasses.asdict(method.config),
        "ancestry weights": digest(ancestry.model.state_dict()),
    }
