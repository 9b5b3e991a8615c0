"""The one training loop: ancestries, auxiliary nets, scaler/φ adaptation and descendants all train here.

Loss: ``(1−λ)·CE + λ·τ²·KL(p_teacher ‖ p_student)`` (soft distillation, Hinton et al. 2015; TLEG
Eq. 6 with λ=1, τ=1; WAVE Eq. 6 adds CE). AdamW, linear warmup then cosine decay per step, gradient
clipping, bf16 autocast on CUDA only (bf16 on some CPUs dies in oneDNN), DDP under ``torchrun``.
Every epoch appends to ``log.jsonl`` and writes ``checkpoint.pt`` atomically; ``resume=True`` continues
from it bit for bit (model, optimizer, schedule, RNG states and the data position are all restored;
:class:`~learngene.training.checkpoint.RunState` is what a checkpoint holds, :mod:`learngene.training.checkpoint` the run directory). One step is :func:`loss_step` then :func:`optimizer_step`.
"""

from __future__ import annotations

import json
import math
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..data import Batch, Batches, BatchMixer, Data, take
from ..errors import ArgumentTypeError, DataError, LearngeneError, require_argument
from ..errors import setting as by_caller
from ..formats.atomic import write_text_atomic
from ..vit.naflex import image_input
from ..vit.spec import available_memory, training_activation_bytes
from . import distributed as dist
from .checkpoint import (
    CHECKPOINT,
    LOG,
    NonFiniteError,
    RunState,
    diverging,
    open_run,
    record_nonfinite_stop,
    zero_sums,
)
from .config import TrainConfig
from .loggers import RunLoggers, open_loggers
from .nonfinite import CUDA_CHECK_EVERY, NonFiniteWatch
from .progress import note_steps, progress_bar

# ---- stopping on SIGINT / SIGTERM at a step boundary ---------------------------------------------------
STOP_CHECK_EVERY = 20  # steps between the ranks' agreement on a stop under DDP (one tiny all-reduce each)
_pending_stop: list[str] = []  # the signal a running loop is asked to stop for ("SIGINT" / "SIGTERM")
_running_loops = [0]


class RunInterrupted(KeyboardInterrupt):
    """A signal stopped a training loop between two optimizer steps; ``checkpoint`` is where it saved the
    run (None without a run dir). ``--resume`` continues from it bit for bit."""

    def __init__(self, signame: str, step: int, checkpoint: Path | None):
        super().__init__(signame)
        self.signame, self.step, self.checkpoint = signame, step, checkpoint


def request_stop(signame: str) -> bool:
    """For a signal handler: ask the running training loop to checkpoint and stop after its current step.
    False when no loop runs or a stop was already asked (a second Ctrl-C): then the caller stops at once."""
    if not _running_loops[0] or _pending_stop:
        return False
    _pending_stop.append(signame)
    return True


def _stop_now(global_step: int, device: torch.device) -> bool:
    """Whether every rank stops after this step. One process reads a flag; ranks agree every
    STOP_CHECK_EVERY steps, so a signal that reaches only some of them stops all at the same step."""
    if not dist.is_distributed():
        return bool(_pending_stop)
    return global_step % STOP_CHECK_EVERY == 0 and dist.count_true(bool(_pending_stop), device) > 0


@dataclass
class TrainResult:
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per epoch
    steps: int = 0
    seconds: float = 0.0

    @property
    def final_acc(self) -> float | None:
        return self.history[-1].get("eval_acc") if self.history else None


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise LearngeneError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise LearngeneError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LearngeneError("--device cuda was asked for but no GPU is visible; use --device auto or cpu")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise LearngeneError(
            f"--device {name} asked for but only {torch.cuda.device_count()} GPU(s) are visible; "
            f"use cuda:0..cuda:{torch.cuda.device_count() - 1}"
        )
    return device


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


