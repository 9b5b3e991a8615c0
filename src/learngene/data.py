"""Datasets, the subsets the benchmark needs, and the one batch iterator.

Small datasets (Fashion-MNIST, scikit-learn digits, small image folders) live in memory as uint8
tensors and are normalized batch by batch; anything a torch ``Dataset`` can read streams through a
``DataLoader``. Both are consumed through :class:`Batches`, whose order depends only on
``(seed, epoch)``: the same seed gives the same batches, a resumed run can skip to any step, and
under DDP each rank takes its share of the very same global batch.
"""

from __future__ import annotations

import gzip
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import DataError
from .io import atomic_path, quote

FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_MEAN, FASHION_MNIST_STD = (0.2860,), (0.3530,)
FASHION_MNIST_INSTALL = "apt-get install dataset-fashion-mnist (Debian), or pass --data-dir / set $LEARNGENE_DATA to a folder with its IDX files"


@dataclass(frozen=True)
class ImageData:
    """An in-memory image classification dataset.

    Attributes:
        images: uint8 ``(N, C, H, W)``.
        labels: int64 ``(N,)`` in ``[0, num_classes)``.
        num_classes: size of the label space (classes may be absent from a subset).
        mean, std: per-channel normalization applied to every batch (training and evaluation alike).
        name: for logs and reports.
        soft_targets: optional float ``(N, K)`` cached teacher logits (distillation without augmentation).
    """

    images: Tensor
    labels: Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    name: str = "data"
    soft_targets: Tensor | None = None

    def __post_init__(self) -> None:
        if self.images.ndim != 4 or self.images.dtype != torch.uint8:
            raise DataError(f"{self.name}: images must be uint8 (N, C, H, W), got {self.images.dtype} {tuple(self.images.shape)}")
        if len(self.images) != len(self.labels):
            raise DataError(f"{self.name}: {len(self.images)} images but {len(self.labels)} labels")
        if len(self.mean) != self.in_chans or len(self.std) != self.in_chans:
            raise DataError(f"{self.name}: normalization has {len(self.mean)} channels, images have {self.in_chans}")
        if len(self.labels) and not (0 <= int(self.labels.min()) and int(self.labels.max()) < self.num_classes):
            raise DataError(f"{self.name}: labels run from {int(self.labels.min())} to {int(self.labels.max())}, outside "
                            f"0..{self.num_classes - 1}; give labels 0..num_classes-1")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def in_chans(self) -> int:
        return self.images.shape[1]

    @property
    def img_size(self) -> int:
        return self.images.shape[-1]

    def subset(self, indices: Sequence[int] | Tensor, name: str | None = None) -> "ImageData":
        idx = torch.as_tensor(indices, dtype=torch.long)
        return replace(
            self,
            images=self.images[idx],
            labels=self.labels[idx],
            soft_targets=None if self.soft_targets is None else self.soft_targets[idx],
            name=name or self.name,
        )

    def with_soft_targets(self, logits: Tensor) -> "ImageData":
        return replace(self, soft_targets=logits.detach().float().cpu())

    def get_batch(self, indices: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        x = normalize(self.images[indices], self.mean, self.std)
        soft = None if self.soft_targets is None else self.soft_targets[indices]
        return x, self.labels[indices], soft


def normalize(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """uint8 images → float, scaled to [0, 1], then standardized per channel."""
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return (images.float() / 255.0 - m) / s


class StreamData:
    """A torch map-style dataset returning ``(normalized float image (C, H, W), label)``, streamed."""

    def __init__(self, dataset, num_classes: int, in_chans: int, img_size: int, name: str):
        self.dataset, self.num_classes, self.name = dataset, num_classes, name
        self._in_chans, self._img_size = in_chans, img_size
        self.soft_targets = None

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def in_chans(self) -> int:
        return self._in_chans

    @property
    def img_size(self) -> int:
        return self._img_size

    def get_batch(self, indices: Tensor) -> tuple[Tensor, Tensor, None]:
        items = [self.dataset[int(i)] for i in indices]
        return torch.stack([x for x, _ in items]), torch.tensor([int(y) for _, y in items]), None


Data = ImageData | StreamData


# ---- built-in datasets ----------------------------------------------------------------------------
def cache_dir() -> Path:
    path = Path(os.environ.get("LEARNGENE_CACHE", Path.home() / ".cache" / "learngene"))
    if path.exists() and not path.is_dir():
        raise DataError(f"the cache folder {quote(path)} (LEARNGENE_CACHE) is not a directory; set LEARNGENE_CACHE to "
                        f"a folder, or unset it")
    return path


def _find_fashion_mnist(data_dir: str | os.PathLike | None) -> Path:
    # a folder the user named is the only place looked in: falling back elsewhere would hide a typo
    if data_dir is not None:
        candidates = [Path(data_dir)]
    else:
        candidates = [Path(p) for p in (os.environ.get("LEARNGENE_DATA"),) if p] + [DEBIAN_FASHION_MNIST]
    for base in candidates:
        for folder in (base, base / "fashion-mnist", base / "FashionMNIST" / "raw"):
            if all((folder / f).exists() or (folder / f"{f}.gz").exists() for f in FASHION_MNIST_FILES):
                return folder
    if data_dir is not None:
        raise DataError(f"Fashion-MNIST IDX files ({FASHION_MNIST_FILES[0]}[.gz], ...) not found in {data_dir}; check "
                        f"--data-dir, or leave it out to use the installed copy")
    raise DataError(f"Fashion-MNIST not found; {FASHION_MNIST_INSTALL}")


def _ungzipped_fashion_mnist(source: Path) -> Path:
    """Folder laid out as torchvision's ``FashionMNIST/raw`` with plain IDX files (un-gzipped once)."""
    if all((source / f).exists() for f in FASHION_MNIST_FILES) and source.name == "raw" and source.parent.name == "FashionMNIST":
        return source.parent.parent
    root = cache_dir() / "fashion-mnist"
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
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
    return root


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
    data = ImageData(ds.data.unsqueeze(1).contiguous(), ds.targets.long(), 10, FASHION_MNIST_MEAN, FASHION_MNIST_STD,
                     name=f"fashion_mnist-{split}")
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
    train_idx, test_idx = train_test_split(np.arange(len(labels)), test_size=test_fraction, random_state=seed,
                                           stratify=bunch.target)
    scaled = images.float() / 255.0
    mean, std = (float(scaled.mean()),), (float(scaled.std()),)
    data = ImageData(images, labels, 10, mean, std, name=f"digits-{split}")
    return resize(data.subset(train_idx if split == "train" else test_idx), img_size)


def resize(data: ImageData, img_size: int) -> ImageData:
    """Bilinear (antialiased) resize of every image to ``img_size``×``img_size``."""
    if data.img_size == img_size and data.images.shape[-2] == img_size:
        return data
    x = F.interpolate(data.images.float(), size=(img_size, img_size), mode="bilinear", antialias=True, align_corners=False)
    return replace(data, images=x.round().clamp(0, 255).to(torch.uint8))


def convert_channels(data: ImageData, in_chans: int) -> ImageData:
    """Repeat a grey channel to ``in_chans`` or average colour channels to one."""
    if data.in_chans == in_chans:
        return data
    if data.in_chans == 1:
        return replace(data, images=data.images.expand(-1, in_chans, -1, -1).contiguous(),
                       mean=data.mean * in_chans, std=data.std * in_chans)
    if in_chans == 1:
        grey = data.images.float().mean(1, keepdim=True).round().to(torch.uint8)
        return replace(data, images=grey, mean=(sum(data.mean) / len(data.mean),), std=(sum(data.std) / len(data.std),))
    raise DataError(f"cannot convert {data.in_chans}-channel images to {in_chans} channels; use --in-chans 1 or 3")


def image_folder(root: str | os.PathLike, img_size: int, in_chans: int = 3, in_memory: bool = True,
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> Data:
    """A torchvision ``ImageFolder`` (one sub-folder per class), resized and center-cropped to ``img_size``."""
    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    root = Path(root)
    if not root.is_dir():
        raise DataError(f"image folder {root} does not exist; check the path after folder:")
    mode = {1: "L", 3: "RGB"}.get(in_chans)
    if mode is None:
        raise DataError(f"image folders load as 1 or 3 channels, not {in_chans}; pass --in-chans 1 or 3")
    resize_crop = [transforms.Resize(img_size), transforms.CenterCrop(img_size)]
    _check_image_folder(root)
    name = f"folder:{root.name}"
    if mean is None:
        mean, std = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)) if in_chans == 3 else ((0.5,), (0.5,))
    if in_memory:
        to_uint8 = transforms.Compose([*resize_crop, transforms.PILToTensor()])
        ds = ImageFolder(str(root), transform=to_uint8, loader=lambda p: _open_image(p, mode))
        images = torch.stack([ds[i][0] for i in range(len(ds))])
        return ImageData(images, torch.tensor(ds.targets), len(ds.classes), tuple(mean), tuple(std), name=name)
    to_float = transforms.Compose([*resize_crop, transforms.ToTensor(), transforms.Normalize(mean, std)])
    ds = ImageFolder(str(root), transform=to_float, loader=lambda p: _open_image(p, mode))
    return StreamData(ds, len(ds.classes), in_chans, img_size, name)


def _check_image_folder(root: Path) -> None:
    """One line for the ways a folder fails to be a dataset: no class folders, no images, an empty class."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    classes = sorted(d for d in root.iterdir() if d.is_dir())
    if not classes:
        raise DataError(f"{root} has no class sub-folders; put the images of each class in a sub-folder named after it")
    empty = [d.name for d in classes if not any(f.suffix.lower() in IMG_EXTENSIONS for f in d.rglob("*"))]
    if len(empty) == len(classes):
        raise DataError(f"{root} holds no images ({', '.join(IMG_EXTENSIONS)}); put the images of each class in "
                        f"its sub-folder")
    if empty:
        raise DataError(f"{root}: class {empty[0]} has no images" + (f" (nor {len(empty) - 1} more)" if len(empty) > 1 else "")
                        + "; add images to it or remove the folder")


def _open_image(path: str, mode: str):
    from PIL import Image

    try:
        with Image.open(path) as img:
            return img.convert(mode)
    except OSError as exc:
        raise DataError(f"cannot read image {path} ({str(exc).splitlines()[0][:120]}); remove or replace it") from None


def torchvision_dataset(name: str, root: str | os.PathLike, split: str = "train", img_size: int | None = None) -> ImageData:
    """A torchvision dataset already on disk (``download=False``): CIFAR10, CIFAR100, MNIST, FashionMNIST, ..."""
    import torchvision.datasets as tvd

    cls = getattr(tvd, name, None)
    if cls is None:
        raise DataError(f"torchvision has no dataset {name!r}; use a class name of torchvision.datasets, e.g. CIFAR10")
    try:
        ds = cls(root=str(root), train=split == "train", download=False)
    except (RuntimeError, TypeError) as exc:
        raise DataError(f"torchvision {name} not found under {root} ({str(exc).splitlines()[0]}); "
                        f"download it there once on a machine with internet") from None
    raw = torch.as_tensor(np.asarray(ds.data))
    images = raw.unsqueeze(1) if raw.ndim == 3 else raw.permute(0, 3, 1, 2)
    scaled = images.float() / 255.0
    mean = tuple(scaled.mean(dim=(0, 2, 3)).tolist())
    std = tuple(scaled.std(dim=(0, 2, 3)).tolist())
    data = ImageData(images.contiguous(), torch.as_tensor(ds.targets).long(), len(ds.classes), mean, std, name=f"{name}-{split}")
    return resize(data, img_size or data.img_size)


BUILTIN_DATASETS = ("fashion_mnist", "digits")


def load_dataset(name: str, split: str = "train", img_size: int | None = None, data_dir: str | os.PathLike | None = None,
                 in_chans: int | None = None) -> Data:
    """Load a dataset by name.

    ``name`` is ``fashion_mnist``, ``digits``, ``folder:PATH`` (``PATH/{split}`` with one sub-folder per
    class, or ``PATH`` itself for the train split) or ``torchvision:NAME`` (found under ``data_dir``).
    ``in_chans`` converts grey to colour or back; ``img_size`` resizes (default: the data's own).
    """
    if name == "fashion_mnist":
        data: Data = fashion_mnist(split, data_dir, img_size or 28)
    elif name == "digits":
        data = digits(split, img_size or 28)
    elif name.startswith("folder:"):
        root = Path(name.removeprefix("folder:"))
        root = root / split if (root / split).is_dir() else root
        data = image_folder(root, img_size or 224, in_chans or 3)
    elif name.startswith("torchvision:"):
        if data_dir is None:
            raise DataError("torchvision datasets need --data-dir; pass the folder they were downloaded to")
        data = torchvision_dataset(name.removeprefix("torchvision:"), data_dir, split, img_size)
    else:
        raise DataError(f"unknown dataset {name!r}; use one of {', '.join(BUILTIN_DATASETS)}, folder:PATH or torchvision:NAME")
    if in_chans is not None and isinstance(data, ImageData):
        data = convert_channels(data, in_chans)
    if len(data) == 0:
        raise DataError(f"dataset {name} ({split}) is empty; check that the data are where you said")
    return data


# ---- subsets ----------------------------------------------------------------------------------------
def few_shot(data: ImageData, per_class: int, seed: int = 0) -> ImageData:
    """``per_class`` images of every class, chosen at random with ``seed`` (the low-data tasks)."""
    gen = torch.Generator().manual_seed(seed)
    picked = []
    for c in range(data.num_classes):
        members = (data.labels == c).nonzero().flatten()
        if len(members) < per_class:
            raise DataError(f"{data.name}: class {c} has {len(members)} images, fewer than the {per_class} per class asked; "
                            f"ask for at most {len(members)} (--few-shot)")
        picked.append(members[torch.randperm(len(members), generator=gen)[:per_class]])
    return data.subset(torch.cat(picked).sort().values, name=f"{data.name}-{per_class}shot")


def fraction(data: ImageData, frac: float, seed: int = 0) -> ImageData:
    """A random ``frac`` of the data (at least one image), fixed by ``seed``."""
    if not 0 < frac <= 1:
        raise DataError(f"fraction must be in (0, 1], got {frac}; give a share of the data between 0 and 1")
    n = max(1, round(len(data) * frac))
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:n]
    return data.subset(idx.sort().values, name=f"{data.name}-{n}")


def class_subset(data: ImageData, classes: Sequence[int]) -> ImageData:
    """Only the images of ``classes``, relabelled ``0..len(classes)-1`` in the given order."""
    classes = list(classes)
    if not classes:
        raise DataError("class subset needs at least one class; give the classes to keep")
    remap = torch.full((data.num_classes,), -1, dtype=torch.long)
    for new, old in enumerate(classes):
        if not 0 <= old < data.num_classes:
            raise DataError(f"{data.name} has no class {old}; choose classes 0..{data.num_classes - 1}")
        remap[old] = new
    keep = (remap[data.labels] >= 0).nonzero().flatten()
    for c in classes:
        if not (data.labels[keep] == c).any():
            raise DataError(f"{data.name}: class {c} has no images; choose classes that have images")
    sub = data.subset(keep, name=f"{data.name}-classes{'-'.join(map(str, classes))}")
    return replace(sub, labels=remap[sub.labels], num_classes=len(classes), soft_targets=None)


# ---- batches ------------------------------------------------------------------------------------------
class Batch(NamedTuple):
    x: Tensor
    y: Tensor
    soft: Tensor | None
    global_size: int  # images in the whole (all-rank) batch, for exact loss averaging under DDP


class Batches:
    """Deterministic batches of ``data``: the order depends only on ``(seed, epoch)``.

    Under DDP (``world > 1``) every rank takes ``batch[rank::world]`` of the same global batch, so a
    run on N processes with global batch B sees exactly the images of a 1-process run with batch B.
    """

    def __init__(self, data: Data, batch_size: int, shuffle: bool, seed: int = 0, rank: int = 0, world: int = 1,
                 augment: bool = False):
        if len(data) == 0:
            raise DataError(f"{getattr(data, 'name', 'dataset')} is empty; give data with at least one image")
        if batch_size < 1:
            raise DataError(f"batch size must be positive, got {batch_size}; pass --batch-size 1 or more")
        self.data, self.batch_size, self.shuffle, self.seed = data, batch_size, shuffle, seed
        self.rank, self.world, self.augment = rank, world, augment
        self.epoch, self.start_step = 0, 0

    def __len__(self) -> int:
        return -(-len(self.data) // self.batch_size)

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        self.epoch, self.start_step = epoch, start_step

    def _order(self) -> Tensor:
        if not self.shuffle:
            return torch.arange(len(self.data))
        return torch.randperm(len(self.data), generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch))

    def __iter__(self) -> Iterator[Batch]:
        order = self._order()
        for step in range(self.start_step, len(self)):
            global_idx = order[step * self.batch_size:(step + 1) * self.batch_size]
            x, y, soft = self.data.get_batch(global_idx[self.rank::self.world])
            if self.augment:
                gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch * 10_007 + step)
                x = augment_batch(x, gen, global_size=len(global_idx), rank=self.rank, world=self.world)
            yield Batch(x, y, soft, len(global_idx))


def augment_batch(x: Tensor, gen: torch.Generator, max_shift: int = 2, global_size: int | None = None, rank: int = 0,
                  world: int = 1) -> Tensor:
    """Random horizontal flips and shifts of up to ``max_shift`` pixels (zero padding), per image.

    Under DDP ``x`` is this rank's share ``batch[rank::world]`` of a global batch of ``global_size``
    images: the draws are made for the whole global batch and then shared out the same way, so
    every image gets the augmentation it would get in a 1-process run.
    """
    n = global_size or x.shape[0]
    flip = (torch.rand(n, generator=gen) < 0.5)[rank::world]
    shifts = torch.randint(0, 2 * max_shift + 1, (n, 2), generator=gen)[rank::world]
    if not len(x):  # this rank's share of a last, tiny global batch
        return x
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
    padded = F.pad(x, (max_shift,) * 4)
    h, w = x.shape[-2:]
    return torch.stack([padded[i, :, a:a + h, b:b + w] for i, (a, b) in enumerate(shifts.tolist())])
