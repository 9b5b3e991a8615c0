"""The device a run uses and what fits there: choosing it, placing models on it, running them there (bf16 autocast
on CUDA, fused attention), and refusing in one line, before anything is allocated, a step that cannot fit its memory.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from ..errors import LearngeneError, named
from ..host.memory import require_free_memory
from ..vit.activation_memory import training_activation_bytes
from ..vit.naflex import image_input
from . import distributed as dist
from .config import TrainConfig, known


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise LearngeneError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise LearngeneError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LearngeneError("device (--device) cuda was asked for but no GPU is visible; use auto or cpu")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise LearngeneError(
            f"device (--device) {name} asked for but only {torch.cuda.device_count()} GPU(s) are visible; "
            f"use cuda:0..cuda:{torch.cuda.device_count() - 1}"
        )
    return device


def autocast(device: torch.device):
    """bf16 autocast on CUDA; plain fp32 elsewhere (bf16 kills some CPUs in oneDNN's AMX path)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def set_fused_attention(model: nn.Module, enabled: bool = True) -> int:
    """Attention through ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on CUDA) or
    timm's eager softmax(QKᵀ)V, for every timm attention module of ``model``; returns how many were set."""
    count = 0
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            cast(Any, module).fused_attn = enabled  # timm's Attention flag
            count += 1
    return count


def place(model: nn.Module, device: torch.device | None) -> torch.device:
    """Where ``model`` runs: ``device``, moving the model there in place when its weights are elsewhere (a CPU
    ancestry asked to run on the GPU), or, without one, where its weights are."""
    if device is None:
        return next(model.parameters()).device
    model.to(device)
    return device


def _block_sizes(model: nn.Module, img_size: int | None) -> tuple[int, int, int, int, int] | None:
    """(tokens, width, heads, MLP hidden, depth) of a ViT fed ``img_size`` images (None for another layout): a
    model that takes any image size is counted at ``img_size`` (a RADIO fed 512-px images has a 2048-px grid)."""
    vit: Any = getattr(model, "skeleton", model)  # a timm ViT, or a GeneNet around one
    try:
        block = vit.blocks[0]
        embed = getattr(vit, "patch_embed", None)  # a NaFlexVit has none: its position grid's (learngene.vit.naflex)
        patches = embed.num_patches if embed is not None else math.prod(vit.embeds.pos_embed_grid_size)
        expects = image_input(vit)
        if img_size and expects and expects[2]:
            patch = embed.patch_size[0] if embed is not None else vit.embeds.patch_size[0]
            patches = (img_size // patch) ** 2
        tokens = patches + getattr(vit, "num_prefix_tokens", 1)
        return tokens, vit.embed_dim, block.attn.num_heads, block.mlp.fc1.out_features, len(vit.blocks)
    except (AttributeError, IndexError, TypeError):
        return None


def require_activation_memory(
    model: nn.Module, cfg: TrainConfig, device: torch.device, img_size: int | None = None
) -> None:
    """Refuse, before the first step allocates it, a batch whose activations cannot fit in the device's free memory
    (:func:`learngene.vit.activation_memory.training_activation_bytes`, a lower bound) for images of ``img_size`` px; a model
    of unknown layout is not checked."""
    sizes = _block_sizes(model, img_size)
    if sizes is None:
        return
    per_rank = math.ceil(known(cfg.batch_size) / dist.world_size())
    need = training_activation_bytes(*sizes, per_rank, 2 if device.type == "cuda" else 4)  # bf16 autocast on CUDA
    require_free_memory(
        need,
        f"a training step of {per_rank} images of {sizes[0]:,} tokens through {sizes[4]} blocks of width {sizes[1]} (its activations)",
        f"choose a smaller {named('batch_size')} or {named('img_size')} (or a larger {named('patch_size')})",
        device=device,
        lower_bound=True,
        error=LearngeneError,
    )


def require_optimizer_memory(model: nn.Module, device: torch.device) -> None:
    """Refuse in one line, before the first step allocates them, the fp32 gradients and AdamW's two moments of the
    trained parameters when they cannot fit beside the weights (already allocated) in the device's free memory."""
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    require_free_memory(
        3 * 4 * trained,
        f"training {trained:,} parameters (their gradients and AdamW's two moments)",
        f"choose a smaller model ({named('depth')}, {named('embed_dim')})",
        device=device,
        error=LearngeneError,
    )


def inference_batch(model: nn.Module, batch_size: int, img_size: int | None, device: torch.device) -> int:
    """The largest batch, at most ``batch_size``, whose forward pass fits in the device's free memory: one block's
    activations at a time (the training estimate at depth 1, a lower bound). Evaluation and teacher logits do not
    depend on the batch, so a batch too large for the machine is made smaller, not refused; one that cannot run
    a single image is refused in one line, before anything is allocated."""
    sizes = _block_sizes(model, img_size)
    if sizes is None:
        return batch_size
    per_image = training_activation_bytes(*sizes[:4], 1, 1, 2 if device.type == "cuda" else 4)
    free = require_free_memory(
        per_image,
        f"a forward pass of one image of {sizes[0]:,} tokens through a block of width {sizes[1]}",
        f"choose a smaller {named('img_size')} (or a larger {named('patch_size')})",
        device=device,
        lower_bound=True,
        error=LearngeneError,
    )
    return batch_size if free is None else max(1, min(batch_size, free // per_image))
