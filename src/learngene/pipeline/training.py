"""``train_ancestry`` (a ViT from scratch: the ancestry of learngenes) and ``train`` (a model file fine-tuned), with
what their model files record: the data, the accuracy, the label space, the licence, the preprocessing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..ancestry import load_ancestry
from ..data import FolderData, ImageData, preprocessing_cfg
from ..errors import LearngeneError
from ..errors import setting as by_caller
from ..formats.labels import HeadChoice, choose_head
from ..formats.model_file import ModelFile, model_preprocessing, read_model
from ..formats.weights import digest
from ..training.config import USE_CASE_DEFAULTS, TrainConfig
from ..training.distill import cache_teacher_outputs, setup_distillation
from ..training.loop import seed_everything
from ..training.loop import train as train_loop
from .inputs import DataArg, Say, SizeArg, load_data, open_run_dir, quiet, resolve_spec, size_input, train_config
from .results import ModelOutput, Trained, license_entry


def train_ancestry(
    data: DataArg,
    size: SizeArg | None = None,
    train_cfg: TrainConfig | Mapping[str, Any] | None = None,
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    license: str | None = None,
    say: Say = quiet,
) -> Trained:
    """A ViT of ``size`` trained from scratch on ``data``, as ``learngene ancestry`` makes it: its file records the
    data, the test accuracy, the label space and ``license``, and the data's preprocessing.

    ``size`` (:func:`~learngene.pipeline.inputs.resolve_spec`) takes the data's image size, channels and classes
    unless it gives them; ``train_cfg``'s ``seed`` draws the initialization.
    """
    cfg = train_config(train_cfg, "ancestry", **USE_CASE_DEFAULTS["ancestry"])
    open_run_dir(run_dir, resume, cfg)
    train, test = load_data(data, *size_input(size), seed=cfg.seed)
    spec = resolve_spec(size, data=train)
    seed_everything(cfg.seed)
    model = spec.create_model()
    cfg = cfg.replace(identity={"command": "ancestry", "spec": spec.to_dict()})
    say(f"ancestry {spec.short()} ({spec.num_params:,} params) on {train.name}: {len(train)} images", banner=True)
    result = train_loop(model, train, cfg, eval_data=test, run_dir=run_dir, resume=resume)
    origin = {
        "kind": "ancestry",
        "data": train.name,
        "epochs": cfg.epochs,
        "eval_acc": result.final_acc,
        "label_space": train.label_space,
        **license_entry(license),
    }
    summary = f"test accuracy {result.final_acc:.4f}"
    return Trained(model, spec, origin, preprocessing_cfg(train), summary, result)


def train(
    model: str | os.PathLike | ModelOutput,
    data: DataArg,
    train_cfg: TrainConfig | Mapping[str, Any] | None = None,
    *,
    teacher: str | os.PathLike | None = None,
    teacher_timm_model: str | None = None,
    new_head: bool = False,
    run_dir: str | Path | None = None,
    resume: bool = False,
    license: str | None = None,
    say: Say = quiet,
) -> Trained:
    """``model`` (a model file, e.g. a descendant, a stitched descendant or an ancestry; or a pipeline result)
    fine-tuned on ``data``, as ``learngene train`` makes it.

    Its head is kept when it was trained on the data's classes, else replaced by a fresh one (``new_head``: always).
    With a ``teacher`` (an ancestry, read by :func:`~learngene.ancestry.load_ancestry` with ``teacher_timm_model``)
    it distils the teacher's logits on the teacher's classes, else its pooled features; a mapping ``train_cfg``
    then takes λ = 0.5 unless it gives one. The file records the model's origin, the data, the accuracy, the label
    space, whether the head is new and ``license``.
    """
    _refuse_distilling_without_teacher(train_cfg, teacher, teacher_timm_model)
    cfg = train_config(train_cfg, "train", **USE_CASE_DEFAULTS["train"], distill_lambda=0.5 if teacher else 0.0)
    open_run_dir(run_dir, resume, cfg)
    loaded, preprocessing = _model(model)
    train, test = load_data(data, loaded.spec.img_size, loaded.spec.in_chans, preprocessing, cfg.seed)
    head = _choose_head(loaded, train, new_head, cfg.seed)
    spec = loaded.spec.replace(num_classes=train.num_classes) if head.fresh else loaded.spec
    net = loaded.model
    identity = {"command": "train", "model weights": digest(loaded.state) if run_dir else None, "new head": head.fresh}
    student, teacher_net, fit_data, loss = net, None, train, None
    if teacher:
        student, teacher_net, fit_data, loss = _distilling(teacher, teacher_timm_model, net, train, cfg, identity, say)
    cfg = cfg.replace(identity=identity)
    result = train_loop(
        student, fit_data, cfg, eval_data=test, teacher=teacher_net, run_dir=run_dir, resume=resume, loss=loss
    )
    origin = {
        **loaded.origin,
        "finetuned_on": train.name,
        "epochs": cfg.epochs,
        "eval_acc": result.final_acc,
        "label_space": train.label_space,
        "new_head": head.fresh,
        **license_entry(license),
    }
    summary = f"test accuracy {result.final_acc:.4f}; {head.why}"
    return Trained(net, spec, origin, preprocessing_cfg(train), summary, result, head.why)


def _model(model: str | os.PathLike | ModelOutput) -> tuple[ModelFile, dict[str, Any] | None]:
    """The model to train, read from its file in the format its header names, and the preprocessing it records."""
    if isinstance(model, ModelOutput):
        if model.spec is None:
            raise LearngeneError("this model has no ViTSpec to train at; save it and pass its file")
        return ModelFile(model.model, model.spec, dict(model.origin), model.model.state_dict()), model.preprocessing
    return read_model(model), model_preprocessing(model)


def _choose_head(loaded: ModelFile, train: ImageData | FolderData, new_head: bool, seed: int) -> HeadChoice:
    """Keep the model's head when it was trained on ``train``'s classes, else (or with ``new_head``) give it a fresh
    one, drawn from ``seed``; the choice and why."""
    space = loaded.origin.get("label_space")
    head = choose_head(space, loaded.num_classes, train.label_space, train.num_classes, force_new=new_head)
    if head.fresh:
        net: Any = loaded.model  # a timm ViT, or a StitchedViT: both have timm's reset_classifier
        seed_everything(seed)
        net.reset_classifier(train.num_classes)  # a timm model, or a StitchedViT's end
    return head


def _refuse_distilling_without_teacher(
    train_cfg: TrainConfig | Mapping[str, Any] | None, teacher: str | os.PathLike | None, teacher_timm_model: str | None
) -> None:
    """A teacher's architecture, or a distillation weight λ > 0, given without a teacher is refused."""
    if teacher_timm_model and not teacher:
        raise LearngeneError(
            by_caller(
                "teacher_timm_model names the architecture of a teacher checkpoint; pass teacher too",
                "--teacher-timm-model names the architecture of a --teacher checkpoint; pass --teacher too",
            )
        )
    lam = train_cfg.distill_lambda if isinstance(train_cfg, TrainConfig) else (train_cfg or {}).get("distill_lambda")
    if lam is not None and lam > 0 and not teacher:
        raise LearngeneError(
            by_caller(
                "distill_lambda needs a teacher to distil from; pass teacher=ANCESTRY",
                "--distill-lambda needs a teacher to distil from; pass --teacher ANCESTRY",
            )
        )


def _distilling(
    teacher: str | os.PathLike,
    teacher_timm_model: str | None,
    net: Any,
    train: ImageData | FolderData,
    cfg: TrainConfig,
    identity: dict[str, Any],
    say: Say,
) -> tuple[Any, Any, Any, Any]:
    """The student, the teacher, the data (with the teacher's outputs cached) and the loss of fine-tuning ``net`` on
    ``train`` while distilling ``teacher``; ``identity`` (what a resumed run must agree on) records the teacher."""
    ancestry = load_ancestry(teacher, teacher_timm_model)
    kd = setup_distillation(net, ancestry.model, train, ancestry.label_space)
    say(f"distilling from {teacher} with λ = {cfg.distill_lambda:g}: {kd.why}")
    identity.update(teacher=str(teacher), distilled=kd.kind)
    fit_data, teacher_net = cache_teacher_outputs(train, kd.teacher, cfg)
    return kd.student, teacher_net, fit_data, kd.loss
