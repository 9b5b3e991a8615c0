"""What cluster and importance share: a seeded sample of calibration images, and the ancestry run on it in eval mode."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..data import Data
from ..errors import LearngeneError
from ..vit.spec import ViTSpec

if TYPE_CHECKING:
    from ..method import Ancestry, CondenseInputs, Method


def calibration_inputs(
    method: Method, ancestry: Ancestry | None, inputs: CondenseInputs | None, no_data: str
) -> tuple[Ancestry, ViTSpec, Data]:
    """The ViT ancestry ``method`` measures, its spec and the images it measures it on; one line for what is
    missing (``no_data`` when there are no images)."""
    ancestry, spec = method.require_vit_ancestry(ancestry)
    if inputs is None or inputs.train is None:
        raise LearngeneError(no_data)
    return ancestry, spec, inputs.train


def calibration_sample(data: Data, num_images: int, seed: int, empty: str) -> Tensor:
    """Indices of ``min(num_images, len(data))`` images of ``data``, drawn by ``seed`` (its own generator: the global
    RNG is left alone) and sorted; ``empty`` is the one-line error when there are none."""
    count = min(num_images, len(data))
    if count < 1:
        raise LearngeneError(empty)
    return torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:count].sort().values


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode inside the block, back in the mode it was in afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
