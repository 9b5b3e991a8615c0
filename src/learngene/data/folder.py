"""Image folders: the ancestry's preprocessing (timm's data config), images streamed through DataLoader
workers with per-image seeds, and the header checks that fail before training starts."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError, first_line
from ..formats.preprocessing import PREPROCESSING_KEYS, check_preprocessing
from ..host.environment import env_number
from ..vit.naflex import image_input
from .augment import AUGMENTATIONS, DEIT_RECIPE
from .images import Data, ImageData, NamedClasses, colour_for_grey_model

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


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
        elif (grid := image_input(source)) is not None:  # a NaFlexVit: its spec's size, the grid times the patch
            chans, size, _ = grid
            cfg["input_size"] = (chans, size, size)
    elif isinstance(source, Mapping):
        cfg = dict(source)
    elif isinstance(source, (ImageData, FolderData)):
        if isinstance(source, FolderData):
            return dict(source.preprocessing)
        cfg = {
            "input_size": (source.in_chans, source.img_size, source.img_size),
            "interpolation": "bilinear",
            "mean": source.mean,
            "std": source.std,
            "crop_pct": 1.0,
            "crop_mode": "center",
        }
    else:
        raise DataError(
            f"no preprocessing can be read from a {type(source).__name__}; give a timm model, a dataset "
            f"or a dict with {', '.join(PREPROCESSING_KEYS)}"
        )
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
        return create_transform(
            **common,
            is_training=True,
            auto_augment=DEIT_RECIPE["auto_augment"],
            re_prob=DEIT_RECIPE["re_prob"],
            re_mode=DEIT_RECIPE["re_mode"],
            re_count=DEIT_RECIPE["re_count"],
        )
    if augment != "none":
        raise DataError(f"unknown augmentation {augment!r}; use one of {', '.join(AUGMENTATIONS)}")
    return create_transform(
        **common, is_training=False, crop_pct=pre["crop_pct"], crop_mode=pre["crop_mode"], normalize=not to_uint8
    )


class ReadFailure(NamedTuple):
    """An image that could not be read, passed back from a worker so the main process raises one line."""

    message: str


class FolderData(NamedClasses, torch.utils.data.Dataset):
    """Images in class sub-folders, decoded and transformed one by one: in DataLoader workers when ``workers > 0``.

    ``dataset[(index, seed)]`` seeds Python's, NumPy's and torch's RNGs with ``seed`` before a random
    transform, so an image's augmentation depends on its position in the epoch only, not on which
    worker or rank decodes it, and a resumed run repeats it.
    """

    def __init__(
        self,
        samples: Sequence[tuple[str, int]],
        classes: Sequence[str],
        preprocessing: Mapping[str, Any],
        name: str,
        augment: str = "none",
        workers: int = 0,
        refuse_colour: bool = False,
    ):
        self.samples, self.classes = list(samples), list(classes)
        self.preprocessing, self.name, self.augment, self.workers = dict(preprocessing), name, augment, workers
        self.refuse_colour = refuse_colour  # a colour image read as grey is an error, not converted
        self.transform = folder_transforms(self.preprocessing, augment)
        self.labels = torch.tensor([y for _, y in self.samples], dtype=torch.long)
        self.soft_targets = None
        self._loader: torch.utils.data.DataLoader | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def __getstate__(self) -> dict[str, Any]:  # what a spawned worker receives: never the loader itself
        return {**self.__dict__, "_loader": None}

    @property
    def num_classes(self) -> int:
        return len(self.classes)

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

    def subset(self, indices: Sequence[int] | Tensor, name: str | None = None) -> FolderData:
        picked = [self.samples[int(i)] for i in torch.as_tensor(indices, dtype=torch.long)]
        return FolderData(
            picked, self.classes, self.preprocessing, name or self.name, self.augment, self.workers, self.refuse_colour
        )

    def __getitem__(self, item: tuple[int, int] | int):
        index, seed = item if isinstance(item, tuple) else (item, index_seed(0, 0, item))
        label = self.samples[index][1]
        try:
            image = self.open_image(index, {1: "L", 3: "RGB"}[self.in_chans])
        except DataError as exc:
            return ReadFailure(str(exc))
        if self.augment == "none":
            return self.transform(image), label
        with _seeded(seed):
            return self.transform(image), label

    def open_image(self, index: int, mode: str):
        """Image ``index`` decoded as a PIL image of ``mode`` (a subclass reads it from elsewhere than a file)."""
        return decode_image(self.samples[index][0], mode, self.refuse_colour)

    def get_batch(self, indices: Tensor) -> tuple[Tensor, Tensor, None]:
        batch = _Collate(self.in_chans, self.img_size)([self[int(i)] for i in indices])
        if isinstance(batch, ReadFailure):  # read here, not in a worker: the same one line as from a worker
            raise DataError(batch.message)
        x, y = batch
        return x, y, None

    def loader(self, sampler) -> torch.utils.data.DataLoader:
        """One DataLoader per dataset, its workers kept between epochs; ``sampler`` says which images come next."""
        if self._loader is None:
            from torch.utils.data import DataLoader

            self._sampler = _Sampler()
            self._loader = DataLoader(
                self,
                batch_sampler=self._sampler,
                num_workers=self.workers,
                collate_fn=_Collate(self.in_chans, self.img_size),
                pin_memory=torch.cuda.is_available(),
                persistent_workers=self.workers > 0,
                prefetch_factor=4 if self.workers > 0 else None,
                generator=torch.Generator().manual_seed(0),
            )  # else the loader draws its seed from the global RNG
        self._sampler.source = sampler
        return self._loader


def default_preprocessing(in_chans: int) -> dict[str, Any]:
    """What images are read with when no model says: ImageNet's mean and std (0.5 for grey), a plain resize to
    224 px (or the size asked) and a centre crop."""
    mean, std = (IMAGENET_MEAN, IMAGENET_STD) if in_chans == 3 else ((0.5,), (0.5,))
    return {
        "input_size": (in_chans, 224, 224),
        "interpolation": "bilinear",
        "mean": mean,
        "std": std,
        "crop_pct": 1.0,
        "crop_mode": "center",
    }


def default_workers() -> int:
    """DataLoader workers per process when ``--workers`` is not given: the CPUs this process may use,
    shared among the processes ``torchrun`` started on this node, less one for the training loop, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    per_process = cpus // int(env_number("LOCAL_WORLD_SIZE", 1, at_least=1))
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

    def __call__(self, items: list) -> tuple[Tensor, Tensor] | ReadFailure:
        failed = next((item for item in items if isinstance(item, ReadFailure)), None)
        if failed is not None:
            return failed
        if not items:
            return torch.empty(self.shape), torch.empty(0, dtype=torch.long)
        return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items], dtype=torch.long)


