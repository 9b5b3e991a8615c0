"""Training-time augmentation: DeiT's recipe (per image in folder workers, mixup/cutmix per batch) and the
flips and shifts of small grey data (per batch, identical under DDP)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

# DeiT's training recipe (Touvron et al. 2021, Table 9; timm's train.py flags), which TLEG, WAVE and
# Share-Init condense with: RandAugment, random erasing, then mixup/cutmix on the batch.
DEIT_RECIPE: dict[str, Any] = {
    "auto_augment": "rand-m9-mstd0.5-inc1",
    "re_prob": 0.25,
    "re_mode": "pixel",
    "re_count": 1,
    "mixup_alpha": 0.8,
    "cutmix_alpha": 1.0,
    "mixup_prob": 1.0,
    "mixup_switch_prob": 0.5,
}
AUGMENTATIONS = ("none", "deit")


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
        self.mixup = Mixup(
            mixup_alpha=DEIT_RECIPE["mixup_alpha"],
            cutmix_alpha=DEIT_RECIPE["cutmix_alpha"],
            prob=DEIT_RECIPE["mixup_prob"],
            switch_prob=DEIT_RECIPE["mixup_switch_prob"],
            mode="batch",
            label_smoothing=label_smoothing,
            num_classes=num_classes,
        )

    def __call__(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        from timm.data.mixup import mixup_target

        if len(x) % 2:
            return x, mixup_target(y, self.num_classes, 1.0, self.label_smoothing)
        return self.mixup(x, y)


def augment_batch(
    x: Tensor, gen: torch.Generator, max_shift: int = 2, global_size: int | None = None, rank: int = 0, world: int = 1
) -> Tensor:
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
    # the draws are made on the CPU (the same for every device); on a GPU the batch stays there, and the shifted
    # windows are gathered with one indexing op rather than one op per image
    flip, shifts = flip.to(x.device, non_blocking=True), shifts.to(x.device, non_blocking=True)
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
    padded = F.pad(x, (max_shift,) * 4)
    (n, c, h, w), device = x.shape, x.device
    rows = (torch.arange(h, device=device) + shifts[:, :1]).view(n, 1, h, 1)  # image i's window starts at shifts[i]
    cols = (torch.arange(w, device=device) + shifts[:, 1:]).view(n, 1, 1, w)
    return padded[
        torch.arange(n, device=device).view(n, 1, 1, 1), torch.arange(c, device=device).view(1, c, 1, 1), rows, cols
    ]
