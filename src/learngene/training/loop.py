"""The one training loop: ancestries, auxiliary nets, scaler/φ adaptation and descendants all train here.

Loss: ``(1−λ)·CE + λ·τ²·KL(p_teacher ‖ p_student)`` (soft distillation, Hinton et al. 2015; TLEG
Eq. 6 with λ=1, τ=1; WAVE Eq. 6 adds CE). AdamW, linear warmup then cosine decay per step, gradient
clipping, bf16 autocast on CUDA only (bf16 on some CPUs dies in oneDNN), DDP under ``torchrun``.
Every epoch appends to ``log.jsonl`` and writes ``checkpoint.pt`` atomically; ``resume=True`` continues
from it bit for bit (model, optimizer, schedule, RNG states and the data position are all restored;
:class:`~learngene.training.checkpoint.RunState` is what a checkpoint holds, :mod:`learngene.training.checkpoint` the
run directory).

This module is the entry, :func:`train`: it builds one :class:`~learngene.training.epochs.TrainingRun` (the run's
parts and state, on one object) and runs it. The parts live in modules named for them:
:mod:`~learngene.training.epochs` (the run: its epochs and steps; one step is :func:`loss_step`, then the update),
:mod:`~learngene.training.steps` (loss, optimizer, schedule, seeds), :mod:`~learngene.training.device` (device,
placement, memory checks), :mod:`~learngene.training.evaluation` (:func:`evaluate`, :func:`predict_logits`),
:mod:`~learngene.training.data_checks` and :mod:`~learngene.training.stopping` (SIGINT / SIGTERM at a step boundary).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from torch import Tensor, nn

from ..data import Data
from ..errors import LearngeneError, require_argument
from ..host.rng import seeded_draws
from .checkpoint import CHECKPOINT, LOG
from .config import TrainConfig
from .data_checks import check_data_fits, require_data
from .device import (
    autocast,
    inference_batch,
    place,
    require_activation_memory,
    require_optimizer_memory,
    resolve_device,
    set_fused_attention,
)
from .epochs import TrainingRun, TrainResult
from .evaluation import evaluate, predict_logits
from .steps import distill_loss, loss_step, make_optimizer, seed_everything, step_draw, uses_fused_adamw
from .stopping import STOPS, RunInterrupted, request_stop

# what this module offered before its parts moved into modules of their own (callers import them from here)
__all__ = [
    "CHECKPOINT",
    "LOG",
    "RunInterrupted",
    "TrainConfig",
    "TrainingRun",
    "TrainResult",
    "autocast",
    "check_data_fits",
    "distill_loss",
    "evaluate",
    "inference_batch",
    "loss_step",
    "make_optimizer",
    "place",
    "predict_logits",
    "request_stop",
    "require_activation_memory",
    "require_data",
    "require_optimizer_memory",
    "resolve_device",
    "seed_everything",
    "set_fused_attention",
    "step_draw",
    "train",
    "uses_fused_adamw",
]


def train(
    model: nn.Module,
    train_data: Data,
    cfg: TrainConfig,
    eval_data: Data | None = None,
    teacher: nn.Module | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    loss: Callable[..., Tensor] | None = None,
) -> TrainResult:
    """Train ``model`` in place (one :class:`~learngene.training.epochs.TrainingRun`); returns the per-epoch history.

    A SIGINT/SIGTERM handler that calls :func:`request_stop` (the CLI's) makes it finish the current step,
    checkpoint there (with a run dir) and raise :class:`RunInterrupted`.

    Args:
        model: any module mapping images to logits (a timm ViT, an aux net, a φ-wrapped descendant).
            Only parameters with ``requires_grad`` are optimized.
        train_data: images and labels; its cached ``soft_targets`` stand in for the teacher when present.
        cfg: the run's settings.
        eval_data: evaluated (top-1) after every ``cfg.eval_every`` epochs and after the last, on a fixed
            subset of ``cfg.eval_images`` of its images (the same subset for every seed and run).
        teacher: frozen module whose logits are distilled when ``cfg.distill_lambda > 0``.
        run_dir: where ``log.jsonl`` and ``checkpoint.pt`` go (rank 0 only); None keeps nothing.
        resume: continue from ``run_dir/checkpoint.pt`` when it exists.
        loss: the per-batch loss, called as :func:`distill_loss` is (its default); a feature-distilling student
            brings its own (:attr:`learngene.training.distill.Distillation.loss`).
    """
    require_argument(model, nn.Module, "model", "a torch module (e.g. a timm ViT)")
    require_data(train_data, "train_data")
    if eval_data is not None:
        require_data(eval_data, "eval_data")
    require_argument(cfg, TrainConfig, "cfg", "a TrainConfig (learngene.TrainConfig(epochs=...))")
    if teacher is not None:
        require_argument(teacher, nn.Module, "teacher", "a torch module or None")
    if resume and run_dir is None:  # nothing to continue from: training from scratch would not say so
        raise LearngeneError(
            "resume=True (--resume) continues from the run directory's checkpoint; pass run_dir (--run-dir) too"
        )
    # its dropout, drop-path and mixup draw from the global generators: one run at a time, the caller's states kept
    with seeded_draws(None), STOPS.running() as outermost:
        run = TrainingRun(model, train_data, cfg, eval_data, teacher, run_dir, resume, loss or distill_loss)
        result = run.run()
        if run.stop_asked() and outermost:  # the signal came after the last step: the run is saved
            raise run.stopped()
        return result
