"""A training run's directory: its checkpoint (what ``resume`` restores, bit for bit), its log, its fingerprint.

:class:`RunState` is what a checkpoint holds besides the model, optimizer and schedule: the position in
the data, the history, the RNG states of every rank and the sums of the unfinished epoch.
:func:`run_fingerprint` says which settings a resumed run must share with the checkpointed one, and
:func:`open_run` starts a run in a directory: fresh, or resumed from its checkpoint.
"""

from __future__ import annotations

import json
import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from ..data import Data
from ..errors import LearngeneError, LearngeneWarning, TrainingError, assigned, first_line, named, shown
from ..formats.atomic import quote, save_torch_atomic, write_text_atomic
from ..formats.weights import digest, nonfinite_tensor, torch_load_weights_only
from . import distributed as dist
from .config import FINGERPRINT_KEYS, TrainConfig

CHECKPOINT = "checkpoint.pt"
CHECKPOINT_KEYS = {
    "model",
    "optimizer",
    "scheduler",
    "rng",
    "epoch",
    "step_in_epoch",
    "global_step",
    "history",
    "seconds",
    "epoch_sums",
}
LOG = "log.jsonl"


def _rng_state() -> dict[str, Any]:
    np_state: Any = np.random.get_state()  # the legacy tuple (name, keys, pos, has_gauss, cached)
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *map(float, np_state[2:])],
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), float(gauss)))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class NonFiniteError(TrainingError):
    """The loss, the gradients or the weights became NaN or infinite: the run stops at that step."""


# what a run stopped by a non-finite loss may change when it resumes (the stop is recorded in its log.jsonl)
AFTER_NONFINITE = ("lr", "grad_clip")
STOPPED_NONFINITE = "non-finite"


# When is a checkpoint worth resuming after a divergence? A run whose loss turns NaN has usually been diverging
# for a while: its weights grow by orders of magnitude and its loss climbs far above what it had reached, while
# both stay finite. A checkpoint written then is finite but already lost, and a resume with a lower lr fails
# again at the same step. So a checkpoint is written only when the run looks sane, by two rules on what the
# loop already has at hand:
#   - weights: every trained tensor finite and their global L2 norm at most WEIGHT_GROWTH × its value at the
#     run's first step. Healthy training (AdamW with weight decay) moves that norm by a small factor; a
#     divergence by orders of magnitude (1e5 in a reported run), so 100× separates the two with margin both ways.
#   - loss: the mean training loss over the steps since the previous checkpoint at most LOSS_GROWTH × the
#     lowest such mean the run has reached, plus LOSS_SLACK (an absolute margin, so that a loss near 0 may
#     fluctuate). A cross-entropy or distillation loss that doubles above its best, plus one nat, is not noise.
# A checkpoint that fails either rule is not written (the previous one stays: a killed run then resumes from
# further back, still to the same result); a stop asked by a signal is written anyway and marked, so that a
# non-finite stop after it can say honestly that no sane checkpoint is left and the run must start again.
WEIGHT_GROWTH = 100.0
LOSS_GROWTH = 2.0
LOSS_SLACK = 1.0


def diverging(norm: float, start_norm: float | None, window_loss: float | None, best_loss: float | None) -> str | None:
    """Why a checkpoint with weight norm ``norm`` and recent mean loss ``window_loss`` is not sane, or None."""
    if start_norm and norm > WEIGHT_GROWTH * start_norm:
        return f"the weights' norm grew from {start_norm:.3g} to {norm:.3g}"
    if window_loss is not None and not window_loss == window_loss:  # NaN
        return "the loss is NaN"
    if window_loss is not None and best_loss is not None and window_loss > LOSS_GROWTH * best_loss + LOSS_SLACK:
        return f"the loss rose to {window_loss:.3g} from a best of {best_loss:.3g}"
    return None


def last_good(ckpt_path: Path | None, sane: bool = True) -> str:
    """The end of a non-finite stop's message: where to resume from, or that the run must start again."""
    if ckpt_path is None:
        return ""
    if not ckpt_path.exists() or not sane:
        where = "" if not ckpt_path.exists() else f" (another run_dir (--run-dir), or delete {quote(ckpt_path.parent)})"
        return (
            f"; no checkpoint of this run has sane weights and loss (each is checked as it is written: weights "
            f"within {WEIGHT_GROWTH:g}× their starting norm, loss within {LOSS_GROWTH:g}× its best + {LOSS_SLACK:g}), "
            f"so a resume would diverge again: start the run over{where} with a lower {named('lr')} and/or a {named('grad_clip')}"
        )
    return (
        f"; the last good checkpoint (sane weights and loss) is {quote(ckpt_path)}: rerun with "
        f"{assigned('resume', True, '')} and a lower {named('lr')} and/or a {named('grad_clip')} (only those two may "
        "change) to continue from it"
    )


