"""``train_ancestry`` (a ViT from scratch: the ancestry of learngenes) and ``train`` (a model file fine-tuned), with
what their model files record: the data, the accuracy, the label space, the licence, the preprocessing."""

from __future__ import annotations

import copy
import os
from typing import Any

from ..data import FolderData, ImageData
from ..errors import LearngeneError, require_argument
from ..formats.model_file import ModelFile, model_preprocessing, read_model
from ..formats.weights import digest
from ..host.rng import seeded_draws
from ..training.loop import train as train_loop
from .fine_tuning import FineTuning, fine_tuning
from .inputs import (
    DataArg,
    Say,
    SizeArg,
    TrainArg,
    check_model_object,
    data_argument,
    input_paths,
    load_data,
    mixup_of,
    open_run_dir,
    quiet,
    resolve_spec,
    size_argument,
    size_input,
    speaker,
    train_config,
)
from .requests import AncestryChoices, TrainChoices
from .results import ModelOutput, Trained


def train_ancestry(
    data: DataArg,
    size: SizeArg | None = None,
    *,
    train_cfg: TrainArg | None = None,
    say: Say = quiet,
    **choices: Any,
) -> Trained:
    """A ViT of ``size`` trained from scratch on ``data``, as ``learngene ancestry`` makes it: its file records the
    data, the test accuracy, the label space and ``license``, and the data's preprocessing.

    Args:
        data: what it trains on (:data:`~learngene.pipeline.inputs.DataArg`).
        size: the model's size (:func:`~learngene.pipeline.inputs.resolve_spec`); it takes the data's image size,
            channels and classes unless it gives them.
        train_cfg: the run's settings, a TrainConfig or a dict of them by name (a setting not given takes
            ``learngene ancestry``'s default); its ``seed`` draws the initialization.
        say: called with a line about what is about to run, e.g. ``print``.
        **choices: the fields of :class:`~learngene.pipeline.requests.AncestryChoices`, by name: ``run_dir`` (where
            the run checkpoints), ``resume`` (continue from its checkpoint) and ``license`` (the licence recorded in
            the model file, an SPDX identifier).
    """
    chosen = AncestryChoices.of(choices)
    data = data_argument(data)
    size = size_argument(size)
    say = speaker(say)
    cfg = train_config(train_cfg, "ancestry", "ancestry", mixup=mixup_of(data))
    open_run_dir(chosen, cfg)
    train, test = load_data(data, *size_input(size), seed=cfg.seed)
    spec = resolve_spec(size, data=train)
    with seeded_draws(cfg.seed):  # timm's initialization, from the global generator (learngene.host.rng)
        model = spec.create_model()
    cfg = cfg.replace(identity={"command": "ancestry", "spec": spec.to_dict()})
    say(f"ancestry {spec.short()} ({spec.num_params:,} params) on {train.name}: {len(train)} images", banner=True)
    result = train_loop(model, train, cfg, eval_data=test, **chosen.checkpointing)
    origin = {"kind": "ancestry", "data": train.name}
    return Trained.of_run(model, spec, train, result, origin, license=chosen.license, inputs=input_paths(data))


def train(
    model: str | os.PathLike | ModelOutput,
    data: DataArg,
    *,
    train_cfg: TrainArg | None = None,
    say: Say = quiet,
    **choices: Any,
) -> Trained:
    """``model`` (a model file, e.g. a descendant, a stitched descendant or an ancestry; or a pipeline result)
    fine-tuned on ``data``, as ``learngene train`` makes it.

    Its head is kept when it was trained on the data's classes, else replaced by a fresh one (``new_head``: always).
    With a ``teacher`` it distils the teacher's logits on the teacher's classes, else its pooled features. The file
    records the model's origin, the data, the accuracy, the label space, whether the head is new and ``license``.

    Args:
        model: a model file's path, or a result of another use case (:func:`expand`'s, :func:`adapt`'s descendant).
        data: what it fine-tunes on (:data:`~learngene.pipeline.inputs.DataArg`), at the model's input size.
        train_cfg: the run's settings, a TrainConfig or a dict of them by name; a setting not given takes
            ``learngene train``'s default (5 epochs, 2,000 test images, λ = 0.5 with a teacher, else 0).
        say: called with a line about the distillation, e.g. ``print``.
        **choices: the fields of :class:`~learngene.pipeline.requests.TrainChoices`, by name: ``teacher`` (an ancestry
            to distil), ``new_head``, ``run_dir``, ``resume``, ``license`` and ``inplace`` (train a result's own
            module instead of a copy; the result given can then no longer be saved).
    """
    require_argument(model, (str, os.PathLike, ModelOutput), "model", "a model file's path or a use case's result")
    chosen = TrainChoices.of(choices)
    data = data_argument(data)
    say = speaker(say)
    cfg = train_config(train_cfg, "train", "train", distill_lambda=chosen.distill_lambda, mixup=mixup_of(data))
    open_run_dir(chosen, cfg)
    loaded, preprocessing = _model(model, chosen.inplace)
    train, test = load_data(data, loaded.spec.img_size, loaded.spec.in_chans, preprocessing, cfg.seed)
    if chosen.inplace and isinstance(model, ModelOutput):  # from here on (a fresh head, training) its module changes
        model.trained_in_place = True
    weights = digest(loaded.state) if chosen.run_dir else None  # the weights read, before any new head
    tuned = _fine_tuning(loaded, train, chosen, cfg)
    cfg = chosen.run_config(cfg, loaded.origin, weights, tuned, say)
    result = train_loop(
        tuned.student, tuned.data, cfg, eval_data=test, teacher=tuned.teacher, loss=tuned.loss, **chosen.checkpointing
    )
    origin = {**loaded.origin, "finetuned_on": train.name}
    inputs = input_paths(model if not isinstance(model, ModelOutput) else None, chosen.teacher, data)
    return Trained.of_run(
        loaded.model, loaded.spec, train, result, origin, license=chosen.license, head=tuned.head, inputs=inputs
    )


def _model(model: str | os.PathLike | ModelOutput, inplace: bool) -> tuple[ModelFile, dict[str, Any] | None]:
    """The model to train, read from its file in the format its header names, and the preprocessing it records; a
    result's module copied unless ``inplace`` (training it, or giving it a fresh head, would change the caller's
    object: ``small.save()`` after ``lg.train(small, ...)`` wrote fine-tuned weights labelled as untrained)."""
    if isinstance(model, ModelOutput):
        if model.spec is None:
            raise LearngeneError("this model has no ViTSpec to train at; save it and pass its file")
        model.check_savable()  # a result trained in place once holds weights its record no longer describes
        check_model_object(model.model, None, f"the {type(model).__name__}'s model")  # what read_model checks
        net = model.model if inplace else copy.deepcopy(model.model)
        return ModelFile(net, model.spec, dict(model.origin), net.state_dict()), model.preprocessing
    return read_model(model), model_preprocessing(model)


def _fine_tuning(loaded: ModelFile, train: ImageData | FolderData, chosen: TrainChoices, cfg: Any) -> FineTuning:
    """The one fine-tune's head and distillation (:func:`~learngene.pipeline.fine_tuning.fine_tuning`, as every
    compare cell's) for the model read from its file, with the ancestry ``chosen.teacher`` loaded."""
    teacher = chosen.teacher_request()
    ancestry = None if teacher is None else teacher.load()
    label_space = loaded.origin.get("label_space")
    return fine_tuning(
        loaded.model,
        loaded.spec,
        train,
        cfg.seed,
        cfg,
        label_space=label_space,
        new_head=chosen.new_head,
        teacher=ancestry,
    )
