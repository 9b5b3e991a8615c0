"""The preprocessing a model expects, as one checked dict of timm's data-config keys.

A leaf: model files (:mod:`learngene.formats.model_file`), genes (:mod:`learngene.gene`) and datasets
(:mod:`learngene.data`, which reads the dict off a timm model or a dataset) all check it here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import DataError

PREPROCESSING_KEYS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")


def check_preprocessing(
    cfg: Mapping[str, Any], img_size: int | None = None, in_chans: int | None = None
) -> dict[str, Any]:
    """``cfg``'s timm data-config keys, checked; ``img_size``/``in_chans`` override the input size."""
    cfg = {k: cfg[k] for k in PREPROCESSING_KEYS if k in cfg}
    missing = [k for k in PREPROCESSING_KEYS if k not in cfg]
    if missing:
        raise DataError(f"preprocessing lacks {', '.join(missing)}; give all of {', '.join(PREPROCESSING_KEYS)}")
    try:  # numbers where numbers belong: a string or a bare number would be read character by character, or fail
        if isinstance(cfg["input_size"], str) or any(isinstance(cfg[k], str) for k in ("mean", "std")):
            raise TypeError("a string")
        chans, *size = (int(v) for v in cfg["input_size"])
        mean, std = tuple(float(v) for v in cfg["mean"]), tuple(float(v) for v in cfg["std"])
        crop_pct = float(cfg["crop_pct"])
    except (TypeError, ValueError, OverflowError):
        raise DataError(
            f"preprocessing has input_size {cfg['input_size']!r}, mean {cfg['mean']!r}, std {cfg['std']!r}, "
            f"crop_pct {cfg['crop_pct']!r}; give lists of numbers (input_size [C, H, W]) and a number"
        ) from None
    if img_size is not None:
        size = [img_size, img_size]
    chans = in_chans or chans
    if len(mean) != len(std) or not all(s > 0 and math.isfinite(s) for s in std) or not all(map(math.isfinite, mean)):
        raise DataError(
            f"preprocessing has mean {mean} and std {std}; give one finite mean and positive std per channel"
        )
    if len(mean) != chans:  # a grey model of an RGB recipe or back: the channels' average, or the value repeated
        mean, std = (
            ((sum(mean) / len(mean),) * chans, (sum(std) / len(std),) * chans)
            if len(mean) > 1
            else (mean * chans, std * chans)
        )
    if not 0 < crop_pct <= 1 or len(size) != 2 or min(size) < 1:
        raise DataError(
            f"preprocessing has input size {cfg['input_size']} and crop_pct {crop_pct}; give a positive "
            f"size and a crop_pct in (0, 1]"
        )
    return {
        "input_size": (chans, *size),
        "interpolation": str(cfg["interpolation"]),
        "mean": mean,
        "std": std,
        "crop_pct": crop_pct,
        "crop_mode": str(cfg["crop_mode"]),
    }
