"""``compare``'s launchers at work: a submitted array of workers (:class:`Launch`, ``OUT/launch/launch.json``), the
submission through submitit, and the wait that shows progress by cell, notices failed tasks and reports
(:func:`launch_compare`). What a launcher is and what each worker runs: :mod:`.launching`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LearngeneError, first_line
from .launching import ACTIVE, LAUNCH, CompareWorker, Launcher

if TYPE_CHECKING:
    from ..bench.protocol import BenchRun
    from ..bench.rows import Row


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
    run = start_compare(profile, out, device="cpu", data_dir=data_dir, progress=False, command=worker.run.command)
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
        write_compare_report(rows, profile, out, meta, plots=worker.run.plots)
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
