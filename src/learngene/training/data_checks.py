"""The data a run is given, checked before a step runs: something the loop can batch, with images and labels that
fit the model.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..data import Data
from ..errors import ArgumentTypeError, DataError, assigned, shown
from ..vit.naflex import image_input


def require_data(data: Any, argument: str) -> None:
    """Refuse, naming ``argument``, something that is not data the loop can batch (before an AttributeError)."""
    if not (hasattr(data, "get_batch") and hasattr(data, "__len__")):
        raise ArgumentTypeError(
            f"{argument} must be image data (learngene.data.load_dataset(...)), got {type(data).__name__} {shown(data)}"
        )


def check_data_fits(model: nn.Module, data: Data) -> None:
    """Fail with one line if ``data``'s images or labels do not fit ``model``'s input and head.

    A model that wraps the network it runs (:class:`~learngene.descendant.GeneNet`) names it
    ``skeleton``; the check reads that network's patch embedding and classifier size. Models without
    a patch embedding (any classifier can be trained here) are checked on labels only.
    """
    model = getattr(model, "skeleton", model)
    expects = image_input(model)
    if expects is not None:
        chans, size, any_size = expects
        if data.in_chans != chans:
            raise DataError(
                f"{data.name} has {data.in_chans}-channel images but the model expects {chans}; "
                f"load the data with {assigned('in_chans', chans)} or build the model for "
                f"{data.in_chans}"
            )
        if data.img_size != size and not any_size:
            raise DataError(
                f"{data.name} has {data.img_size}px images but the model expects {size}px; "
                f"load the data with {assigned('img_size', size)}"
            )
    classes = getattr(model, "num_classes", None)
    if classes is not None and data.num_classes > classes:
        raise DataError(
            f"{data.name} has {data.num_classes} classes but the model's head has {classes}; "
            f"build the model with num_classes={data.num_classes}"
        )
