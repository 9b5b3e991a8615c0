"""Datasets, the subsets the benchmark needs, and the one batch iterator.

Small datasets (Fashion-MNIST, scikit-learn digits, small image folders) live in memory as uint8
tensors and are normalized batch by batch; anything a torch ``Dataset`` can read streams through a
``DataLoader``. Both are consumed through :class:`Batches`, whose order depends only on
``(seed, epoch)``: the same seed gives the same batches, a resumed run can skip to any step, and
under DDP each rank takes its share of the very same global batch.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import random
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, NamedTuple, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import DataError
from .io import atomic_path, quote
from .preprocessing import PREPROCESSING_KEYS, check_preprocessing

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
        dataset, classes: the label space: the source dataset and the name of every class, in label
            order (empty when unknown, e.g. tensors built by hand).
    """

    images: Tensor
    labels: Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    name: str = "data"
    soft_targets: Tensor | None = None
    dataset: str = ""
    classes: tuple[str, ...] = ()

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
        if self.classes and len(self.classes) != self.num_classes:
            raise DataError(f"{self.name}: {len(self.classes)} class names for {self.num_classes} classes; name every class")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def label_space(self) -> dict[str, Any] | None:
        return label_space(self)

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


Data = Union[ImageData, "FolderData"]


def label_space(data: Data) -> dict[str, Any] | None:
    """``{"dataset": ..., "classes": [...]}``: what the labels of ``data`` mean (None when unnamed).

    Model and gene files record it, so that a head is reused only on the classes it was trained on.
    """
    if not data.classes:
        return None
    source = data.dataset if isinstance(data, ImageData) else data.name
    return {"dataset": source, "classes": list(data.classes)}


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
    """Folder laid out as torchvision's ``FashionMNIST/raw`` with plain IDX files (un-gzipped once).

    The cache is keyed by the source folder and its files' sizes and times, so a ``--data-dir`` with other
    (or broken) files never silently reuses the copy made from an earlier one; every file is checked.
    """
    if all((source / f).exists() for f in FASHION_MNIST_FILES) and source.name == "raw" and source.parent.name == "FashionMNIST":
        for name in FASHION_MNIST_FILES:
            _check_idx(source / name, source / name)
        return source.parent.parent
    root = cache_dir() / "fashion-mnist" / _source_key(source)
    raw = root / "FashionMNIST" / "raw"
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"cannot create the data cache {raw} ({exc.strerror}); set $LEARNGENE_CACHE to a writable "
                        f"folder") from None
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
    fields = [int.from_bytes(head[i:i + 4], "big") for i in range(0, len(head) - 3, 4)]
    if len(fields) != 1 + ndim or fields[0] != magic or 4 + 4 * ndim + math.prod(fields[1:]) != path.stat().st_size:
        raise DataError(f"{shown} is not a Fashion-MNIST IDX file (its header does not match its length); replace it "
                        f"with the dataset's original file")


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
                     name=f"fashion_mnist-{split}", dataset="fashion_mnist", classes=tuple(FashionMNIST.classes))
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
    data = ImageData(images, labels, 10, mean, std, name=f"digits-{split}", dataset="digits",
                     classes=tuple(str(d) for d in range(10)))
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


