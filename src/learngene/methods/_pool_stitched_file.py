"""The stitched-model file: a ``StitchedViT`` (pool's stitched descendants) as
safetensors, the model format pool declares (:data:`STITCHED_FILE`, ``LearngenePool.model_formats``): ``learngene
train`` and ``inspect`` read it, and a result writes it, through that declaration.

Its header says what it is (``format`` ``learngene-stitched-model``) and holds both instances' specs, the cut, the
origin and the preprocessing its inputs expect; its tensors are the model's state_dict, loaded back strictly.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import GeneFormatError, first_line
from ..formats.atomic import quote
from ..formats.preprocessing import check_preprocessing
from ..formats.weights import check_finite, model_header, read_safetensors, save_safetensors
from ..method import ModelFormat
from ..vit.spec import ViTSpec
from ._pool_stitches import STITCHED_MODEL_FORMAT, StitchedViT

PARTS_FORMAT = "learngene.stitched_vit"  # the tag of the header's ``stitched_vit`` entry (its parts)


def save_stitched(
    path: str | os.PathLike,
    model: StitchedViT,
    origin: dict[str, Any] | None,
    overwrite: bool,
    preprocessing: dict[str, Any] | None,
) -> None:
    """Write ``model`` atomically as safetensors; the header says what it is (``format``), its parts, its origin and
    the preprocessing its inputs expect. The write of the format pool declares, which
    :func:`~learngene.formats.model_file.save_model` calls for a stitched model."""
    front, end = model.specs
    parts = {
        "format": PARTS_FORMAT,
        "front": front.to_dict(),
        "end": end.to_dict(),
        "cut_front": model.cut_front,
        "cut_end": model.cut_end,
    }
    if preprocessing is not None:
        preprocessing = check_preprocessing(preprocessing, front.img_size, front.in_chans)
    header = model_header(STITCHED_MODEL_FORMAT, origin, preprocessing, stitched_vit=json.dumps(parts))
    save_safetensors(path, model.state_dict(), header, overwrite)


def read_stitched(path: str | os.PathLike) -> tuple[StitchedViT, dict[str, Any]]:
    """A file written by :func:`save_stitched`: the model (weights loaded strictly) and its origin."""
    tensors, metadata = read_safetensors(path)
    if "stitched_vit" not in metadata:
        raise GeneFormatError(f"{quote(path)} is not a stitched ViT (no stitched_vit header); load it as a model file")
    try:
        config = json.loads(metadata["stitched_vit"])
        origin = json.loads(metadata.get("origin", "{}"))
        front, end = ViTSpec.from_dict(config["front"]), ViTSpec.from_dict(config["end"])
        model = StitchedViT(front, end, int(config["cut_front"]), int(config["cut_end"]))
    except (ValueError, KeyError, TypeError) as exc:  # bad JSON, a missing field, impossible sizes
        raise GeneFormatError(
            f"{quote(path)} has a corrupt stitched-model header ({first_line(exc)}); make it again (expand "
            f"with output=('stitch', ...), learngene expand GENE --stitch ...)"
        ) from None
    check_finite(tensors, path)
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise GeneFormatError(
            f"{quote(path)}'s tensors do not match its header ({first_line(exc)}); make it again (expand "
            f"with output=('stitch', ...), learngene expand GENE --stitch ...)"
        ) from None
    return model, origin if isinstance(origin, dict) else {}


def describe_stitched(model: StitchedViT) -> list[str]:
    """A stitched descendant's parts (``learngene inspect``): its two instances' parts, the stitch, its input, its
    size."""
    front, end = model.specs

    def part(spec: ViTSpec) -> str:
        return f"{spec.short()} (width {spec.embed_dim}, {spec.num_heads} heads, mlp x{spec.mlp_ratio:g})"

    return [
        f"  front:   embeddings and blocks 0..{model.cut_front} of {part(front)}",
        f"  stitch:  linear {front.embed_dim} -> {end.embed_dim}",
        f"  end:     blocks {model.cut_end}..{end.depth - 1}, final norm and {end.num_classes}-way head of {part(end)}",
        f"  images:  {front.img_size}px/{front.patch_size}, {front.in_chans} ch, family {front.family.short()}",
        f"  total:   {model.depth} blocks, {model.num_params:,} params",
    ]


def _read(path: str | os.PathLike) -> tuple[StitchedViT, ViTSpec, dict[str, Any]]:
    model, origin = read_stitched(path)
    return model, model.specs[0], origin  # its input side is the front instance's


STITCHED_FILE = ModelFormat(
    STITCHED_MODEL_FORMAT, "stitched descendant", read=_read, write=save_stitched, describe=describe_stitched
)