def image_folder(
    root: str | os.PathLike,
    img_size: int | None = None,
    in_chans: int = 3,
    in_memory: bool = True,
    preprocessing: Mapping[str, Any] | None = None,
    augment: str = "none",
    workers: int = 0,
    classes: Sequence[str] | None = None,
    keep_colour: bool = False,
) -> Data:
    """An image folder (one sub-folder per class, named after it), read with ``preprocessing``'s resize and crop.

    ``preprocessing`` (:func:`preprocessing_cfg`, e.g. an ancestry's) defaults to ImageNet's mean and std
    (0.5 for grey), a plain resize to ``img_size`` and a centre crop. ``in_memory`` decodes every image
    once into uint8; otherwise they stream (:class:`FolderData`, ``workers`` DataLoader processes).
    ``classes``, when given (the training split's), must be the folder's classes: labels are their indices.
    ``keep_colour`` refuses to read colour images as grey (``in_chans=1``) instead of converting them.
    """
    root = Path(root)
    _check_reading(root, in_chans, in_memory, augment)
    pre = preprocessing_cfg(preprocessing or default_preprocessing(in_chans), img_size, in_chans)
    samples, found, modes = _folder_samples(root)
    if classes is not None:
        _check_same_classes(root, found, classes)
    refuse_colour = keep_colour and in_chans == 1
    if refuse_colour:
        check_colour(modes, lambda i: decode_image(samples[i][0], "RGB"), f"folder:{root}")
    name = f"folder:{root.name}"
    if not in_memory:
        return FolderData(samples, found, pre, name, augment, workers, refuse_colour)
    to_uint8 = folder_transforms(pre, to_uint8=True)
    mode = {1: "L", 3: "RGB"}[in_chans]
    images = torch.stack([to_uint8(decode_image(path, mode, refuse_colour)) for path, _ in samples])
    return ImageData(
        images,
        torch.tensor([y for _, y in samples]),
        len(found),
        pre["mean"],
        pre["std"],
        name=name,
        dataset=name,
        classes=tuple(found),
    )


def _check_reading(root: Path, in_chans: int, in_memory: bool, augment: str) -> None:
    """Refuse a folder that is not there, channels other than grey or RGB, and an augmentation it cannot apply."""
    if not root.is_dir():
        raise DataError(f"image folder {root} does not exist; check the path after folder:")
    if in_chans not in (1, 3):
        raise DataError(f"image folders load as 1 or 3 channels, not {in_chans}; pass in_chans (--in-chans) 1 or 3")
    if augment != "none" and in_memory:
        raise DataError(
            f"aug={augment!r} (--aug {augment}) draws a new augmentation per image and epoch; stream the folder "
            "(in_memory=False)"
        )
    if augment == "deit" and in_chans != 3:
        raise DataError(
            "aug='deit' (--aug deit: RandAugment, mixup/cutmix, random erasing) is for RGB images; for grey data "
            "use augment=True (--augment: flips and shifts)"
        )


