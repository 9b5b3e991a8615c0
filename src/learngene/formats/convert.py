"""Checkpoint formats: a file or folder in, a timm architecture + its kwargs + a timm state_dict out.

Three layouts are read, all offline and without unpickling code:

* a timm checkpoint file (``.safetensors``, ``.pth``, ``.bin``) whose architecture the user names;
* a timm hub folder (``config.json`` with ``architecture``, ``model_args``, ``pretrained_cfg``, next
  to ``model.safetensors`` or ``pytorch_model.bin``), as ``timm.models.save_for_hf`` writes it;
* a Hugging Face transformers folder of a ViT, DeiT, DINOv2 (with or without registers, MLP or SwiGLU),
  DINOv3 (``DINOv3ViTModel``: RoPE, registers, layer scale, MLP or gated MLP), CLIP or SigLIP image tower
  (``config.json`` with ``model_type``, ``model.safetensors``; a whole CLIP or SigLIP model gives its image
  tower): its keys are renamed by :data:`~learngene.formats.hf_to_timm.HF_TO_TIMM` (the shape of torchtune's ``convert_weights.py``), q/k/v
  are fused into timm's ``qkv``, and the config becomes timm kwargs. A classifier timm's ViT cannot express (``Dinov2ForImageClassification`` reads the class
  token concatenated with the mean patch token) is refused unless the head is dropped (``drop_head``).

Every state_dict then goes through the ``checkpoint_filter_fn`` of the architecture's own timm module
(see :mod:`learngene.ancestry`), which converts further layouts (OpenAI CLIP, original DINOv2, ...)
and resamples position embeddings to the requested image size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GeneFormatError, LearngeneError, first_line
from .hf_to_timm import HF_PREFIXES, HF_TOWERS, hf_config_to_timm, hf_state_to_timm, without_head
from .licenses import folder_license
from .preprocessing import preprocessing_problem
from .weights import StateDict, is_regular_file, load_weights, read_regular_text

CONFIG = "config.json"
# the weight files a folder may hold, in the order timm's local-dir loader prefers them
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors", "open_clip_pytorch_model.bin")


@dataclass
class Checkpoint:
    """What a checkpoint holds, in timm's terms.

    Attributes:
        arch: the timm architecture name (None for a bare file: the user names it).
        kwargs: ``timm.create_model`` keyword arguments read from the checkpoint's config.
        state: the weights under timm's key names (lazily memory-mapped where the format allows).
        pretrained_cfg: preprocessing the checkpoint records (mean, std, input size, crop, interpolation).
        source: where it came from, for messages.
        license: the licence the folder records (:func:`learngene.formats.licenses.folder_license`); None: none recorded.
    """

    arch: str | None
    kwargs: dict[str, Any]
    state: StateDict
    pretrained_cfg: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    license: str | None = None


def is_model_folder(path: str | os.PathLike) -> bool:
    return Path(path).is_dir() and (Path(path) / CONFIG).exists()  # a FIFO too: refused as read, not taken for a file


def read_checkpoint(path: str | os.PathLike, lazy: bool = True, drop_head: bool = False) -> Checkpoint:
    """Read a checkpoint file or a timm / transformers folder (detected by its ``config.json``);
    ``drop_head``: a folder's classifier is left out (a headless model: its output is the pooled embedding)."""
    path = Path(path)
    if not path.is_dir():
        return Checkpoint(arch=None, kwargs={}, state=load_weights(path, lazy=lazy), source=str(path))
    if not (path / CONFIG).exists():
        raise LearngeneError(
            f"{path} is a folder without {CONFIG}; give a timm hub or transformers model folder, or a checkpoint file"
        )
    config = read_config(path / CONFIG)
    for key, kind, named in (
        ("architecture", str, "a string"),
        ("model_type", str, "a string"),
        ("model_args", dict, "a JSON object"),
        ("pretrained_cfg", dict, "a JSON object"),
        ("vision_config", dict, "a JSON object"),
        ("architectures", list, "a list of class names"),
    ):
        if key in config and not isinstance(config[key], kind):
            raise GeneFormatError(
                f"{path / CONFIG}: {key} is {config[key]!r}, not {named}; check the model's config (use "
                f"the folder as timm or transformers saved it)"
            )
    weights = _weight_file(path)
    license = folder_license(path, config)
    read = _read_timm_folder if "architecture" in config else _read_hf_folder if "model_type" in config else None
    if read is not None:
        try:
            ckpt = read(path, config, load_weights(weights, lazy=lazy), drop_head)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
            # a field of the wrong type that no check above names (timm's own reading, a nested setting)
            raise GeneFormatError(
                f"{path / CONFIG} has a field of the wrong type or shape ({type(exc).__name__}: "
                f"{first_line(exc, 120)}); check the model's config (use the folder "
                f"as timm or transformers saved it)"
            ) from None
        return dataclasses.replace(ckpt, license=license)
    raise GeneFormatError(
        f"{path / CONFIG} names neither a timm 'architecture' nor a transformers 'model_type'; "
        f"give a timm hub or transformers model folder"
    )


