"""A training run (:class:`TrainingRun`): built once from what :func:`~learngene.training.loop.train` is given,
started fresh or from a checkpoint, then its epochs, steps, log records and checkpoints.
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

from ..data import Batch, Batches, BatchMixer, Data, take
from ..errors import LearngeneError
from ..formats.atomic import write_text_atomic
from ..host.threads import usable_cpus
from . import distributed as dist
from .checkpoint import LOG, NonFiniteError, diverging, last_good, open_run, record_nonfinite_stop, zero_sums
from .config import TrainConfig, known
from .data_checks import check_data_fits
from .device import require_activation_memory, require_optimizer_memory, resolve_device, set_fused_attention
from .evaluation import evaluate
from .loggers import open_loggers
from .nonfinite import CUDA_CHECK_EVERY, NonFiniteWatch
from .progress import note_steps, progress_bar
from .steps import loss_step, make_optimizer, seed_everything, warmup_cosine
from .stopping import STOPS, RunInterrupted


@dataclass
class TrainResult:
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per epoch
    steps: int = 0
    seconds: float = 0.0

    @property
    def final_acc(self) -> float | None:
        return self.history[-1].get("eval_acc") if self.history else None

    @property
    def cost(self) -> dict[str, Any]:
        """What the run cost, as a gene or model file records it: its optimizer steps and seconds (to 0.01 s)."""
        return {"steps": self.steps, "seconds": round(self.seconds, 2)}


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


class TrainingRun:
    """One call of :func:`~learngene.training.loop.train`, built once and then trained (:meth:`run`): what it was
    given, the parts built for it (device, batches, optimizer, schedule, the module its steps run, loggers) and where
    it stands (``state``: what a checkpoint holds). Its epochs, steps, checkpoints and log records are its methods and
    read these from it.

    Building it checks the data against the model and the memory, moves model and teacher to the device, seeds the
    run and opens ``run_dir``: fresh, or restored from its checkpoint when ``resume`` (``train`` has checked the
    arguments' kinds).
    """

    def __init__(
        self,
        model: nn.Module,
        train_data: Data,
        cfg: TrainConfig,
        eval_data: Data | None,
        teacher: nn.Module | None,
        run_dir: str | Path | None,
        resume: bool,
        loss: Callable[..., Tensor],
    ):
        cfg = cfg.resolved()  # a setting not given (None) is the loop's: 10 epochs, batches of 128, λ = 0, every image
        self.model, self.cfg, self.teacher, self.loss_of = model, cfg, teacher, loss
        self.device = resolve_device(cfg.device)
        self.eval_data = self._place(train_data, eval_data)
        head = getattr(getattr(model, "skeleton", model), "num_classes", None) or train_data.num_classes
        self.mixer = BatchMixer(head, cfg.label_smoothing) if cfg.mixup else None
        self.batches = Batches(
            train_data,
            known(cfg.batch_size),
            shuffle=True,
            seed=cfg.seed,
            rank=dist.rank(),
            world=dist.world_size(),
            augment=cfg.augment,
            device=self.device,
        )
        self.steps_per_epoch = len(self.batches)
        self.total_steps = cfg.max_steps or known(cfg.epochs) * self.steps_per_epoch
        self.epochs = math.ceil(self.total_steps / self.steps_per_epoch)
        self.optimizer = make_optimizer(model, cfg, self.device)
        self.scheduler = warmup_cosine(self.optimizer, cfg, self.steps_per_epoch, self.total_steps)
        seed_everything(cfg.seed + 1000 * dist.rank())
        self.state, self.ckpt_path = open_run(
            run_dir, resume, model, self.optimizer, self.scheduler, cfg, train_data, teacher, self.device
        )
        self.net = _wrapped(model, cfg, self.device)
        self.watch = NonFiniteWatch(self.device, self.steps_per_epoch, last_good=self.last_good)
        if self.state.start_norm is None and self.state.global_step == 0:
            self.state.start_norm = trained_norm(model)
        self.window_start: Tensor | None = None  # the epoch sums at the previous checkpoint (or the epoch's start)
        self.step_tic = 0.0  # when the previous step ended, for the loggers' throughput
        resumed_at, data_name = self.state.global_step or None, getattr(train_data, "name", None)
        # TensorBoard / W&B (cfg.log), on the main process
        self.loggers = open_loggers(cfg, run_dir, resumed_at, data=data_name) if dist.is_main() else None

    def _place(self, train_data: Data, eval_data: Data | None) -> Data | None:
        """Check the data against the model and the memory, move model and teacher to the device; the fixed eval
        subset (the same ``cfg.eval_images`` images for every seed and run)."""
        cfg, device = self.cfg, self.device
        check_data_fits(self.model, train_data)
        if eval_data is not None:
            check_data_fits(self.model, eval_data)
            eval_data = take(eval_data, cfg.eval_images or None)
        if known(cfg.distill_lambda) > 0 and self.teacher is None and train_data.soft_targets is None:
            raise LearngeneError("distillation (λ > 0) needs a teacher or cached teacher logits")
        require_activation_memory(self.model, cfg, device, train_data.img_size)
        require_optimizer_memory(self.model, device)
        self.model.to(device)
        set_fused_attention(self.model, cfg.sdpa)
        if self.teacher is not None:
            self.teacher.to(device).eval().requires_grad_(False)
            set_fused_attention(self.teacher, cfg.sdpa)
        return eval_data

    def run(self) -> TrainResult:
        """Train from where the run stands (fresh, or resumed) to its last step: each epoch's steps, log record and
        checkpoint. A non-finite stop is noted in the run directory's log, so that a resume may change lr/clipping."""
        caller_threads = self.adopt_threads()
        try:
            self.run_epochs()
        except BaseException as exc:
            if self.loggers is not None:
                self.loggers.close(failed=True)
            if isinstance(exc, NonFiniteError) and self.ckpt_path is not None:
                if dist.is_main() and self.ckpt_path.exists():
                    record_nonfinite_stop(self.ckpt_path.parent, str(exc))
            raise
        finally:
            torch.set_num_threads(caller_threads)
        if self.loggers is not None:
            self.loggers.close()
        dist.barrier()
        return TrainResult(history=self.state.history, steps=self.state.global_step, seconds=self.state.seconds)

    def adopt_threads(self) -> int:
        """On the CPU the thread count is part of the result (matmuls split their sums by it, and the default count
        follows the machine's load): a fresh run records torch's count in its state, which every checkpoint saves, and
        a resumed run computes with the recorded count again where this process may use that many CPUs (else its
        result equals the uninterrupted run's up to the order of float sums, as after resuming with another number of
        processes). Returns the caller's count, which :meth:`run` gives back at the end."""
        caller = torch.get_num_threads()
        if self.device.type == "cpu":
            recorded = self.state.threads
            if recorded is not None and recorded != caller and recorded <= usable_cpus():
                torch.set_num_threads(recorded)
            self.state.threads = torch.get_num_threads()
        return caller

    def run_epochs(self) -> None:
        """The run's epochs from where it stands: each one's steps, log record and checkpoint."""
        cfg, state, device = self.cfg, self.state, self.device
        self.net.train()
        note_steps(state.global_step, self.total_steps)  # a resumed run starts part-way: not this run's speed
        start_epoch, start_step = state.epoch, state.step_in_epoch
        for epoch in range(start_epoch, self.epochs):
            self.batches.set_epoch(epoch, start_step if epoch == start_epoch else 0)
            # loss sum, correct, images (this rank), kept on the device: adding to them does not sync
            sums = (state.epoch_sums.clone() if epoch == start_epoch else zero_sums()).to(device)
            self.window_start = sums.clone()
            self.run_epoch(epoch, sums)
            record = self.epoch_record(epoch, sums)
            state.history.append(record)
            if cfg.progress and dist.is_main():
                tqdm.write(
                    f"{cfg.desc} epoch {epoch + 1}/{self.epochs}: "
                    + ", ".join(
                        f"{k} {v:.4g}" for k, v in record.items() if k not in ("epoch", "step", "lr", "seconds")
                    )
                )
            if self.ckpt_path is not None and dist.is_main():
                write_text_atomic(self.ckpt_path.parent / LOG, "".join(json.dumps(r) + "\n" for r in state.history))
            stop = epoch + 1 < self.epochs and STOPS.now(device, state.global_step)
            self.checkpoint(epoch + 1, 0, zero_sums(), sums, forced=stop)
            if stop:
                raise self.stopped()

    def run_epoch(self, epoch: int, sums: Tensor) -> None:
        """The steps of one epoch (from where a resumed run stopped), adding to ``sums``; checkpoints every
        ``cfg.checkpoint_every`` steps and where a stop was asked for. On CUDA nothing here waits for the GPU at every
        step (the host prepares the next batch while the GPU runs this one): the sums stay on the device and a
        non-finite loss is read every ``watch.every`` steps, before a checkpoint and at the end of the epoch (only
        per-step logging, ``cfg.log``, reads every step's sums)."""
        cfg, state, watch, batches = self.cfg, self.state, self.watch, self.batches
        epoch_steps = min(self.steps_per_epoch, self.total_steps - epoch * self.steps_per_epoch)
        tic = self.step_tic = time.perf_counter()
        bar = progress_bar(
            total=epoch_steps,
            initial=batches.start_step,
            desc=f"{cfg.desc} {epoch + 1}/{self.epochs}",
            disable=not (cfg.progress and dist.is_main()),
            leave=False,
            dynamic_ncols=True,
        )
        for step_in_epoch, batch in enumerate(batches, start=batches.start_step):
            if step_in_epoch >= epoch_steps:
                break
            sums += self.step(batch)
            bar.update(1)
            if not state.global_step % watch.every:
                watch.check(state.global_step)
            # reading the sums waits for a GPU: at the steps where the watch reads its flags anyway
            if not bar.disable and not state.global_step % CUDA_CHECK_EVERY:
                loss_sum, correct, seen = sums.tolist()
                bar.set_postfix(loss=f"{loss_sum / max(seen, 1):.3f}", acc=f"{correct / max(seen, 1):.3f}")
            last = step_in_epoch + 1 == epoch_steps
            stop = not last and STOPS.now(self.device, state.global_step)
            if stop or (cfg.checkpoint_every and not state.global_step % cfg.checkpoint_every and not last):
                watch.check(state.global_step)
                state.seconds += _seconds_since(tic, self.device)
                tic = time.perf_counter()
                self.checkpoint(epoch, step_in_epoch + 1, sums, sums, forced=stop)
            if stop:
                bar.close()
                raise self.stopped()
        bar.close()
        watch.check(state.global_step)  # before the epoch's record and checkpoint
        state.seconds += _seconds_since(tic, self.device)

    def step(self, batch: Batch) -> Tensor:
        """One optimizer step on ``batch``: back-propagate, clip, update, advance the schedule; a non-finite loss or
        gradient stops the run with one line (on the CPU before it reaches the weights, on CUDA when the watch next
        reads its flags). Returns the step's loss sum, correct predictions and images (this rank, on the device)."""
        state, watch = self.state, self.watch
        loss, per_sample, logits, y = loss_step(
            self.net, batch, self.teacher, self.cfg, self.device, self.mixer, self.loss_of
        )
        watch.loss(loss, state.global_step)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.cfg.grad_clip
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip) if clip else None
        if grad_norm is not None:
            watch.gradients(grad_norm, state.global_step)
        watch.note(loss, grad_norm, state.global_step)
        self.optimizer.step()
        self.scheduler.step()
        state.global_step += 1
        note_steps(state.global_step, self.total_steps)
        step_sums = _step_sums(per_sample, logits, y, self.device)
        self.log_step(step_sums, len(y))
        return step_sums

    def epoch_record(self, epoch: int, sums: Tensor) -> dict[str, Any]:
        """One line of the log: the epoch's loss and accuracy over every rank, the learning rate, the eval metrics."""
        totals = dist.all_reduce_sum(sums).cpu()
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "step": self.state.global_step,
            "train_loss": totals[0].item() / max(totals[2].item(), 1),
            "train_acc": totals[1].item() / max(totals[2].item(), 1),
            "lr": self.scheduler.get_last_lr()[0],
            "seconds": self.state.seconds,
        }
        eval_data, cfg = self.eval_data, self.cfg
        if eval_data is not None and cfg.evaluates_after(epoch + 1, self.epochs):
            shown = cfg.progress and dist.is_main()
            desc = f"{cfg.desc} {epoch + 1}/{self.epochs} evaluate ({len(eval_data)} images)" if shown else None
            tic = time.perf_counter()
            metrics = evaluate(self.model, eval_data, cfg.eval_batch_size, self.device, desc=desc)
            record.update(eval_acc=metrics["acc"], eval_loss=metrics["loss"])
            if self.loggers is not None:
                self.loggers.epoch(record, len(eval_data), time.perf_counter() - tic)
        elif self.loggers is not None:
            self.loggers.epoch(record, 0, 0.0)
        return record

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
        self.state.save(self.ckpt_path, self.model, self.optimizer, self.scheduler)
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

    def last_good(self) -> str:
        """The end of a non-finite stop's message: where to resume from, or that the run must start again."""
        return last_good(self.ckpt_path, self.state.sane)

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

    def stop_asked(self) -> bool:
        """Whether a signal asked this run to stop (on any rank)."""
        return STOPS.now(self.device)

    def stopped(self) -> RunInterrupted:
        return STOPS.interrupted(self.state.global_step, self.ckpt_path)


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
