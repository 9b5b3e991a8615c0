"""The one batch iterator: an order that depends only on (seed, epoch), shared out over DDP ranks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import Tensor

from ..errors import DataError
from .augment import augment_batch
from .folder import ReadFailure, index_seed
from .images import Data, ImageData, normalize


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

    With ``device``, batches come out on it, as the training loop wants them. In-memory images
    (:class:`ImageData`) then travel as uint8, a quarter of float32's bytes, gathered into pinned memory on
    CUDA and copied without blocking the host, and are normalized and augmented on the device, as timm's
    loader does; the values are those of the CPU batches (the same operations; copies and flips are exact).
    Streamed batches arrive pinned from the DataLoader's workers. Without ``device`` (and for other data, e.g.
    a wrapper that only has ``get_batch``) they are made on the CPU, normalized, and the step copies them.
    """

    def __init__(
        self,
        data: Data,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        rank: int = 0,
        world: int = 1,
        augment: bool = False,
        device: torch.device | None = None,
    ):
        if len(data) == 0:
            raise DataError(f"{getattr(data, 'name', 'dataset')} is empty; give data with at least one image")
        if batch_size < 1:
            raise DataError(
                f"batch size must be positive, got {batch_size}; pass batch_size=1 (--batch-size 1) or more"
            )
        self.data, self.batch_size, self.shuffle, self.seed = data, batch_size, shuffle, seed
        self.rank, self.world, self.augment = rank, world, augment
        self.epoch, self.start_step = 0, 0
        self.device = device
        self._scale: tuple[Tensor, Tensor] | None = None  # the data's mean and std on the device, copied there once

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
            mine = order[lo : lo + self.batch_size][self.rank :: self.world].tolist()
            positions = range(lo + self.rank, lo + self.batch_size, self.world)
            yield [(i, index_seed(self.seed, self.epoch, p)) for i, p in zip(mine, positions)]

    def _shares(self) -> Iterator[tuple[int, Tensor, Tensor, Tensor | None]]:
        """``(step, x, y, soft)`` of this rank, from memory or from the data's DataLoader."""
        if hasattr(self.data, "loader"):
            for step, out in enumerate(self.data.loader(self), start=self.start_step):
                if isinstance(out, ReadFailure):
                    raise DataError(out.message)
                yield step, *out, None
            return
        order, data = self._order(), self.data
        pinned = self.device is not None and self.device.type == "cuda"
        for step in range(self.start_step, len(self)):
            mine = order[step * self.batch_size : (step + 1) * self.batch_size][self.rank :: self.world]
            if self._raw and isinstance(data, ImageData):
                yield step, *data.gather(mine, pin_memory=pinned)
            else:
                yield step, *data.get_batch(mine)

    @property
    def _raw(self) -> bool:
        """Whether images travel as uint8 and are normalized on the device (in-memory data given a device)."""
        return self.device is not None and isinstance(self.data, ImageData)

    def __iter__(self) -> Iterator[Batch]:
        if self.device is not None and self.device.type == "cuda":
            return _one_ahead(self._made(), self.device)
        return self._made()

    def _made(self) -> Iterator[Batch]:
        for step, x, y, soft in self._shares():
            global_size = min(self.batch_size, len(self.data) - step * self.batch_size)
            if self.device is not None:  # from pinned memory (on CUDA) these copies leave the host free
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
                soft = None if soft is None else soft.to(self.device, non_blocking=True)
            if self._raw:
                x = normalize(x, *self._mean_std())
            if self.augment:
                gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch * 10_007 + step)
                x = augment_batch(x, gen, global_size=global_size, rank=self.rank, world=self.world)
            yield Batch(x, y, soft, global_size)

    def _mean_std(self) -> tuple[Tensor, Tensor]:
        if self._scale is None:
            mean, std = (torch.tensor(v, dtype=torch.float32).to(self.device) for v in (self.data.mean, self.data.std))
            self._scale = mean, std
        return self._scale


def _one_ahead(batches: Iterator[Batch], device: torch.device) -> Iterator[Batch]:
    """``batches``, each made (copied, normalized, augmented) on a stream of its own while the GPU still runs the
    step before it, as timm's PrefetchLoader does: on the training stream the copy would wait for that step, and the
    step after it for the copy. The host reads one batch ahead; the values are the same."""
    side, main = torch.cuda.Stream(device), torch.cuda.current_stream(device)
    with torch.cuda.stream(side):
        ready = next(batches, None)
    main.wait_stream(side)
    while ready is not None:
        with torch.cuda.stream(side):
            coming = next(batches, None)
        for tensor in (ready.x, ready.y, ready.soft):
            if tensor is not None:  # made on the side stream, used on the main one: not reused before it is done
                tensor.record_stream(main)
        yield ready
        main.wait_stream(side)  # the training stream waits (on the GPU, not the host) for the coming batch
        ready = coming
