"""Checkpoint formats: a file or folder in, a timm architecture + its kwargs + a timm state_dict out.

Three layouts are read, all offline and without unpickling code:

* a timm checkpoint file (``.safetensors``, ``.pth``, ``.bin``) whose architecture the user names;
* a timm hub folder (``config.json`` with ``architecture``, ``model_args``, ``pretrained_cfg``, next
  to ``model.safetensors`` or ``pytorch_model.bin``), as ``timm.models.save_for_hf`` writes it;
* a Hugging Face transformers folder of a ViT, DeiT, DINOv2 (with or without registers, MLP or SwiGLU),
  DINOv3 (``DINOv3ViTModel``: RoPE, registers, layer scale, MLP or gated MLP), CLIP or SigLIP image tower
  (``config.json`` with ``model_type``, ``model.safetensors``; a whole CLIP or SigLIP model gives its image
  tower): its keys are renamed by :data:`HF_TO_TIMM` (the shape of torchtune's ``convert_weights.py``), q/k/v
  are fused into timm's ``qkv``, and the config becomes timm kwargs. A classifier timm's ViT cannot express (``Dinov2ForImageClassification`` reads the class
  token concatenated with the mean patch token) is refused unless the head is dropped (``drop_head``).

Every state_dict then goes through the ``checkpoint_filter_fn`` of the architecture's own timm module
(see :mod:`learngene.ancestry`), which converts further layouts (OpenAI CLIP, original DINOv2, ...)
and resamples position embeddings to the requested image size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import GeneFormatError, LearngeneError, first_line
from .licenses import folder_license
from .preprocessing import preprocessing_problem
from .weights import StateDict, is_regular_file, load_weights, read_regular_text

CONFIG = "config.json"
# the weight files a folder may hold, in the order timm's local-dir loader prefers them
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors", "open_clip_pytorch_model.bin")
TIMM_LAYER_NORM_EPS = 1e-6  # every timm ViT's LayerNorm ...
CLIP_LAYER_NORM_EPS = 1e-5  # ... but the CLIP image towers' (PyTorch's default, as OpenAI trained them)
DINOV3_LAYER_NORM_EPS = 1e-5  # ... and timm's DINOv3 architectures'
DINOV3_ROPE_THETA = 100.0  # the RoPE base timm's DINOv3 architectures fix (rope_temperature)


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
    "embeddings.register_tokens": "reg_token",  # DINOv2 with registers (see _fold_registers)
    # CLIP and SigLIP image towers (vision_model.*); their 1-D class token and 2-D position table are reshaped
    "embeddings.class_embedding": "cls_token",
    "embeddings.patch_embedding.weight": "patch_embed.proj.weight",
    "embeddings.patch_embedding.bias": "patch_embed.proj.bias",
    "embeddings.position_embedding.weight": "pos_embed",
    "embeddings.position_ids": None,
    "pre_layrnorm.weight": "norm_pre.weight",  # (sic, transformers' CLIP)
    "pre_layrnorm.bias": "norm_pre.bias",
    "post_layernorm.weight": "norm.weight",
    "post_layernorm.bias": "norm.bias",
    "encoder.layers.{}.layer_norm1.weight": "blocks.{}.norm1.weight",
    "encoder.layers.{}.layer_norm1.bias": "blocks.{}.norm1.bias",
    "encoder.layers.{}.layer_norm2.weight": "blocks.{}.norm2.weight",
    "encoder.layers.{}.layer_norm2.bias": "blocks.{}.norm2.bias",
    **{
        f"encoder.layers.{{}}.self_attn.{p}_proj.{kind}": f"blocks.{{}}.attn.{p}.{kind}"
        for p in "qkv"
        for kind in ("weight", "bias")
    },
    "encoder.layers.{}.self_attn.out_proj.weight": "blocks.{}.attn.proj.weight",
    "encoder.layers.{}.self_attn.out_proj.bias": "blocks.{}.attn.proj.bias",
    **{
        f"encoder.layers.{{}}.mlp.{fc}.{kind}": f"blocks.{{}}.mlp.{fc}.{kind}"
        for fc in ("fc1", "fc2")
        for kind in ("weight", "bias")
    },
    "visual_projection.weight": "head.weight",  # CLIP's image projection: a bias-free head (timm's layout)
    # SigLIP's attention-pool head -> timm's attn_pool (in_proj is split into q and kv by _split_in_proj)
    "head.probe": "attn_pool.latent",
    "head.attention.in_proj_weight": "attn_pool.in_proj.weight",
    "head.attention.in_proj_bias": "attn_pool.in_proj.bias",
    "head.attention.out_proj.weight": "attn_pool.proj.weight",
    "head.attention.out_proj.bias": "attn_pool.proj.bias",
    "head.layernorm.weight": "attn_pool.norm.weight",
    "head.layernorm.bias": "attn_pool.norm.bias",
    **{f"head.mlp.{fc}.{kind}": f"attn_pool.mlp.{fc}.{kind}" for fc in ("fc1", "fc2") for kind in ("weight", "bias")},
    # DINOv3 (DINOv3ViTModel, its blocks under layer.{} as saved, model.layer.{} as built): timm's Eva, whose q and
    # v biases are its own (k has none); a gated MLP's value projection up_proj becomes fc1_x beside the gate
    # (see _dinov3_layout)
    "embeddings.patch_embeddings.weight": "patch_embed.proj.weight",
    "embeddings.patch_embeddings.bias": "patch_embed.proj.bias",
    **{
        f"{layer}.{{}}.{hf}": f"blocks.{{}}.{timm}"
        for layer in ("layer", "model.layer")
        for hf, timm in (
            *((f"{n}.{kind}", f"{n}.{kind}") for n in ("norm1", "norm2") for kind in ("weight", "bias")),
            *((f"attention.{p}_proj.weight", f"attn.{p}.weight") for p in "qkv"),
            *((f"attention.{p}_proj.bias", f"attn.{p}_bias") for p in "qkv"),
            *((f"attention.o_proj.{kind}", f"attn.proj.{kind}") for kind in ("weight", "bias")),
            ("layer_scale1.lambda1", "gamma_1"),
            ("layer_scale2.lambda1", "gamma_2"),
            *(
                (f"mlp.{proj}_proj.{kind}", f"mlp.{fc}.{kind}")
                for proj, fc in (("up", "fc1"), ("gate", "fc1_g"), ("down", "fc2"))
                for kind in ("weight", "bias")
            ),
        )
    },
    "norm.weight": "norm.weight",
    "norm.bias": "norm.bias",
}
# the classifiers of transformers' task models, left out by drop_head
HF_CLASSIFIERS = ("classifier.", "cls_classifier.", "distillation_classifier.", "visual_projection.")
# the text tower and contrastive scales of a whole CLIP / SigLIP model: not part of the image tower
HF_TEXT_PARTS = ("text_model.", "text_projection.", "logit_scale", "logit_bias")

# the backbone's attribute name in transformers' task models (ViTForImageClassification.vit, ...)
HF_PREFIXES = {
    "vit": "vit.",
    "deit": "deit.",
    "dinov2": "dinov2.",
    "dinov2_with_registers": "dinov2_with_registers.",
    "clip_vision_model": "vision_model.",
    "siglip_vision_model": "vision_model.",
    "dinov3_vit": "",  # DINOv3ViTModel and DINOv3ViTBackbone hold the backbone at the top
}
# whole CLIP / SigLIP models: their image tower's config is config["vision_config"]
HF_TOWERS = {"clip": "clip_vision_model", "siglip": "siglip_vision_model"}
# the timm architecture of each family (and activation); create_model's kwargs set every size
HF_ARCHS = {
    "vit": "vit_base_patch16_224",
    "deit": "deit_base_distilled_patch16_224",
    "dinov2": "vit_base_patch14_dinov2",
    "dinov2_swiglu": "vit_giant_patch14_dinov2",
    "dinov2_with_registers": "vit_base_patch14_reg4_dinov2",
    "clip_vision_model": "vit_base_patch16_clip_224",
    "clip_vision_model/quick_gelu": "vit_base_patch16_clip_quickgelu_224",
    "siglip_vision_model": "vit_base_patch16_siglip_224",
    "siglip_vision_model/gelu_tanh": "vit_base_patch32_siglip_256",
    "dinov3_vit": "vit_small_patch16_dinov3",
    "dinov3_vit/qv_bias": "vit_small_patch16_dinov3_qkvb",
    "dinov3_vit/gated": "vit_small_plus_patch16_dinov3",
}
# transformers' names of the tanh approximation of GELU (timm's gelu_tanh)
HF_GELU_TANH = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")


def hf_key_to_timm(key: str) -> str | None:
    """The timm key of a transformers key (backbone prefix already removed), None for a dropped tensor."""
    abstract = re.sub(r"\.(\d+)\.", ".{}.", key, count=1)
    if abstract not in HF_TO_TIMM:
        raise KeyError(key)
    target = HF_TO_TIMM[abstract]
    if target is None or "{}" not in target:
        return target
    layer = re.search(r"\.(\d+)\.", key)
    if layer is None:  # the abstract key matched a layer pattern, so the key holds its number
        raise KeyError(key)
    return target.format(layer.group(1))


def without_head(state: StateDict, prefixes: tuple[str, ...], source: str) -> StateDict:
    """``state`` less its classifier (keys under ``prefixes``); a ``--drop-head`` with no head to drop is refused,
    since it would otherwise be accepted and mean nothing."""
    kept = {k: v for k, v in state.items() if not k.startswith(prefixes)}
    if len(kept) == len(state):
        raise LearngeneError(
            f"drop_head (--drop-head): {source} has no classifier head to drop (no "
            f"{'/'.join(p + '*' for p in prefixes)} weights); leave it out"
        )
    return kept


def hf_state_to_timm(
    state: StateDict, model_type: str, hidden: int | None = None, drop_head: bool = False
) -> StateDict:
    """Rename a transformers ViT / DeiT / DINOv2 / CLIP / SigLIP state_dict to timm's keys and fuse q, k, v into qkv."""
    prefix = HF_PREFIXES[model_type]
    state = {k: v for k, v in state.items() if not k.startswith(HF_TEXT_PARTS)}
    if drop_head:
        state = without_head(state, HF_CLASSIFIERS, f"this {model_type} checkpoint")
    elif hidden and "classifier.weight" in state and state["classifier.weight"].shape[-1] == 2 * hidden:
        raise LearngeneError(
            f"this {model_type} classifier reads the class token concatenated with the mean patch "
            f"token ({2 * hidden} inputs), which timm's ViT cannot express; pass drop_head=True "
            f"(--drop-head) to load the backbone without it"
        )
    out: StateDict = {}
    for key, value in state.items():
        short = key[len(prefix) :] if key.startswith(prefix) else key
        try:
            target = hf_key_to_timm(short)
        except KeyError:
            raise GeneFormatError(
                f"transformers key {key!r} has no timm counterpart that learngene knows; "
                f"is this a {model_type} checkpoint?"
            ) from None
        if target is not None:
            out[target] = value
    out = _dinov3_layout(out) if model_type == "dinov3_vit" else out
    return _fold_registers(_split_in_proj(_as_timm_shapes(fuse_qkv(out))))


