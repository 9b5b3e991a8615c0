"""Checkpoint formats: a file or folder in, a timm architecture + its kwargs + a timm state_dict out.

Three layouts are read, all offline and without unpickling code:

* a timm checkpoint file (``.safetensors``, ``.pth``, ``.bin``) whose architecture the user names;
* a timm hub folder (``config.json`` with ``architecture``, ``model_args``, ``pretrained_cfg``, next
  to ``model.safetensors`` or ``pytorch_model.bin``), as ``timm.models.save_for_hf`` writes it;
* a Hugging Face transformers folder of a ViT, DeiT or DINOv2 (``config.json`` with ``model_type``,
  ``model.safetensors``): its keys are renamed by :data:`HF_TO_TIMM` (the shape of torchtune's
  ``convert_weights.py``), q/k/v are fused into timm's ``qkv``, and the config becomes timm kwargs.

Every state_dict then goes through the ``checkpoint_filter_fn`` of the architecture's own timm module
(see :mod:`learngene.ancestry`), which converts further layouts (OpenAI CLIP, original DINOv2, ...)
and resamples position embeddings to the requested image size.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .errors import GeneFormatError, LearngeneError
from .io import load_weights

StateDict = dict[str, Tensor]

CONFIG = "config.json"
# the weight files a folder may hold, in the order timm's local-dir loader prefers them
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors", "open_clip_pytorch_model.bin")
TIMM_LAYER_NORM_EPS = 1e-6  # every timm ViT's LayerNorm


@dataclass
class Checkpoint:
    """What a checkpoint holds, in timm's terms.

    Attributes:
        arch: the timm architecture name (None for a bare file: the user names it).
        kwargs: ``timm.create_model`` keyword arguments read from the checkpoint's config.
        state: the weights under timm's key names (lazily memory-mapped where the format allows).
        pretrained_cfg: preprocessing the checkpoint records (mean, std, input size, crop, interpolation).
        source: where it came from, for messages.
    """

    arch: str | None
    kwargs: dict[str, Any]
    state: StateDict
    pretrained_cfg: dict[str, Any] = field(default_factory=dict)
    source: str = ""


def is_model_folder(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / CONFIG).is_file()


def read_checkpoint(path: str | Path, lazy: bool = True) -> Checkpoint:
    """Read a checkpoint file or a timm / transformers folder (detected by its ``config.json``)."""
    path = Path(path)
    if not path.is_dir():
        return Checkpoint(arch=None, kwargs={}, state=load_weights(path, lazy=lazy), source=str(path))
    if not (path / CONFIG).is_file():
        raise LearngeneError(f"{path} is a folder without {CONFIG}; give a timm hub or transformers model folder, "
                             f"or a checkpoint file")
    try:
        config = json.loads((path / CONFIG).read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise GeneFormatError(f"{path / CONFIG} is not valid JSON ({str(exc)[:120]}); restore the model's config") from None
    if not isinstance(config, dict):
        raise GeneFormatError(f"{path / CONFIG} is not a JSON object; restore the model's config")
    for key, kind, named in (("architecture", str, "a string"), ("model_type", str, "a string"),
                             ("model_args", dict, "a JSON object")):
        if key in config and not isinstance(config[key], kind):
            raise GeneFormatError(f"{path / CONFIG}: {key} is {config[key]!r}, not {named}; check the model's config (use "
                                  f"the folder as timm or transformers saved it)")
    weights = _weight_file(path)
    if "architecture" in config:
        return _read_timm_folder(path, config, load_weights(weights, lazy=lazy))
    if "model_type" in config:
        return _read_hf_folder(path, config, load_weights(weights, lazy=lazy))
    raise GeneFormatError(f"{path / CONFIG} names neither a timm 'architecture' nor a transformers 'model_type'; "
                          f"give a timm hub or transformers model folder")


def _weight_file(folder: Path) -> Path:
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    if any(folder.glob("*.index.json")):
        raise LearngeneError(f"{folder} holds a sharded checkpoint, which learngene does not read; merge the shards "
                             f"into one model.safetensors")
    raise LearngeneError(f"{folder} has no {' or '.join(WEIGHT_FILES[:2])}; put the weights next to {CONFIG}")


# ---- timm hub folders ----------------------------------------------------------------------------------
def _read_timm_folder(folder: Path, config: dict[str, Any], state: StateDict) -> Checkpoint:
    """timm's own reading of the config (``timm.models.load_model_config_from_path``): architecture + kwargs."""
    from timm.models._hub import load_model_config_from_path

    pretrained_cfg, arch, model_args = load_model_config_from_path(folder)
    kwargs = dict(model_args or {})
    if "num_classes" in config:
        kwargs.setdefault("num_classes", config["num_classes"])
    return Checkpoint(arch=arch, kwargs=kwargs, state=state, pretrained_cfg=_data_cfg(pretrained_cfg), source=str(folder))


