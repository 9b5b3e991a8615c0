"""Evaluation and inference with the loop's batches: top-1 accuracy and loss (:func:`evaluate`), logits in order
(:func:`predict_logits`), all ranks together under DDP.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data import Batches, Data
from ..errors import LearngeneError, require_argument
from . import distributed as dist
from .data_checks import check_data_fits, require_data
from .device import autocast, inference_batch, place
from .progress import progress_bar


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: Data,
    batch_size: int = 512,
    device: torch.device | None = None,
    desc: str | None = None,
) -> dict[str, float]:
    """Top-1 accuracy and mean cross-entropy of ``model`` on ``data`` (all ranks together under DDP); with
    ``desc``, a progress bar of that name while it runs. It runs on ``device`` (the model is moved there, as
    :func:`train` moves it), by default where the model's weights are."""
    require_argument(model, nn.Module, "model", "a torch module (e.g. a timm ViT)")
    require_data(data, "data")
    require_argument(batch_size, int, "batch_size", "a whole number of images")
    if batch_size < 1:
        raise LearngeneError(f"batch_size must be at least 1, got {batch_size}")
    check_data_fits(model, data)
    with _inference(model, data, batch_size, device, shared=True) as (batches, device):
        totals = torch.zeros(3, dtype=torch.float64, device=device)  # correct, loss sum, count
        bar = progress_bar(
            total=len(batches), desc=desc, unit="batch", leave=False, dynamic_ncols=True, disable=desc is None
        )
        for batch in batches:
            x, y = batch.x, batch.y
            with autocast(device):
                logits = model(x).float()
            totals += torch.stack(
                [
                    (logits.argmax(-1) == y).sum().double(),
                    F.cross_entropy(logits, y, reduction="sum").double(),
                    torch.full((), len(y), dtype=torch.float64, device=device),  # torch.tensor(..., device) would sync
                ]
            )
            bar.update(1)
        bar.close()
        dist.all_reduce_sum(totals)
    correct, loss, count = totals.tolist()
    return {"acc": correct / count, "loss": loss / count}


@torch.no_grad()
def predict_logits(model: nn.Module, data: Data, batch_size: int = 512, device: torch.device | None = None) -> Tensor:
    """Logits of ``model`` for every image of ``data`` in order (e.g. to cache a teacher's outputs), on the CPU. It
    runs on ``device`` (the model is moved there, as :func:`train` moves it), by default where the model's weights are."""
    out = []
    with _inference(model, data, batch_size, device) as (batches, device):
        for batch in batches:
            with autocast(device):
                out.append(model(batch.x).float().cpu())
    return torch.cat(out)


@contextlib.contextmanager
def _inference(
    model: nn.Module, data: Data, batch_size: int, device: torch.device | None, shared: bool = False
) -> Iterator[tuple[Batches, torch.device]]:
    """``data``'s batches (this rank's share when ``shared`` by the ranks, else all) for ``model`` in eval mode on
    ``device`` (the model moved there; by default where its weights are), as large as the free memory allows up to
    ``batch_size``; the model's training mode is given back after."""
    device = place(model, device)
    batch_size = inference_batch(model, batch_size, data.img_size, device)
    was_training = model.training
    model.eval()
    rank, world = (dist.rank(), dist.world_size()) if shared else (0, 1)
    yield Batches(data, batch_size, shuffle=False, rank=rank, world=world, device=device), device
    model.train(was_training)
