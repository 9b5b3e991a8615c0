"""Where datasets come from: Fashion-MNIST, scikit-learn's digits, image folders and torchvision datasets,
each a registered source that :func:`load_dataset` finds by name."""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import pickle
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ..errors import DataError, first_line, held_warnings
from ..formats.atomic import atomic_path, quote
from ..registry import (  # noqa: F401  (re-exported)
    DATA_SOURCES,
    DataSource,
    find_data_source,
    list_sources,
    register_source,
    source_usages,
)
from .augment import AUGMENTATIONS
from .folder import FolderData, image_folder
from .images import Data, ImageData, colour_for_grey_model, convert_channels, resize

FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_MEAN, FASHION_MNIST_STD = (0.2860,), (0.3530,)
FASHION_MNIST_INSTALL = (
    "apt-get install dataset-fashion-mnist (Debian), or pass data_dir (--data-dir) or set $LEARNGENE_DATA to a folder "
    "with its IDX files"
)


# ---- built-in datasets ----------------------------------------------------------------------------
def cache_dir() -> Path:
    path = Path(os.environ.get("LEARNGENE_CACHE", Path.home() / ".cache" / "learngene"))
    if path.exists() and not path.is_dir():
        raise DataError(
            f"the cache folder {quote(path)} (LEARNGENE_CACHE) is not a directory; set LEARNGENE_CACHE to "
            f"a folder, or unset it"
        )
    return path


def _find_fashion_mnist(data_dir: str | os.PathLike | None) -> Path:
    # a folder the user named is the only place looked in: falling back elsewhere would hide a typo
    env = os.environ.get("LEARNGENE_DATA", "").strip()
    if data_dir is None and env and not Path(env).is_dir():  # as for --data-dir: a typo must not fall back silently
        raise DataError(f"LEARNGENE_DATA={env!r} is not a folder; set it to the folder with the data, or unset it")
    if data_dir is not None:
        candidates = [Path(data_dir)]
    else:
        candidates = [Path(p) for p in (env,) if p] + [DEBIAN_FASHION_MNIST]
    for base in candidates:
        for folder in (base, base / "fashion-mnist", base / "FashionMNIST" / "raw"):
            if all((folder / f).exists() or (folder / f"{f}.gz").exists() for f in FASHION_MNIST_FILES):
                return folder
    if data_dir is not None:
        raise DataError(
            f"Fashion-MNIST IDX files ({FASHION_MNIST_FILES[0]}[.gz], ...) not found in {data_dir}; check "
            f"data_dir (--data-dir), or leave it out to use the installed copy"
        )
    raise DataError(f"Fashion-MNIST not found; {FASHION_MNIST_INSTALL}")