def _data_cfg(cfg: dict[str, Any]) -> dict[str, Any]:
    keys = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std")
    return {k: cfg[k] for k in keys if cfg.get(k) is not None}


# ---- transformers folders: ViT, DeiT, DINOv2 ------------------------------------------------------------
# transformers key (layer index as "{}") -> timm key; None: a tensor timm's ViT has no place for
# (the masked-image-modelling token, the tanh pooler of ViTModel/DeiTModel).
# q/k/v go to temporary "attn.{q,k,v}" keys that fuse_qkv joins into timm's "attn.qkv".
HF_TO_TIMM: dict[str, str | None] = {
    "embeddings.cls_token": "cls_token",
    "embeddings.distillation_token": "dist_token",
    "embeddings.mask_token": None,
    "embeddings.position_embeddings": "pos_embed",
    "embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
    "embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
    "encoder.layer.{}.layernorm_before.weight": "blocks.{}.norm1.weight",  # ViT, DeiT
    "encoder.layer.{}.layernorm_before.bias": "blocks.{}.norm1.bias",
    "encoder.layer.{}.layernorm_after.weight": "blocks.{}.norm2.weight",
    "encoder.layer.{}.layernorm_after.bias": "blocks.{}.norm2.bias",
    "encoder.layer.{}.norm1.weight": "blocks.{}.norm1.weight",  # DINOv2
    "encoder.layer.{}.norm1.bias": "blocks.{}.norm1.bias",
    "encoder.layer.{}.norm2.weight": "blocks.{}.norm2.weight",
    "encoder.layer.{}.norm2.bias": "blocks.{}.norm2.bias",
    "encoder.layer.{}.attention.attention.query.weight": "blocks.{}.attn.q.weight",
    "encoder.layer.{}.attention.attention.query.bias": "blocks.{}.attn.q.bias",
    "encoder.layer.{}.attention.attention.key.weight": "blocks.{}.attn.k.weight",
    "encoder.layer.{}.attention.attention.key.bias": "blocks.{}.attn.k.bias",
    "encoder.layer.{}.attention.attention.value.weight": "blocks.{}.attn.v.weight",
    "encoder.layer.{}.attention.attention.value.bias": "blocks.{}.attn.v.bias",
    "encoder.layer.{}.attention.output.dense.weight": "blocks.{}.attn.proj.weight",
    "encoder.layer.{}.attention.output.dense.bias": "blocks.{}.attn.proj.bias",
    "encoder.layer.{}.intermediate.dense.weight": "blocks.{}.mlp.fc1.weight",  # ViT, DeiT
    "encoder.layer.{}.intermediate.dense.bias": "blocks.{}.mlp.fc1.bias",
    "encoder.layer.{}.output.dense.weight": "blocks.{}.mlp.fc2.weight",
    "encoder.layer.{}.output.dense.bias": "blocks.{}.mlp.fc2.bias",
    "encoder.layer.{}.mlp.fc1.weight": "blocks.{}.mlp.fc1.weight",  # DINOv2
    "encoder.layer.{}.mlp.fc1.bias": "blocks.{}.mlp.fc1.bias",
    "encoder.layer.{}.mlp.fc2.weight": "blocks.{}.mlp.fc2.weight",
    "encoder.layer.{}.mlp.fc2.bias": "blocks.{}.mlp.fc2.bias",
    "encoder.layer.{}.mlp.weights_in.weight": "blocks.{}.mlp.fc1.weight",  # DINOv2 SwiGLU (giant)
    "encoder.layer.{}.mlp.weights_in.bias": "blocks.{}.mlp.fc1.bias",
    "encoder.layer.{}.mlp.weights_out.weight": "blocks.{}.mlp.fc2.weight",
    "encoder.layer.{}.mlp.weights_out.bias": "blocks.{}.mlp.fc2.bias",
    "encoder.layer.{}.layer_scale1.lambda1": "blocks.{}.ls1.gamma",
    "encoder.layer.{}.layer_scale2.lambda1": "blocks.{}.ls2.gamma",
    "layernorm.weight": "norm.weight",
    "layernorm.bias": "norm.bias",
    "pooler.dense.weight": None,
    "pooler.dense.bias": None,
    "classifier.weight": "head.weight",
    "classifier.bias": "head.bias",
    "cls_classifier.weight": "head.weight",  # DeiT with teacher: the class-token head ...
    "cls_classifier.bias": "head.bias",
    "distillation_classifier.weight": "head_dist.weight",  # ... and the distillation-token head
    "distillation_classifier.bias": "head_dist.bias",
}