def _dinov3_layout(state: StateDict) -> StateDict:
    """DINOv3's tensors in timm's Eva layout: a gated MLP's value projection (``fc1``, transformers' up_proj) is
    ``fc1_x`` beside the gate ``fc1_g``; a key bias, which timm's Eva holds as zeros it never learns, must be zero;
    no registers are no ``reg_token`` (transformers keeps an empty one)."""
    gated = any(".mlp.fc1_g." in k for k in state)
    out: StateDict = {}
    for key, value in state.items():
        if key == "reg_token" and value.shape[1] == 0:
            continue
        if key.endswith(".attn.k_bias"):
            if bool(value.detach().ne(0).any()):
                raise LearngeneError(
                    f"this DINOv3 has a key bias ({key}) that is not zero, which timm's DINOv3 architectures "
                    f"cannot hold (their key bias is fixed at zero); give a checkpoint trained with key_bias=false"
                )
            continue
        out[key.replace(".mlp.fc1.", ".mlp.fc1_x.") if gated else key] = value
    return out


def _as_timm_shapes(state: StateDict) -> StateDict:
    """CLIP / SigLIP keep a 1-D class token, a 2-D position table and a bias-free projection: timm's shapes."""
    if "cls_token" in state and state["cls_token"].ndim == 1:
        state["cls_token"] = state["cls_token"].reshape(1, 1, -1)
    if "pos_embed" in state and state["pos_embed"].ndim == 2:
        state["pos_embed"] = state["pos_embed"].unsqueeze(0)
    if "head.weight" in state and "head.bias" not in state:
        state["head.bias"] = torch.zeros(state["head.weight"].shape[0], dtype=state["head.weight"].dtype)
    return state


