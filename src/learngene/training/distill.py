"""Distillation from a teacher (the ancestry) while training a student: on logits, or on pooled embeddings.

Two kinds, chosen by the teacher's label space (:func:`setup_distillation`):

- **logit KD** when the teacher's head was trained on the data's classes: per image
  ``(1−λ)·CE(z_s, y) + λ·τ²·KL(softmax(z_t/τ) ‖ softmax(z_s/τ))`` (Hinton et al. 2015, arXiv:1503.02531;
  :func:`learngene.training.steps.distill_loss`). Weight selection (Xu et al., arXiv:2311.18823, Sec. 4.4) reports
  selection followed by this distillation as its best recipe.
- **feature KD** otherwise (another label space, or a headless teacher): per image
  ``(1−λ)·CE(z_s, y) + λ·(1 − cos(P·f_s, f_t))`` where ``f_s`` is the student's pooled embedding (what its
  head reads), ``f_t`` the teacher's and ``P`` a learned linear map when their widths differ. ``P`` trains
  with the student and is not part of the student (nothing saves it).

Both run in the one training loop (:func:`learngene.training.loop.train`): the teacher's outputs are the loop's
soft targets, and :class:`FeatureDistillation` brings its own per-image loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import LearngeneError
from ..vit.naflex import image_input
from .steps import distill_loss


def _timm_net(model: nn.Module) -> Any:  # a timm model: num_features, get_classifier, forward_head
    """The timm model a student wraps (:class:`~learngene.descendant.GeneNet` names it ``skeleton``)."""
    return getattr(model, "skeleton", model)


class PooledFeatures(nn.Module):
    """A timm model seen as its pooled embedding: what its classifier head reads (``pre_logits``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model: Any = model  # a timm model: num_features, forward_features, forward_head

    @property
    def width(self) -> int:
        return int(self.model.num_features)

    def forward(self, x: Tensor) -> Tensor:
        return self.model.forward_head(self.model.forward_features(x), pre_logits=True)


class FeatureDistillation(nn.Module):
    """A student taught a teacher's pooled embeddings: per image ``(1−λ)·CE + λ·(1 − cos(P·f, f_t))``.

    ``f`` is the student's pooled embedding (the input of its head, caught by a hook), ``f_t`` the
    teacher's (:class:`PooledFeatures`), ``P`` a learned linear map when the widths differ (it trains with
    the student and is not stored). The wrapped student's logits are this module's output.
    """

    def __init__(self, net: nn.Module, teacher_width: int):
        super().__init__()
        self.net = net
        width = int(_timm_net(net).num_features)
        self.proj = nn.Linear(width, teacher_width, bias=False) if width != teacher_width else nn.Identity()
        self._features: Tensor | None = None
        _timm_net(net).get_classifier().register_forward_pre_hook(self._keep)

    def _keep(self, module: nn.Module, args: tuple[Tensor, ...]) -> None:
        self._features = args[0]

    def describe(self, note: str = "") -> str:
        width = int(_timm_net(self.net).num_features)
        teacher = getattr(self.proj, "out_features", width)
        projection = f", through a learned projection {width}→{teacher}" if width != teacher else ""
        return f"pooled features (cosine distance{projection}{note})"

    @property
    def skeleton(self) -> nn.Module:
        """The student's timm model (the training loop checks the data against it)."""
        return _timm_net(self.net)

    def no_weight_decay(self) -> set[str]:
        return {f"net.{k}" for k in getattr(self.net, "no_weight_decay", lambda: set())()}

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def distill_loss(
        self,
        logits: Tensor,
        labels: Tensor,
        teacher_features: Tensor | None,
        lam: float,
        tau: float,
        label_smoothing: float = 0.0,
    ) -> Tensor:
        """The per-sample loss the training loop uses for this model (in place of its logit distillation)."""
        loss = (1.0 - lam) * distill_loss(logits, labels, None, 0.0, tau, label_smoothing)
        if lam > 0.0:
            if teacher_features is None or self._features is None:
                raise LearngeneError("feature distillation (λ > 0) needs the teacher's features")
            student = self.proj(self._features).float()
            loss = loss + lam * (1.0 - F.cosine_similarity(student, teacher_features.float(), dim=-1))
        return loss


class Distillation(NamedTuple):
    """What :func:`setup_distillation` chose: train ``student`` with ``teacher`` (``train(student, data, cfg,
    teacher=teacher)``) and save the model you passed in, not ``student``."""

    student: nn.Module
    teacher: nn.Module
    kind: str  # "logits" or "features"
    why: str  # one line for the user

    @property
    def loss(self) -> Callable[..., Tensor]:
        """The loss to pass to ``train(..., loss=)``: the feature student's own, else logit distillation's."""
        return self.student.distill_loss if isinstance(self.student, FeatureDistillation) else distill_loss


def _same_classes(teacher_space: dict[str, Any] | None, data_space: dict[str, Any] | None) -> bool:
    return bool(
        teacher_space
        and data_space
        and teacher_space.get("classes")
        and list(teacher_space["classes"]) == list(data_space.get("classes", []))
    )


def setup_distillation(
    model: nn.Module, teacher: nn.Module, data: Any, teacher_label_space: dict[str, Any] | None
) -> Distillation:
    """Logit KD when the teacher's head was trained on ``data``'s classes (both named, in the same order),
    else feature KD on the pooled embedding.

    Args:
        model: the student (a timm ViT, or a model wrapping one as ``skeleton``).
        teacher: a timm model taking the data's images (e.g. ``load_ancestry(path).model``).
        data: the training data (its ``label_space``, image size and channels are read).
        teacher_label_space: what the teacher's head was trained on (``Ancestry.label_space``; None: unknown).
    """
    net = _timm_net(teacher)
    expects = image_input(net)
    if expects is None:  # a CNN: any image size runs, but its first convolution fixes the channels
        conv = next((m for m in net.modules() if isinstance(m, nn.Conv2d)), None)
        expects = (conv.in_channels, data.img_size, True) if conv is not None else None
    if expects is not None:
        chans, size, any_size = expects
        if data.in_chans != chans or (data.img_size != size and not any_size):
            raise LearngeneError(
                f"the teacher takes {chans}-channel {size}px images but {data.name} has "
                f"{data.in_chans}-channel {data.img_size}px ones; give a teacher made for this data"
            )
    teacher_classes = int(getattr(net, "num_classes", 0) or 0)
    if teacher_classes and teacher_classes == data.num_classes and _same_classes(teacher_label_space, data.label_space):
        return Distillation(
            model,
            teacher,
            "logits",
            f"logit distillation: the teacher's head was trained on the data's {teacher_classes} classes",
        )
    if not hasattr(net, "forward_head") or not hasattr(net, "num_features"):
        raise LearngeneError(f"the teacher ({type(net).__name__}) has no pooled embedding to distil; give a timm ViT")
    features = PooledFeatures(net)
    student = FeatureDistillation(model, features.width)
    why = (
        "the teacher has no classifier"
        if not teacher_classes
        else "the teacher records no label space"
        if not teacher_label_space
        else "the teacher's head was trained on other classes"
    )
    return Distillation(student, features, "features", f"feature distillation on {student.describe()}: {why}")


def cache_teacher_outputs(data: Any, teacher: nn.Module, cfg: Any) -> tuple[Any, nn.Module | None]:
    """``(data, teacher)`` for :func:`learngene.training.loop.train`: in-memory images that are the same every epoch get
    the teacher's outputs computed once (the teacher is then not needed: None); augmented, mixed or streamed
    data keep the teacher, which the loop runs on each batch."""
    from ..data import ImageData
    from .device import resolve_device
    from .evaluation import predict_logits

    if cfg.augment or cfg.mixup or not isinstance(data, ImageData) or data.soft_targets is not None:
        return data, teacher
    return data.with_soft_targets(predict_logits(teacher, data, cfg.eval_batch_size, resolve_device(cfg.device))), None