# ---- image folders: the ancestry's preprocessing, streamed through DataLoader workers -------------------
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# DeiT's training recipe (Touvron et al. 2021, Table 9; timm's train.py flags), which TLEG, WAVE and
# Share-Init condense with: RandAugment, random erasing, then mixup/cutmix on the batch.
DEIT_RECIPE = {"auto_augment": "rand-m9-mstd0.5-inc1", "re_prob": 0.25, "re_mode": "pixel", "re_count": 1,
               "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "mixup_prob": 1.0, "mixup_switch_prob": 0.5}
AUGMENTATIONS = ("none", "deit")


def preprocessing_cfg(source: Any, img_size: int | None = None, in_chans: int | None = None) -> dict[str, Any]:
    """The preprocessing a model expects, as timm's data-config keys (``timm.data.resolve_data_config``).

    ``source`` is a timm model (its ``pretrained_cfg``: mean, std, interpolation, crop), a dataset
    (its own normalization, resized with bilinear interpolation and no crop margin, as :func:`load_dataset`
    does) or such a dict (checked). ``img_size``/``in_chans`` override the input size (a model built at
    another resolution than its pretrained one). A descendant's model file records this dict, and
    hub folders write it as the ``pretrained_cfg``.
    """
    if isinstance(source, torch.nn.Module):
        from timm.data import resolve_data_config

        cfg = dict(resolve_data_config(model=source))
        embed = getattr(source, "patch_embed", None)
        if embed is not None and getattr(embed, "img_size", None) is not None:
            cfg["input_size"] = (embed.proj.in_channels, *embed.img_size)
    elif isinstance(source, Mapping):
        cfg = dict(source)
    elif isinstance(source, (ImageData, FolderData)):
        if isinstance(source, FolderData):
            return dict(source.preprocessing)
        cfg = {"input_size": (source.in_chans, source.img_size, source.img_size), "interpolation": "bilinear",
               "mean": source.mean, "std": source.std, "crop_pct": 1.0, "crop_mode": "center"}
    else:
        raise DataError(f"no preprocessing can be read from a {type(source).__name__}; give a timm model, a dataset "
                        f"or a dict with {', '.join(PREPROCESSING_KEYS)}")
    return check_preprocessing(cfg, img_size, in_chans)


def folder_transforms(pre: Mapping[str, Any], augment: str = "none", to_uint8: bool = False):
    """timm's transform for ``pre`` (:func:`preprocessing_cfg`): resize, crop, to tensor, normalize.

    ``augment="deit"`` is DeiT's training transform instead (random-resized crop, flip, RandAugment
    ``rand-m9-mstd0.5-inc1``, random erasing), through ``timm.data.create_transform``; ``to_uint8``
    leaves out the normalization (images kept in memory are normalized batch by batch).
    """
    from timm.data import create_transform

    common = {k: pre[k] for k in ("input_size", "interpolation", "mean", "std")}
    if augment == "deit":
        return create_transform(**common, is_training=True, auto_augment=DEIT_RECIPE["auto_augment"],
                                re_prob=DEIT_RECIPE["re_prob"], re_mode=DEIT_RECIPE["re_mode"],
                                re_count=DEIT_RECIPE["re_count"])
    if augment != "none":
        raise DataError(f"unknown augmentation {augment!r}; use one of {', '.join(AUGMENTATIONS)}")
    return create_transform(**common, is_training=False, crop_pct=pre["crop_pct"], crop_mode=pre["crop_mode"],
                            normalize=not to_uint8)


class _Failed(NamedTuple):
    """An image that could not be read, passed back from a worker so the main process raises one line."""

    message: str


class FolderData:
    """Images in class sub-folders, decoded and transformed one by one: in DataLoader workers when ``workers > 0``.

    ``dataset[(index, seed)]`` seeds Python's, NumPy's and torch's RNGs with ``seed`` before a random
    transform, so an image's augmentation depends on its position in the epoch only, not on which
    worker or rank decodes it, and a resumed run repeats it.
    """

    def __init__(self, samples: Sequence[tuple[str, int]], classes: Sequence[str], preprocessing: Mapping[str, Any],
                 name: str, augment: str = "none", workers: int = 0):
        self.samples, self.classes = list(samples), list(classes)
        self.preprocessing, self.name, self.augment, self.workers = dict(preprocessing), name, augment, workers
        self.transform = folder_transforms(self.preprocessing, augment)
        self.labels = torch.tensor([y for _, y in self.samples], dtype=torch.long)
        self.soft_targets = None
        self._loader = None

    def __len__(self) -> int:
        return len(self.samples)

    def __getstate__(self) -> dict[str, Any]:  # what a spawned worker receives: never the loader itself
        return {**self.__dict__, "_loader": None}

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def label_space(self) -> dict[str, Any] | None:
        return label_space(self)

    @property
    def in_chans(self) -> int:
        return self.preprocessing["input_size"][0]

    @property
    def img_size(self) -> int:
        return self.preprocessing["input_size"][-1]

    @property
    def mean(self) -> tuple[float, ...]:
        return self.preprocessing["mean"]

    @property
    def std(self) -> tuple[float, ...]:
        return self.preprocessing["std"]

    def subset(self, indices: Sequence[int] | Tensor, name: str | None = None) -> "FolderData":
        picked = [self.samples[int(i)] for i in torch.as_tensor(indices, dtype=torch.long)]
        return FolderData(picked, self.classes, self.preprocessing, name or self.name, self.augment, self.workers)

    def __getitem__(self, item: tuple[int, int] | int):
        index, seed = item if isinstance(item, tuple) else (item, index_seed(0, 0, item))
        path, label = self.samples[index]
        try:
            image = _open_image(path, {1: "L", 3: "RGB"}[self.in_chans])
        except DataError as exc:
            return _Failed(str(exc))
        if self.augment == "none":
            return self.transform(image), label
        with _seeded(seed):
            return self.transform(image), label

    def get_batch(self, indices: Tensor) -> tuple[Tensor, Tensor, None]:
        x, y = _Collate(self.in_chans, self.img_size)([self[int(i)] for i in indices])
        return x, y, None

    def loader(self, sampler) -> "torch.utils.data.DataLoader":
        """One DataLoader per dataset, its workers kept between epochs; ``sampler`` says which images come next."""
        if self._loader is None:
            from torch.utils.data import DataLoader

            self._sampler = _Sampler()
            self._loader = DataLoader(
                self, batch_sampler=self._sampler, num_workers=self.workers, collate_fn=_Collate(self.in_chans, self.img_size),
                pin_memory=torch.cuda.is_available(), persistent_workers=self.workers > 0,
                prefetch_factor=4 if self.workers > 0 else None,
                generator=torch.Generator().manual_seed(0))  # else the loader draws its seed from the global RNG
        self._sampler.source = sampler
        return self._loader


def default_workers() -> int:
    """DataLoader workers per process when ``--workers`` is not given: the CPUs this process may use,
    shared among the processes ``torchrun`` started on this node, less one for the training loop, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    per_process = cpus // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(0, min(8, per_process - 1))


def index_seed(seed: int, epoch: int, position: int) -> int:
    """The RNG seed of the image at ``position`` of epoch ``epoch``'s order (independent of workers and ranks)."""
    return (seed * 1_000_003 + epoch) * 100_000_007 + position & (2**63 - 1)


class _seeded:
    """Seeds Python's, NumPy's and torch's RNGs (timm's transforms draw from all three) and restores them after."""

    def __init__(self, seed: int):
        self.seed = seed

    def __enter__(self) -> None:
        self.states = random.getstate(), np.random.get_state(), torch.get_rng_state()
        random.seed(self.seed)
        np.random.seed(self.seed % 2**32)
        torch.manual_seed(self.seed)

    def __exit__(self, *exc: object) -> None:
        random.setstate(self.states[0])
        np.random.set_state(self.states[1])
        torch.set_rng_state(self.states[2])


class _Sampler:
    """The DataLoader's batch sampler; yields what its current ``source`` (a :class:`Batches`) asks for."""

    source: Any = None

    def __iter__(self):
        return self.source.index_batches()

    def __len__(self) -> int:
        return len(self.source) - self.source.start_step


class _Collate:
    """Stacks ``(image, label)`` pairs; an empty share (a rank's part of a last, tiny batch) stays empty."""

    def __init__(self, in_chans: int, img_size: int):
        self.shape = (0, in_chans, img_size, img_size)

    def __call__(self, items: list) -> tuple[Tensor, Tensor] | _Failed:
        failed = next((item for item in items if isinstance(item, _Failed)), None)
        if failed is not None:
            return failed
        if not items:
            return torch.empty(self.shape), torch.empty(0, dtype=torch.long)
        return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items], dtype=torch.long)