def _ungzipped_fashion_mnist(source: Path) -> Path:
    """Folder laid out as torchvision's ``FashionMNIST/raw`` with plain IDX files (un-gzipped once).

    The cache is keyed by the source folder and its files' sizes and times, so a ``--data-dir`` with other
    (or broken) files never silently reuses the copy made from an earlier one; every file is checked.
    """
    if (
        all((source / f).exists() for f in FASHION_MNIST_FILES)
        and source.name == "raw"
        and source.parent.name == "FashionMNIST"
    ):
        for name in FASHION_MNIST_FILES:
            _check_idx(source / name, source / name)
        return source.parent.parent
    root = cache_dir() / "fashion-mnist" / _source_key(source)
    raw = root / "FashionMNIST" / "raw"
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(
            f"cannot create the data cache {raw} ({exc.strerror}); set $LEARNGENE_CACHE to a writable folder"
        ) from None
    for name in FASHION_MNIST_FILES:
        target = raw / name
        if target.exists():
            continue
        plain, packed = source / name, source / f"{name}.gz"
        with atomic_path(target, overwrite=True) as tmp:
            if plain.exists():
                shutil.copyfile(plain, tmp)
            else:
                try:
                    with gzip.open(packed, "rb") as src, open(tmp, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                except (OSError, EOFError) as exc:
                    raise DataError(f"{packed} is corrupt ({exc}); reinstall the dataset") from None
            _check_idx(tmp, plain if plain.exists() else packed)
    return root


def _source_key(source: Path) -> str:
    """Names the cache of one source folder: its path and its files' sizes and modification times."""
    digest = hashlib.sha256(str(source.resolve()).encode())
    for name in FASHION_MNIST_FILES:
        for path in (source / name, source / f"{name}.gz"):
            if path.exists():
                st = path.stat()
                digest.update(f"{path.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _check_idx(path: Path, shown: Path) -> None:
    """An IDX file's magic number and sizes agree with its length (the check torchvision skips)."""
    ndim = 3 if "-images-" in path.name or "-images-" in shown.name else 1
    magic = 0x0800 + ndim  # unsigned bytes, ndim dimensions
    with open(path, "rb") as fh:
        head = fh.read(4 + 4 * ndim)
    fields = [int.from_bytes(head[i : i + 4], "big") for i in range(0, len(head) - 3, 4)]
    if len(fields) != 1 + ndim or fields[0] != magic or 4 + 4 * ndim + math.prod(fields[1:]) != path.stat().st_size:
        raise DataError(
            f"{shown} is not a Fashion-MNIST IDX file (its header does not match its length); replace it "
            f"with the dataset's original file"
        )


def fashion_mnist(split: str = "train", data_dir: str | os.PathLike | None = None, img_size: int = 28) -> ImageData:
    """Fashion-MNIST (Xiao et al. 2017), 10 classes of 28×28 grayscale clothing images.

    Looked for in ``data_dir``, then ``$LEARNGENE_DATA``, then Debian's
    ``/usr/share/datasets/fashion-mnist``; read with torchvision's IDX reader.
    """
    from torchvision.datasets import FashionMNIST

    if split not in ("train", "test"):
        raise DataError(f"Fashion-MNIST has splits 'train' and 'test', not {split!r}; use one of those")
    root = _ungzipped_fashion_mnist(_find_fashion_mnist(data_dir))
    try:
        ds = FashionMNIST(root=str(root), train=split == "train", download=False)
    except RuntimeError as exc:
        raise DataError(f"Fashion-MNIST in {root} is unreadable ({exc}); delete that cache folder and retry") from None
    data = ImageData(
        ds.data.unsqueeze(1).contiguous(),
        ds.targets.long(),
        10,
        FASHION_MNIST_MEAN,
        FASHION_MNIST_STD,
        name=f"fashion_mnist-{split}",
        dataset="fashion_mnist",
        classes=tuple(FashionMNIST.classes),
    )
    return resize(data, img_size)


def digits(split: str = "train", img_size: int = 28, test_fraction: float = 0.25, seed: int = 0) -> ImageData:
    """scikit-learn's handwritten digits (8×8, 16 grey levels, 1797 images), resized to ``img_size``.

    The train/test split is stratified and fixed by ``seed``.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if split not in ("train", "test"):
        raise DataError(f"digits has splits 'train' and 'test', not {split!r}; use one of those")
    bunch = load_digits()
    images = torch.from_numpy(np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)).unsqueeze(1)
    labels = torch.from_numpy(bunch.target.astype(np.int64))
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)), test_size=test_fraction, random_state=seed, stratify=bunch.target
    )
    scaled = images.float() / 255.0
    mean, std = (float(scaled.mean()),), (float(scaled.std()),)
    data = ImageData(
        images,
        labels,
        10,
        mean,
        std,
        name=f"digits-{split}",
        dataset="digits",
        classes=tuple(str(d) for d in range(10)),
    )
    return resize(data.subset(train_idx if split == "train" else test_idx), img_size)


def torchvision_dataset(
    name: str, root: str | os.PathLike, split: str = "train", img_size: int | None = None
) -> ImageData:
    """A torchvision dataset already on disk (``download=False``): CIFAR10, CIFAR100, MNIST, FashionMNIST, ..."""
    import torchvision.datasets as tvd

    cls = getattr(tvd, name, None)
    if cls is None:
        raise DataError(f"torchvision has no dataset {name!r}; use a class name of torchvision.datasets, e.g. CIFAR10")
    try:
        ds = cls(root=str(root), train=split == "train", download=False)
    except (RuntimeError, TypeError) as exc:
        raise DataError(
            f"torchvision {name} not found under {root} ({first_line(exc)}); "
            f"download it there once on a machine with internet"
        ) from None
    # torchvision's readers check little (MNIST's asserts, CIFAR's unpickled arrays): files that are not the
    # dataset's fail in many ways, caught here as one
    except (AssertionError, ValueError, IndexError, KeyError, EOFError, OSError, pickle.UnpicklingError) as exc:
        why = "a pickle torch.load(weights_only=True) refuses" if isinstance(exc, pickle.UnpicklingError) else None
        raise DataError(
            f"torchvision {name} under {root} is unreadable ({why or first_line(exc)}); replace its files with "
            f"the dataset's original download"
        ) from None
    try:
        raw = torch.as_tensor(np.asarray(ds.data))
        targets = torch.as_tensor(ds.targets).long()
        if raw.ndim not in (3, 4) or raw.dtype != torch.uint8 or len(targets) != len(raw):
            raise ValueError(f"images of shape {tuple(raw.shape)} and dtype {raw.dtype}, {len(targets)} labels")
    except (AttributeError, TypeError, ValueError, RuntimeError) as exc:
        raise DataError(
            f"torchvision {name} under {root} does not hold images learngene can read ({first_line(exc)}); "
            f"use a dataset of uint8 images with labels, e.g. CIFAR10 or MNIST"
        ) from None
    images = raw.unsqueeze(1) if raw.ndim == 3 else raw.permute(0, 3, 1, 2)
    scaled = images.float() / 255.0
    mean = tuple(scaled.mean(dim=(0, 2, 3)).tolist())
    std = tuple(scaled.std(dim=(0, 2, 3)).tolist())
    data = ImageData(
        images.contiguous(),
        targets,
        len(ds.classes),
        mean,
        std,
        name=f"{name}-{split}",
        dataset=name,
        classes=tuple(map(str, ds.classes)),
    )
    return resize(data, img_size or data.img_size)


@dataclass(frozen=True)
class LoadRequest:
    """What every source is asked for: the split and how the caller wants the images."""

    split: str
    img_size: int | None
    data_dir: str | os.PathLike | None
    in_chans: int | None
    preprocessing: Mapping[str, Any] | None
    augment: str
    workers: int
    classes: Sequence[str] | None


def find_source(name: str) -> tuple[DataSource, str]:
    """The source a ``--data`` value names, and its argument (the part after ``:``, empty for none)."""
    prefix, sep, argument = name.partition(":")
    source = find_data_source(prefix)
    if source is None or bool(sep) != bool(source.argument):
        raise DataError(f"unknown dataset {name!r}; use one of {', '.join(usage for usage, _ in source_usages())}")
    return source, argument


def _fashion_mnist_source(_: str, req: LoadRequest) -> Data:
    return fashion_mnist(req.split, req.data_dir, req.img_size or 28)


def _digits_source(_: str, req: LoadRequest) -> Data:
    return digits(req.split, req.img_size or 28)


def _folder_source(path: str, req: LoadRequest) -> Data:
    root = Path(path)
    root = root / req.split if (root / req.split).is_dir() else root
    return image_folder(
        root,
        req.img_size,
        req.in_chans or 3,
        in_memory=False,
        preprocessing=req.preprocessing,
        augment=req.augment if req.split == "train" else "none",
        workers=req.workers,
        classes=req.classes,
        keep_colour=True,
    )


def _torchvision_source(name: str, req: LoadRequest) -> Data:
    if req.data_dir is None:
        raise DataError("torchvision datasets need data_dir (--data-dir): the folder they were downloaded to")
    return torchvision_dataset(name, req.data_dir, req.split, req.img_size)


BUILTIN_DATASETS = tuple(name for name, source in DATA_SOURCES.items() if not source.argument)


def load_dataset(
    name: str,
    split: str = "train",
    img_size: int | None = None,
    data_dir: str | os.PathLike | None = None,
    in_chans: int | None = None,
    preprocessing: Mapping[str, Any] | None = None,
    augment: str = "none",
    workers: int = 0,
    classes: Sequence[str] | None = None,
) -> Data:
    """Load a dataset by name, through the registered source it names (:data:`DATA_SOURCES`).

    ``name`` is ``fashion_mnist``, ``digits``, ``folder:PATH`` (``PATH/{split}`` with one sub-folder per
    class, or ``PATH`` itself for the train split), ``torchvision:NAME`` (found under ``data_dir``) or
    ``hf:NAME_OR_PATH`` (a Hugging Face ``datasets`` dataset, :mod:`learngene.data.hub`).
    ``in_chans`` converts grey to colour, and refuses colour for a grey model (that would discard the colour:
    :func:`convert_channels` does it when asked); ``img_size`` resizes (default: the data's own).
    Folders stream (``workers`` DataLoader processes) with ``preprocessing``'s resize, crop and
    normalization (e.g. the ancestry's, :func:`preprocessing_cfg`), and ``augment="deit"`` on the train
    split; ``classes`` (the train split's) must be the folder's own. The small in-memory datasets
    normalize with their own statistics and take no ``augment`` (the training loop's ``--augment``).
    """
    if augment not in AUGMENTATIONS:
        raise DataError(f"unknown augmentation {augment!r}; use one of {', '.join(AUGMENTATIONS)}")
    source, argument = find_source(name)
    if augment != "none" and not source.streams:
        raise DataError(
            f"aug={augment!r} (--aug {augment}) is for image folders (folder:PATH) of RGB images; for {name} use "
            "augment=True (--augment: flips and shifts)"
        )
    if workers < 0:
        raise DataError(f"workers (--workers) must be 0 (decode in the main process) or more, got {workers}")
    request = LoadRequest(split, img_size, data_dir, in_chans, preprocessing, augment, workers, classes)
    with held_warnings(("huggingface_hub", "datasets")):  # torch's or PIL's note on data that then fail: unsaid
        data = cast(Data, source.read(argument, request))  # learngene data: the registry checks it by its parts
    if in_chans is not None and isinstance(data, ImageData):
        if in_chans == 1 and data.in_chans > 1:
            raise colour_for_grey_model(name)
        data = convert_channels(data, in_chans)
    if len(data) == 0:
        raise DataError(f"dataset {name} ({split}) is empty; check that the data are where you said")
    return data


def load_splits(
    name: str,
    img_size: int | None = None,
    data_dir: str | os.PathLike | None = None,
    in_chans: int | None = None,
    preprocessing: Mapping[str, Any] | None = None,
    augment: str = "none",
    workers: int = 0,
) -> tuple[Data, Data]:
    """``(train, test)`` of :func:`load_dataset`; a test folder must hold the training folder's classes."""
    train = load_dataset(name, "train", img_size, data_dir, in_chans, preprocessing, augment, workers)
    classes = getattr(train, "classes", None)
    test = load_dataset(
        name,
        "test",
        img_size,
        data_dir,
        in_chans,
        preprocessing,
        "none",
        workers,
        classes=classes if isinstance(train, FolderData) else None,
    )
    return train, test
