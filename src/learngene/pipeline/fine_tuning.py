"""One fine-tune: the head and distillation rules that ``learngene train`` (:func:`~learngene.pipeline.train`) and
every cell of ``learngene compare`` and ``bench`` (:mod:`learngene.bench.cells`) share, so that compare's numbers come
from what ``learngene train`` runs.

- The head: kept when it was trained on the data's classes (or records none and has their count), else (or when a
  fresh one is asked for) the classifier a timm model of the model's size starts with at the run's seed
  (:func:`fresh_head`): the same for every method and for scratch, whose own head it is.
- Distillation: logits where the teacher's head was trained on the data's classes, else the pooled features
  (:func:`~learngene.training.distill.setup_distillation`, its projection drawn from the run's seed); the teacher's
  outputs computed once where the data allow (:func:`~learngene.training.distill.cache_teacher_outputs`), kept in a
  cache that several runs on the same data may share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from torch import nn

from ..formats.labels import HeadChoice, LabelSpace, choose_head
from ..host.rng import seeded_draws
from ..method import Ancestry
from ..training.distill import Distillation, cache_teacher_outputs, setup_distillation
from ..vit.spec import ViTSpec


@dataclass
class FineTuning:
    """What the training loop is given to fine-tune a model: ``student`` (the model, or it wrapped for feature
    distillation), its ``data`` (with the teacher's outputs where they were cached), the ``teacher`` the loop still
    runs (None: none, or its outputs cached) and the distillation ``loss``; with the ``head`` choice and the
    ``distillation`` that ran (None: none)."""

    student: nn.Module
    data: Any
    teacher: nn.Module | None
    loss: Any
    head: HeadChoice
    distillation: Distillation | None = None


def fresh_head(model: nn.Module, spec: ViTSpec, seed: int) -> None:
    """Give ``model`` (a model of ``spec``'s size, its classifier of ``spec.num_classes`` outputs) the classifier a
    scratch model of ``spec`` gets at ``seed``: the same for every method at a seed, and scratch's own."""
    with seeded_draws(seed):  # timm's initialization, from the global generator (learngene.host.rng)
        reference: Any = spec.create_model()
    cast(Any, model).get_classifier().load_state_dict(reference.get_classifier().state_dict())


def fine_tuning(
    model: nn.Module,
    spec: ViTSpec,
    train: Any,
    seed: int,
    cfg: Any,
    *,
    label_space: LabelSpace | None = None,
    new_head: bool = False,
    teacher: Ancestry | None = None,
    teacher_outputs: dict[str, Any] | None = None,
) -> FineTuning:
    """Prepare ``model`` (of ``spec``, whose head was trained on ``label_space``; None: unknown) to be fine-tuned on
    ``train`` with settings ``cfg``: its head kept or made fresh at ``seed`` (``new_head``: always fresh), and, with a
    ``teacher``, the distillation of it. ``teacher_outputs``: a cache of the teacher's outputs on ``train`` by kind of
    distillation, for runs that share the data."""
    classes = int(getattr(model, "num_classes", spec.num_classes))
    head = choose_head(label_space, classes, train.label_space, train.num_classes, force_new=new_head)
    if head.fresh:
        # a model no ViTSpec describes whole (a stitched ViT) names the spec of its head side
        own = cast(ViTSpec, getattr(model, "head_spec", spec)).replace(num_classes=train.num_classes)
        if classes != train.num_classes:
            with seeded_draws(seed):  # the new classifier's shape; its weights are fresh_head's
                cast(Any, model).reset_classifier(train.num_classes)
        fresh_head(model, own, seed)
    if teacher is None:
        return FineTuning(model, train, None, None, head)
    with seeded_draws(seed):  # a feature student's projection: drawn from the run's seed, not the process's state
        kd = setup_distillation(model, teacher.model, train, teacher.label_space)
    cache = {} if teacher_outputs is None else teacher_outputs
    if kd.kind not in cache:
        cache[kd.kind] = cache_teacher_outputs(train, kd.teacher, cfg)
    data, teacher_net = cache[kd.kind]
    return FineTuning(kd.student, data, teacher_net, kd.loss, head, kd)
