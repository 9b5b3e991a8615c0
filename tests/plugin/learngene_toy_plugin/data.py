"""The toy data source: class c is a stripe pattern of period c + 2 pixels, 16x16 grey."""

from __future__ import annotations

import torch

from learngene.data import ImageData


def load(argument: str, request) -> ImageData:
    size = request.img_size or 16
    n, classes = (32, 4) if request.split == "train" else (16, 4)
    gen = torch.Generator().manual_seed(0 if request.split == "train" else 1)
    labels = torch.arange(n) % classes
    images = torch.randint(0, 60, (n, 1, size, size), generator=gen, dtype=torch.uint8)
    cols = torch.arange(size)
    for i, c in enumerate(labels.tolist()):
        images[i] += (((cols % (c + 2)) == 0).to(torch.uint8) * 150).view(1, 1, size)
    return ImageData(images, labels, classes, (0.3,), (0.3,), name="toy_stripes")
