"""Loading the ancestry: our own saved models, or a timm architecture + a local checkpoint file.

Nothing is ever downloaded: timm models are created with ``pretrained=False`` and the weights come
from the given file, read through safetensors or ``torch.load(weights_only=True)``. For ViTs the
state_dict goes through timm's own ``checkpoint_filter_fn`` (it converts other layouts and resamples
position embeddings to the requested image size); a classifier of another size is dropped.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from .errors import LearngeneError, SpecError
from .io import build_model, load_model_file, load_weights, quote
from .methods.base import Ancestry
from .spec import spec_from_model


def load_ancestry(path: str | os.PathLike, timm_model: str | None = None, **model_kwargs: Any) -> Ancestry:
    """Load an ancestry.

    Args:
        path: a model saved by learngene (``learngene ancestry``/``expand``/``train``), or, with
            ``timm_model``, a timm checkpoint (``.safetensors``, ``.pth``, ``.bin``).
        timm_model: timm architecture name, e.g. ``"deit_tiny_patch16_224"``.
        **model_kwargs: passed to ``timm.create_model`` (e.g. ``num_classes``, ``img_size``, ``in_chans``).
    """
    if timm_model is None:
        state, spec, _ = load_model_file(path)
        return Ancestry(build_model(spec, state, source=str(path)).eval(), spec)
    _require_timm_name(timm_model)
    state = load_weights(path)  # before building the model: a bad file fails in a moment, not after a big init
    model = _timm_model(timm_model, model_kwargs)
    try:
        from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

        if isinstance(model, VisionTransformer):
            state = checkpoint_filter_fn(state, model)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise LearngeneError(f"{quote(path)} does not fit timm model {timm_model}: {str(exc).splitlines()[0][:200]}") from None
    _load_filtered(model, state, str(path), timm_model)
    try:
        spec = spec_from_model(model)
    except SpecError:
        spec = None  # a non-ViT (or exotic ViT) can still be a teacher
    return Ancestry(model.eval(), spec)


def _require_timm_name(name: str) -> None:
    import timm

    if not timm.is_model(name):
        raise LearngeneError(f"timm has no model {name!r}; pick a name from timm.list_models()")


def _timm_model(name: str, kwargs: dict[str, Any]) -> nn.Module:
    import timm

    try:
        return timm.create_model(name, pretrained=False, **kwargs)
    except (TypeError, ValueError, AssertionError) as exc:
        raise LearngeneError(f"cannot build timm model {name} with {kwargs}: {exc}") from None


def _load_filtered(model: nn.Module, state: dict, path: str, name: str) -> None:
    """Load ``state`` into ``model``; only a classifier of the wrong size may be left out."""
    own = model.state_dict()
    head = {k for k in own if k.startswith(_classifier_prefix(model))}
    state = {k: v for k, v in state.items() if not (k in head and own[k].shape != v.shape)}
    for key, value in state.items():
        if key in own and own[key].shape != value.shape:
            raise LearngeneError(f"{quote(path)}: {key} has shape {tuple(value.shape)} but timm {name} needs "
                                 f"{tuple(own[key].shape)}; pick the matching --timm-model or sizes")
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if k not in head]
    if missing or result.unexpected_keys:
        bad = (missing or result.unexpected_keys)[0]
        raise LearngeneError(f"{quote(path)} does not match timm {name} (e.g. {'missing' if missing else 'unexpected'} "
                             f"key {bad!r}); pick the matching --timm-model")


def _classifier_prefix(model: nn.Module) -> str:
    get = getattr(model, "get_classifier", None)
    classifier = get() if get else None
    for name, module in model.named_modules():
        if module is classifier and name:
            return name + "."
    return "head."
