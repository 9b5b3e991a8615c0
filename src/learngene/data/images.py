"""In-memory image datasets (uint8, normalized batch by batch), resizing, channels and the subsets the benchmark needs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Union, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import DataError
from ..host.memory import require_free_memory

if TYPE_CHECKING:
    from .folder import FolderData


class NamedClasses:
    """The datasets' ``label_space`` (:class:`ImageData`'s and :class:`~learngene.data.folder.FolderData`'s)."""

    @property
    def label_space(self) -> dict[str, Any] | None:
        """What the labels mean (:func:`label_space`); model and gene files record it."""
        return label_space(cast(Data, self))


@dataclass(frozen=True)
class ImageData(NamedClasses):
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
            raise DataError(
                f"{self.name}: images must be uint8 (N, C, H, W), got {self.images.dtype} {tuple(self.images.shape)}"
            )
        if len(self.images) != len(self.labels):
            raise DataError(f"{self.name}: {len(self.images)} images but {len(self.labels)} labels")
        if len(self.mean) != self.in_chans or len(self.std) != self.in_chans:
            raise DataError(f"{self.name}: normalization has {len(self.mean)} channels, images have {self.in_chans}")
        if len(self.labels) and not (0 <= int(self.labels.min()) and int(self.labels.max()) < self.num_classes):
            raise DataError(
                f"{self.name}: labels run from {int(self.labels.min())} to {int(self.labels.max())}, outside "
                f"0..{self.num_classes - 1}; give labels 0..num_classes-1"
            )
        if self.classes and len(self.classes) != self.num_classes:
            raise DataError(
                f"{self.name}: {len(self.classes)} class names for {self.num_classes} classes; name every class"
            )

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def in_chans(self) -> int:
        return self.images.shape[1]

    @property
    def img_size(self) -> int:
        return self.images.shape[-1]

    def subset(self, indices: Sequence[int] | Tensor, name: str | None = None) -> ImageData:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return replace(
            self,
            images=self.images[idx],
            labels=self.labels[idx],
            soft_targets=None if self.soft_targets is None else self.soft_targets[idx],
            name=name or self.name,
        )

    def with_soft_targets(self, logits: Tensor) -> ImageData:
        return replace(self, soft_targets=logits.detach().float().cpu())

    def get_batch(self, indices: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """The images at ``indices`` normalized (float32), their labels and soft targets, on the CPU."""
        images, labels, soft = self.gather(indices)
        return normalize(images, self.mean, self.std), labels, soft

    def gather(self, indices: Tensor, pin_memory: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
        """The uint8 images at ``indices`` (not normalized: a quarter of the bytes), their labels and soft targets.

        ``pin_memory`` gathers them straight into page-locked memory, which a GPU copies from without holding the
        host (``tensor.to(device, non_blocking=True)``); torch's pinned-memory cache gives a buffer back only once
        the copies out of it are done. :class:`~learngene.data.Batches` uses it on CUDA.
        """
        parts = (self.images, self.labels, self.soft_targets)
        return cast(Any, tuple(None if t is None else _take(t, indices, pin_memory) for t in parts))


def _take(source: Tensor, indices: Tensor, pin_memory: bool) -> Tensor:
    if not pin_memory:
        return source[indices]
    out = torch.empty((len(indices), *source.shape[1:]), dtype=source.dtype, pin_memory=True)
    return torch.index_select(source, 0, indices, out=out)


def normalize(images: Tensor, mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor) -> Tensor:
    """uint8 images → float, scaled to [0, 1], then standardized per channel (where ``images`` are: give ``mean``
    and ``std`` as tensors on their device, as :class:`~learngene.data.Batches` does, to copy them there once)."""
    m = torch.as_tensor(mean, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
    s = torch.as_tensor(std, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
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


def resize(data: ImageData, img_size: int) -> ImageData:
    """Bilinear (antialiased) resize of every image to ``img_size``×``img_size``."""
    if data.img_size == img_size and data.images.shape[-2] == img_size:
        return data
    need = len(data) * data.in_chans * img_size**2 * 5  # the float32 resized copy, then its uint8 images
    require_free_memory(
        need,
        f"{len(data):,} images of {data.name} resized to {img_size}x{img_size} px",
        "choose a smaller img_size (--img-size), or fewer images (train_images, --train-images)",
        error=DataError,
    )
    x = F.interpolate(
        data.images.float(), size=(img_size, img_size), mode="bilinear", antialias=True, align_corners=False
    )
    return replace(data, images=x.round().clamp(0, 255).to(torch.uint8))


def colour_for_grey_model(name: str) -> DataError:
    """The error for colour images given to a 1-channel model: reading them as grey would discard their colour."""
    return DataError(
        f"{name} holds colour images but the model takes 1-channel (grey) input, which would discard "
        f"their colour; use a 3-channel ancestry, or convert the images to greyscale first "
        f"(learngene.data.convert_channels) if grey is what you want"
    )


def convert_channels(data: ImageData, in_chans: int) -> ImageData:
    """Repeat a grey channel to ``in_chans`` or average colour channels to one."""
    if data.in_chans == in_chans:
        return data
    if data.in_chans == 1:
        return replace(
            data,
            images=data.images.expand(-1, in_chans, -1, -1).contiguous(),
            mean=data.mean * in_chans,
            std=data.std * in_chans,
        )
    if in_chans == 1:
        grey = data.images.float().mean(1, keepdim=True).round().to(torch.uint8)
        return replace(data, images=grey, mean=(sum(data.mean) / len(data.mean),), std=(sum(data.std) / len(data.std),))
    raise DataError(
        f"cannot convert {data.in_chans}-channel images to {in_chans} channels; use in_chans (--in-chans) 1 or 3"
    )


# ---- subsets ----------------------------------------------------------------------------------------
def few_shot(data: ImageData, per_class: int, seed: int = 0) -> ImageData:
    """``per_class`` images of every class, chosen at random with ``seed`` (the low-data tasks)."""
    gen = torch.Generator().manual_seed(seed)
    picked = []
    for c in range(data.num_classes):
        members = (data.labels == c).nonzero().flatten()
        if len(members) < per_class:
            raise DataError(
                f"{data.name}: class {c} has {len(members)} images, fewer than the {per_class} per class asked; "
                f"ask for at most {len(members)} (--few-shot)"
            )
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
