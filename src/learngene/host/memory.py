"""Memory: what is free (this machine's or a CUDA device's), refused in one line before a run allocates more; and
mapped weights, pages given back to the kernel once read, and tensors made one at a time into a temporary file's map
instead of ordinary memory.

It imports no torch at module level: the size checks of :class:`~learngene.vit.spec.ViTSpec` use it."""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from ..errors import LearngeneError, SpecError

if TYPE_CHECKING:
    import torch
    from torch import Tensor


def tensors_in_temporary_file(made: Iterable[tuple[str, Callable[[], Tensor]]]) -> dict[str, Tensor]:
    """Tensors computed one at a time (``(key, make)`` pairs), each written to a temporary file once made and
    dropped, returned as views of that file's private memory map.

    For a copy that loading must make of a memory-mapped checkpoint (EVA-02's q, k, v fused into one weight):
    in ordinary memory it stays resident for good, while a file's pages can be given back once read
    (:func:`release_pages`), as the checkpoint's are. The file is unlinked at once: the map keeps its data
    until the tensors are freed, and nothing is left on disk. (Where the temporary folder is a tmpfs, its pages
    are memory too: no saving, no loss.)
    """
    import torch

    layout: dict[str, tuple[int, torch.dtype, torch.Size]] = {}
    with tempfile.NamedTemporaryFile(prefix="learngene-", suffix=".tensors") as fh:
        offset = 0
        for key, make in made:
            tensor = make().detach().contiguous()
            fh.write(bytes(-offset % 64))  # aligned for every dtype
            offset += -offset % 64
            layout[key] = (offset, tensor.dtype, tensor.shape)
            if tensor.numel():
                fh.write(tensor.reshape(-1).view(torch.uint8).numpy().data)
            offset += tensor.numel() * tensor.element_size()
            del tensor
        fh.flush()
        storage = (
            cast(torch.UntypedStorage, torch.UntypedStorage.from_file(fh.name, shared=False, nbytes=offset))
            if offset
            else None
        )
    return {
        key: torch.empty(shape, dtype=dtype)
        if storage is None
        else torch.empty(0, dtype=dtype).set_(storage, start // torch.empty(0, dtype=dtype).element_size(), shape)  # type: ignore[call-overload]  # the stubs omit UntypedStorage
        for key, (start, dtype, shape) in layout.items()
    }


# Not the standard library's mmap.madvise: it advises only a map that Python's mmap made, and these tensors lie in
# torch's maps (UntypedStorage.from_file, torch.load(mmap=True)). Measured on a file read through torch's map (RssFile
# in /proc/self/status): mmap.madvise(PAGEOUT) on a second map of the same file gave none of its pages back (the
# kernel skips pages mapped twice), madvise on the tensor's own map (below) all of them. Nor has Python 3.11's mmap
# module a MADV_PAGEOUT.
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
    made = {
        k: v.clone() if v.device.type == "cpu" and v.untyped_storage().data_ptr() in storages else v
        for k, v in made.items()
    }
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


def available_memory() -> int | None:
    """Bytes of memory free for new allocations (Linux ``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def free_memory(device: Any = None) -> int | None:
    """Bytes free for new allocations on ``device``: the CUDA driver's count on a CUDA device, else this machine's
    (:func:`available_memory`); None where unknown."""
    if getattr(device, "type", None) == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    return available_memory()


def require_free_memory(
    need: int,
    what: str,
    fix: str,
    *,
    device: Any = None,
    lower_bound: bool = False,
    error: type[LearngeneError] = SpecError,
) -> int | None:
    """Refuse in one line, before anything is allocated, ``need`` bytes for ``what`` that exceed the memory free on
    ``device`` (this machine's where it is None or a CPU); ``lower_bound``: ``need`` is an estimate from below (an
    activation count), said as "at least"; ``fix`` says what to choose instead. Returns the free bytes it read (None
    where unknown), for a caller that sizes its work by them."""
    free = free_memory(device)
    if free is not None and need > free:
        where = "cuda" if getattr(device, "type", None) == "cuda" else "this machine"
        raise error(
            f"{what} needs {'at least ' if lower_bound else ''}{need / 2**30:,.1f} GiB, but {where} has "
            f"{free / 2**30:,.1f} GiB free; {fix}"
        )
    return free
