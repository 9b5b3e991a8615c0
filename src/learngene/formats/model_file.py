"""The learngene model file: a timm state_dict plus the spec (and origin) in the safetensors header.

:func:`read_model` and :func:`save_model` read and write any model learngene makes in the file format of its kind:
a timm ViT in this one, a model only one method makes (pool's stitched descendants) in the format that method declares
(:class:`~learngene.method.ModelFormat`, found by :func:`model_format`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from ..errors import GeneFormatError, LearngeneError, first_line
from ..gene import GENE_FORMAT
from ..method import ModelFormat
from ..registry import get_method, list_methods
from ..vit.spec import ViTSpec, check_state_shapes
from .atomic import quote
from .preprocessing import check_preprocessing
from .weights import (
    check_finite,
    model_header,
    nonfinite_tensor,
    read_safetensors,
    require_file,
    save_safetensors,
)

MODEL_FORMAT = "learngene-model"


def save_model(
    path: str | os.PathLike,
    model_or_state: torch.nn.Module | dict[str, Tensor],
    spec: ViTSpec | None,
    origin: dict[str, Any] | None = None,
    overwrite: bool = False,
    preprocessing: dict[str, Any] | None = None,
) -> None:
    """Save a ViT as safetensors that timm loads directly; the header records its spec and origin, and the
    preprocessing its inputs expect (timm's data-config keys, :func:`learngene.data.preprocessing_cfg`), at the
    spec's image size, or, for a model that takes any size (a NaFlexVit), at the size ``preprocessing`` gives.

    A model that names its own file format (``file_format``, e.g. pool's stitched descendants) is written in that
    format, which its method declares (:func:`model_format`; its parts give its sizes, and ``spec`` may be None)."""
    own = model_format(getattr(model_or_state, "file_format", None))
    if own is not None:
        own.write(path, model_or_state, origin, overwrite, preprocessing)
        return
    if spec is None:
        raise LearngeneError(f"a {type(model_or_state).__name__} is saved with its ViTSpec; pass spec")
    state = model_or_state.state_dict() if isinstance(model_or_state, torch.nn.Module) else model_or_state
    bad = nonfinite_tensor(state)  # a file load_model_file refuses is never written
    if bad is not None:
        raise GeneFormatError(
            f"the model's tensor {bad!r} holds NaN or infinite values, so nothing was written to {quote(path)}; save "
            "the weights of a run that did not diverge"
        )
    if preprocessing is not None:
        # a model that takes any image size keeps the size it is fed (a RADIO's 512 px), not its position grid's
        size = None if spec.family.dynamic_img_size else spec.img_size
        preprocessing = check_preprocessing(preprocessing, size, spec.in_chans)
    save_safetensors(path, state, model_header(MODEL_FORMAT, origin, preprocessing, spec=spec.to_json()), overwrite)


def load_model_file(path: str | os.PathLike, lazy: bool = False) -> tuple[dict[str, Tensor], ViTSpec, dict[str, Any]]:
    """Read a file written by :func:`save_model`: (state_dict, spec, origin); ``lazy``: memory-mapped tensors."""
    tensors, metadata = read_safetensors(path, lazy=lazy)
    own = model_format(metadata.get("format")) if metadata.get("format") != MODEL_FORMAT else None
    if own is not None:
        raise GeneFormatError(
            f"{quote(path)} is a {own.what}, not a timm ViT: only `learngene train` (as the model it fine-tunes) and "
            f"`learngene inspect` read it"
        )
    if metadata.get("format") == GENE_FORMAT:
        raise GeneFormatError(
            f"{quote(path)} is a learngene, not a model: expand it into one first (learngene expand), or give it where "
            "a gene is taken"
        )
    if metadata.get("format") != MODEL_FORMAT:
        raise GeneFormatError(
            f"{quote(path)} is not a learngene model file (no '{MODEL_FORMAT}' header); "
            f"for a timm checkpoint pass timm_model=NAME (--timm-model NAME)"
        )
    if "spec" not in metadata:
        raise GeneFormatError(
            f"{quote(path)} records no spec in its header; create it again with learngene (ancestry, expand or train)"
        )
    try:
        spec = ViTSpec.from_json(metadata["spec"])
        origin = json.loads(metadata.get("origin", "{}"))
    except ValueError as exc:  # JSONDecodeError, or a SpecError for impossible sizes
        raise GeneFormatError(
            f"{quote(path)} has a corrupt model header ({first_line(exc)}); create it again with "
            f"learngene (ancestry, expand or train)"
        ) from None
    if not isinstance(origin, dict):
        raise GeneFormatError(
            f"{quote(path)} has a corrupt model header (origin is not a JSON object); create it again "
            f"with learngene (ancestry, expand or train)"
        )
    check_finite(tensors, path)
    return tensors, spec, origin


def model_preprocessing(path: str | os.PathLike) -> dict[str, Any] | None:
    """The preprocessing a model file's header records (:func:`save_model`), or None for a file without one."""
    require_file(path)
    try:
        with safe_open(str(path), framework="pt") as fh:
            text = (fh.metadata() or {}).get("preprocessing")
        return None if text is None else check_preprocessing(json.loads(text))
    except (SafetensorError, OSError, ValueError, TypeError) as exc:  # unreadable header, bad JSON, bad values
        raise GeneFormatError(
            f"{quote(path)} has a corrupt preprocessing header ({first_line(exc)}); create it again with "
            f"learngene (ancestry, expand or train)"
        ) from None


@dataclass
class ModelFile:
    """A model read from a file (:func:`read_model`): the model, the spec of its input side (a timm ViT's own; a
    stitched ViT's front instance), the origin its header records and the tensors the file holds."""

    model: torch.nn.Module
    spec: ViTSpec
    origin: dict[str, Any]
    state: dict[str, Tensor]

    @property
    def num_classes(self) -> int:
        return int(getattr(self.model, "num_classes", self.spec.num_classes))


def header_tag(path: str | os.PathLike) -> str | None:
    """The format tag a safetensors file's header records (``learngene-model``, ``learngene``, a method's model
    format); None for a file without one: a plain checkpoint, safetensors or pickled."""
    try:
        with safe_open(str(path), framework="pt") as fh:
            tag = (fh.metadata() or {}).get("format")
    except (SafetensorError, OSError, ValueError):
        return None
    return tag if isinstance(tag, str) else None


def model_format(tag: Any) -> ModelFormat | None:
    """The model format a method declares (:attr:`learngene.method.Method.model_formats`) under the header tag
    ``tag``, e.g. pool's stitched descendants; None: no method declares one (a timm ViT's file, or no model file)."""
    if not isinstance(tag, str) or tag == MODEL_FORMAT:
        return None
    declared = (f for name in list_methods() for f in get_method(name).model_formats)
    return next((f for f in declared if f.tag == tag), None)


def read_model(path: str | os.PathLike) -> ModelFile:
    """The model in ``path``, in the format its header names: a learngene model file (a timm ViT, loaded strictly)
    or a model format a method declares (:func:`model_format`)."""
    own = model_format(read_safetensors(path, lazy=True)[1].get("format"))
    if own is not None:
        model, spec, origin = own.read(path)
        return ModelFile(model, spec, origin, model.state_dict())
    state, spec, origin = load_model_file(path)
    return ModelFile(build_model(spec, state, source=str(path)), spec, origin, state)


def build_model(spec: ViTSpec, state: dict[str, Tensor], source: str = "state_dict") -> torch.nn.Module:
    """The timm model of ``spec`` with ``state`` loaded strictly (shapes checked with key names)."""
    check_state_shapes(state, spec, source, require_all=True)
    odd = next((k for k, t in state.items() if not t.is_floating_point()), None)
    if odd is not None:  # a timm ViT's weights are all floating point; load_state_dict would cast silently
        raise GeneFormatError(
            f"{source}: {odd} holds {str(state[odd].dtype).removeprefix('torch.')} values where a "
            f"ViT has floating-point weights; use the model's real (float) weights"
        )
    model = spec.create_model()
    model.load_state_dict(state, strict=True)
    return model