def _split_in_proj(state: StateDict) -> StateDict:
    """SigLIP's pooling head: nn.MultiheadAttention's fused in_proj (q, k, v rows) -> timm's ``q`` and ``kv``."""
    for kind in ("weight", "bias"):
        fused = state.pop(f"attn_pool.in_proj.{kind}", None)
        if fused is not None:
            width = fused.shape[0] // 3
            state[f"attn_pool.q.{kind}"], state[f"attn_pool.kv.{kind}"] = fused[:width], fused[width:]
    return state


def _fold_registers(state: StateDict) -> StateDict:
    """DINOv2 with registers adds the class token's position row before inserting the registers; timm's
    ``no_embed_class`` layout has no such row: it is folded into the class token (timm's own conversion)."""
    if "reg_token" in state and "pos_embed" in state:
        state["cls_token"] = state["cls_token"] + state["pos_embed"][:, :1]
        state["pos_embed"] = state["pos_embed"][:, 1:]
    return state


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
                raise GeneFormatError(
                    f"{block}'s query, key and value {kind}s have shapes "
                    f"{', '.join(str(tuple(p.shape)) for p in parts)}, which differ; check that "
                    f"the checkpoint is complete and matches its config"
                )
            out[f"{block}.qkv.{kind}"] = torch.cat(parts)
    return out