def autocast(device: torch.device):
    """bf16 autocast on CUDA; plain fp32 elsewhere (bf16 kills some CPUs in oneDNN's AMX path)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def set_fused_attention(model: nn.Module, enabled: bool = True) -> int:
    """Attention through ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on CUDA) or
    timm's eager softmax(QKᵀ)V, for every timm attention module of ``model``; returns how many were set."""
    count = 0
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            cast(Any, module).fused_attn = enabled  # timm's Attention flag
            count += 1
    return count


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


def _lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warmup to 1, then cosine decay to ``min_ratio`` at ``total`` steps."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


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


def require_data(data: Any, argument: str) -> None:
    """Refuse, naming ``argument``, something that is not data the loop can batch (before an AttributeError)."""
    if not (hasattr(data, "get_batch") and hasattr(data, "__len__")):
        shown = repr(data) if len(repr(data)) <= 40 else repr(data)[:37] + "..."
        raise ArgumentTypeError(
            f"{argument} must be image data (learngene.data.load_dataset(...)), got {type(data).__name__} {shown}"
        )


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: Data,
    batch_size: int = 512,
    device: torch.device | None = None,
    desc: str | None = None,
) -> dict[str, float]:
    """Top-1 accuracy and mean cross-entropy of ``model`` on ``data`` (all ranks together under DDP); with
    ``desc``, a progress bar of that name while it runs. It runs on ``device`` (the model is moved there, as
    :func:`train` moves it), by default where the model's weights are."""
    require_argument(model, nn.Module, "model", "a torch module (e.g. a timm ViT)")
    require_data(data, "data")
    require_argument(batch_size, int, "batch_size", "a whole number of images")
    if batch_size < 1:
        raise LearngeneError(f"batch_size must be at least 1, got {batch_size}")
    check_data_fits(model, data)
    device = place(model, device)
    batch_size = inference_batch(model, batch_size, data.img_size, device)
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # correct, loss sum, count
    batches = Batches(data, batch_size, shuffle=False, rank=dist.rank(), world=dist.world_size(), device=device)
    bar = progress_bar(
        total=len(batches), desc=desc, unit="batch", leave=False, dynamic_ncols=True, disable=desc is None
    )
    for batch in batches:
        x, y = batch.x, batch.y
        with autocast(device):
            logits = model(x).float()
        totals += torch.stack(
            [
                (logits.argmax(-1) == y).sum().double(),
                F.cross_entropy(logits, y, reduction="sum").double(),
                torch.full((), len(y), dtype=torch.float64, device=device),  # torch.tensor(..., device) would sync
            ]
        )
        bar.update(1)
    bar.close()
    dist.all_reduce_sum(totals)
    model.train(was_training)
    correct, loss, count = totals.tolist()
    return {"acc": correct / count, "loss": loss / count}


@torch.no_grad()
def predict_logits(model: nn.Module, data: Data, batch_size: int = 512, device: torch.device | None = None) -> Tensor:
    """Logits of ``model`` for every image of ``data`` in order (e.g. to cache a teacher's outputs), on the CPU. It
    runs on ``device`` (the model is moved there, as :func:`train` moves it), by default where the model's weights are."""
    device = place(model, device)
    batch_size = inference_batch(model, batch_size, data.img_size, device)
    was_training = model.training
    model.eval()
    out = []
    for batch in Batches(data, batch_size, shuffle=False, device=device):
        with autocast(device):
            out.append(model(batch.x).float().cpu())
    model.train(was_training)
    return torch.cat(out)


def place(model: nn.Module, device: torch.device | None) -> torch.device:
    """Where ``model`` runs: ``device``, moving the model there in place when its weights are elsewhere (a CPU
    ancestry asked to run on the GPU), or, without one, where its weights are."""
    if device is None:
        return next(model.parameters()).device
    model.to(device)
    return device