# the backbone's attribute name in transformers' task models (ViTForImageClassification.vit, ...)
HF_PREFIXES = {"vit": "vit.", "deit": "deit.", "dinov2": "dinov2."}
# the timm architecture of each family; create_model's kwargs set every size
HF_ARCHS = {"vit": "vit_base_patch16_224", "deit": "deit_base_distilled_patch16_224",
            "dinov2": "vit_base_patch14_dinov2", "dinov2_swiglu": "vit_giant_patch14_dinov2"}


def hf_key_to_timm(key: str) -> str | None:
    """The timm key of a transformers key (backbone prefix already removed), None for a dropped tensor."""
    abstract = re.sub(r"\.(\d+)\.", ".{}.", key, count=1)
    if abstract not in HF_TO_TIMM:
        raise KeyError(key)
    target = HF_TO_TIMM[abstract]
    if target is None or "{}" not in target:
        return target
    return target.format(re.search(r"\.(\d+)\.", key).group(1))


def hf_state_to_timm(state: StateDict, model_type: str) -> StateDict:
    """Rename a transformers ViT / DeiT / DINOv2 state_dict to timm's keys and fuse q, k, v into qkv."""
    prefix = HF_PREFIXES[model_type]
    out: StateDict = {}
    for key, value in state.items():
        short = key[len(prefix):] if key.startswith(prefix) else key
        try:
            target = hf_key_to_timm(short)
        except KeyError:
            raise GeneFormatError(f"transformers key {key!r} has no timm counterpart that learngene knows; "
                                  f"is this a {model_type} checkpoint?") from None
        if target is not None:
            out[target] = value
    return fuse_qkv(out)


def fuse_qkv(state: StateDict) -> StateDict:
    """Join ``blocks.i.attn.{q,k,v}.{weight,bias}`` into timm's ``blocks.i.attn.qkv.*`` (rows q, then k, then v)."""
    out: StateDict = {}
    for key, value in state.items():
        match = re.fullmatch(r"(blocks\.\d+\.attn)\.([qkv])\.(weight|bias)", key)
        if match is None:
            out[key] = value
        elif match.group(2) == "q":
            block, _, kind = match.groups()
            try:
                parts = [state[f"{block}.{part}.{kind}"] for part in "qkv"]
            except KeyError as exc:
                raise GeneFormatError(f"the checkpoint has {key} but not {exc.args[0]}; it is incomplete") from None
            if len({p.shape for p in parts}) != 1:
                raise GeneFormatError(f"{block}'s query, key and value {kind}s have shapes "
                                      f"{', '.join(str(tuple(p.shape)) for p in parts)}, which differ; check that "
                                      f"the checkpoint is complete and matches its config")
            out[f"{block}.qkv.{kind}"] = torch.cat(parts)
    return out


