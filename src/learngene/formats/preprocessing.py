"""The preprocessing a model expects, as one checked dict of timm's data-config keys.

A leaf: model files (:mod:`learngene.formats.model_file`), genes (:mod:`learngene.gene`) and datasets
(:mod:`learngene.data`, which reads the dict off a timm model or a dataset) all check it here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from ..errors import DataError

PREPROCESSING_KEYS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")  # timm's names (PIL's filters)
CROP_MODES = ("center", "squash", "border")  # timm's eval transform's


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _numbers(value: object) -> TypeGuard[Sequence[float]]:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(map(_number, value))


def preprocessing_problem(cfg: Mapping[str, Any]) -> str | None:
    """What is wrong with the values ``cfg`` gives of timm's data-config keys (each key optional), in words; None
    when nothing is: input_size three positive whole numbers, mean and std finite (std above 0), crop_pct in
    (0, 1], interpolation and crop_mode names timm knows. For configs read from elsewhere (a Hub or model folder's
    ``pretrained_cfg``) before anything takes them in."""
    size = cfg.get("input_size")
    if "input_size" in cfg and not (
        _numbers(size) and len(size) == 3 and all(float(v).is_integer() and v >= 1 for v in size)
    ):
        return f"input_size {size!r}, not [channels, height, width] of positive whole numbers"
    for key in ("mean", "std"):
        value = cfg.get(key)
        if key in cfg and not (_numbers(value) and (key == "mean" or all(v > 0 for v in value))):
            return f"{key} {value!r}, not a list of finite numbers" + (" above 0" if key == "std" else "")
    crop = cfg.get("crop_pct")
    if "crop_pct" in cfg and not (_number(crop) and 0 < crop <= 1):
        return f"crop_pct {crop!r}, not a number in (0, 1]"
    for key, names in (("interpolation", INTERPOLATIONS), ("crop_mode", CROP_MODES)):
        if key in cfg and cfg[key] not in names:
            return f"{key} {cfg[key]!r}, not one of {', '.join(names)}"
    return None


def check_preprocessing(
    cfg: Mapping[str, Any], img_size: int | None = None, in_chans: int | None = None
) -> dict[str, Any]:
    """``cfg``'s timm data-config keys, checked; ``img_size``/``in_chans`` override the input size."""
    cfg = {k: cfg[k] for k in PREPROCESSING_KEYS if k in cfg}
    missing = [k for k in PREPROCESSING_KEYS if k not in cfg]
    if missing:
        raise DataError(f"preprocessing lacks {', '.join(missing)}; give all of {', '.join(PREPROCESSING_KEYS)}")
    problem = preprocessing_problem(cfg)
    if problem is not None:
        raise DataError(f"preprocessing has {problem}; give values in those ranges")
    chans, *size = (int(v) for v in cfg["input_size"])
    mean, std = tuple(float(v) for v in cfg["mean"]), tuple(float(v) for v in cfg["std"])
    if len(mean) != len(std):
        raise DataError(f"preprocessing has mean {mean} and std {std}; give one mean and one std per channel")
    if img_size is not None:
        if isinstance(img_size, bool) or not isinstance(img_size, int) or img_size < 1:
            raise DataError(f"an image size of {img_size!r} was asked for; give a positive whole number")
        size = [img_size, img_size]
    chans = in_chans or chans
    if len(mean) != chans:  # a grey model of an RGB recipe or back: the channels' average, or the value repeated
        mean, std = (
            ((sum(mean) / len(mean),) * chans, (sum(std) / len(std),) * chans)
            if len(mean) > 1
            else (mean * chans, std * chans)
        )
    return {
        "input_size": (chans, *size),
        "interpolation": str(cfg["interpolation"]),
        "mean": mean,
        "std": std,
        "crop_pct": float(cfg["crop_pct"]),
        "crop_mode": str(cfg["crop_mode"]),
    }
