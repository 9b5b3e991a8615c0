"""``condense``: an ancestry into a learngene by one method, with the provenance the gene records."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..ancestry import feed_size, load_ancestry
from ..binding import check_before_saving
from ..data import preprocessing_cfg
from ..errors import LearngeneError
from ..errors import setting as by_caller
from ..formats.weights import digest
from ..method import Ancestry, CondenseInputs, Method
from ..registry import get_method
from ..training.config import USE_CASE_DEFAULTS, TrainConfig
from ..training.loop import seed_everything
from ..validate import caller_name
from .inputs import DataArg, load_data, method_options, open_run_dir, timm_arguments, train_config
from .results import Condensed


def condense(
    method: str | Method,
    ancestry: Ancestry | str | os.PathLike,
    *,
    options: Mapping[str, Any] | Sequence[str] | None = None,
    data: DataArg | None = None,
    train_cfg: TrainConfig | Mapping[str, Any] | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    license: str | None = None,
    timm_model: str | None = None,
    drop_head: bool = False,
    timm_kwargs: Mapping[str, Any] | Sequence[str] | None = None,
) -> Condensed:
    """The learngene of ``ancestry`` by ``method``, as ``learngene condense`` makes it.

    The gene records the ancestry's label space and licence (``license`` replaces it) and the preprocessing its
    tensors expect: the data's, for a method that trains on data, else the ancestry's. It is checked against its
    method before it is returned, so that only genes the method can read are saved.

    Args:
        method: a registered method's name, or a method already made (``get_method(name)(**options)``).
        ancestry: a loaded :class:`~learngene.method.Ancestry`, or what :func:`~learngene.ancestry.load_ancestry`
            reads (with ``timm_model``, ``drop_head`` and ``timm_kwargs``, the ``timm.create_model`` arguments of a
            checkpoint).
        options: the method's options by name, or ``KEY=VALUE`` texts (``--opt``).
        data: what a method that trains or measures on data uses (:data:`~learngene.pipeline.inputs.DataArg`),
            loaded at the ancestry's input size.
        train_cfg: the run's settings; a mapping takes the method's distillation λ unless it gives one
            (:func:`~learngene.pipeline.inputs.train_config`); its ``seed`` seeds the condensation.
        run_dir: where the run checkpoints.
        resume: whether it continues from the checkpoint in ``run_dir``.
    """
    made = _method(method, options)
    defaults = {**USE_CASE_DEFAULTS["condense"], "distill_lambda": made.distill_lambda}
    cfg = train_config(train_cfg, f"condense {made.name}", **defaults)  # checked even where unused
    open_run_dir(run_dir, resume, cfg)
    source = _ancestry(ancestry, timm_model, drop_head, timm_kwargs)
    inputs, preprocessing = None, source.preprocessing
    if made.needs_data:
        inputs = _condense_inputs(made, source, data, cfg, run_dir, resume)
        preprocessing = preprocessing_cfg(inputs.train)  # what the gene's tensors were trained on
    seed_everything(cfg.seed)
    gene = dataclasses.replace(made.condense(source, inputs), preprocessing=preprocessing)
    gene.label_space = source.label_space
    gene.license = license or source.license
    gene.ancestry_source = source.source
    check_before_saving(gene, made)
    return Condensed(gene, made.condense_note(gene))


def _method(method: str | Method, options: Mapping[str, Any] | Sequence[str] | None) -> Method:
    if isinstance(method, Method):
        return type(method)(method.config, **method_options(method.Config, options)) if options else method
    cls = get_method(method)
    return cls(**method_options(cls.Config, options))


def _ancestry(
    ancestry: Ancestry | str | os.PathLike,
    timm_model: str | None,
    drop_head: bool,
    timm_kwargs: Mapping[str, Any] | Sequence[str] | None,
) -> Ancestry:
    if isinstance(ancestry, Ancestry):
        if timm_model or drop_head or timm_kwargs:
            raise LearngeneError(
                "timm_model, drop_head and timm_kwargs say how to read an ancestry file; pass its path"
            )
        return ancestry
    if timm_kwargs and not timm_model:
        raise LearngeneError(
            by_caller(
                "timm_kwargs need timm_model: they are passed to timm.create_model for the checkpoint",
                "--timm-arg needs --timm-model: it is passed to timm.create_model for the checkpoint",
            )
        )
    return load_ancestry(ancestry, timm_model, drop_head=drop_head, **timm_arguments(timm_kwargs))


def _condense_inputs(
    method: Method,
    ancestry: Ancestry,
    data: DataArg | None,
    cfg: TrainConfig,
    run_dir: str | Path | None,
    resume: bool,
) -> CondenseInputs:
    """The data (fed to the ancestry: its input size and channels) and settings of a condensation that needs data."""
    model_in = ancestry.spec  # None for a non-ViT teacher: the data keep their own size unless told otherwise
    train, test = load_data(
        data,
        feed_size(ancestry, ancestry.preprocessing),
        model_in.in_chans if model_in else None,
        ancestry.preprocessing,
        cfg.seed,
    )
    if model_in and train.in_chans != model_in.in_chans:
        flag = caller_name("in_chans", "--in-chans")
        raise LearngeneError(
            f"{flag} {train.in_chans}: condensing feeds the data to the ancestry, which reads "
            f"{model_in.in_chans}-channel images; leave {flag} out (the data follow the ancestry)"
        )
    if run_dir:  # what a resumed run must share with this one, besides what the loop sees
        identity = {
            "command": "condense",
            "method": method.name,
            "options": dataclasses.asdict(method.config),
            "ancestry weights": digest(ancestry.model.state_dict()),
        }
        cfg = cfg.replace(identity=identity)
    return CondenseInputs(train=train, eval=test, train_cfg=cfg, run_dir=run_dir, resume=resume)
