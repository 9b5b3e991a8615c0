"""Files: atomic writes, safe weight loading, and the learngene model file.

Weights are read only through safetensors or ``torch.load(..., weights_only=True)``; nothing here
ever unpickles code. Every write goes to a temporary file in the target directory, is fsync'ed and
then renamed (or, where an existing file must not be replaced, hard-linked, which fails if the name
exists), so a crash never leaves a half-written output and two writers of one name cannot both win.
File names in messages are quoted (:func:`quote`), so every error stays on one line.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import hashlib
import io
import json
import os
import sys
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from ._version import __version__
from .errors import GeneFormatError, LearngeneError
from .preprocessing import check_preprocessing
from .spec import ViTSpec

MODEL_FORMAT = "learngene-model"


def library_version() -> str:
    return __version__


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def quote(path: str | os.PathLike) -> str:
    """A file name as messages show it: quoted like Python's repr, so a newline in a name cannot split a one-line error."""
    return repr(os.fspath(path))


# errnos that say something about the place written to (full, read-only, not allowed, name too long), not a bug
_PLACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.EFBIG,
                 errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.EIO, errno.EMFILE, errno.ENFILE}


def os_error_message(exc: OSError, path: str | os.PathLike | None = None) -> str:
    """One line for an OSError about a place (disk full, read-only, permissions): what, where, what to do.

    ``path`` names the place when given (e.g. the output, not its temporary file), else the error's own file.
    """
    where = path if path is not None else exc.filename
    what = exc.strerror or type(exc).__name__
    fix = {errno.ENOSPC: "free some disk space or choose another path",
           errno.EDQUOT: "free some disk space or choose another path",
           errno.EROFS: "choose a path on a writable filesystem",
           errno.ENAMETOOLONG: "choose a shorter path"}.get(exc.errno, "check the path and its permissions, or choose another path")
    return (f"{quote(where)}: " if where is not None else "") + f"{what}; {fix}"


def check_output_path(path: str | os.PathLike, overwrite: bool = True) -> Path:
    """Fail early, with a clear message, if ``path`` cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise LearngeneError(f"{quote(path)} is a directory; give a file path")
    return check_output_place(path, overwrite)


def check_output_place(path: Path, overwrite: bool) -> Path:
    """``path`` (a file or a folder) is new or may be replaced, and its directory exists and is writable."""
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise LearngeneError(f"{quote(path)} already exists; pass --overwrite to replace it")
    parent = path.parent if str(path.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise LearngeneError(f"{quote(parent)} is not a directory; choose an output path inside a directory")
    if not parent.is_dir():
        raise LearngeneError(f"directory {quote(parent)} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise LearngeneError(f"directory {quote(parent)} is not writable; choose another output path")
    return path


# the temporary file's name keeps at most this much of the target's, so a long (valid) name stays valid
TEMP_NAME_CHARS = 32


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success fsync it and move it to ``path``, atomically.

    A crash at any moment leaves either the old file (or none) or the complete new one: the data reach
    the disk (fsync) before the rename, and the rename itself is made durable by syncing the directory.
    Without ``overwrite`` the output is created exclusively: the temporary file is hard-linked to
    ``path``, which fails if ``path`` exists, so of two writers racing for one name only one succeeds.
    A full or read-only disk raises a one-line :class:`LearngeneError`; the old file is left intact.
    """
    path = check_output_path(path, overwrite)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:TEMP_NAME_CHARS]}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise LearngeneError(f"cannot write {os_error_message(exc, path)}") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600 files; outputs get the usual permissions
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
        raise LearngeneError(f"cannot write {os_error_message(exc, path)}") from None
    finally:
        tmp_path.unlink(missing_ok=True)


def _publish(tmp: Path, path: Path, overwrite: bool) -> None:
    if overwrite:
        os.replace(tmp, path)
        return
    taken = LearngeneError(f"{quote(path)} already exists (another process wrote it meanwhile); pass --overwrite "
                           f"to replace it, or choose another path")
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- run directories: one run at a time ---------------------------------------------------------------
RUN_LOCK = ".lock"


@dataclass
class _HeldRun:
    """A locked run directory: the lock's descriptor, and what was there before this run (to undo a failed one)."""

    fd: int
    path: Path
    created: bool  # this run made the directory
    before: frozenset[str]  # names in it when it was locked