def _check_same_classes(root: Path, found: list[str], classes: Sequence[str]) -> None:
    """Refuse a folder whose classes are not ``classes`` (the training folder's), in order: labels are indices."""
    if list(classes) != found:
        extra, lacking = sorted(set(found) - set(classes)), sorted(set(classes) - set(found))
        raise DataError(
            f"{root} has classes {_some(found)} but the training folder has {_some(classes)}"
            + (f" ({_some(extra)} only here)" if extra else "")
            + (f" ({_some(lacking)} missing here)" if lacking else "")
            + "; give both splits the same class sub-folders, or their labels would not agree"
        )


def write_image_folder(
    root: str | os.PathLike,
    num_classes: int = 4,
    per_class: int = 8,
    size: int = 224,
    fmt: str = "jpg",
    seed: int = 0,
    splits: Sequence[str] = ("train", "test"),
) -> Path:
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


def _folder_samples(root: Path) -> tuple[list[tuple[str, int]], list[str], list[str]]:
    """``(path, class index)`` of every image, classes in sorted order (as torchvision's ImageFolder), and each
    image's mode (PIL's, from its header); one line for the ways a folder fails to be a dataset: no class folders,
    no images, an empty class, one class, a class name holding a line break."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    try:
        classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    except OSError as exc:
        raise DataError(f"cannot list {root} ({exc.strerror}); check its permissions") from None
    if not classes:
        raise DataError(f"{root} has no class sub-folders; put the images of each class in a sub-folder named after it")
    broken = next((c for c in classes if not c.isprintable()), None)
    if broken is not None:  # a class name is a label: reports, model cards and CSVs write one per line
        raise DataError(
            f"{root}: class folder {broken!r} holds a line break or another control character; rename it "
            f"(the folder names are the class names)"
        )
    per_class = [
        sorted(str(f) for f in (root / c).rglob("*") if f.suffix.lower() in IMG_EXTENSIONS and f.is_file())
        for c in classes
    ]
    empty = [c for c, files in zip(classes, per_class) if not files]
    if len(empty) == len(classes):
        raise DataError(
            f"{root} holds no images ({', '.join(IMG_EXTENSIONS)}); put the images of each class in its sub-folder"
        )
    if empty:
        raise DataError(
            f"{root}: class {empty[0]} has no images"
            + (f" (nor {len(empty) - 1} more)" if len(empty) > 1 else "")
            + "; add images to it or remove the folder"
        )
    if len(classes) == 1:
        raise DataError(
            f"{root} has one class ({classes[0]}): a classifier of one class learns nothing; give at "
            f"least two class sub-folders"
        )
    samples = [(f, c) for c, files in enumerate(per_class) for f in files]
    return samples, classes, _check_headers([f for f, _ in samples])


def _check_headers(paths: Sequence[str]) -> list[str]:
    """Open every image's header (not its pixels): a file that is no image, or a decompression bomb, fails
    before training starts rather than hours into it; returns their modes. Threads, since this waits on the disk."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda p: decode_image(p, None), paths, chunksize=256))


def check_colour(modes: Sequence[str], decoded: Callable[[int], Any], name: str) -> None:
    """For a grey model that refuses colour: before anything trains, the first image of every colour mode (PIL's,
    from the headers: ``modes``, one per image; ``decoded(i)`` image ``i``) must in fact be grey, as a grey image
    saved as RGB is; the others are judged as they are read. A dataset may mix grey and colour images."""
    firsts = {mode: i for i, mode in reversed(list(enumerate(modes))) if mode not in GREY_MODES}
    if any(is_colour(decoded(i)) for i in firsts.values()):
        raise colour_for_grey_model(name)


def is_colour(image) -> bool:
    """Whether a PIL image's channels differ (a grey image saved as RGB or with a palette is not colour; the
    tolerance of 8 levels absorbs JPEG's chroma noise)."""
    rgb = np.asarray(image.convert("RGB")).astype(np.int16)
    return bool(np.abs(rgb - rgb[..., :1]).max() > 8)


GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")  # PIL's modes of one channel (and alpha): never colour


def decode_image(source: str | IO[bytes], mode: str | None, refuse_colour: bool = False, shown: str | None = None):
    """Decode one image (a file's path, or a binary stream: a ``datasets`` row's bytes) into ``mode`` (None: only its
    header, and return its mode); unreadable images and decompression bombs (PIL's pixel limit, without PIL's
    warning) fail in one line, and so does a colour image read as grey (``mode`` "L") with ``refuse_colour``.
    ``shown`` names the image in the message (default: ``image PATH``)."""
    import warnings

    from PIL import Image

    shown = shown or f"image {source}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source) as img:
                if mode is None:
                    return img.mode
                if refuse_colour and mode == "L" and img.mode not in GREY_MODES and is_colour(img):
                    raise colour_for_grey_model(shown)
                return img.convert(mode)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise DataError(
            f"{shown} has more pixels than PIL decodes safely ({Image.MAX_IMAGE_PIXELS:,}): a "
            f"decompression bomb or an oversized image; remove it or scale it down"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"cannot read {shown} ({first_line(exc, 120)}); remove or replace it") from None
