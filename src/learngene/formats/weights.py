"""Reading and writing weights: safetensors (mapped or read), ``torch.load(..., weights_only=True)``, the
non-finite check and digests. Nothing here ever unpickles code."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
import zipfile
from pathlib import Path
from typing import Any, cast

import torch
from safetensors import safe_open
from torch import Tensor

from ..errors import GeneFormatError, LearngeneError, first_line
from ..host.memory import release_pages
from .atomic import atomic_path, library_version, now_iso, quote

StateDict = dict[str, Tensor]  # a model's (or a gene's) tensors by key

# safetensors dtype names (the format's spec) <-> torch dtypes
_ST_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
_ST_NAMES = {dtype: name for name, dtype in _ST_DTYPES.items()}


def model_header(
    tag: str, origin: dict[str, Any] | None, preprocessing: dict[str, Any] | None, **described: str
) -> dict[str, str]:
    """The safetensors header of a model file learngene writes: what the file is (``format`` ``tag``, and the
    ``described`` entries of its kind: a ViT's spec, a stitched model's parts), where the model came from
    (``origin``), the preprocessing its inputs expect (checked by the caller) and which learngene wrote it, when."""
    header = {
        "format": tag,
        **described,
        "origin": json.dumps(origin or {}, sort_keys=True),
        "library_version": library_version(),
        "created": now_iso(),
    }
    if preprocessing is not None:
        header["preprocessing"] = json.dumps(preprocessing)
    return header


def save_safetensors(
    path: str | os.PathLike, tensors: dict[str, Tensor], metadata: dict[str, str], overwrite: bool = False
) -> None:
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
        header[key] = {
            "dtype": _ST_NAMES[plain[key].dtype],
            "shape": list(plain[key].shape),
            "data_offsets": [offset, offset + nbytes],
        }
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
                    fh.write(data.reshape(-1).view(torch.uint8).numpy().data)
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
    storage = cast(
        torch.UntypedStorage, torch.UntypedStorage.from_file(str(path), shared=False, nbytes=path.stat().st_size)
    )
    tensors: dict[str, Tensor] = {}
    for key, info in header.items():
        dtype = _ST_DTYPES.get(info["dtype"])
        begin = start + info["data_offsets"][0]
        if dtype is None or begin % (itemsize := torch.empty(0, dtype=dtype).element_size()):
            with safe_open(str(path), framework="pt") as fh:  # an unusual dtype or layout: read it
                tensors[key] = fh.get_tensor(key)
            continue
        tensors[key] = torch.empty(0, dtype=dtype).set_(storage, begin // itemsize, info["shape"])  # type: ignore[call-overload]  # the stubs omit UntypedStorage
    return tensors


def is_regular_file(path: str | os.PathLike) -> bool:
    """``path`` (links followed) is a regular file: reading it cannot block, as a FIFO's or a device's read can."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_regular_text(path: str | os.PathLike) -> str:
    """The text of a regular file; anything else (a FIFO would block forever) is refused in one line."""
    if not is_regular_file(path):
        raise LearngeneError(f"{quote(path)} is not a regular file; give the folder's files as regular files")
    return Path(path).read_text(encoding="utf-8")


def require_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        if path.is_symlink():  # exists() follows links: a dangling link, or a loop of links
            raise LearngeneError(
                f"{quote(path)} is a symbolic link that leads nowhere (dangling, or a loop of links); "
                f"give the path of a real file"
            )
        raise LearngeneError(f"{quote(path)} does not exist; check the path")
    if path.is_dir():
        raise LearngeneError(f"{quote(path)} is a directory; give the path of a file")
    if not path.is_file():
        raise LearngeneError(f"{quote(path)} is not a regular file; give the path of a file")
    if not os.access(path, os.R_OK):
        raise LearngeneError(f"{quote(path)} is not readable; check its permissions")
    if path.stat().st_size == 0:
        raise GeneFormatError(
            f"{quote(path)} is empty (0 bytes), perhaps from an interrupted copy; copy or create it again"
        )
    return path


def read_safetensors(path: str | os.PathLike, lazy: bool = False) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Read all tensors and the header metadata of a safetensors file, with one-line errors.

    ``lazy``: the tensors are views of the file's memory map (:func:`mmap_safetensors`), read when used.
    """
    path = require_file(path)
    try:
        with safe_open(str(path), framework="pt") as fh:  # validates the header, lazy or not
            metadata = fh.metadata() or {}
            tensors = None if lazy else {k: fh.get_tensor(k) for k in fh.keys()}
        if tensors is None:
            tensors = mmap_safetensors(path)
    except Exception as exc:  # safetensors raises SafetensorError, OSError, ValueError, ... for bad files
        if _looks_like_pickle(path):
            raise GeneFormatError(
                f"{quote(path)} is not a readable safetensors file: it looks like a pickle/.pth file, which is never "
                f"unpickled here; pass it as an ancestry checkpoint with timm_model (--timm-model), or convert "
                f"it to safetensors"
            ) from None
        raise GeneFormatError(
            f"{quote(path)} is not a readable safetensors file ({first_line(exc)}); check that it is a "
            f"complete file written by learngene, or create it again"
        ) from None
    return tensors, metadata


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
        raise ValueError(first_line(exc)) from None


def load_weights(path: str | os.PathLike, lazy: bool = False) -> dict[str, Tensor]:
    """Load a state_dict from ``.safetensors`` or a torch checkpoint, never unpickling code.

    Torch checkpoints go through ``torch.load(weights_only=True)``; common wrappers
    (``{"model": ...}``, ``{"state_dict": ...}``) are unwrapped. ``lazy``: memory-map the file
    (safetensors, and torch's zip checkpoints) instead of reading it, so tensors cost RAM only when used.
    """
    path = require_file(path)
    if path.suffix == ".safetensors":
        state = read_safetensors(path, lazy=lazy)[0]
        check_finite(state, path)
        return state
    try:
        obj = torch_load_weights_only(path, mmap=lazy)
    except ValueError as exc:
        raise GeneFormatError(
            f"{quote(path)} could not be loaded as weights ({exc}); give a .safetensors file or a torch "
            f"checkpoint of plain tensors"
        ) from None
    for wrapper in ("model_ema", "state_dict", "model"):
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            obj = obj[wrapper]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, Tensor) for v in obj.values()):
        raise GeneFormatError(
            f"{quote(path)} does not hold a state_dict of tensors; give a checkpoint of the model's "
            f"weights (a dict of tensor names to tensors)"
        )
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
    for name, t in tensors.items() if isinstance(tensors, dict) else [("", tensors)]:
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        if values:
            h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()[:16]


def check_finite(tensors: dict[str, Tensor], path: str | os.PathLike) -> None:
    """Refuse weights holding NaN or infinite values: whatever is built from them would be too."""
    name = nonfinite_tensor(tensors)
    if name is not None:
        raise GeneFormatError(
            f"{quote(path)}: tensor {name!r} holds NaN or infinite values; use the weights of a "
            f"run that did not diverge"
        )
