"""Run directories: one run at a time (a lock file), and a failed run's new files undone."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import LearngeneError
from .formats.atomic import os_error_message, quote

RUN_LOCK = ".lock"


@dataclass
class _HeldRun:
    """A locked run directory: the lock's descriptor, and what was there before this run (to undo a failed one)."""

    fd: int
    path: Path
    created: bool  # this run made the directory
    before: frozenset[str]  # names in it when it was locked


_held_locks: dict[Path, _HeldRun] = {}


def lock_run_dir(path: str | os.PathLike, flag: str = "--run-dir", what: str = "run directory") -> Path:
    """Create ``path`` if needed and lock it for this process, so a second run on it is refused.

    The lock (``fcntl.flock`` on ``path/.lock``) is released by :func:`release_run_dirs` or when the
    process exits, however it exits (the kernel drops it with the file descriptor). Locking again a
    directory this process holds is a no-op.
    """
    import fcntl

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise LearngeneError(f"{flag} {quote(path)} is a file, not a directory; give a directory path")
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LearngeneError(f"cannot create the {what}: {os_error_message(exc, path)}") from None
    key = path.resolve()
    if key in _held_locks:
        return path
    before = frozenset(os.listdir(path))
    try:
        fd = os.open(path / RUN_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        _undo_run_dir(_HeldRun(-1, path, created, before))
        raise LearngeneError(f"cannot write in the {what}: {os_error_message(exc, path)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LearngeneError(
            f"another learngene run is using the {what} {quote(path)}; wait for it to finish, or give another {flag}"
        ) from None
    _held_locks[key] = _HeldRun(fd, path, created, before)
    return path


def unlock_run_dir(path: str | os.PathLike) -> None:
    """Release the lock of one run directory this process holds (kept as it is: a finished run)."""
    held = _held_locks.pop(Path(path).resolve(), None)
    if held is not None:
        os.close(held.fd)


def release_run_dirs(failed: bool = False, resumable: str | None = None) -> None:
    """Release every run-directory lock this process holds.

    ``failed``: the command failed; a run directory that holds no ``resumable`` file (a checkpoint) is then
    put back as it was: the files this run added (its log, its lock) are removed, and the directory too if
    this run made it and it is left empty. A failed run writes nothing, as every other failed output: one that
    added nothing but its lock (e.g. a resume refused before it began) takes its lock away too.
    """
    while _held_locks:
        held = _held_locks.popitem()[1]
        os.close(held.fd)  # closing the descriptor drops the flock
        if failed and not (resumable and (held.path / resumable).exists()):
            _undo_run_dir(held)
        elif failed and _added(held) == {RUN_LOCK}:
            with contextlib.suppress(OSError):
                (held.path / RUN_LOCK).unlink()


def _added(held: _HeldRun) -> set[str]:
    try:
        return set(os.listdir(held.path)) - held.before
    except OSError:
        return set()


def _undo_run_dir(held: _HeldRun) -> None:
    added = _added(held)
    for name in added:
        with contextlib.suppress(OSError):
            (held.path / name).unlink(missing_ok=True)
    if held.created:
        with contextlib.suppress(OSError):
            held.path.rmdir()  # fails, and is left, when something else is in it