_held_locks: dict[Path, _HeldRun] = {}


def lock_run_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` if needed and lock it for this process, so a second run on it is refused.

    The lock (``fcntl.flock`` on ``path/.lock``) is released by :func:`release_run_dirs` or when the
    process exits, however it exits (the kernel drops it with the file descriptor). Locking again a
    directory this process holds is a no-op.
    """
    import fcntl

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise LearngeneError(f"--run-dir {quote(path)} is a file, not a directory; give a directory path")
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LearngeneError(f"cannot create the run directory: {os_error_message(exc, path)}") from None
    key = path.resolve()
    if key in _held_locks:
        return path
    before = frozenset(os.listdir(path))
    try:
        fd = os.open(path / RUN_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        _undo_run_dir(_HeldRun(-1, path, created, before))
        raise LearngeneError(f"cannot write in the run directory: {os_error_message(exc, path)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LearngeneError(f"another learngene run is using the run directory {quote(path)}; wait for it to "
                             f"finish, or give another --run-dir") from None
    _held_locks[key] = _HeldRun(fd, path, created, before)
    return path


def release_run_dirs(failed: bool = False, resumable: str | None = None) -> None:
    """Release every run-directory lock this process holds.

    ``failed``: the command failed; a run directory that holds no ``resumable`` file (a checkpoint) is then
    put back as it was: the files this run added (its log, its lock) are removed, and the directory too if
    this run made it and it is left empty. A failed run writes nothing, as every other failed output.
    """
    while _held_locks:
        held = _held_locks.popitem()[1]
        os.close(held.fd)  # closing the descriptor drops the flock
        if failed and not (resumable and (held.path / resumable).exists()):
            _undo_run_dir(held)


def _undo_run_dir(held: _HeldRun) -> None:
    try:
        added = set(os.listdir(held.path)) - held.before
    except OSError:
        added = set()
    for name in added:
        with contextlib.suppress(OSError):
            (held.path / name).unlink(missing_ok=True)
    if held.created:
        with contextlib.suppress(OSError):
            held.path.rmdir()  # fails, and is left, when something else is in it


def write_text_atomic(path: str | os.PathLike, text: str, overwrite: bool = True) -> None:
    write_bytes_atomic(path, text.encode(), overwrite)


def write_bytes_atomic(path: str | os.PathLike, data: bytes, overwrite: bool = True) -> None:
    """Serialized data go to disk through Python's own writes, so a full disk is an ``OSError`` (ENOSPC) that
    :func:`atomic_path` reports in one line; serializers writing on their own (safetensors, torch.save) raise
    errors of their own kinds instead."""
    with atomic_path(path, overwrite) as tmp:
        tmp.write_bytes(data)


def save_torch_atomic(path: str | os.PathLike, obj: Any, overwrite: bool = True) -> None:
    """``torch.save`` of plain tensors and containers, written atomically (e.g. a training checkpoint)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_bytes_atomic(path, buffer.getbuffer(), overwrite)


# safetensors dtype names (the format's spec) <-> torch dtypes
_ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
_ST_NAMES = {dtype: name for name, dtype in _ST_DTYPES.items()}


def save_safetensors(path: str | os.PathLike, tensors: dict[str, Tensor], metadata: dict[str, str], overwrite: bool = True) -> None:
    """Write a safetensors file one tensor at a time, so saving never holds a second copy of the tensors.

    ``safetensors.torch.save_file`` first turns every tensor into a ``bytes`` object (a full copy, and
    it refuses tensors sharing storage); a gene that holds a whole 1-billion-parameter ancestry
    (weight_selection) would need twice its size in RAM. The layout written here is the format's own:
    an 8-byte little-endian header length, the JSON header (padded to 8 bytes), then the raw data.
    """
    plain = {k: v.detach() for k, v in tensors.items()}
    for key, value in plain.items():
        if value.dtype not in _ST_NAMES:
            raise LearngeneError(f"tensor {key} has dtype {value.dtype}, which safetensors cannot store")
    # the largest elements first keep every tensor aligned to its element size, as safetensors does
    order = sorted(plain, key=lambda k: (-plain[k].element_size(), k))
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for key in order:
        nbytes = plain[key].numel() * plain[key].element_size()
        header[key] = {"dtype": _ST_NAMES[plain[key].dtype], "shape": list(plain[key].shape),
                       "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with atomic_path(path, overwrite) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(len(head).to_bytes(8, "little"))
            fh.write(head)
            for key in order:
                data = plain[key].to("cpu").contiguous()  # a copy only of a non-contiguous view
                if data.numel():
                    fh.write(memoryview(data.reshape(-1).view(torch.uint8).numpy()))
                release_pages(plain[key])  # a view of a mapped ancestry (pretrained's gene): written, given back


def mmap_safetensors(path: str | os.PathLike) -> dict[str, Tensor]:
    """The tensors of a (validated) safetensors file as views of its memory map: nothing is read until used.

    The map is private (copy-on-write): writing to a tensor changes this process's copy, never the
    file. Pages the program touches count as resident memory, untouched ones cost nothing, so a
    model built on these tensors (``load_state_dict(assign=True)``) costs no copy of the checkpoint.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
    header.pop("__metadata__", None)
    start = 8 + size
    storage = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=path.stat().st_size)
    tensors: dict[str, Tensor] = {}
    for key, info in header.items():
        dtype = _ST_DTYPES.get(info["dtype"])
        begin = start + info["data_offsets"][0]
        if dtype is None or begin % (itemsize := torch.empty(0, dtype=dtype).element_size()):
            with safe_open(str(path), framework="pt") as fh:  # an unusual dtype or layout: read it
                tensors[key] = fh.get_tensor(key)
            continue
        tensors[key] = torch.empty(0, dtype=dtype).set_(storage, begin // itemsize, info["shape"])
    return tensors


def tensors_in_temporary_file(made: Iterable[tuple[str, Callable[[], Tensor]]]) -> dict[str, Tensor]:
    """Tensors computed one at a time (``(key, make)`` pairs), each written to a temporary file once made and
    dropped, returned as views of that file's private memory map.

    For a copy that loading must make of a memory-mapped checkpoint (EVA-02's q, k, v fused into one weight):
    in ordinary memory it stays resident for good, while a file's pages can be given back once read
    (:func:`release_pages`), as the checkpoint's are. The file is unlinked at once: the map keeps its data
    until the tensors are freed, and nothing is left on disk. (Where the temporary folder is a tmpfs, its pages
    are memory too: no saving, no loss.)
    """
    layout: dict[str, tuple[int, torch.dtype, torch.Size]] = {}
    with tempfile.NamedTemporaryFile(prefix="learngene-", suffix=".tensors") as fh:
        offset = 0
        for key, make in made:
            tensor = make().detach().contiguous()
            fh.write(bytes(-offset % 64))  # aligned for every dtype
            offset += -offset % 64
            layout[key] = (offset, tensor.dtype, tensor.shape)
            if tensor.numel():
                fh.write(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
            offset += tensor.numel() * tensor.element_size()
            del tensor
        fh.flush()
        storage = torch.UntypedStorage.from_file(fh.name, shared=False, nbytes=offset) if offset else None
    return {key: torch.empty(shape, dtype=dtype) if storage is None else
            torch.empty(0, dtype=dtype).set_(storage, start // torch.empty(0, dtype=dtype).element_size(), shape)
            for key, (start, dtype, shape) in layout.items()}


def _require_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        if path.is_symlink():  # exists() follows links: a dangling link, or a loop of links
            raise LearngeneError(f"{quote(path)} is a symbolic link that leads nowhere (dangling, or a loop of links); "
                                 f"give the path of a real file")
        raise LearngeneError(f"{quote(path)} does not exist; check the path")
    if path.is_dir():
        raise LearngeneError(f"{quote(path)} is a directory; give the path of a file")
    if not path.is_file():
        raise LearngeneError(f"{quote(path)} is not a regular file; give the path of a file")
    if not os.access(path, os.R_OK):
        raise LearngeneError(f"{quote(path)} is not readable; check its permissions")
    if path.stat().st_size == 0:
        raise GeneFormatError(f"{quote(path)} is empty (0 bytes), perhaps from an interrupted copy; copy or create it again")
    return path


_MADV_PAGEOUT = 21  # linux/mman.h (Linux >= 5.4)
_RELEASE_MIN_BYTES = 2**20  # smaller tensors are not worth reading /proc/self/maps for (a tiny model's every step)


def release_pages(*tensors: Tensor) -> None:
    """Let the kernel take back the pages of tensors read once from a memory map (``madvise(MADV_PAGEOUT)``).

    A method that reads every layer of a memory-mapped ancestry once (PEG's mixtures) would otherwise keep
    the whole checkpoint resident beside the gene it builds. Only tensors that lie in a file's mapping are
    advised: their unchanged pages are read again from the file if used (written ones are kept or swapped);
    tensors in ordinary memory are left alone, so a caller need not know where a tensor lives. A no-op
    elsewhere than Linux.
    """
    import ctypes
    import mmap

    libc = _libc()
    for tensor in _file_mapped(tensors) if libc is not None else []:
        start = tensor.data_ptr() // mmap.PAGESIZE * mmap.PAGESIZE
        end = tensor.data_ptr() + tensor.numel() * tensor.element_size()
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_PAGEOUT)


def give_back(read: Iterable[Tensor], made: dict[str, Tensor]) -> dict[str, Tensor]:
    """``made`` (computed from the tensors ``read``) owning its memory, then ``read``'s pages given back.

    For a method that reads a memory-mapped gene or ancestry once, part by part: an output that is a view of
    a mapped tensor (an unchanged or evenly sliced tensor) is copied first, else reading it later (into the
    model) would bring the released pages back. Tensors in ordinary memory are returned as they are.
    """
    mapped = _file_mapped(list(read))
    if not mapped:
        return made
    storages = {t.untyped_storage().data_ptr() for t in mapped}
    made = {k: v.clone() if v.device.type == "cpu" and v.untyped_storage().data_ptr() in storages else v
            for k, v in made.items()}
    release_pages(*mapped)
    return made


def _file_mapped(tensors: Iterable[Tensor]) -> list[Tensor]:
    """The CPU tensors of ``tensors`` (of 1 MiB or more) that lie in a mapping of a file."""
    found, mapped = [], None
    for tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if tensor.device.type != "cpu" or nbytes < _RELEASE_MIN_BYTES or not sys.platform.startswith("linux"):
            continue
        mapped = _file_mappings() if mapped is None else mapped
        start, end = tensor.data_ptr(), tensor.data_ptr() + nbytes
        if any(lo <= start and end <= hi for lo, hi in mapped):
            found.append(tensor)
    return found


def _file_mappings() -> list[tuple[int, int]]:
    """The address ranges of this process's private mappings of regular files (``/proc/self/maps``)."""
    ranges = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[4] != "0" and fields[5].startswith("/"):  # an inode and a path
                lo, hi = fields[0].split("-")
                ranges.append((int(lo, 16), int(hi, 16)))
    return ranges


@functools.cache
def _libc():
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None


def read_safetensors(path: str | os.PathLike, lazy: bool = False) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Read all tensors and the header metadata of a safetensors file, with one-line errors.

    ``lazy``: the tensors are views of the file's memory map (:func:`mmap_safetensors`), read when used.
    """
    path = _require_file(path)
    try:
        with safe_open(str(path), framework="pt") as fh:  # validates the header, lazy or not
            metadata = fh.metadata() or {}
            tensors = None if lazy else {k: fh.get_tensor(k) for k in fh.keys()}
        if tensors is None:
            tensors = mmap_safetensors(path)
    except Exception as exc:  # safetensors raises SafetensorError, OSError, ValueError, ... for bad files
        if _looks_like_pickle(path):
            raise GeneFormatError(f"{quote(path)} is not a readable safetensors file: it looks like a pickle/.pth file, which is never "
                                  f"unpickled here; pass it as an ancestry checkpoint with --timm-model, or convert "
                                  f"it to safetensors") from None
        raise GeneFormatError(f"{quote(path)} is not a readable safetensors file ({_first_line(exc)}); check that it is a "
                              f"complete file written by learngene, or create it again") from None
    return tensors, metadata


def _first_line(exc: BaseException, limit: int = 160) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:limit]


def _looks_like_pickle(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(4)
    return head[:1] == b"\x80" or head[:2] == b"PK"


def torch_load_weights_only(path: str | os.PathLike, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)`` on CPU; a file it refuses raises ``ValueError`` with one line why.

    Only tensors, plain containers and numbers are ever rebuilt: a pickle that names any other class or
    function (code that would run on load) is refused, never executed. ``mmap``: map a zip checkpoint
    instead of reading it (a legacy, non-zip file is read).
    """
    try:
        with warnings.catch_warnings():  # e.g. torch's note on pickle protocols: not the user's business
            warnings.simplefilter("ignore")
            if mmap and zipfile.is_zipfile(path):
                return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        if "Weights only load failed" in str(exc):
            raise ValueError("it pickles objects other than tensors, which are never unpickled here") from None
        raise ValueError(_first_line(exc)) from None


def load_weights(path: str | os.PathLike, lazy: bool = False) -> dict[str, Tensor]:
    """Load a state_dict from ``.safetensors`` or a torch checkpoint, never unpickling code.

    Torch checkpoints go through ``torch.load(weights_only=True)``; common wrappers
    (``{"model": ...}``, ``{"state_dict": ...}``) are unwrapped. ``lazy``: memory-map the file
    (safetensors, and torch's zip checkpoints) instead of reading it, so tensors cost RAM only when used.
    """
    path = _require_file(path)
    if path.suffix == ".safetensors":
        state = read_safetensors(path, lazy=lazy)[0]
        check_finite(state, path)
        return state
    try:
        obj = torch_load_weights_only(path, mmap=lazy)
    except ValueError as exc:
        raise GeneFormatError(f"{quote(path)} could not be loaded as weights ({exc}); give a .safetensors file or a torch "
                              f"checkpoint of plain tensors") from None
    for wrapper in ("model_ema", "state_dict", "model"):
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            obj = obj[wrapper]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, Tensor) for v in obj.values()):
        raise GeneFormatError(f"{quote(path)} does not hold a state_dict of tensors; give a checkpoint of the model's "
                              f"weights (a dict of tensor names to tensors)")
    check_finite(obj, path)
    return obj


_CHECK_ELEMENTS = 2**24  # 64 MiB of float32 per slice


def nonfinite_tensor(tensors: dict[str, Tensor]) -> str | None:
    """The name of the first floating tensor holding NaN or an infinity, else None.

    Each tensor is checked a slice at a time, and the pages of tensors that are views of a file's memory map are
    given back once checked (:func:`release_pages`): checking a 4 GiB gene or checkpoint holds neither all of it
    nor ``isfinite``'s temporaries of its largest tensor (a ViT-g PEG gene's 1 GiB FFN stack: 2.6 GiB).
    """
    for name, t in tensors.items():
        if t.is_floating_point():
            finite = True
            for part in t.reshape(-1).split(_CHECK_ELEMENTS):
                finite = finite and bool(torch.isfinite(part).all())
                release_pages(part)
            release_pages(t)
            if not finite:
                return name
    return None


def digest(tensors: dict[str, Tensor] | Tensor | None, values: bool = True) -> str | None:
    """A short sha256 of tensors' names, shapes and dtypes, and of their values unless ``values=False``:
    an identity to compare, e.g. a checkpoint's run against the run resuming it."""
    if tensors is None:
        return None
    h = hashlib.sha256()
    for name, t in (tensors.items() if isinstance(tensors, dict) else [("", tensors)]):
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        if values:
            h.update(memoryview(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()))
    return h.hexdigest()[:16]


def check_finite(tensors: dict[str, Tensor], path: str | os.PathLike) -> None:
    """Refuse weights holding NaN or infinite values: whatever is built from them would be too."""
    name = nonfinite_tensor(tensors)
    if name is not None:
        raise GeneFormatError(f"{quote(path)}: tensor {name!r} holds NaN or infinite values; use the weights of a "
                              f"run that did not diverge")


# ---- learngene model files: a timm state_dict + the spec in the safetensors header ---------------
def save_model(path: str | os.PathLike, model_or_state: torch.nn.Module | dict[str, Tensor], spec: ViTSpec,
               origin: dict[str, Any] | None = None, overwrite: bool = True,
               preprocessing: dict[str, Any] | None = None) -> None:
    """Save a ViT as safetensors that timm loads directly; the header records its spec and origin, and the
    preprocessing its inputs expect (timm's data-config keys, :func:`learngene.data.preprocessing_cfg`)."""
    state = model_or_state.state_dict() if isinstance(model_or_state, torch.nn.Module) else model_or_state
    metadata = {
        "format": MODEL_FORMAT,
        "spec": spec.to_json(),
        "origin": json.dumps(origin or {}, sort_keys=True),
        "library_version": library_version(),
        "created": now_iso(),
    }
    if preprocessing is not None:
        metadata["preprocessing"] = json.dumps(check_preprocessing(preprocessing, spec.img_size, spec.in_chans))
    save_safetensors(path, state, metadata, overwrite)


def load_model_file(path: str | os.PathLike, lazy: bool = False) -> tuple[dict[str, Tensor], ViTSpec, dict[str, Any]]:
    """Read a file written by :func:`save_model`: (state_dict, spec, origin); ``lazy``: memory-mapped tensors."""
    tensors, metadata = read_safetensors(path, lazy=lazy)
    if metadata.get("format") != MODEL_FORMAT:
        raise GeneFormatError(f"{quote(path)} is not a learngene model file (no '{MODEL_FORMAT}' header); "
                              f"for a timm checkpoint pass --timm-model NAME")
    if "spec" not in metadata:
        raise GeneFormatError(f"{quote(path)} records no spec in its header; create it again with learngene "
                              f"(ancestry, expand or train)")
    try:
        spec = ViTSpec.from_json(metadata["spec"])
        origin = json.loads(metadata.get("origin", "{}"))
    except ValueError as exc:  # JSONDecodeError, or a SpecError for impossible sizes
        raise GeneFormatError(f"{quote(path)} has a corrupt model header ({_first_line(exc)}); create it again with "
                              f"learngene (ancestry, expand or train)") from None
    if not isinstance(origin, dict):
        raise GeneFormatError(f"{quote(path)} has a corrupt model header (origin is not a JSON object); create it again "
                              f"with learngene (ancestry, expand or train)")
    check_finite(tensors, path)
    return tensors, spec, origin


def model_preprocessing(path: str | os.PathLike) -> dict[str, Any] | None:
    """The preprocessing a model file's header records (:func:`save_model`), or None for a file without one."""
    _require_file(path)
    try:
        with safe_open(str(path), framework="pt") as fh:
            text = (fh.metadata() or {}).get("preprocessing")
        return None if text is None else check_preprocessing(json.loads(text))
    except (SafetensorError, OSError, ValueError, TypeError) as exc:  # unreadable header, bad JSON, bad values
        raise GeneFormatError(f"{quote(path)} has a corrupt preprocessing header ({_first_line(exc)}); create it again with "
                              f"learngene (ancestry, expand or train)") from None


def build_model(spec: ViTSpec, state: dict[str, Tensor], source: str = "state_dict") -> torch.nn.Module:
    """The timm model of ``spec`` with ``state`` loaded strictly (shapes checked with key names)."""
    check_state_shapes(state, spec, source, require_all=True)
    odd = next((k for k, t in state.items() if not t.is_floating_point()), None)
    if odd is not None:  # a timm ViT's weights are all floating point; load_state_dict would cast silently
        raise GeneFormatError(f"{source}: {odd} holds {str(state[odd].dtype).removeprefix('torch.')} values where a "
                              f"ViT has floating-point weights; use the model's real (float) weights")
    model = spec.create_model()
    model.load_state_dict(state, strict=True)
    return model


def check_state_shapes(state: dict[str, Tensor], spec: ViTSpec, source: str, require_all: bool = False) -> None:
    """Every key of ``state`` exists in ``spec``'s timm model with the same shape (and all present)."""
    expected = spec.state_shapes()
    unknown = sorted(set(state) - set(expected))
    if unknown:
        raise LearngeneError(f"{source} gives key {unknown[0]!r} that a {spec.short()} timm ViT does not have"
                             + (f" (+{len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    for key, tensor in state.items():
        if tuple(tensor.shape) != expected[key]:
            raise LearngeneError(f"{source} gives {key} of shape {tuple(tensor.shape)} but the target "
                                 f"{spec.short()} needs {expected[key]}; the sizes are incompatible")
    if require_all:
        missing = sorted(set(expected) - set(state))
        if missing:
            raise LearngeneError(f"{source} lacks {missing[0]!r}" + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""))

