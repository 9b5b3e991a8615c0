"""Writing files safely: output paths checked before work starts, atomic writes (a temporary file in
the target directory, fsync'ed, then renamed or hard-linked), and file names quoted so every error stays
on one line."""

from __future__ import annotations

import contextlib
import datetime
import errno
import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from .._version import __version__
from ..errors import LearngeneError, PlaceError, assigned

# how a message names the setting that lets an output replace a file, for both callers
OVERWRITE = assigned("overwrite", True, "")


def library_version() -> str:
    return __version__


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def quote(path: str | os.PathLike) -> str:
    """A file name as messages show it: quoted like Python's repr, so a newline in a name cannot split a one-line error."""
    return repr(os.fspath(path))


def printable(path: str | os.PathLike) -> str:
    """A file name as a line that reports success shows it: as it is, unless it holds a character that is not printed
    as itself (a newline would split the line in two), then quoted (:func:`quote`)."""
    text = os.fspath(path)
    return str(text) if str(text).isprintable() else quote(path)


# errnos that say something about the place written to (full, read-only, not allowed, name too long), not a bug
_PLACE_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.ENAMETOOLONG,
    errno.EFBIG,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.ELOOP,
    errno.EIO,
    errno.EMFILE,
    errno.ENFILE,
}


def os_error_message(exc: OSError, path: str | os.PathLike | None = None) -> str:
    """One line for an OSError about a place (disk full, read-only, permissions): what, where, what to do.

    ``path`` names the place when given (e.g. the output, not its temporary file), else the error's own file.
    """
    where = path if path is not None else exc.filename
    what = exc.strerror or type(exc).__name__
    fix = {
        errno.ENOSPC: "free some disk space or choose another path",
        errno.EDQUOT: "free some disk space or choose another path",
        errno.EROFS: "choose a path on a writable filesystem",
        errno.ENAMETOOLONG: "choose a shorter path",
    }.get(exc.errno or 0, "check the path and its permissions, or choose another path")
    return (f"{quote(where)}: " if where is not None else "") + f"{what}; {fix}"


def check_output_path(path: str | os.PathLike, overwrite: bool = True) -> Path:
    """Fail early, with a clear message, if ``path`` cannot be written: a folder, FIFO, device or socket there is never
    replaced, ``overwrite`` or not."""
    path = Path(path)
    if path.is_dir():
        raise LearngeneError(f"{quote(path)} is a directory; give a file path")
    if path.exists() and not path.is_file():
        raise LearngeneError(f"{quote(path)} is no regular file (a FIFO, device or socket); give a file path")
    return check_output_place(path, overwrite)


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """``a`` and ``b`` are one file: the same path once symbolic links are resolved, or the same inode (a hard link)."""
    try:
        return Path(a).resolve() == Path(b).resolve() or os.path.samefile(a, b)
    except (OSError, RuntimeError):  # one does not exist (yet), or is a loop of symbolic links
        return False


def _inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """``path`` lies in ``folder`` (at any depth), links resolved; neither needs to exist."""
    try:
        inner, outer = Path(path).resolve(), Path(folder).resolve()
    except (OSError, RuntimeError):
        return False
    return inner != outer and outer in inner.parents


def check_not_input(
    output: str | os.PathLike, inputs: Sequence[str | os.PathLike | None], folder_output: bool = False
) -> None:
    """Refuse an output that would replace one of the command's own inputs, ``--overwrite`` or not.

    An input is replaced when the output is the same file (by name, through a symbolic link, or a hard link:
    the same device and inode), when the output is an existing file inside an input folder (a model folder's
    weights), or, for a folder output (``folder_output``: a hub folder, a report folder), when an input lies
    inside it.
    """
    for given in inputs:
        if not given:
            continue
        clash = same_file(output, given)
        if not clash and Path(given).is_dir():
            clash = _inside(output, given) and Path(output).exists()
        if not clash and folder_output:
            clash = _inside(given, output)
        if clash:
            raise LearngeneError(
                f"the output {quote(output)} is (or holds) this command's input {quote(given)}, which an output "
                f"never replaces, overwrite (--overwrite) or not; choose another output path"
            )


def check_outputs(
    outputs: Sequence[str | os.PathLike | None],
    inputs: Sequence[str | os.PathLike | None] = (),
    overwrite: bool = False,
) -> None:
    """Every output file can be written (and does not exist, without ``overwrite``), none is an input of the
    command (:func:`check_not_input`), and no two name the same file."""
    given = [o for o in outputs if o]
    for out in given:
        check_not_input(out, inputs)
        check_output_path(out, overwrite)
    if len({Path(o).resolve() for o in given}) < len(given):
        raise LearngeneError(f"two outputs name the same file ({', '.join(map(quote, given))}); give each its own path")