def hf_config_to_timm(config: dict[str, Any], state: StateDict) -> tuple[str, dict[str, Any]]:
    """The timm architecture and ``create_model`` kwargs of a transformers ViT / DeiT / DINOv2 / CLIP / SigLIP config."""
    model_type = config["model_type"]
    hidden = _int(config, "hidden_size")
    kwargs: dict[str, Any] = dict(
        depth=_int(config, "num_hidden_layers"),
        embed_dim=hidden,
        num_heads=_int(config, "num_attention_heads"),
        img_size=_int(config, "image_size"),
        patch_size=_int(config, "patch_size"),
        in_chans=_int(config, "num_channels"),
        num_classes=int(state["head.weight"].shape[0]) if "head.weight" in state else 0,
    )
    if model_type in ("vit", "deit", "dinov2", "dinov2_with_registers"):
        kwargs["qkv_bias"] = bool(config.get("qkv_bias", True))
    act = config.get("hidden_act", "gelu")
    if model_type.startswith("dinov2"):
        arch = _dinov2_arch(config, state, kwargs)
    elif model_type == "dinov3_vit":
        arch = _dinov3_arch(config, state, kwargs, act)
    elif model_type in ("clip_vision_model", "siglip_vision_model"):
        arch = _clip_siglip_arch(config, model_type, act)
        kwargs["mlp_ratio"] = _int(config, "intermediate_size") / hidden
    else:
        arch = HF_ARCHS[model_type]
        kwargs["mlp_ratio"] = _int(config, "intermediate_size") / hidden
        if act != "gelu":
            raise LearngeneError(
                f"this {model_type} uses activation {act!r}, which timm's {arch} does not; "
                f"learngene converts GELU ViTs and DeiTs"
            )
    if model_type == "deit":
        architectures = config.get("architectures") or []
        if "DeiTForImageClassification" in architectures or "DeiTForMaskedImageModeling" in architectures:
            raise LearngeneError(
                f"{architectures[0]} reads only the class token, which timm's distilled DeiT does not "
                f"express; convert a DeiTForImageClassificationWithTeacher or a DeiTModel"
            )
    timm_eps = {"clip_vision_model": CLIP_LAYER_NORM_EPS, "dinov3_vit": DINOV3_LAYER_NORM_EPS}.get(
        model_type, TIMM_LAYER_NORM_EPS
    )
    eps = _number(config, "layer_norm_eps", timm_eps)
    if eps > timm_eps:
        kwargs["norm_layer"] = functools.partial(nn.LayerNorm, eps=eps)  # an ancestry (a teacher), not a family
    # a smaller eps is transformers' ViT/DeiT default 1e-12 (BERT's; the Google/Facebook weights were trained
    # with 1e-6): timm's 1e-6 keeps the family describable and moves outputs by ~1e-6 of the variance
    return arch, kwargs


def _dinov2_arch(config: dict[str, Any], state: StateDict, kwargs: dict[str, Any]) -> str:
    """DINOv2's timm architecture; sets its MLP ratio, layer scale and registers in ``kwargs``."""
    hidden = kwargs["embed_dim"]
    if config.get("use_swiglu_ffn"):
        # transformers' Dinov2SwiGLUFFN always runs SiLU whatever hidden_act says (facebook/dinov2-giant's config
        # says "gelu"); timm packs SwiGLU's two input projections into fc1, and its mlp_ratio counts both halves
        arch = HF_ARCHS["dinov2_swiglu"]
        kwargs["mlp_ratio"] = state["blocks.0.mlp.fc1.weight"].shape[0] / hidden
    else:
        arch = HF_ARCHS["dinov2"]
        kwargs["mlp_ratio"] = _number(config, "mlp_ratio", 4.0)
        act = config.get("hidden_act", "gelu")
        if act != "gelu":
            raise LearngeneError(
                f"this DINOv2 uses activation {act!r}, which timm's {arch} does not; learngene "
                f"converts GELU and SwiGLU DINOv2"
            )
    kwargs["init_values"] = _number(config, "layerscale_value", 1.0)
    registers = int(_number(config, "num_register_tokens", 0, integer=True))
    if registers:
        if config.get("use_swiglu_ffn"):
            raise LearngeneError(
                "this DINOv2 has both registers and a SwiGLU MLP, which no timm architecture "
                "has; give one without registers or with an MLP"
            )
        arch = HF_ARCHS["dinov2_with_registers"]
        kwargs["reg_tokens"] = registers
    return arch


