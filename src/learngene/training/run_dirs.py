"""Run directories: one run at a time (a lock file), and a failed run's new files undone."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import LearngeneError, named
from ..formats.atomic import os_error_message, quote

if TYPE_CHECKING:
    from filelock import BaseFileLock

RUN_LOCK = ".lock"
RUN_DIR = named("run_dir")  # how messages name the setting that gives a run directory


@dataclass
class _HeldRun:
    """A locked run directory: its lock, and what was there before this run (to undo a failed one)."""

    lock: BaseFileLock
    path: Path
    created: bool  # this run made the directory
    before: frozenset[str]  # names in it when it was locked


_held_locks: dict[Path, _HeldRun] = {}


def lock_run_dir(path: str | os.PathLike, shown: str = RUN_DIR, what: str = "run directory") -> Path:
    """Create ``path`` if needed and lock it for this process, so a second run on it is refused (``shown`` names the
    setting that gave it, ``what`` says what it is, in the messages).

    The lock (a ``filelock.FileLock`` on ``path/.lock``: ``flock`` on POSIX) is released by :func:`release_run_dirs`
    or when the process exits, however it exits (the kernel drops it with the file descriptor). Locking again a
    directory this process holds is a no-op.
    """
    from filelock import FileLock, Timeout  # imported here: ~70 ms that `--help` and the other commands need not pay

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise LearngeneError(f"{shown} {quote(path)} is a file, not a directory; give a directory path")
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LearngeneError(f"cannot create the {what}: {os_error_message(exc, path)}") from None
    key = path.resolve()
    if key in _held_locks:
        return path
    before = frozenset(os.listdir(path))
    lock = FileLock(path / RUN_LOCK, timeout=0, thread_local=False)  # one try; any thread of the run may release it
    try:
        lock.acquire()
    except Timeout:
        raise LearngeneError(
            f"another learngene run is using the {what} {quote(path)}; wait for it to finish, or give another {shown}"
        ) from None
    except OSError as exc:
        _undo_run_dir(path, created, before)
        raise LearngeneError(f"cannot write in the {what}: {os_error_message(exc, path)}") from None
    _held_locks[key] = _HeldRun(lock, path, created, before)
    return path


def unlock_run_dir(path: str | os.PathLike) -> None:
    """Release the lock of one run directory this process holds (kept as it is: a finished run)."""
    held = _held_locks.pop(Path(path).resolve(), None)
    if held is not None:
        held.lock.release()


def release_run_dirs(failed: bool = False, resumable: str | None = None) -> None:
    """Release every run-directory lock this process holds.

    ``failed``: the command failed; a run directory that holds no ``resumable`` file (a checkpoint) is then
    put back as it was: the files this run added (its log, its lock) are removed, and the directory too if
    this run made it and it is left empty. A failed run writes nothing, as every other failed output: one that
    added nothing but its lock (e.g. a resume refused before it began) takes its lock away too.
    """
    while _held_locks:
        held = _held_locks.popitem()[1]
        held.lock.release()
        if failed and not (resumable and (held.path / resumable).exists()):
            _undo_run_dir(held.path, held.created, held.before)
        elif failed and _added(held.path, held.before) == {RUN_LOCK}:
            with contextlib.suppress(OSError):
                (held.path / RUN_LOCK).unlink()


def _added(path: Path, before: frozenset[str]) -> set[str]:
    """The names in ``path`` that were not there when it held ``before``."""
    try:
        return set(os.listdir(path)) - before
    except OSError:
        return set()


def _undo_run_dir(path: Path, created: bool, before: frozenset[str]) -> None:
    """Remove what was added to ``path`` since it held ``before``, and ``path`` itself if ``created`` and empty."""
    added = _added(path, before)
    for name in added:
        with contextlib.suppress(OSError):
            (path / name).unlink(missing_ok=True)
    if created:
        with contextlib.suppress(OSError):
            path.rmdir()  # fails, and is left, when something else is in it