def _block_sizes(model: nn.Module, img_size: int | None) -> tuple[int, int, int, int, int] | None:
    """(tokens, width, heads, MLP hidden, depth) of a ViT fed ``img_size`` images (None for another layout): a
    model that takes any image size is counted at ``img_size`` (a RADIO fed 512-px images has a 2048-px grid)."""
    vit: Any = getattr(model, "skeleton", model)  # a timm ViT, or a GeneNet around one
    try:
        block = vit.blocks[0]
        embed = getattr(vit, "patch_embed", None)  # a NaFlexVit has none: its position grid's (learngene.vit.naflex)
        patches = embed.num_patches if embed is not None else math.prod(vit.embeds.pos_embed_grid_size)
        expects = image_input(vit)
        if img_size and expects and expects[2]:
            patch = embed.patch_size[0] if embed is not None else vit.embeds.patch_size[0]
            patches = (img_size // patch) ** 2
        tokens = patches + getattr(vit, "num_prefix_tokens", 1)
        return tokens, vit.embed_dim, block.attn.num_heads, block.mlp.fc1.out_features, len(vit.blocks)
    except (AttributeError, IndexError, TypeError):
        return None


def _free_memory(device: torch.device) -> int | None:
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else available_memory()


def require_activation_memory(
    model: nn.Module, cfg: TrainConfig, device: torch.device, img_size: int | None = None
) -> None:
    """Refuse, before the first step allocates it, a batch whose activations cannot fit in the device's free memory
    (:func:`learngene.vit.spec.training_activation_bytes`, a lower bound) for images of ``img_size`` px; a model
    of unknown layout is not checked."""
    sizes = _block_sizes(model, img_size)
    if sizes is None:
        return
    per_rank = math.ceil(cfg.batch_size / dist.world_size())
    need = training_activation_bytes(*sizes, per_rank, 2 if device.type == "cuda" else 4)  # bf16 autocast on CUDA
    free = _free_memory(device)
    if free is not None and need > free:
        raise LearngeneError(
            f"a training step of {per_rank} images of {sizes[0]:,} tokens through {sizes[4]} blocks of "
            f"width {sizes[1]} needs at least {need / 2**30:,.1f} GiB for its activations, but "
            f"{device.type} has {free / 2**30:,.1f} GiB free; choose a smaller --batch-size or "
            f"--img-size (or a larger --patch-size)"
        )


def require_optimizer_memory(model: nn.Module, device: torch.device) -> None:
    """Refuse in one line, before the first step allocates them, the fp32 gradients and AdamW's two moments of the
    trained parameters when they cannot fit beside the weights (already allocated) in the device's free memory."""
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    need, free = 3 * 4 * trained, _free_memory(device)
    if free is not None and need > free:
        raise LearngeneError(
            f"training {trained:,} parameters needs {need / 2**30:,.1f} GiB for their gradients and AdamW's two "
            f"moments, but {device.type} has {free / 2**30:,.1f} GiB free; choose a smaller model (--depth, "
            f"--embed-dim)"
        )


def inference_batch(model: nn.Module, batch_size: int, img_size: int | None, device: torch.device) -> int:
    """The largest batch, at most ``batch_size``, whose forward pass fits in the device's free memory: one block's
    activations at a time (the training estimate at depth 1, a lower bound). Evaluation and teacher logits do not
    depend on the batch, so a batch too large for the machine is made smaller, not refused; one that cannot run
    a single image is refused in one line, before anything is allocated."""
    sizes = _block_sizes(model, img_size)
    free = _free_memory(device)
    if sizes is None or free is None:
        return batch_size
    per_image = training_activation_bytes(*sizes[:4], 1, 1, 2 if device.type == "cuda" else 4)
    if per_image > free:
        raise LearngeneError(
            f"a forward pass of one image of {sizes[0]:,} tokens through a block of width {sizes[1]} needs at "
            f"least {per_image / 2**30:,.1f} GiB, but {device.type} has {free / 2**30:,.1f} GiB free; choose a "
            f"smaller --img-size (or a larger --patch-size)"
        )
    return max(1, min(batch_size, free // per_image))


def check_data_fits(model: nn.Module, data: Data) -> None:
    """Fail with one line if ``data``'s images or labels do not fit ``model``'s input and head.

    A model that wraps the network it runs (:class:`~learngene.descendant.GeneNet`) names it
    ``skeleton``; the check reads that network's patch embedding and classifier size. Models without
    a patch embedding (any classifier can be trained here) are checked on labels only.
    """
    model = getattr(model, "skeleton", model)
    expects = image_input(model)
    if expects is not None:
        chans, size, any_size = expects
        if data.in_chans != chans:
            raise DataError(
                f"{data.name} has {data.in_chans}-channel images but the model expects {chans}; "
                f"load the data with {by_caller(f'in_chans={chans}', f'--in-chans {chans}')} or build the model for "
                f"{data.in_chans}"
            )
        if data.img_size != size and not any_size:
            raise DataError(
                f"{data.name} has {data.img_size}px images but the model expects {size}px; "
                f"load the data with {by_caller(f'img_size={size}', f'--img-size {size}')}"
            )
    classes = getattr(model, "num_classes", None)
    if classes is not None and data.num_classes > classes:
        raise DataError(
            f"{data.name} has {data.num_classes} classes but the model's head has {classes}; "
            f"build the model with num_classes={data.num_classes}"
        )


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
    if cfg.distill_lambda > 0 and soft is None:
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


def optimizer_step(
    loss: Tensor,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    cfg: TrainConfig,
    watch: NonFiniteWatch,
    step: int,
    ckpt_path: Path | None,
    sane: bool = True,
) -> None:
    """Back-propagate ``loss``, clip, update and advance the schedule; a non-finite loss or gradient stops
    the run with one line (at which ``step`` of the run it happened, and the last good checkpoint): on the CPU
    before it reaches the weights, on CUDA when ``watch`` next reads its flags."""
    watch.loss(loss, step, ckpt_path, sane)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip) if cfg.grad_clip else None
    if grad_norm is not None:
        watch.gradients(grad_norm, step, ckpt_path, sane)
    watch.note(loss, grad_norm, step)
    optimizer.step()
    scheduler.step()


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
    """Train ``model`` in place; returns the per-epoch history.

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
            by_caller("resume=True continues from run_dir; pass run_dir too", "--resume needs --run-dir")
        )
    _running_loops[0] += 1
    try:
        result = _train(model, train_data, cfg, eval_data, teacher, run_dir, resume, loss or distill_loss)
        stopped = (
            dist.count_true(bool(_pending_stop), resolve_device(cfg.device)) > 0
            if dist.is_distributed()
            else bool(_pending_stop)
        )
        if stopped and _running_loops[0] == 1:  # the signal came after the last step: the run is saved
            raise RunInterrupted(_pending_stop[0], result.steps, Path(run_dir) / CHECKPOINT if run_dir else None)
        return result
    except NonFiniteError as exc:
        if run_dir is not None and dist.is_main() and (Path(run_dir) / CHECKPOINT).exists():
            record_nonfinite_stop(Path(run_dir), str(exc))
        raise
    finally:
        _running_loops[0] -= 1
        if not _running_loops[0]:
            _pending_stop.clear()


def _prepare(
    model: nn.Module,
    train_data: Data,
    cfg: TrainConfig,
    eval_data: Data | None,
    teacher: nn.Module | None,
    device: torch.device,
) -> Data | None:
    """Check the data against the model, move model and teacher to ``device``; the fixed eval subset."""
    check_data_fits(model, train_data)
    if eval_data is not None:
        check_data_fits(model, eval_data)
        eval_data = take(eval_data, cfg.eval_images)
    if cfg.distill_lambda > 0 and teacher is None and train_data.soft_targets is None:
        raise LearngeneError("distillation (λ > 0) needs a teacher or cached teacher logits")
    require_activation_memory(model, cfg, device, train_data.img_size)
    require_optimizer_memory(model, device)
    model.to(device)
    set_fused_attention(model, cfg.sdpa)
    if teacher is not None:
        teacher.to(device).eval().requires_grad_(False)
        set_fused_attention(teacher, cfg.sdpa)
    return eval_data


def _wrapped(model: nn.Module, cfg: TrainConfig, device: torch.device) -> nn.Module:
    """The module the steps run: compiled first, then wrapped in DDP (as nanoGPT does)."""
    net = cast(nn.Module, torch.compile(model)) if cfg.compile else model
    if dist.is_distributed():
        # timm's (1, 1, D) class token gets a gradient with another (irrelevant) stride for its size-1 dims,
        # and DDP warns about it on every run (timm issue #2147): harmless, so not shown
        warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
        net = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    return net


def trained_norm(model: nn.Module) -> float:
    """The global L2 norm of ``model``'s trained parameters (the weights the sanity rules watch)."""
    norms = [p.detach().float().norm() for p in model.parameters() if p.requires_grad]
    return float(torch.stack(norms).norm()) if norms else 0.0


@dataclass
class _Run:
    """One training run's parts, as the epoch loop uses them."""

    model: nn.Module
    net: nn.Module
    teacher: nn.Module | None
    cfg: TrainConfig
    device: torch.device
    optimizer: torch.optim.Optimizer
    scheduler: Any
    mixer: BatchMixer | None
    loss_of: Callable
    state: RunState
    ckpt_path: Path | None
    watch: NonFiniteWatch
    total_steps: int = 0

    window_start: Tensor | None = None  # the epoch sums at the previous checkpoint (or the epoch's start)
    loggers: RunLoggers | None = None  # TensorBoard / W&B (cfg.log), on the main process
    step_tic: float = 0.0  # when the previous step ended, for the loggers' throughput

    def checkpoint(
        self, epoch: int, step_in_epoch: int, epoch_sums: Tensor, sums: Tensor, forced: bool = False
    ) -> None:
        """Save the run here if its weights and loss are sane (``checkpoint.diverging``), or if ``forced`` (a
        signal's stop, marked then); ``sums``: the epoch's sums so far, whose change since the previous
        checkpoint is the loss the rules read."""
        if self.ckpt_path is None:
            return
        why = self.divergence(sums)
        if why is not None and not forced:
            return  # the previous (sane) checkpoint stays the one a resume starts from
        self.state.sane = why is None
        self.state.epoch, self.state.step_in_epoch, self.state.epoch_sums = epoch, step_in_epoch, epoch_sums
        self.state.save(self.ckpt_path, self.model, self.optimizer, self.scheduler, self.cfg)
        if self.loggers is not None:  # what a resume continues from is on disk in the curves too
            self.loggers.flush()

    def divergence(self, sums: Tensor) -> str | None:
        """Why the run is not sane now (weights or loss, ``checkpoint.diverging``), or None; every rank calls it
        at the same step (the loss is summed over ranks) and gets the same answer."""
        start = self.window_start if self.window_start is not None else torch.zeros_like(sums)
        window = dist.all_reduce_sum((sums - start).double().clone()).tolist()
        self.window_start = sums.clone()
        norm = trained_norm(self.model)
        if not math.isfinite(norm):
            return None  # RunState.save refuses non-finite weights with its own message
        loss = window[0] / window[2] if window[2] > 0 else None
        why = diverging(norm, self.state.start_norm, loss, self.state.best_loss)
        if why is None and loss is not None:
            self.state.best_loss = loss if self.state.best_loss is None else min(self.state.best_loss, loss)
        return why

    def stopped(self) -> RunInterrupted:
        return RunInterrupted(_pending_stop[0] if _pending_stop else "stop", self.state.global_step, self.ckpt_path)


def _train(
    model: nn.Module,
    train_data: Data,
    cfg: TrainConfig,
    eval_data: Data | None,
    teacher: nn.Module | None,
    run_dir: str | Path | None,
    resume: bool,
    loss: Callable[..., Tensor],
) -> TrainResult:
    device = resolve_device(cfg.device)
    eval_data = _prepare(model, train_data, cfg, eval_data, teacher, device)
    head = getattr(getattr(model, "skeleton", model), "num_classes", None) or train_data.num_classes
    mixer = BatchMixer(head, cfg.label_smoothing) if cfg.mixup else None
    batches = Batches(
        train_data,
        cfg.batch_size,
        shuffle=True,
        seed=cfg.seed,
        rank=dist.rank(),
        world=dist.world_size(),
        augment=cfg.augment,
        device=device,
    )
    steps_per_epoch = len(batches)
    total_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    epochs = math.ceil(total_steps / steps_per_epoch)
    # a short run (e.g. one fine-tuning epoch) still decays: warmup takes at most a fifth of it
    warmup = max(1, min(round(cfg.warmup_epochs * steps_per_epoch), total_steps // 5))

    optimizer = make_optimizer(model, cfg, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: _lr_factor(s, warmup, total_steps, cfg.min_lr / cfg.lr)
    )
    seed_everything(cfg.seed + 1000 * dist.rank())
    state, ckpt_path = open_run(run_dir, resume, model, optimizer, scheduler, cfg, train_data, teacher, device)
    # a model may bring its own per-sample loss (an aux net distilling a headless ancestry's features)
    run = _Run(
        model,
        _wrapped(model, cfg, device),
        teacher,
        cfg,
        device,
        optimizer,
        scheduler,
        mixer,
        loss,
        state,
        ckpt_path,
        NonFiniteWatch(device, steps_per_epoch),
        total_steps,
    )

    if state.start_norm is None and state.global_step == 0:
        state.start_norm = trained_norm(model)
    if dist.is_main():
        run.loggers = open_loggers(cfg, run_dir, state.global_step if state.global_step else None)
    try:
        _run_epochs(run, batches, epochs, steps_per_epoch, eval_data, run_dir)
    except BaseException:
        if run.loggers is not None:
            run.loggers.close(failed=True)
        raise
    if run.loggers is not None:
        run.loggers.close()
    dist.barrier()
    return TrainResult(history=state.history, steps=state.global_step, seconds=state.seconds)


def _run_epochs(
    run: _Run, batches: Batches, epochs: int, steps_per_epoch: int, eval_data: Data | None, run_dir: str | Path | None
) -> None:
    """The run's epochs from where it stands: each one's steps, log record and checkpoint."""
    cfg, state, device, total_steps = run.cfg, run.state, run.device, run.total_steps
    run.net.train()
    note_steps(state.global_step, total_steps)  # a resumed run starts part-way: that part is not this run's speed
    start_epoch, start_step = state.epoch, state.step_in_epoch
    for epoch in range(start_epoch, epochs):
        batches.set_epoch(epoch, start_step if epoch == start_epoch else 0)
        epoch_steps = min(steps_per_epoch, total_steps - epoch * steps_per_epoch)
        # loss sum, correct, images (this rank), kept on the device: adding to them does not sync
        sums = (state.epoch_sums.clone() if epoch == start_epoch else zero_sums()).to(device)
        run.window_start = sums.clone()
        _run_epoch(run, batches, epoch, epochs, epoch_steps, sums)
        record = _epoch_record(run, epoch, sums, eval_data, epochs)
        state.history.append(record)
        if cfg.progress and dist.is_main():
            tqdm.write(
                f"{cfg.desc} epoch {epoch + 1}/{epochs}: "
                + ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k not in ("epoch", "step", "lr", "seconds"))
            )
        if run_dir is not None and dist.is_main():
            write_text_atomic(Path(run_dir) / LOG, "".join(json.dumps(r) + "\n" for r in state.history))
        stop = epoch + 1 < epochs and _stop_now(state.global_step, device)
        run.checkpoint(epoch + 1, 0, zero_sums(), sums, forced=stop)
        if stop:
            raise run.stopped()


def _run_epoch(run: _Run, batches: Batches, epoch: int, epochs: int, epoch_steps: int, sums: Tensor) -> None:
    """The steps of one epoch (from where a resumed run stopped), adding to ``sums``; checkpoints every
    ``cfg.checkpoint_every`` steps and where a stop was asked for. On CUDA nothing here waits for the GPU at every
    step (the host prepares the next batch while the GPU runs this one): the sums stay on the device and a
    non-finite loss is read every ``run.watch.every`` steps, before a checkpoint and at the end of the epoch (only
    per-step logging, ``cfg.log``, reads every step's sums)."""
    cfg, state, device, watch = run.cfg, run.state, run.device, run.watch
    tic = run.step_tic = time.perf_counter()
    bar = progress_bar(
        total=epoch_steps,
        initial=batches.start_step,
        desc=f"{cfg.desc} {epoch + 1}/{epochs}",
        disable=not (cfg.progress and dist.is_main()),
        leave=False,
        dynamic_ncols=True,
    )
    for step_in_epoch, batch in enumerate(batches, start=batches.start_step):
        if step_in_epoch >= epoch_steps:
            break
        loss, per_sample, logits, y = loss_step(run.net, batch, run.teacher, cfg, device, run.mixer, run.loss_of)
        optimizer_step(
            loss, run.model, run.optimizer, run.scheduler, cfg, watch, state.global_step, run.ckpt_path, state.sane
        )
        state.global_step += 1
        note_steps(state.global_step, run.total_steps)
        step_sums = torch.stack(
            [
                per_sample.sum().double(),
                (logits.argmax(-1) == y).sum().double(),
                torch.full((), len(y), dtype=torch.float64, device=device),  # torch.tensor(..., device) would sync
            ]
        )
        sums += step_sums
        if run.loggers is not None:  # reading the step's sums waits for a GPU: per-step curves cost that
            now = time.perf_counter()
            lr = run.scheduler.get_last_lr()[0]
            run.loggers.step(state.global_step, step_sums.tolist(), lr, now - run.step_tic, len(y) * dist.world_size())
            run.step_tic = now
        bar.update(1)
        if not state.global_step % watch.every:
            watch.check(state.global_step, run.ckpt_path, state.sane)
        # reading the sums waits for a GPU: at the steps where the watch reads its flags anyway
        if not bar.disable and not state.global_step % CUDA_CHECK_EVERY:
            loss_sum, correct, seen = sums.tolist()
            bar.set_postfix(loss=f"{loss_sum / max(seen, 1):.3f}", acc=f"{correct / max(seen, 1):.3f}")
        stop = step_in_epoch + 1 < epoch_steps and _stop_now(state.global_step, device)
        if stop or (
            cfg.checkpoint_every and not state.global_step % cfg.checkpoint_every and step_in_epoch + 1 < epoch_steps
        ):
            watch.check(state.global_step, run.ckpt_path, state.sane)
            state.seconds += _seconds_since(tic, device)
            tic = time.perf_counter()
            run.checkpoint(epoch, step_in_epoch + 1, sums, sums, forced=stop)
        if stop:
            bar.close()
            raise run.stopped()
    bar.close()
    watch.check(state.global_step, run.ckpt_path, state.sane)  # before the epoch's record and checkpoint
    state.seconds += _seconds_since(tic, device)


def _seconds_since(tic: float, device: torch.device) -> float:
    """Seconds since ``tic`` once the device has finished the steps queued so far: CUDA runs asynchronously, and
    the last step's backward and update may still be running when the host reaches the end of an epoch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - tic


def _epoch_record(run: _Run, epoch: int, sums: Tensor, eval_data: Data | None, epochs: int) -> dict[str, Any]:
    """One line of the log: the epoch's loss and accuracy over every rank, the learning rate, the eval metrics."""
    totals = dist.all_reduce_sum(sums).cpu()
    record: dict[str, Any] = {
        "epoch": epoch + 1,
        "step": run.state.global_step,
        "train_loss": totals[0].item() / max(totals[2].item(), 1),
        "train_acc": totals[1].item() / max(totals[2].item(), 1),
        "lr": run.scheduler.get_last_lr()[0],
        "seconds": run.state.seconds,
    }
    if eval_data is not None and run.cfg.evaluates_after(epoch + 1, epochs):
        shown = run.cfg.progress and dist.is_main()
        desc = f"{run.cfg.desc} {epoch + 1}/{epochs} evaluate ({len(eval_data)} images)" if shown else None
        tic = time.perf_counter()
        metrics = evaluate(run.model, eval_data, run.cfg.eval_batch_size, run.device, desc=desc)
        record.update(eval_acc=metrics["acc"], eval_loss=metrics["loss"])
        if run.loggers is not None:
            run.loggers.epoch(record, len(eval_data), time.perf_counter() - tic)
    elif run.loggers is not None:
        run.loggers.epoch(record, 0, 0.0)
    return record