def check_output_place(path: Path, overwrite: bool) -> Path:
    """``path`` (a file or a folder) is new or may be replaced, and its directory is writable, or can be made: the
    folders it lacks are created when the output is written (:func:`make_parents`), as timm's and transformers'
    savers do, so a refusal here leaves nothing behind. A file where a folder must go is refused."""
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise LearngeneError(f"{quote(path)} already exists; pass {OVERWRITE} to replace it")
    parent = path.parent if str(path.parent) else Path(".")
    existing = next((p for p in (parent, *parent.parents) if p.exists() or p.is_symlink()), Path("."))
    if not existing.is_dir():
        raise LearngeneError(f"{quote(existing)} is not a directory; choose an output path inside a directory")
    if not os.access(existing, os.W_OK):
        raise LearngeneError(f"directory {quote(existing)} is not writable; choose another output path")
    return path


def make_parents(path: Path) -> None:
    """Create the folders ``path`` lies in that do not exist yet (checked writable by :func:`check_output_place`);
    one line where the place refuses (a full disk, permissions changed meanwhile)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlaceError(f"cannot create {os_error_message(exc, path.parent)}") from None


# the temporary file's name keeps at most this much of the target's, so a long (valid) name stays valid
TEMP_NAME_CHARS = 32


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success fsync it and move it to ``path``, atomically.

    A crash at any moment leaves either the old file (or none) or the complete new one: the data reach
    the disk (fsync) before the rename, and the rename itself is made durable by syncing the directory.
    Without ``overwrite`` the output is created exclusively: the temporary file is hard-linked to
    ``path``, which fails if ``path`` exists, so of two writers racing for one name only one succeeds.
    A full or read-only disk raises a one-line :class:`~learngene.errors.PlaceError`; the old file is left intact.
    """
    path = check_output_path(path, overwrite)
    make_parents(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:TEMP_NAME_CHARS]}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise PlaceError(f"cannot write {os_error_message(exc, path)}") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~umask())  # mkstemp makes 0600 files; outputs get the usual permissions
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        _publish(tmp_path, path, overwrite)
        with contextlib.suppress(OSError):  # some filesystems cannot open or sync a directory
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except OSError as exc:
        if exc.errno not in _PLACE_ERRNOS:
            raise
        raise PlaceError(f"cannot write {os_error_message(exc, path)}") from None
    finally:
        tmp_path.unlink(missing_ok=True)


def _publish(tmp: Path, path: Path, overwrite: bool) -> None:
    if overwrite:
        os.replace(tmp, path)
        return
    taken = LearngeneError(
        f"{quote(path)} already exists (another process wrote it meanwhile); pass {OVERWRITE} "
        f"to replace it, or choose another path"
    )
    try:
        os.link(tmp, path)  # atomic and exclusive: fails if the name exists
        return
    except FileExistsError:
        raise taken from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS):
            raise
    try:  # a filesystem without hard links: claim the name exclusively, then move the data over the claim
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except FileExistsError:
        raise taken from None
    os.replace(tmp, path)


def umask() -> int:
    """The process's file-creation mask (read by setting it and back: the only way os offers)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str, overwrite: bool = True) -> None:
    write_bytes_atomic(path, text.encode(), overwrite)


def write_bytes_atomic(path: str | os.PathLike, data: bytes | memoryview, overwrite: bool = True) -> None:
    """Serialized data go to disk through Python's own writes, so a full disk is an ``OSError`` (ENOSPC) that
    :func:`atomic_path` reports in one line; serializers writing on their own (safetensors, torch.save) raise
    errors of their own kinds instead."""
    with atomic_path(path, overwrite) as tmp:
        tmp.write_bytes(data)


def save_torch_atomic(path: str | os.PathLike, obj: Any, overwrite: bool = True) -> None:
    """``torch.save`` of plain tensors and containers, written atomically (e.g. a training checkpoint)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    # the view is released on the way out, error or not: a failed write leaves it in the traceback's frames, and
    # CPython 3.12.1 (not 3.11.7, 3.12.3 or 3.13.0) crashes when its garbage collector frees a BytesIO with a live view
    with buffer.getbuffer() as view:
        write_bytes_atomic(path, view, overwrite)