def hf_config_to_timm(config: dict[str, Any], state: StateDict) -> tuple[str, dict[str, Any]]:
    """The timm architecture and ``create_model`` kwargs of a transformers ViT / DeiT / DINOv2 config."""
    model_type = config["model_type"]
    hidden = _int(config, "hidden_size")
    kwargs: dict[str, Any] = dict(
        depth=_int(config, "num_hidden_layers"),
        embed_dim=hidden,
        num_heads=_int(config, "num_attention_heads"),
        img_size=_int(config, "image_size"),
        patch_size=_int(config, "patch_size"),
        in_chans=_int(config, "num_channels"),
        qkv_bias=bool(config.get("qkv_bias", True)),
        num_classes=int(state["head.weight"].shape[0]) if "head.weight" in state else 0,
    )
    act = config.get("hidden_act", "gelu")
    arch = HF_ARCHS[model_type]
    if model_type == "dinov2":
        if config.get("use_swiglu_ffn"):
            # timm packs SwiGLU's two input projections into fc1; its mlp_ratio counts both halves
            arch = HF_ARCHS["dinov2_swiglu"]
            kwargs["mlp_ratio"] = state["blocks.0.mlp.fc1.weight"].shape[0] / hidden
        else:
            kwargs["mlp_ratio"] = float(config.get("mlp_ratio", 4))
        kwargs["init_values"] = config.get("layerscale_value", 1.0)
        if config.get("num_register_tokens"):
            raise LearngeneError("this DINOv2 has register tokens; learngene reads DINOv2 without registers from "
                                 "transformers (use timm's vit_*_reg4_dinov2 checkpoints for registers)")
    else:
        kwargs["mlp_ratio"] = _int(config, "intermediate_size") / hidden
    if act not in ("gelu", "silu") or (act == "silu") != (arch == HF_ARCHS["dinov2_swiglu"]):
        raise LearngeneError(f"this {model_type} uses activation {act!r}, which timm's {arch} does not; "
                             f"learngene converts GELU ViTs and SwiGLU DINOv2")
    if model_type == "deit":
        architectures = config.get("architectures") or []
        if "DeiTForImageClassification" in architectures or "DeiTForMaskedImageModeling" in architectures:
            raise LearngeneError(f"{architectures[0]} reads only the class token, which timm's distilled DeiT does not "
                                 f"express; convert a DeiTForImageClassificationWithTeacher or a DeiTModel")
    eps = float(config.get("layer_norm_eps", TIMM_LAYER_NORM_EPS))
    if eps > TIMM_LAYER_NORM_EPS:
        kwargs["norm_layer"] = functools.partial(nn.LayerNorm, eps=eps)  # an ancestry (a teacher), not a family
    # a smaller eps is transformers' ViT/DeiT default 1e-12 (BERT's; the Google/Facebook weights were trained
    # with 1e-6): timm's 1e-6 keeps the family describable and moves outputs by ~1e-6 of the variance
    return arch, kwargs


def _int(config: dict[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, (list, tuple)) and len(set(value)) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        raise GeneFormatError(f"the transformers config's {key} is {value!r}, not one integer; learngene needs "
                              f"square images and patches")
    return value


def _read_hf_folder(folder: Path, config: dict[str, Any], state: StateDict) -> Checkpoint:
    model_type = config.get("model_type")
    if model_type not in HF_PREFIXES:
        raise LearngeneError(f"{folder} is a transformers {model_type!r} model; learngene converts "
                             f"{', '.join(HF_PREFIXES)} (or give a timm checkpoint with --timm-model)")
    state = hf_state_to_timm(state, model_type)
    arch, kwargs = hf_config_to_timm(config, state)
    data_cfg: dict[str, Any] = {"input_size": (kwargs["in_chans"], kwargs["img_size"], kwargs["img_size"])}
    processor = folder / "preprocessor_config.json"
    if processor.is_file():  # the image processor's normalization
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            values = json.loads(processor.read_text())
            data_cfg.update({k: tuple(values[h]) for k, h in (("mean", "image_mean"), ("std", "image_std"))
                             if isinstance(values.get(h), list)})
    return Checkpoint(arch=arch, kwargs=kwargs, state=state, pretrained_cfg=data_cfg, source=str(folder))