def read_config(path: Path) -> dict[str, Any]:
    """A folder's ``config.json`` as a dict: a regular file (a FIFO would block), valid JSON, no NaN or infinity
    (Python's json accepts them), not nested beyond what the parser can follow; else one line."""

    def no_constant(name: str) -> Any:
        raise ValueError(f"it holds {name}, which is not a number JSON allows")

    try:
        config = json.loads(read_regular_text(path), parse_constant=no_constant)
    except RecursionError:
        raise GeneFormatError(f"{path} is nested too deeply to read; check the model's config, or restore it") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise GeneFormatError(
            f"{path} is not valid JSON ({str(exc)[:120]}); check the model's config, or restore it"
        ) from None
    if not isinstance(config, dict):
        raise GeneFormatError(f"{path} is not a JSON object; check the model's config, or restore it")
    return config


def _weight_file(folder: Path) -> Path:
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    if any(folder.glob("*.index.json")):
        raise LearngeneError(
            f"{folder} holds a sharded checkpoint, which learngene does not read; merge the shards "
            f"into one model.safetensors"
        )
    raise LearngeneError(f"{folder} has no {' or '.join(WEIGHT_FILES[:2])}; put the weights next to {CONFIG}")


# ---- timm hub folders ----------------------------------------------------------------------------------
def _read_timm_folder(folder: Path, config: dict[str, Any], state: StateDict, drop_head: bool = False) -> Checkpoint:
    """timm's own reading of the config (``timm.models.load_model_config_from_path``): architecture + kwargs."""
    from timm.models._hub import load_model_config_from_path

    _data_cfg(config.get("pretrained_cfg") or {}, folder / CONFIG)  # as the file declares it, before timm's overrides
    pretrained_cfg, arch, model_args = load_model_config_from_path(folder)
    kwargs = dict(model_args or {})
    if "num_classes" in config:
        kwargs.setdefault("num_classes", config["num_classes"])
    if drop_head:
        state = without_head(state, ("head.", "head_dist."), str(folder))
        kwargs["num_classes"] = 0
    return Checkpoint(
        arch=arch,
        kwargs=kwargs,
        state=state,
        pretrained_cfg=_data_cfg(pretrained_cfg, folder / CONFIG),
        source=str(folder),
    )


def _data_cfg(cfg: dict[str, Any], source: Path) -> dict[str, Any]:
    """The preprocessing ``source`` (a folder's config) declares, its values in range (:func:`preprocessing_problem`)."""
    keys = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std")
    data_cfg = {k: cfg[k] for k in keys if cfg.get(k) is not None}
    problem = preprocessing_problem(data_cfg)
    if problem is not None:
        raise GeneFormatError(
            f"{source} declares preprocessing {problem}; check the model's config (or restore the folder as "
            f"it was published)"
        )
    return data_cfg


def _read_hf_folder(folder: Path, config: dict[str, Any], state: StateDict, drop_head: bool = False) -> Checkpoint:
    model_type = config.get("model_type")
    if model_type in HF_TOWERS:  # a whole CLIP / SigLIP: its image tower
        vision = config.get("vision_config")
        if not isinstance(vision, dict):
            raise GeneFormatError(
                f"{folder / CONFIG} is a {model_type} model without a vision_config; restore its config"
            )
        config = {**vision, "model_type": HF_TOWERS[model_type]}
        model_type = config["model_type"]
    if model_type not in HF_PREFIXES:
        raise LearngeneError(
            f"{folder} is a transformers {model_type!r} model; learngene converts "
            f"vit, deit, dinov2, dinov2_with_registers, dinov3_vit, clip and siglip image towers "
            f"(or give a timm checkpoint with timm_model, --timm-model)"
        )
    state = hf_state_to_timm(state, model_type, config.get("hidden_size"), drop_head)
    arch, kwargs = hf_config_to_timm(config, state)
    data_cfg: dict[str, Any] = {"input_size": (kwargs["in_chans"], kwargs["img_size"], kwargs["img_size"])}
    processor = folder / "preprocessor_config.json"
    if is_regular_file(processor):  # the image processor's normalization
        with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
            values = json.loads(processor.read_text())
            data_cfg.update(
                {
                    k: tuple(values[h])
                    for k, h in (("mean", "image_mean"), ("std", "image_std"))
                    if isinstance(values.get(h), list)
                }
            )
    return Checkpoint(
        arch=arch, kwargs=kwargs, state=state, pretrained_cfg=_data_cfg(data_cfg, folder), source=str(folder)
    )