def record_nonfinite_stop(run_dir: Path, message: str) -> None:
    """Note in log.jsonl that the run stopped on a non-finite value, so that resuming it may change lr/clipping."""
    log = run_dir / LOG
    before = log.read_text() if log.exists() else ""
    write_text_atomic(log, before + json.dumps({"stopped": STOPPED_NONFINITE, "why": message}) + "\n")


def stopped_by_nonfinite(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` last stopped on a non-finite loss (its log.jsonl ends with that record)."""
    try:
        lines = (run_dir / LOG).read_text().splitlines()
        return bool(lines) and json.loads(lines[-1]).get("stopped") == STOPPED_NONFINITE
    except (OSError, ValueError, AttributeError):
        return False


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        ckpt = torch_load_weights_only(path)
    except ValueError as exc:
        raise TrainingError(f"checkpoint {quote(path)} is unreadable ({exc}); delete it to start over") from None
    if not isinstance(ckpt, dict) or not CHECKPOINT_KEYS <= set(ckpt):
        raise TrainingError(
            f"{quote(path)} is not a learngene training checkpoint; delete it or give another run_dir (--run-dir)"
        )
    for key, (fits, wanted) in _FIELDS.items():
        if key in ckpt and not fits(ckpt[key]):
            raise TrainingError(
                f"checkpoint {quote(path)} records {key}={shown(ckpt[key])} where learngene writes "
                f"{wanted}: it was edited or damaged; delete it (or give another run_dir (--run-dir)) to start over"
            )
    return ckpt


def _count(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _state_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in value.items())


def _rng(value: Any) -> bool:
    return isinstance(value, dict) and {"torch", "numpy", "python"} <= set(value)


# What RunState.save writes under each key, checked when a checkpoint is read back: a value this version would not
# have written (an edited file, another program's) is refused in one line before anything uses it (a thread count of 0
# reached torch.set_num_threads, a string an arithmetic step). Keys absent from an older checkpoint keep their default.
_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model": (_state_dict, "the model's tensors by name"),
    "optimizer": (lambda v: isinstance(v, dict), "the optimizer's state (a dict)"),
    "scheduler": (lambda v: isinstance(v, dict), "the schedule's state (a dict)"),
    "rng": (_rng, "the RNG states (torch, numpy, python)"),
    "rng_per_rank": (lambda v: isinstance(v, list) and bool(v) and all(map(_rng, v)), "each rank's RNG states"),
    "epoch": (_count, "an integer >= 0"),
    "step_in_epoch": (_count, "an integer >= 0"),
    "global_step": (_count, "an integer >= 0"),
    "history": (lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v), "a list of epoch records"),
    "seconds": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "epoch_sums": (
        lambda v: isinstance(v, Tensor) and v.shape == (3,) and v.is_floating_point() and bool(v.isfinite().all()),
        "3 finite sums (loss, correct, images)",
    ),
    "fingerprint": (lambda v: isinstance(v, dict), "the run's fingerprint (a dict)"),
    "start_norm": (lambda v: v is None or _real(v), "a finite number or None"),
    "best_loss": (lambda v: v is None or _real(v), "a finite number or None"),
    "sane": (lambda v: isinstance(v, bool), "True or False"),
    "threads": (lambda v: v is None or _count(v, 1), "a thread count >= 1 or None"),
}


def zero_sums() -> Tensor:
    return torch.zeros(3, dtype=torch.float64)


def run_fingerprint(cfg: TrainConfig, model: nn.Module, data: Data, teacher: nn.Module | None = None) -> dict[str, Any]:
    """Everything that changes a run's result: a checkpoint records it, and a run resuming it must match.

    The one place that says which settings count: the training settings of ``FINGERPRINT_KEYS`` (those whose
    declaration in :mod:`learngene.training.config` says they change the result);
    the data (name, number of images, image size, channels, classes, normalization, augmentation, and
    digests of the labels and of the images or image paths); the model's and teacher's tensor names and
    shapes; and ``cfg.identity`` (the command, method, options and input weights the caller names).
    Speed settings (compile, fused AdamW, SDPA, workers, device) are not in it: they are free to change.
    """
    images = getattr(data, "images", None)
    return {
        **{k: getattr(cfg, k) for k in FINGERPRINT_KEYS},
        "data": data.name,
        "training images": len(data),
        "image size": data.img_size,
        "channels": data.in_chans,
        "classes": list(data.label_space["classes"]) if data.label_space else data.num_classes,
        "normalization": [list(data.mean), list(data.std)],
        "augmentation": getattr(data, "augment", "none"),
        "labels": digest(data.labels),
        "images": digest(images)
        if images is not None
        else digest({p: torch.zeros(0) for p, _ in cast(Any, data).samples}, values=False),  # streamed: paths
        "model": digest(model.state_dict(), values=False),
        "teacher": digest(teacher.state_dict(), values=False) if teacher is not None else None,
        **cfg.identity,
    }


def _differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    def show(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."

    return [
        f"{k} was {show(saved.get(k))}, now {show(now.get(k))}"
        for k in dict.fromkeys([*saved, *now])
        if saved.get(k) != now.get(k)
    ]


@dataclass
class RunState:
    """Where a training run stands: what every checkpoint saves and ``resume`` restores with it.

    ``epoch_sums`` are the loss sum, correct predictions and images of the unfinished epoch so far. A
    checkpoint holds those of all ranks together; on resume rank 0 continues from them and the others
    from zero (the epoch's all-reduce adds the rest).
    """

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # one record per finished epoch
    seconds: float = 0.0
    epoch_sums: Tensor = field(default_factory=zero_sums)
    fingerprint: dict[str, Any] = field(default_factory=dict)  # run_fingerprint of the run
    # the sanity rules' references (see ``diverging``), kept with the checkpoint so a resumed run goes on with them
    start_norm: float | None = None  # the trained weights' norm at the run's first step
    best_loss: float | None = None  # the lowest mean training loss between two checkpoints so far
    sane: bool = True  # the checkpoint on disk passed the rules (False: a signal's stop written while diverging)
    threads: int | None = None  # the CPU threads a CPU run computes with (TrainingRun.adopt_threads); None on CUDA

    def save(self, path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
        """Atomic; every rank calls it at the same step (their RNG states and partial sums are gathered)."""
        ranks = dist.all_gather_object((_rng_state(), self.epoch_sums.cpu()))
        if not dist.is_main():
            return
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": ranks[0][0],
            "rng_per_rank": [r[0] for r in ranks],
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "global_step": self.global_step,
            "history": self.history,
            "seconds": self.seconds,
            "epoch_sums": sum(r[1] for r in ranks),
            "fingerprint": self.fingerprint,
            "start_norm": self.start_norm,
            "best_loss": self.best_loss,
            "sane": self.sane,
            "threads": self.threads,
        }
        bad = nonfinite_tensor(state["model"])
        if bad is not None:  # never replace the last good checkpoint with one that cannot be resumed
            raise NonFiniteError(
                f"weights became non-finite ({bad}) at step {self.global_step}; lower {named('lr')} or check "
                f"the data{last_good(path, self.sane)}"
            )
        save_torch_atomic(path, state)

    @classmethod
    def load(
        cls,
        path: Path,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        peak_lr: float,
        fingerprint: dict[str, Any],
    ) -> RunState:
        """Restore model, optimizer, schedule and this rank's RNG states from ``path``; the run's position.
        Refuses (one line) a checkpoint whose :func:`run_fingerprint` differs from this run's ``fingerprint``; after
        a stop for non-finite values (a resume may lower the learning rate) the schedule goes on at ``peak_lr``."""
        ckpt = load_checkpoint(path)
        free = AFTER_NONFINITE if stopped_by_nonfinite(path.parent) else ()
        _refuse_changed(ckpt, path, fingerprint, free)
        try:
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            scheduler.load_state_dict(ckpt["scheduler"])
            per_rank = ckpt.get("rng_per_rank", [ckpt["rng"]])
            if dist.rank() < len(per_rank):  # a rank the saved run did not have keeps its fresh seed
                _set_rng_state(per_rank[dist.rank()])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            # the fingerprint matched, so the run is this one: the file's states were edited or damaged
            raise TrainingError(
                f"checkpoint {quote(path)} cannot be restored ({first_line(exc)}); delete it (or give another "
                "run_dir (--run-dir)) to start over"
            ) from None
        if free:
            _set_peak_lr(optimizer, scheduler, peak_lr)
        return cls(
            epoch=ckpt["epoch"],
            step_in_epoch=ckpt["step_in_epoch"],
            global_step=ckpt["global_step"],
            history=list(ckpt["history"]),
            seconds=ckpt["seconds"],
            epoch_sums=ckpt["epoch_sums"] if dist.is_main() else zero_sums(),
            fingerprint=fingerprint,
            start_norm=ckpt.get("start_norm"),
            best_loss=ckpt.get("best_loss"),
            sane=ckpt.get("sane", True),
            threads=ckpt.get("threads"),
        )


def _refuse_changed(ckpt: dict[str, Any], path: Path, fingerprint: dict[str, Any], free: tuple[str, ...]) -> None:
    """Refuse (one line) a checkpoint this run (its :func:`run_fingerprint`) differs from, saying how (``free``: the
    settings that may change); a checkpoint written before fingerprints is compared by its training settings alone,
    with a warning."""
    if "fingerprint" in ckpt:
        changed = _differences(
            {k: v for k, v in ckpt["fingerprint"].items() if k not in free},
            {k: v for k, v in fingerprint.items() if k not in free},
        )
    else:
        saved = ckpt.get("config", {})
        changed = _differences(
            {k: v for k, v in saved.items() if k in FINGERPRINT_KEYS},
            {
                k: fingerprint[k] for k in FINGERPRINT_KEYS if k in saved
            },  # the run's settings, as its fingerprint holds them
        )
        if dist.is_main() and not changed:
            warnings.warn(
                LearngeneWarning(
                    f"{quote(path)} predates run fingerprints: only its training settings were checked, "
                    f"not its data, model or method; resume it only with the command that made it"
                ),
                stacklevel=3,
            )
    if changed:
        both = f"{named('lr')} and {named('grad_clip')}"
        may = (
            f"after its stop on a non-finite loss only {both} may change; "
            if free
            else f"only a run stopped by a non-finite loss may change {both}; "
        )
        raise LearngeneError(
            f"cannot resume {quote(path)}: the run differs from the checkpointed one: "
            f"{'; '.join(changed[:3])}{'; ...' if len(changed) > 3 else ''}; {may}use the same "
            f"other settings, or another run_dir (--run-dir) to start over"
        )


def _set_peak_lr(optimizer: torch.optim.Optimizer, scheduler: Any, lr: float) -> None:
    """A new peak learning rate in place of the saved one; the schedule goes on from the saved step."""
    scheduler.base_lrs = [lr] * len(optimizer.param_groups)
    for group in optimizer.param_groups:
        group["initial_lr"] = lr
    for group, factor in zip(optimizer.param_groups, scheduler.lr_lambdas):
        group["lr"] = lr * factor(scheduler.last_epoch)


def open_run(
    run_dir: str | Path | None,
    resume: bool,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    cfg: TrainConfig,
    data: Data,
    teacher: nn.Module | None,
    device: torch.device,
) -> tuple[RunState, Path | None]:
    """The run's state and checkpoint path: resumed from ``run_dir``'s checkpoint when ``resume`` finds one (its
    fingerprint must match), else fresh, with an older run's log and checkpoint removed; no directory: nothing kept."""
    run_dir = Path(run_dir) if run_dir is not None else None
    ckpt_path = run_dir / CHECKPOINT if run_dir is not None else None
    if run_dir is not None and dist.is_main():
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in (CHECKPOINT, LOG):  # temporary files of a run killed while it wrote them
            for stale in run_dir.glob(f".{name}.*.tmp"):
                stale.unlink(missing_ok=True)
    found = resume and ckpt_path is not None and ckpt_path.exists()
    if dist.is_distributed() and resume and ckpt_path is not None:
        seen = dist.count_true(found, device)
        if 0 < seen < dist.world_size():
            raise LearngeneError(
                f"{quote(ckpt_path)} is visible to {seen} of {dist.world_size()} processes; put the run directory (run_dir, --run-dir) on a "
                f"filesystem every node shares"
            )
    fingerprint = run_fingerprint(cfg, model, data, teacher) if run_dir is not None else {}
    state = RunState(fingerprint=fingerprint)
    if found and ckpt_path is not None:
        state = RunState.load(ckpt_path, model, optimizer, scheduler, cfg.lr, fingerprint)
    elif run_dir is not None and dist.is_main():
        for name in (LOG, CHECKPOINT):  # a fresh run must never resume an older run's checkpoint later
            (run_dir / name).unlink(missing_ok=True)
    return state, ckpt_path
