"""``compare``'s launchers: where its cells run. ``inprocess`` (the default) computes them in this process; ``local``
and ``slurm`` submit an array of workers through submitit (its local executor, or one Slurm job array) and wait for
them, showing progress by cell, then report from the shared ``--out`` folder.

Every launcher runs the same worker: :func:`learngene.compare` on the shared ``--out`` with the same arguments,
which claims the cells no other worker has claimed or finished (:mod:`learngene.bench.workers`). A Slurm array
task is one such worker, not one cell or a fixed chunk of cells: a task that starts late, is requeued or is
cancelled changes nothing about who computes what, since whichever worker is free takes the next free cell, a dead
task's claims die with its process, and a cell stopped half-way resumes from its checkpoint in whichever worker
takes it next. A static mapping of cells to tasks would have to be kept in step with requeues, and a task per cell
would pay the interpreter's and the data's start for every cell.

In a worker, SIGTERM (``scancel``) and submitit's preemption signal (SIGUSR2, sent by Slurm before the time limit or
on preemption) make the training loop finish its step and checkpoint; on SIGUSR2 submitit then requeues the task,
and the requeued task (or any other worker) resumes the cell from that checkpoint. A task that fails for a reason
of its own writes one line (why, and its log) under ``OUT/launch/`` and is not retried: the launcher reports it.

This module is torch-free until a launch starts (the command line builds its flags from :class:`Launcher`). The
submission, the wait and the report: :mod:`.launches`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ArgumentTypeError, LearngeneError, assigned, first_line, named, shown
from ..pipeline.requests import AncestryRequest, DataRequest
from ..settings import field
from ..validate import refusal

if TYPE_CHECKING:
    from .comparing import CompareRun

LAUNCH = "launch"  # OUT/launch: submitit's folder (the tasks' logs), launch.json and the tasks' failure records
# the ranges a Launcher takes: beyond them a value is a typo (any real cluster's own limits are lower)
MAX_WORKERS, MAX_PER_TASK, YEAR = 100_000, 4096, 525_600  # YEAR: in minutes
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "RESIZING")


@dataclass(frozen=True)
class Launcher:
    """Where ``compare``'s cells run: ``lg.compare(..., launcher=Launcher("slurm", workers=8))`` or
    ``launcher="slurm"``; each field is a flag of ``learngene compare``.

    Attributes:
        kind: ``inprocess`` (this process computes every cell), ``local`` (``workers`` processes on this machine,
            submitit's local executor) or ``slurm`` (one Slurm job array of ``workers`` tasks).
        workers: how many workers (array tasks) share the cells.
        partition, time, gpus_per_task, cpus_per_task, array_parallelism: each task's Slurm request (``time`` in
            minutes; ``array_parallelism``: at most this many tasks at once, None: all).
        slurm_args: further ``sbatch`` options, ``KEY=VALUE`` each (e.g. ``"account=proj"``, ``"qos=low"``).
        threads: CPU threads each worker computes with (None: the CPUs Slurm gave the task, else the worker's
            default); a CPU run's sums follow the count, so a run compared with another gives both the same.
        wait: wait for the workers, showing progress by cell, and report; False (``--no-wait``, Slurm only): return
            once the array is submitted; the same call later reports progress, or the results once done.
    """

    kind: Literal["inprocess", "local", "slurm"] = field(
        "inprocess", flag="--launcher", help="where the cells run: this process, local worker processes, or Slurm"
    )
    workers: int = field(
        2,
        flag="--launch-workers",
        metavar="N",
        at_least=1,
        at_most=MAX_WORKERS,
        help="workers (array tasks) of a local or slurm launcher",
    )
    partition: str | None = field(
        None, flag="--slurm-partition", metavar="NAME", nonempty=True, help="the tasks' Slurm partition"
    )
    time: int = field(
        60, flag="--slurm-time", metavar="MIN", at_least=1, at_most=YEAR, help="each task's time limit in minutes"
    )
    gpus_per_task: int | None = field(
        None,
        flag="--slurm-gpus-per-task",
        metavar="N",
        at_least=1,
        at_most=MAX_PER_TASK,
        help="GPUs of each task (default: none requested)",
    )
    cpus_per_task: int = field(
        1, flag="--slurm-cpus-per-task", metavar="N", at_least=1, at_most=MAX_PER_TASK, help="CPUs of each task"
    )
    array_parallelism: int | None = field(
        None,
        flag="--slurm-array-parallelism",
        metavar="N",
        at_least=1,
        at_most=MAX_WORKERS,
        help="at most this many tasks at once (default: all)",
    )
    slurm_args: tuple[str, ...] = field(())  # --slurm-arg KEY=VALUE (repeatable), added by the command line
    threads: int | None = field(None, at_least=1, at_most=MAX_PER_TASK)  # the command line's --threads
    wait: bool = field(True)  # --no-wait

    def __post_init__(self) -> None:
        if isinstance(self.slurm_args, list):
            object.__setattr__(self, "slurm_args", tuple(self.slurm_args))
        bad = refusal(self)
        if bad is not None:
            error = ArgumentTypeError if bad.of_type else LearngeneError
            raise error(f"Launcher {bad.named} must be {bad.wanted}, got {shown(bad.value)}; give {bad.expected}")
        self.sbatch_options()  # a KEY=VALUE that is not one is refused now
        if not self.wait and self.kind != "slurm":
            raise LearngeneError(
                f"{assigned('wait', False, '', '--no-wait')} returns while the workers run, which only Slurm's can: "
                f"its workers outlive this process; give kind='slurm' (--launcher slurm), or wait"
            )

    def sbatch_options(self) -> dict[str, str]:
        """``slurm_args`` as sbatch options by name (``mem-per-cpu=2G`` as ``mem_per_cpu``)."""
        options = {}
        for text in self.slurm_args:
            key, sep, value = str(text).partition("=")
            if not sep or not key.strip() or not value.strip():
                raise LearngeneError(
                    f"{named('slurm_args', '--slurm-arg')} takes KEY=VALUE, e.g. account=myproject or qos=low; got "
                    f"{shown(text)}"
                )
            options[key.strip().lstrip("-").replace("-", "_")] = value.strip()
        return options

    @classmethod
    def of(cls, given: Launcher | str | None) -> Launcher:
        """``given`` as a Launcher: a kind's name is that kind with the defaults."""
        if given is None:
            return cls()
        if isinstance(given, str):
            return cls(kind=given)  # type: ignore[arg-type]
        if not isinstance(given, cls):
            raise ArgumentTypeError(
                f"launcher must be 'inprocess', 'local', 'slurm' or a learngene.Launcher, got {shown(given)}"
            )
        return given


