"""One training step's parts: the loss (:func:`loss_step`, soft distillation), AdamW and its warmup-cosine schedule
(:func:`warmup_cosine`), and the seeds a run draws from (the update itself is :meth:`learngene.training.epochs.TrainingRun.step`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data import Batch, BatchMixer
from ..errors import LearngeneError
from . import distributed as dist
from .config import TrainConfig, known
from .device import autocast


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def step_draw(seed: int, step: int, choices: int) -> int:
    """Which of ``choices`` a network that changes per step (a drawn size, a drawn stitch) runs at its ``step``-th
    training forward: a function of the run's seed and that count alone, so a resumed run (the count is a buffer,
    saved with the model) draws what the uninterrupted one did."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return int(torch.randint(choices, (1,), generator=generator))


def distill_loss(
    logits: Tensor, labels: Tensor, teacher_logits: Tensor | None, lam: float, tau: float, label_smoothing: float = 0.0
) -> Tensor:
    """Per-sample ``(1−λ)·CE + λ·τ²·KL(softmax(z_t/τ) ‖ softmax(z_s/τ))`` (summed later, not averaged).

    ``labels`` are class indices, or soft targets ``(N, K)`` (mixup/cutmix, smoothing already folded in).
    """
    logits = logits.float()
    loss = torch.zeros(len(logits), device=logits.device)
    if lam < 1.0:
        loss = loss + (1.0 - lam) * F.cross_entropy(logits, labels, reduction="none", label_smoothing=label_smoothing)
    if lam > 0.0:
        if teacher_logits is None:
            raise LearngeneError("distillation (λ > 0) needs a teacher")
        log_p_student = F.log_softmax(logits / tau, dim=-1)
        log_p_teacher = F.log_softmax(teacher_logits.float() / tau, dim=-1)
        kl = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(-1)
        loss = loss + lam * tau**2 * kl
    return loss


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warmup to 1, then cosine decay to ``min_ratio`` at ``total`` steps."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine(optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int, total_steps: int) -> Any:
    """The run's per-step schedule (:func:`lr_factor`): ``cfg.warmup_epochs`` of linear warmup, then cosine decay to
    ``cfg.min_lr`` at ``total_steps``."""
    # a short run (e.g. one fine-tuning epoch) still decays: warmup takes at most a fifth of it
    warmup = max(1, min(round(cfg.warmup_epochs * steps_per_epoch), total_steps // 5))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, warmup, total_steps, cfg.min_lr / cfg.lr)
    )


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    # Not timm.optim.param_groups_weight_decay (timm 1.0.31), measured on every model fingerprints_methods.py trains:
    # it puts the no-decay group first and, at weight_decay 0 (PEG's adapt), every parameter in one group, so the
    # optimizer state of a checkpoint written by this code would not load (torch: "a parameter group that doesn't
    # match the size"); getting these groups back from its output takes as many lines as making them.
    skip = set(getattr(model, "no_weight_decay", lambda: set())())
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 or name in skip or name.split(".")[-1] in skip else decay).append(p)
    if not decay and not no_decay:
        raise LearngeneError("nothing to train: the model has no parameter that requires grad")
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def uses_fused_adamw(cfg: TrainConfig, device: torch.device) -> bool:
    """Whether the run's AdamW takes its fused kernel: ``cfg.fused_adamw`` when set, else on CUDA only."""
    return device.type == "cuda" if cfg.fused_adamw is None else cfg.fused_adamw


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """The run's AdamW: no weight decay on biases, norms and what the model names, fused per :func:`uses_fused_adamw`."""
    return torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, fused=uses_fused_adamw(cfg, device))


def loss_step(
    net: nn.Module,
    batch: Batch,
    teacher: nn.Module | None,
    cfg: TrainConfig,
    device: torch.device,
    mixer: BatchMixer | None = None,
    loss_of: Callable[..., Tensor] = distill_loss,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Forward one batch: the loss to back-propagate, and the per-sample losses, logits and labels (detached).
    ``loss_of`` is :func:`distill_loss` or the model's own per-sample loss (same signature)."""
    x, y = batch.x.to(device, non_blocking=True), batch.y.to(device, non_blocking=True)  # no-ops for the loop's batches
    soft = batch.soft.to(device, non_blocking=True) if batch.soft is not None else None
    target, smoothing = y, cfg.label_smoothing
    if mixer is not None:  # soft targets, already smoothed
        x, target, smoothing = *mixer(x, y), 0.0
    if known(cfg.distill_lambda) > 0 and soft is None:
        if teacher is None:
            raise LearngeneError(
                f"distill_lambda={cfg.distill_lambda:g} needs a teacher or soft targets; pass one, or set distill_lambda=0"
            )
        with torch.inference_mode(), autocast(device):
            soft = teacher(x).float()
        soft = soft.clone()  # an inference-mode tensor cannot be saved for the KL's backward
    with autocast(device):
        logits = net(x)
    per_sample = loss_of(logits, target, soft, cfg.distill_lambda, cfg.distill_tau, smoothing)
    # DDP averages gradients over ranks; scaling by world/global_size makes that the exact mean
    # over the global batch, even when ranks hold unequal shares of the last batch.
    loss = per_sample.sum() * (dist.world_size() / batch.global_size)
    return loss, per_sample.detach(), logits.detach(), y