def _dinov3_arch(config: dict[str, Any], state: StateDict, kwargs: dict[str, Any], act: str) -> str:
    """DINOv3's timm architecture (Siméoni et al., arXiv 2508.10104; timm's Eva with RoPE and no absolute position
    table); sets its MLP ratio, q/v biases, layer scale, registers and class-token pooling in ``kwargs``."""
    gated = "blocks.0.mlp.fc1_g.weight" in state
    if act != ("silu" if gated else "gelu"):
        raise LearngeneError(
            f"this DINOv3 runs its {'gated ' if gated else ''}MLP with {act!r}, which timm's DINOv3 architectures do "
            f"not; learngene converts DINOv3 with a GELU MLP or a SiLU-gated one"
        )
    theta = _number(config, "rope_theta", DINOV3_ROPE_THETA)
    if theta != DINOV3_ROPE_THETA:
        raise LearngeneError(
            f"this DINOv3's RoPE base is rope_theta={theta}, but timm's DINOv3 architectures fix it at "
            f"{DINOV3_ROPE_THETA:g}; give a DINOv3 with the published base"
        )
    hidden = kwargs["embed_dim"]
    inner = _int(config, "intermediate_size")
    if gated and inner % 8:  # timm's DINOv3 SwiGLU rounds its hidden width up to a multiple of 8
        raise LearngeneError(
            f"this gated DINOv3's intermediate_size {inner} is not a multiple of 8, which timm's "
            f"{HF_ARCHS['dinov3_vit/gated']} rounds up to; give one whose MLP width is"
        )
    kwargs["mlp_ratio"] = inner / hidden
    qv_bias = "blocks.0.attn.q_bias" in state
    kwargs["qkv_bias"] = qv_bias
    kwargs["init_values"] = _number(config, "layerscale_value", 1.0)
    kwargs["num_reg_tokens"] = int(_number(config, "num_register_tokens", 0, integer=True))
    kwargs["global_pool"] = "token"  # DINOv3ViTModel's pooled output is the normalized class token
    return HF_ARCHS["dinov3_vit/gated" if gated else "dinov3_vit/qv_bias" if qv_bias else "dinov3_vit"]


def _clip_siglip_arch(config: dict[str, Any], model_type: str, act: str) -> str:
    """The timm architecture of a CLIP or SigLIP image tower with activation ``act``."""
    if model_type == "siglip_vision_model":
        if not config.get("vision_use_head", True):
            raise LearngeneError(
                "this SigLIP image tower has no attention-pool head (vision_use_head=false), which "
                "timm's SigLIP ViTs pool with; give a tower with its head"
            )
        timm_act = "gelu_tanh" if act in HF_GELU_TANH else act
    else:
        timm_act = act
    arch = HF_ARCHS.get(model_type if timm_act == "gelu" else f"{model_type}/{timm_act}")
    if arch is None:
        raise LearngeneError(
            f"this {model_type} uses activation {act!r}, which learngene's timm architectures "
            f"for it do not; it converts {'GELU and QuickGELU CLIP' if 'clip' in model_type else 'GELU SigLIP'}"
        )
    return arch


def _int(config: dict[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, (list, tuple)) and len(value) == 2 and len(set(value)) == 1:  # (height, width), square
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        raise GeneFormatError(
            f"the transformers config's {key} is {value!r}, not one integer (or a square [height, width]); "
            f"check the model's config: learngene needs square images and patches"
        )
    return value


def _number(config: dict[str, Any], key: str, default: float, integer: bool = False) -> float:
    """A numeric config field (``default`` when absent), finite and non-negative; else one line. An explicit null is
    refused as a string is: transformers writes these fields as numbers, so a null one was edited, and taking the
    default for it would read another model than the file describes."""
    if key not in config:
        return default
    value = config[key]
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise GeneFormatError(
            f"the transformers config's {key} is {value!r}, not a non-negative {'integer' if integer else 'number'}; "
            f"check the model's config (use the folder as transformers saved it)"
        )
    return value


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
