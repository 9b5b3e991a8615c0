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

This module is torch-free until a launch starts (the command line builds its flags from :class:`Launcher`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ArgumentTypeError, LearngeneError, assigned, first_line, named, shown
from ..settings import field
from ..validate import refusal

if TYPE_CHECKING:
    from ..bench.protocol import BenchRun
    from ..bench.rows import Row

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
    ancestry: Any
    data: Any
    sizes: tuple[str, ...]
    train_cfg: Any
    out: str
    choices: dict[str, Any]
    time_limit: float | None = None
    plots: bool = True
    command: str | None = None
    threads: int | None = None

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
                    out=self.out,
                    time_limit=self.time_limit,
                    plots=self.plots,
                    command=self.command,
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


# ---- launching and waiting ------------------------------------------------------------------------------
@dataclass
class Launch:
    """A submitted array of workers on ``out``: what ``OUT/launch/launch.json`` records of it."""

    kind: str
    jobs: list[str]
    fingerprint: str
    since: int  # the folder's clock at submission (ns): failure records older than it are an earlier run's
    submitted: float = 0.0

    @classmethod
    def read(cls, out: Path) -> Launch | None:
        path = out / LAUNCH / "launch.json"
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def write(self, out: Path) -> None:
        from ..formats.atomic import write_text_atomic

        write_text_atomic(out / LAUNCH / "launch.json", json.dumps(dataclasses.asdict(self)))

    @property
    def job(self) -> str:
        """The job's id, as ``squeue -j`` and ``scancel`` take it (an array's: its number)."""
        return self.jobs[0].split("_")[0] if self.jobs else ""


def squeue_states(job: str) -> dict[str, str]:
    """The state of every task of Slurm job ``job`` that Slurm still lists, by task id (``12_0``)."""
    try:
        done = subprocess.run(
            ["squeue", "-h", "-r", "-j", job, "-o", "%i %T"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LearngeneError(f"squeue does not answer ({first_line(exc)}); is this a Slurm login node?") from None
    if done.returncode:  # a job Slurm forgot (finished long ago) is "Invalid job id": none of it is active
        return {}
    return dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if " " in line)


def failures(out: Path, since: int) -> list[dict[str, str]]:
    """The failure records of this launch's tasks (written after ``since``)."""
    records = []
    for path in sorted((out / LAUNCH).glob("failed-*.json")):
        try:
            if path.stat().st_mtime_ns >= since:
                records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def folder_clock(folder: Path) -> int:
    """``folder``'s clock now (its filesystem's, a network server's), in ns: the clock of the records' times."""
    marker = folder / f".clock-{os.getpid()}"
    marker.touch()
    try:
        return marker.stat().st_mtime_ns
    finally:
        marker.unlink()


def submit(launcher: Launcher, worker: CompareWorker, out: Path, fingerprint: str) -> tuple[Launch, list[Any]]:
    """Submit ``launcher.workers`` workers as one array; the launch (also written to ``OUT/launch/launch.json``) and
    submitit's jobs."""
    try:
        import submitit
    except ImportError:
        raise LearngeneError(
            "launcher local and slurm submit through submitit, which is not installed; pip install "
            "'learngene-vit[slurm]' (or submitit), or use launcher='inprocess' (--launcher inprocess)"
        ) from None
    folder = out / LAUNCH
    folder.mkdir(parents=True, exist_ok=True)
    since = folder_clock(folder)
    executor = submitit.AutoExecutor(folder=folder, cluster=launcher.kind)
    executor.update_parameters(**_parameters(launcher))
    try:
        jobs = executor.map_array(worker, list(range(launcher.workers)))
    except (subprocess.CalledProcessError, OSError, RuntimeError) as exc:
        raise LearngeneError(
            f"the {launcher.kind} launcher could not submit: {first_line(exc)}; check that a Slurm cluster answers "
            f"(sinfo), or use launcher='local' (--launcher local)"
        ) from None
    launch = Launch(launcher.kind, [str(j.job_id) for j in jobs], fingerprint, since, time.time())
    launch.write(out)
    return launch, jobs


def _parameters(launcher: Launcher) -> dict[str, Any]:
    """submitit's parameters of each task (the Slurm ones apply to Slurm only)."""
    params: dict[str, Any] = {
        "name": "learngene-compare",
        "timeout_min": launcher.time,
        "cpus_per_task": launcher.cpus_per_task,
        "tasks_per_node": 1,
        "nodes": 1,
    }
    if launcher.kind == "local":
        return params
    params["slurm_array_parallelism"] = launcher.array_parallelism or launcher.workers
    if launcher.gpus_per_task:
        params["slurm_gpus_per_task"] = launcher.gpus_per_task
    if launcher.partition:
        params["slurm_partition"] = launcher.partition
    if launcher.slurm_args:
        params["slurm_additional_parameters"] = launcher.sbatch_options()
    return params


@dataclass
class Watch:
    """The launcher's view of its workers: the grid read from ``out`` (nothing computed, nothing claimed) and which
    tasks still run."""

    run: BenchRun
    launch: Launch
    jobs: list[Any]  # submitit's local jobs (a Slurm array is asked through squeue)
    say: Callable[[str], None]
    work: Any = None
    shown: tuple[int, int, int] = (-1, -1, -1)
    last_said: float = 0.0

    def grid(self) -> tuple[list[Row], int, int]:
        """(the finished cells' rows, their count, the grid's cells)."""
        from ..bench.workers import ObservingClaims

        if self.work is None:
            self.work, _ = self.run.prepare()
        rows = self.run.observe(self.work, ObservingClaims(Path(self.run.out), self.launch.since))
        return rows, len(rows), int(self.run.meta.get("cells", len(rows)))

    def active(self) -> int:
        """How many of the launch's tasks are pending or running."""
        if self.launch.kind == "local":
            return sum(not job.done() for job in self.jobs)
        states = squeue_states(self.launch.job)
        return sum(state in ACTIVE for state in states.values())

    def progress(self, done: int, total: int, active: int) -> None:
        """A line when the count of finished cells or active tasks changes, and at least once a minute."""
        if (done, total, active) == self.shown and time.monotonic() - self.last_said < 60:
            return
        self.shown, self.last_said = (done, total, active), time.monotonic()
        what = f"Slurm job {self.launch.job}" if self.launch.kind == "slurm" else "local workers"
        self.say(f"learngene compare: {done} of {total} cells done; {what}: {active} task(s) pending or running")


POLL_SECONDS = 5.0  # how often the launcher reads the folder and the queue


def wait_for(watch: Watch, wait: bool) -> tuple[list[Row], bool]:
    """Read the grid until no task is pending or running (or once, without ``wait``); (rows, complete). Once the
    grid is complete the tasks end within moments (each writes the report), so none outlives the launcher."""
    while True:
        active = watch.active()  # before the grid: a task that ends in between has written its cells
        rows, done, total = watch.grid()
        watch.progress(done, total, active)
        if not active or not wait:
            return rows, done >= total
        time.sleep(POLL_SECONDS)


def ended_line(out: Path, launch: Launch, done: int, total: int) -> str:
    """Why the launch ended with cells left, in one line: the failed tasks (why, and their logs) or a cancellation."""
    failed = failures(out, launch.since)
    said = "; ".join(f"task {f['task']} failed: {f['why']} (log: {f['log']})" for f in failed)
    what = said or "its tasks ended without finishing (cancelled or killed; logs in " + str(out / LAUNCH) + ")"
    return f"{total - done} of {total} cells not done: {what}; rerun the same command to finish them"


def fingerprint(profile: Any) -> str:
    """The profile's hash, as its workers' claims name it (``claims/profile-<hash>.lock``)."""
    import hashlib

    text = json.dumps(profile.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def launch_compare(
    launcher: Launcher, worker: CompareWorker, profile: Any, say: Callable[[str], None], data_dir: str | None = None
) -> tuple[list[Row], dict[str, Any]]:
    """Run ``worker`` as ``launcher`` says (or follow the Slurm array already running on its folder with the same
    settings), wait for it showing progress by cell, and write the report; (rows, meta). Without
    ``launcher.wait``: the rows finished so far, ``meta["complete"]`` False while tasks run."""
    from .profile import start_compare
    from .report import write_compare_report

    out, began = Path(worker.out), time.perf_counter()
    run = start_compare(profile, out, device="cpu", data_dir=data_dir, progress=False, command=worker.command)
    launch, jobs = _following(launcher, out, fingerprint(profile)), list[Any]()
    watch = Watch(run, launch or Launch(launcher.kind, [], "", 0), [], say)
    rows, done, total = watch.grid()  # the data load here: a bad input is refused before anything is queued
    if done < total and launch is None:
        launch, jobs = submit(launcher, worker, out, fingerprint(profile))
        watch.launch, watch.jobs = launch, jobs
        where = f"Slurm job {launch.job}" if launch.kind == "slurm" else "local workers"
        say(
            f"learngene compare: {total - done} of {total} cells to do: {where}, {len(launch.jobs)} task(s), logs in "
            f"{out / LAUNCH}"
        )
    if done < total and launch is not None:
        rows, complete = wait_for(watch, launcher.wait)
        if not complete and launcher.wait:
            raise LearngeneError(ended_line(out, launch, len(rows), total))
        if not complete:
            say(
                f"learngene compare: Slurm job {launch.job} runs; the same command again shows its progress, or the "
                f"results once it is done (scancel {launch.job} stops it)"
            )
            return rows, {**run.meta, "complete": False, "job": launch.job}
    for failed in failures(out, launch.since) if launch else []:
        say(
            f"learngene compare: task {failed['task']} failed: {failed['why']} (log: {failed['log']}); the other "
            "workers took its cells"
        )
    meta = {**run.meta, "wall_seconds": round(time.perf_counter() - began, 1), "complete": True}
    meta["launcher"] = launcher.kind
    with run.claims.reporting():
        write_compare_report(rows, profile, out, meta, plots=worker.plots)
    return rows, meta


def _following(launcher: Launcher, out: Path, fingerprint: str) -> Launch | None:
    """The Slurm array that runs on ``out`` (None where none does): a later command follows it rather than
    submitting another; one with other settings is refused."""
    launch = Launch.read(out)
    if launch is None or launch.kind != "slurm" or launcher.kind != "slurm":
        return None
    states = squeue_states(launch.job)
    if not any(state in ACTIVE for state in states.values()):
        return None
    if launch.fingerprint != fingerprint:
        raise LearngeneError(
            f"Slurm job {launch.job} runs a learngene compare with other settings on {out}; give the same settings "
            f"to follow it, wait for it, stop it (scancel {launch.job}), or give another out (--out)"
        )
    return launch