@dataclass(frozen=True)
class CompareWorker:
    """One worker of a launched compare: ``compare`` (:func:`learngene.compare`, given by the module that builds the
    worker, which imports this one) on the shared folder with the launching call's arguments (picklable: submitit
    sends it to the task; a module-level function pickles by name). ``threads``: as :attr:`Launcher.threads`."""

    compare: Callable[..., Any]
    ancestry: AncestryRequest
    data: str | DataRequest
    sizes: tuple[str, ...]
    train_cfg: Any
    run: CompareRun
    choices: dict[str, Any]
    threads: int | None = None

    def __post_init__(self) -> None:
        # a task may start in another folder: the files it reads named absolute (the run's out is: CompareRun.shared)
        if Path(str(self.ancestry.path)).exists():
            object.__setattr__(self, "ancestry", replace(self.ancestry, path=os.path.abspath(self.ancestry.path)))
        if isinstance(self.data, DataRequest) and self.data.data_dir is not None:
            object.__setattr__(self, "data", replace(self.data, data_dir=os.path.abspath(self.data.data_dir)))

    @property
    def out(self) -> str:
        """The folder the workers share."""
        return str(self.run.out)

    def __call__(self, index: int) -> int:
        from ..host.threads import set_threads

        set_threads(self.threads or _slurm_cpus())
        try:
            with _CheckpointingSignals():
                self.compare(
                    self.ancestry,
                    self.data,
                    list(self.sizes),
                    train_cfg=self.train_cfg,
                    out=self.run.out,
                    time_limit=self.run.time_limit,
                    plots=self.run.plots,
                    command=self.run.command,
                    **self.choices,
                )
        except Exception as exc:  # a signal's stop (SystemExit) is no failure of the task's own
            _record_failure(Path(self.out), exc)
            raise
        return index

    def checkpoint(self, index: int) -> Any:
        """What submitit requeues on preemption or timeout: the same worker (its cell resumes from its checkpoint)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, index)


def _slurm_cpus() -> int | None:
    """The CPUs Slurm gave this task (``SLURM_CPUS_PER_TASK``), None outside one."""
    value = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


class _CheckpointingSignals:
    """While a worker runs: SIGTERM and SIGUSR2 make a running training loop finish its step and checkpoint
    (:func:`learngene.training.loop.request_stop`); then, or at once where no loop runs, SIGUSR2 goes on to submitit's
    handler (which calls :meth:`CompareWorker.checkpoint`, requeues the task and exits) and SIGTERM ends the task."""

    def __enter__(self) -> _CheckpointingSignals:
        self.previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
        for s in self.previous:
            signal.signal(s, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        from ..training.loop import request_stop

        if not request_stop(signal.Signals(signum).name):  # no loop to checkpoint: nothing is half-done
            self._stop(signum, frame)

    def _stop(self, signum: int, frame: Any) -> None:
        handler = self.previous.get(signal.Signals(signum))
        if signum == signal.SIGUSR2 and callable(handler):
            handler(signum, frame)  # submitit: checkpoint() and requeue, then exit
        raise SystemExit(128 + signum)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        from ..training.loop import RunInterrupted

        for s, handler in self.previous.items():
            signal.signal(s, handler)
        if isinstance(exc, RunInterrupted):  # the cell is checkpointed: now requeue (SIGUSR2) or end (SIGTERM)
            print(
                f"learngene compare worker: {exc.signame} after step {exc.step}; checkpoint written to "
                f"{exc.checkpoint}; the cell resumes from it in the next worker that takes it",
                file=sys.stderr,
                flush=True,
            )
            self._stop(signal.Signals[exc.signame].value, None)


def _task_id() -> str:
    """This task's job id (``12_3`` for array task 3 of job 12), its submitit log's prefix."""
    try:
        import submitit

        return str(submitit.JobEnvironment().job_id)
    except (ImportError, RuntimeError, KeyError):
        return f"pid{os.getpid()}"


def _record_failure(out: Path, exc: BaseException) -> None:
    """One line for the launcher: this task failed, why, and where its log is."""
    from ..formats.atomic import write_text_atomic

    task = _task_id()
    logs = sorted(str(p) for p in (out / LAUNCH).glob(f"{task}_*_log.err"))
    why = f"{type(exc).__name__}: {first_line(exc)}" if not isinstance(exc, LearngeneError) else first_line(exc)
    record = {"task": task, "why": why, "log": logs[0] if logs else str(out / LAUNCH)}
    write_text_atomic(out / LAUNCH / f"failed-{task}.json", json.dumps(record))
