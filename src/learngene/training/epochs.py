"""A run's epochs and steps: the run's parts (:class:`TrainingRun`), started from scratch or a checkpoint
(:func:`run_training`), each epoch's steps, log record and checkpoint.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..data import Batches, BatchMixer, Data, take
from ..errors import LearngeneError
from ..formats.atomic import write_text_atomic
from . import distributed as dist
from .checkpoint import (
    LOG,
    RunState,
    diverging,
    open_run,
    zero_sums,
)
from .config import TrainConfig, known
from .data_checks import check_data_fits
from .device import require_activation_memory, require_optimizer_memory, resolve_device, set_fused_attention
from .evaluation import evaluate
from .loggers import RunLoggers, open_loggers
from .nonfinite import CUDA_CHECK_EVERY, NonFiniteWatch
from .progress import note_steps, progress_bar
from .steps import loss_step, lr_factor, make_optimizer, optimizer_step, seed_everything
from .stopping import STOPS, RunInterrupted


@dataclass
class TrainResult:
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per epoch
    steps: int = 0
    seconds: float = 0.0

    @property
    def final_acc(self) -> float | None:
        return self.history[-1].get("eval_acc") if self.history else None


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
        eval_data = take(eval_data, cfg.eval_images or None)
    if known(cfg.distill_lambda) > 0 and teacher is None and train_data.soft_targets is None:
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
class TrainingRun:
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

    def log_step(self, step_sums: Tensor, images: int) -> None:
        """Give the per-step loggers (``cfg.log``) the step's sums, learning rate and throughput; reading the sums
        waits for a GPU: per-step curves cost that."""
        if self.loggers is None:
            return
        now = time.perf_counter()
        lr = self.scheduler.get_last_lr()[0]
        self.loggers.step(
            self.state.global_step, step_sums.tolist(), lr, now - self.step_tic, images * dist.world_size()
        )
        self.step_tic = now

    def stopped(self) -> RunInterrupted:
        return STOPS.interrupted(self.state.global_step, self.ckpt_path)


def run_training(
    model: nn.Module,
    train_data: Data,
    cfg: TrainConfig,
    eval_data: Data | None,
    teacher: nn.Module | None,
    run_dir: str | Path | None,
    resume: bool,
    loss: Callable[..., Tensor],
) -> TrainResult:
    """The run :func:`learngene.training.loop.train` asks for, once its arguments are checked: its batches and
    length, then its epochs from where it stands (fresh, or resumed from ``run_dir``)."""
    device = resolve_device(cfg.device)
    eval_data = _prepare(model, train_data, cfg, eval_data, teacher, device)
    head = getattr(getattr(model, "skeleton", model), "num_classes", None) or train_data.num_classes
    mixer = BatchMixer(head, cfg.label_smoothing) if cfg.mixup else None
    batches = Batches(
        train_data,
        known(cfg.batch_size),
        shuffle=True,
        seed=cfg.seed,
        rank=dist.rank(),
        world=dist.world_size(),
        augment=cfg.augment,
        device=device,
    )
    steps_per_epoch = len(batches)
    total_steps = cfg.max_steps or known(cfg.epochs) * steps_per_epoch
    epochs = math.ceil(total_steps / steps_per_epoch)
    run = _start(model, train_data, cfg, teacher, run_dir, resume, loss, device, mixer, steps_per_epoch, total_steps)
    try:
        _run_epochs(run, batches, epochs, steps_per_epoch, eval_data, run_dir)
    except BaseException:
        if run.loggers is not None:
            run.loggers.close(failed=True)
        raise
    if run.loggers is not None:
        run.loggers.close()
    dist.barrier()
    return TrainResult(history=run.state.history, steps=run.state.global_step, seconds=run.state.seconds)


def _start(
    model: nn.Module,
    train_data: Data,
    cfg: TrainConfig,
    teacher: nn.Module | None,
    run_dir: str | Path | None,
    resume: bool,
    loss: Callable[..., Tensor],
    device: torch.device,
    mixer: BatchMixer | None,
    steps_per_epoch: int,
    total_steps: int,
) -> TrainingRun:
    """The run's parts: its optimizer and warmup-cosine schedule, its state (fresh, or restored from ``run_dir``'s
    checkpoint with the RNG states), the module its steps run and, on the main process, its loggers."""
    # a short run (e.g. one fine-tuning epoch) still decays: warmup takes at most a fifth of it
    warmup = max(1, min(round(cfg.warmup_epochs * steps_per_epoch), total_steps // 5))
    optimizer = make_optimizer(model, cfg, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, warmup, total_steps, cfg.min_lr / cfg.lr)
    )
    seed_everything(cfg.seed + 1000 * dist.rank())
    state, ckpt_path = open_run(run_dir, resume, model, optimizer, scheduler, cfg, train_data, teacher, device)
    # a model may bring its own per-sample loss (an aux net distilling a headless ancestry's features)
    run = TrainingRun(
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
        run.loggers = open_loggers(
            cfg, run_dir, state.global_step if state.global_step else None, data=getattr(train_data, "name", None)
        )
    return run


def _run_epochs(
    run: TrainingRun,
    batches: Batches,
    epochs: int,
    steps_per_epoch: int,
    eval_data: Data | None,
    run_dir: str | Path | None,
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
        stop = epoch + 1 < epochs and STOPS.now(device, state.global_step)
        run.checkpoint(epoch + 1, 0, zero_sums(), sums, forced=stop)
        if stop:
            raise run.stopped()


def _run_epoch(run: TrainingRun, batches: Batches, epoch: int, epochs: int, epoch_steps: int, sums: Tensor) -> None:
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
        step_sums = _step_sums(per_sample, logits, y, device)
        sums += step_sums
        run.log_step(step_sums, len(y))
        bar.update(1)
        if not state.global_step % watch.every:
            watch.check(state.global_step, run.ckpt_path, state.sane)
        # reading the sums waits for a GPU: at the steps where the watch reads its flags anyway
        if not bar.disable and not state.global_step % CUDA_CHECK_EVERY:
            loss_sum, correct, seen = sums.tolist()
            bar.set_postfix(loss=f"{loss_sum / max(seen, 1):.3f}", acc=f"{correct / max(seen, 1):.3f}")
        stop = step_in_epoch + 1 < epoch_steps and STOPS.now(device, state.global_step)
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


def _step_sums(per_sample: Tensor, logits: Tensor, labels: Tensor, device: torch.device) -> Tensor:
    """One step's loss sum, correct predictions and images (this rank), on the device: adding them does not sync."""
    return torch.stack(
        [
            per_sample.sum().double(),
            (logits.argmax(-1) == labels).sum().double(),
            torch.full((), len(labels), dtype=torch.float64, device=device),  # torch.tensor(..., device) would sync
        ]
    )


def _seconds_since(tic: float, device: torch.device) -> float:
    """Seconds since ``tic`` once the device has finished the steps queued so far: CUDA runs asynchronously, and
    the last step's backward and update may still be running when the host reaches the end of an epoch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - tic


def _epoch_record(run: TrainingRun, epoch: int, sums: Tensor, eval_data: Data | None, epochs: int) -> dict[str, Any]:
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
