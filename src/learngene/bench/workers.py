"""Workers that share one report folder: each claims the units of the grid no other has claimed or finished.

A *unit* is one cached stage result of the bench engine (:mod:`learngene.bench.protocol`): a condensed gene,
an adapted gene, a fine-tuned cell. Any number of processes running the same profile into the same folder
(``learngene compare`` started several times, once per GPU by ``torchrun``, or once per SLURM array task) are
workers: each walks the grid in the same order, takes every unit whose result is not on disk and whose claim
it can get, skips those another worker holds, and walks again until none is left; whichever finishes last
writes the report, from the results on disk, so it is the same report whoever computed what.

The claim is an exclusive ``flock`` on ``claims/<unit>.lock``, held while the unit is computed. The kernel
releases it when its process dies, however it dies (``kill -9`` included), so a killed worker's units are
free at once and the next worker resumes them from their checkpoints; there is no lease to tune and no
heartbeat to miss. Its limits are those of ``flock`` on the filesystem: exact on a local disk; on NFSv4 Linux
maps it to a byte-range lock the server arbitrates (a dead client's locks are freed when its lease expires,
about 90 s); on NFSv3 mounted ``nolock``, or Lustre without ``-o flock``, locks are per node, so two nodes can
compute the same unit. That costs time, not correctness: a unit's result depends only on its key (the same
seed gives the same numbers), and results are written atomically (temporary file, then rename).

A unit that fails (a method that refuses a size, a non-finite loss) is recorded with its reason in
``claims/<unit>.failed``, so that the workers running do not repeat it and the report shows it as n/a; a
worker started after the record was written tries it again (a rerun retries failures, as a single run always
did: the cause may have been the disk, since freed). Every worker also holds a shared lock on the folder's ``.lock`` (a run that needs the
folder alone, e.g. ``learngene bench``, is refused while workers run, and they while it runs) and on
``claims/profile-<hash>.lock``: a worker with other settings is refused while one of these runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import LearngeneError, named
from ..formats.atomic import os_error_message, quote, write_text_atomic
from ..training.run_dirs import RUN_LOCK

REPORT_FOLDER = named("out_dir", "--out")  # how messages name the setting that gives the report folder

CLAIMS = "claims"


class Busy(Exception):
    """The unit is not done, and this worker cannot compute it now: another worker holds its claim (or this
    walk only reads)."""


class Claims:
    """The claims of one process that works alone in its folder: every claim is granted, failures are kept in
    memory (the engine's behaviour before workers: a rerun tries a failed unit again)."""

    def __init__(self) -> None:
        self.failures: dict[str, str] = {}

    def hold(self, unit: str) -> contextlib.AbstractContextManager[None]:
        """Hold ``unit``'s claim while the block computes it; raises :class:`Busy` when another worker holds it."""
        return contextlib.nullcontext()

    def failure(self, unit: str) -> str | None:
        """Why ``unit`` failed, when a worker recorded that it did."""
        return self.failures.get(unit)

    def fail(self, unit: str, reason: str) -> None:
        self.failures[unit] = reason

    def reporting(self) -> contextlib.AbstractContextManager[None]:
        """Held while the report is written (one writer at a time)."""
        return contextlib.nullcontext()

    def close(self) -> None:
        pass


@contextlib.contextmanager
def report_lock(claims: Path) -> Iterator[None]:
    """Held while a report is written into the folder of ``claims`` (one writer at a time)."""
    fd = os.open(claims / "report.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits: the report another worker writes takes seconds
        yield
    finally:
        os.close(fd)


def _lock(path: Path, mode: int) -> int | None:
    """An open descriptor of ``path`` holding ``flock(mode | LOCK_NB)``; None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class SharedClaims(Claims):
    """The claims of one worker among any number on ``out`` (files under ``out/claims``); see the module."""

    def __init__(self, out: Path, fingerprint: str, shown: str = REPORT_FOLDER) -> None:
        super().__init__()
        self.dir = out / CLAIMS
        self.held: list[int] = []
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.started = self._now()
            folder = _lock(out / RUN_LOCK, fcntl.LOCK_SH)
        except OSError as exc:
            raise LearngeneError(f"cannot write in the report folder: {os_error_message(exc, out)}") from None
        if folder is None:
            raise LearngeneError(
                f"another learngene run is using the report folder {quote(out)} alone; wait for it to finish, "
                f"or give another {shown}"
            )
        self.held.append(folder)
        mine = self.dir / f"profile-{fingerprint}.lock"
        own = _lock(mine, fcntl.LOCK_SH)
        if own is None:  # an exclusive holder of our own profile lock: only a worker checking us, a moment
            own = os.open(mine, os.O_RDWR)
            fcntl.flock(own, fcntl.LOCK_SH)
        self.held.append(own)
        for other in self.dir.glob("profile-*.lock"):
            if other != mine and (probe := _lock(other, fcntl.LOCK_EX)) is None:
                self.close()
                raise LearngeneError(
                    f"a learngene compare with other settings is running on {quote(out)}; give this one the same "
                    f"settings to help it, wait for it to finish, or give another {shown}"
                )
            elif other != mine and probe is not None:
                os.close(probe)

    def _path(self, unit: str, suffix: str) -> Path:
        return self.dir / f"{unit}{suffix}"

    def _now(self) -> int:
        """The folder's clock (on a network filesystem, the server's: the clock of the failure records' times)."""
        marker = self.dir / f"started-{socket.gethostname()}-{os.getpid()}"
        marker.touch()
        try:
            return marker.stat().st_mtime_ns
        finally:
            marker.unlink()

    @contextlib.contextmanager
    def hold(self, unit: str) -> Iterator[None]:
        path = self._path(unit, ".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _lock(path, fcntl.LOCK_EX)
        if fd is None:
            raise Busy(unit)
        try:
            os.ftruncate(fd, 0)  # who holds it, for a person looking: the lock itself is the flock
            os.write(fd, f"{socket.gethostname()} pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n".encode())
            yield
        finally:
            os.close(fd)  # closing the descriptor drops the flock

    def failure(self, unit: str) -> str | None:
        """Why ``unit`` failed, as recorded by this worker or one running with it (a record older than this worker
        is from an earlier run: tried again)."""
        if unit in self.failures:
            return self.failures[unit]
        path = self._path(unit, ".failed")
        try:
            if path.stat().st_mtime_ns < self.started:
                return None
            return path.read_text().strip() or None
        except FileNotFoundError:
            return None

    def fail(self, unit: str, reason: str) -> None:
        super().fail(unit, reason)
        path = self._path(unit, ".failed")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, reason + "\n")

    def reporting(self) -> contextlib.AbstractContextManager[None]:
        return report_lock(self.dir)

    def close(self) -> None:
        while self.held:
            os.close(self.held.pop())


class ObservingClaims(Claims):
    """The claims of a process that only reads ``out`` while workers compute (a launcher following its array): it
    takes no claim, and a failure record counts from ``since`` (the folder's clock, ns) on, when its workers began."""

    def __init__(self, out: Path, since: int) -> None:
        super().__init__()
        self.dir, self.since = out / CLAIMS, since

    def hold(self, unit: str) -> contextlib.AbstractContextManager[None]:
        raise Busy(unit)

    def failure(self, unit: str) -> str | None:
        path = self.dir / f"{unit}.failed"
        try:
            return path.read_text().strip() or None if path.stat().st_mtime_ns >= self.since else None
        except FileNotFoundError:
            return None

    def reporting(self) -> contextlib.AbstractContextManager[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        return report_lock(self.dir)


def worker_device(device: str) -> str:
    """The device of this worker: under ``torchrun`` (``LOCAL_RANK`` set) each rank is one worker on its own GPU,
    ``cuda:LOCAL_RANK``, where ``device`` leaves the choice (``auto``, ``cuda``) and a GPU is visible; no process
    group is joined (the workers share nothing but the folder)."""
    local = os.environ.get("LOCAL_RANK")
    if local is None or device not in ("auto", "cuda"):
        return device
    try:
        rank = int(local)
    except ValueError:
        raise LearngeneError(f"LOCAL_RANK={local!r} is not a number; start the workers with torchrun") from None
    import torch

    return f"cuda:{rank}" if torch.cuda.is_available() else device
