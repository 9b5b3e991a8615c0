"""Distillation from a teacher while training: the loss the loop back-propagates equals the formula, for both kinds."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from learngene.data import Batch
from learngene.errors import LearngeneError
from learngene.training.distill import cache_teacher_outputs, setup_distillation
from learngene.training.loop import TrainConfig, loss_step, seed_everything, train

from .bounds import order_bound
from .conftest import TINY, make_images

SPACE = {"dataset": "toy", "classes": ["a", "b", "c", "d"]}


def _data(classes=("a", "b", "c", "d")):
    return dataclasses.replace(make_images(16), classes=tuple(classes), dataset="toy")


def _models(teacher_width: int):
    seed_everything(0)
    student = TINY.create_model()
    teacher = TINY.replace(embed_dim=teacher_width).create_model().eval()
    return student, teacher


def _batch(data):
    x, y, _ = data.get_batch(torch.arange(len(data)))
    return Batch(x, y, None, len(y))


def test_logit_distillation_loss_is_the_formula_when_the_teacher_knows_the_classes():
    data = _data()
    student, teacher = _models(32)
    kd = setup_distillation(student, teacher, data, SPACE)
    assert kd.kind == "logits" and kd.student is student and "logit distillation" in kd.why
    lam, tau = 0.3, 2.0
    cfg = TrainConfig(distill_lambda=lam, distill_tau=tau, device="cpu")
    batch = _batch(data)
    loss, *_ = loss_step(kd.student, batch, kd.teacher, cfg, torch.device("cpu"))
    z_s, z_t = student(batch.x), teacher(batch.x)
    log_p_s, p_t = F.log_softmax(z_s / tau, -1), F.softmax(z_t / tau, -1)
    kl = (p_t * (p_t.log() - log_p_s)).sum(-1)
    expected = ((1 - lam) * F.cross_entropy(z_s, batch.y, reduction="none") + lam * tau**2 * kl).mean()
    torch.testing.assert_close(loss, expected, rtol=0, atol=_formula_bound(expected, len(batch.y)))


def test_feature_distillation_loss_is_the_formula_on_another_label_space_with_a_projection():
    data = _data(("w", "x", "y", "z"))  # the same count, other classes: the teacher's logits mean nothing here
    student, teacher = _models(48)
    kd = setup_distillation(student, teacher, data, SPACE)
    assert kd.kind == "features" and "other classes" in kd.why and "projection 32→48" in kd.why
    lam = 0.4
    cfg = TrainConfig(distill_lambda=lam, device="cpu")
    batch = _batch(data)
    loss, *_ = loss_step(kd.student, batch, kd.teacher, cfg, torch.device("cpu"), loss_of=kd.student.distill_loss)
    f_s = student.forward_head(student.forward_features(batch.x), pre_logits=True)
    f_t = teacher.forward_head(teacher.forward_features(batch.x), pre_logits=True)
    projected = f_s @ kd.student.proj.weight.T
    expected = (
        (1 - lam) * F.cross_entropy(student(batch.x), batch.y, reduction="none")
        + lam * (1 - F.cosine_similarity(projected, f_t, dim=-1))
    ).mean()
    torch.testing.assert_close(loss, expected, rtol=0, atol=_formula_bound(expected, len(batch.y)))


def _formula_bound(expected, batch: int) -> float:
    """The loop's loss and the formula here: the same logits (or features), summed in other orders: a softmax's or
    cosine's sum over at most 48 terms (classes, a feature width), then the batch's mean (tests/bounds.py)."""
    return order_bound(max(48, batch), max(1.0, float(expected.detach().abs())), steps=2)


def test_feature_distillation_trains_in_the_loop_and_leaves_the_student_plain():
    data = _data(("w", "x", "y", "z"))
    student, teacher = _models(48)
    keys = set(student.state_dict())
    kd = setup_distillation(student, teacher, data, None)
    assert kd.kind == "features" and "records no label space" in kd.why
    cfg = TrainConfig(epochs=1, batch_size=8, distill_lambda=0.5, device="cpu", progress=False)
    cached, left = cache_teacher_outputs(data, kd.teacher, cfg)
    assert left is None and cached.soft_targets.shape == (len(data), 48)
    before = kd.student.proj.weight.clone()
    result = train(kd.student, cached, cfg, loss=kd.loss)  # the student brings its loss: train is told it
    assert result.steps == 2 and not torch.equal(before, kd.student.proj.weight)  # the projection learned
    assert set(student.state_dict()) == keys  # the projection is not part of the student


def test_a_teacher_for_other_images_is_one_line():
    data = _data()
    student, _ = _models(32)
    teacher = TINY.replace(img_size=32).create_model()
    with pytest.raises(LearngeneError, match="teacher takes 1-channel 32px images"):
        setup_distillation(student, teacher, data, SPACE)