def image_folder(root: str | os.PathLike, img_size: int | None = None, in_chans: int = 3, in_memory: bool = True,
                 preprocessing: Mapping[str, Any] | None = None, augment: str = "none", workers: int = 0,
                 classes: Sequence[str] | None = None) -> Data:
    """An image folder (one sub-folder per class, named after it), read with ``preprocessing``'s resize and crop.

    ``preprocessing`` (:func:`preprocessing_cfg`, e.g. an ancestry's) defaults to ImageNet's mean and std
    (0.5 for grey), a plain resize to ``img_size`` and a centre crop. ``in_memory`` decodes every image
    once into uint8; otherwise they stream (:class:`FolderData`, ``workers`` DataLoader processes).
    ``classes``, when given (the training split's), must be the folder's classes: labels are their indices.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"image folder {root} does not exist; check the path after folder:")
    if in_chans not in (1, 3):
        raise DataError(f"image folders load as 1 or 3 channels, not {in_chans}; pass --in-chans 1 or 3")
    if augment != "none" and in_memory:
        raise DataError(f"--aug {augment} draws a new augmentation per image and epoch; stream the folder "
                        f"(in_memory=False)")
    if augment == "deit" and in_chans != 3:
        raise DataError("--aug deit (RandAugment, mixup/cutmix, random erasing) is for RGB images; for grey data "
                        "use --augment (flips and shifts)")
    if preprocessing is None:
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if in_chans == 3 else ((0.5,), (0.5,))
        preprocessing = {"input_size": (in_chans, 224, 224), "interpolation": "bilinear", "mean": mean, "std": std,
                         "crop_pct": 1.0, "crop_mode": "center"}
    pre = preprocessing_cfg(preprocessing, img_size, in_chans)
    samples, found = _folder_samples(root)
    if classes is not None and list(classes) != found:
        extra, lacking = sorted(set(found) - set(classes)), sorted(set(classes) - set(found))
        raise DataError(f"{root} has classes {_some(found)} but the training folder has {_some(classes)}"
                        + (f" ({_some(extra)} only here)" if extra else "") + (f" ({_some(lacking)} missing here)" if lacking else "")
                        + "; give both splits the same class sub-folders, or their labels would not agree")
    name = f"folder:{root.name}"
    if not in_memory:
        return FolderData(samples, found, pre, name, augment, workers)
    to_uint8 = folder_transforms(pre, to_uint8=True)
    mode = {1: "L", 3: "RGB"}[in_chans]
    images = torch.stack([to_uint8(_open_image(path, mode)) for path, _ in samples])
    return ImageData(images, torch.tensor([y for _, y in samples]), len(found), pre["mean"], pre["std"], name=name,
                     dataset=name, classes=tuple(found))


def write_image_folder(root: str | os.PathLike, num_classes: int = 4, per_class: int = 8, size: int = 224,
                       fmt: str = "jpg", seed: int = 0, splits: Sequence[str] = ("train", "test")) -> Path:
    """Generated RGB images in ``root/{split}/class_{c}/`` for the pipeline's checks and benchmarks.

    Class ``c`` is a stripe pattern of period ``c + 2`` (over noise), in every patch, so the task is
    learnable; sizes vary by up to a fifth around ``size`` so that resizing and cropping do work.
    """
    from PIL import Image

    root = Path(root)
    rng = np.random.default_rng(seed)
    for split in splits:
        for c in range(num_classes):
            folder = root / split / f"class_{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                h, w = (int(size * f) for f in rng.uniform(1.0, 1.2, 2))
                pixels = rng.integers(0, 90, (h, w, 3))
                pixels[:, np.arange(w) % (c + 2) == 0] += 150
                Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i}.{fmt}")
    return root


def _some(names: Sequence[str], limit: int = 4) -> str:
    names = list(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _folder_samples(root: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """``(path, class index)`` of every image, classes in sorted order (as torchvision's ImageFolder);
    one line for the ways a folder fails to be a dataset: no class folders, no images, an empty class, one class."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    try:
        classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    except OSError as exc:
        raise DataError(f"cannot list {root} ({exc.strerror}); check its permissions") from None
    if not classes:
        raise DataError(f"{root} has no class sub-folders; put the images of each class in a sub-folder named after it")
    per_class = [sorted(str(f) for f in (root / c).rglob("*") if f.suffix.lower() in IMG_EXTENSIONS and f.is_file())
                 for c in classes]
    empty = [c for c, files in zip(classes, per_class) if not files]
    if len(empty) == len(classes):
        raise DataError(f"{root} holds no images ({', '.join(IMG_EXTENSIONS)}); put the images of each class in "
                        f"its sub-folder")
    if empty:
        raise DataError(f"{root}: class {empty[0]} has no images" + (f" (nor {len(empty) - 1} more)" if len(empty) > 1 else "")
                        + "; add images to it or remove the folder")
    if len(classes) == 1:
        raise DataError(f"{root} has one class ({classes[0]}): a classifier of one class learns nothing; give at "
                        f"least two class sub-folders")
    samples = [(f, c) for c, files in enumerate(per_class) for f in files]
    _check_headers([f for f, _ in samples])
    return samples, classes


def _check_headers(paths: Sequence[str]) -> None:
    """Open every image's header (not its pixels): a file that is no image, or a decompression bomb, fails
    before training starts rather than hours into it. Threads, since this waits on the disk."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in pool.map(lambda p: _open_image(p, None), paths, chunksize=256):
            pass


def _open_image(path: str, mode: str | None):
    """Decode one image (``mode`` None: only its header); unreadable files and decompression bombs (PIL's
    pixel limit) fail in one line."""
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                return img.convert(mode) if mode else None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise DataError(f"image {path} has more pixels than PIL decodes safely ({Image.MAX_IMAGE_PIXELS:,}): a "
                        f"decompression bomb or an oversized image; remove it or scale it down") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"cannot read image {path} ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}); "
                        f"remove or replace it") from None


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
    data = ImageData(images.contiguous(), torch.as_tensor(ds.targets).long(), len(ds.classes), mean, std,
                     name=f"{name}-{split}", dataset=name, classes=tuple(map(str, ds.classes)))
    return resize(data, img_size or data.img_size)


BUILTIN_DATASETS = ("fashion_mnist", "digits")


def load_dataset(name: str, split: str = "train", img_size: int | None = None, data_dir: str | os.PathLike | None = None,
                 in_chans: int | None = None, preprocessing: Mapping[str, Any] | None = None, augment: str = "none",
                 workers: int = 0, classes: Sequence[str] | None = None) -> Data:
    """Load a dataset by name.

    ``name`` is ``fashion_mnist``, ``digits``, ``folder:PATH`` (``PATH/{split}`` with one sub-folder per
    class, or ``PATH`` itself for the train split) or ``torchvision:NAME`` (found under ``data_dir``).
    ``in_chans`` converts grey to colour or back; ``img_size`` resizes (default: the data's own).
    Folders stream (``workers`` DataLoader processes) with ``preprocessing``'s resize, crop and
    normalization (e.g. the ancestry's, :func:`preprocessing_cfg`), and ``augment="deit"`` on the train
    split; ``classes`` (the train split's) must be the folder's own. The small in-memory datasets
    normalize with their own statistics and take no ``augment`` (the training loop's ``--augment``).
    """
    if augment not in AUGMENTATIONS:
        raise DataError(f"unknown augmentation {augment!r}; use one of {', '.join(AUGMENTATIONS)}")
    if augment != "none" and not name.startswith("folder:"):
        raise DataError(f"--aug {augment} is for image folders (folder:PATH) of RGB images; for {name} use --augment "
                        f"(flips and shifts)")
    if workers < 0:
        raise DataError(f"--workers must be 0 (decode in the main process) or more, got {workers}")
    if name == "fashion_mnist":
        data: Data = fashion_mnist(split, data_dir, img_size or 28)
    elif name == "digits":
        data = digits(split, img_size or 28)
    elif name.startswith("folder:"):
        root = Path(name.removeprefix("folder:"))
        root = root / split if (root / split).is_dir() else root
        data = image_folder(root, img_size, in_chans or 3, in_memory=False, preprocessing=preprocessing,
                            augment=augment if split == "train" else "none", workers=workers, classes=classes)
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


def load_splits(name: str, img_size: int | None = None, data_dir: str | os.PathLike | None = None,
                in_chans: int | None = None, preprocessing: Mapping[str, Any] | None = None, augment: str = "none",
                workers: int = 0) -> tuple[Data, Data]:
    """``(train, test)`` of :func:`load_dataset`; a test folder must hold the training folder's classes."""
    train = load_dataset(name, "train", img_size, data_dir, in_chans, preprocessing, augment, workers)
    classes = getattr(train, "classes", None)
    test = load_dataset(name, "test", img_size, data_dir, in_chans, preprocessing, "none", workers,
                        classes=classes if isinstance(train, FolderData) else None)
    return train, test


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


def take(data: Data, images: int | None, seed: int = 0) -> Data:
    """A fixed random subset of ``images`` images, the same for every caller (all of them for ``None``)."""
    if images is None or images >= len(data):
        return data
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:images]
    return data.subset(idx.sort().values, name=f"{data.name}-{images}")


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
    names = tuple(data.classes[c] for c in classes) if data.classes else ()
    return replace(sub, labels=remap[sub.labels], num_classes=len(classes), soft_targets=None, classes=names)


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
    Streamed data (:class:`FolderData`) are decoded by its DataLoader, whose batch sampler is this
    order (as a ``DistributedSampler`` seeded per epoch, but sharing out each global batch).
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

    def index_batches(self) -> Iterator[list[tuple[int, int]]]:
        """This rank's share of every remaining global batch as ``(image index, augmentation seed)`` pairs."""
        order = self._order()
        for step in range(self.start_step, len(self)):
            lo = step * self.batch_size
            mine = order[lo:lo + self.batch_size][self.rank::self.world].tolist()
            positions = range(lo + self.rank, lo + self.batch_size, self.world)
            yield [(i, index_seed(self.seed, self.epoch, p)) for i, p in zip(mine, positions)]

    def _shares(self) -> Iterator[tuple[int, Tensor, Tensor, Tensor | None]]:
        """``(step, x, y, soft)`` of this rank, from memory or from the data's DataLoader."""
        if hasattr(self.data, "loader"):
            for step, out in enumerate(self.data.loader(self), start=self.start_step):
                if isinstance(out, _Failed):
                    raise DataError(out.message)
                yield step, *out, None
            return
        order = self._order()
        for step in range(self.start_step, len(self)):
            global_idx = order[step * self.batch_size:(step + 1) * self.batch_size]
            yield step, *self.data.get_batch(global_idx[self.rank::self.world])

    def __iter__(self) -> Iterator[Batch]:
        for step, x, y, soft in self._shares():
            global_size = min(self.batch_size, len(self.data) - step * self.batch_size)
            if self.augment:
                gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch * 10_007 + step)
                x = augment_batch(x, gen, global_size=global_size, rank=self.rank, world=self.world)
            yield Batch(x, y, soft, global_size)


class BatchMixer:
    """DeiT's mixup (α 0.8) or cutmix (α 1.0), one of them per batch, through ``timm.data.Mixup``:
    ``(images, labels) → (mixed images, soft targets)`` with ``label_smoothing`` folded into the targets.

    timm mixes a batch with its reverse, so it needs an even batch; an odd one (the last, or a rank's share
    under DDP) is left unmixed with smoothed one-hot targets. Under DDP each rank mixes its own share
    (as DeiT's training does), so runs on 1 and N processes differ by which images are paired.
    """

    def __init__(self, num_classes: int, label_smoothing: float = 0.0):
        from timm.data import Mixup

        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        self.mixup = Mixup(mixup_alpha=DEIT_RECIPE["mixup_alpha"], cutmix_alpha=DEIT_RECIPE["cutmix_alpha"],
                           prob=DEIT_RECIPE["mixup_prob"], switch_prob=DEIT_RECIPE["mixup_switch_prob"], mode="batch",
                           label_smoothing=label_smoothing, num_classes=num_classes)

    def __call__(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        from timm.data.mixup import mixup_target

        if len(x) % 2:
            return x, mixup_target(y, self.num_classes, 1.0, self.label_smoothing)
        return self.mixup(x, y)


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
