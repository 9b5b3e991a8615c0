"""timm's ``NaFlexVit`` as a :class:`~learngene.vit.spec.ViTSpec` family: SigLIP 2 NaFlex (Tschannen et al.,
"SigLIP 2", arXiv 2502.14786) and RADIO (``naflexvit_*_radio_*``).

A NaFlexVit with timm's ``Block`` is a ViT whose embeddings sit in one module, ``embeds``: its tokens are
``embeds.cls_token``/``embeds.reg_token``, its patch embedding is a Linear over each flattened patch
(``embeds.proj.weight``, ``(D, P·P·C)``, channels last: ``(ph, pw, C)``), and its learned position
embedding is a grid ``embeds.pos_embed`` ``(1, g, g, D)`` over the patches only (no row for the prefix
tokens), resized to the input's grid on every forward, so it takes any image size. The rest of the
state_dict (``norm_pre``, ``blocks``, ``norm``, ``attn_pool``, ``fc_norm``, ``head``) has a ViT's names.

That embedding is a ViT's in another layout, exactly: the Linear's weight is the patch convolution's
``(D, C, P, P)`` kernel permuted to channels last and flattened, and the grid is the ``(1, g·g, D)``
table of a ``no_embed_class`` ViT in row-major order. :func:`to_vit_layout`/:func:`to_model_layout` move
tensors between the two, so the rules that resample a position table or a patch kernel are written once
(:mod:`learngene.vit.transfer`). The spec records the construction-time grid as ``img_size = g · patch_size``
(timm's ``pos_embed_grid_size``); the model is built with that grid and still takes any image size.

Not described (refused in one line naming the part): EVA blocks (RoPE, SwiGLU: ``rope_type``,
``swiglu_mlp``, ``attn_type``), factorized or no position embeddings, a convolutional patch embedding,
an input norm on the flattened patches, non-square grids, pooling that includes the prefix tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .timm_keys import KEEP, WIDTH, Axis

if TYPE_CHECKING:
    from torch import Tensor

NAFLEX_MODULE = "timm.models.naflexvit"

# a ViT's key -> the NaFlexVit key of the same tensor
MODEL_KEYS = {
    "cls_token": "embeds.cls_token",
    "reg_token": "embeds.reg_token",
    "pos_embed": "embeds.pos_embed",
    "patch_embed.proj.weight": "embeds.proj.weight",
    "patch_embed.proj.bias": "embeds.proj.bias",
    "patch_embed.norm.weight": "embeds.norm.weight",
    "patch_embed.norm.bias": "embeds.norm.bias",
}
VIT_KEYS = {v: k for k, v in MODEL_KEYS.items()}

# forward-time settings of the embedding: no weights, fixed by the architecture; a model whose values differ
# from its architecture's is refused (a descendant built from the architecture would compute otherwise)
EMBED_SETTINGS = (
    "pos_embed_interp_mode",
    "pos_embed_ar_preserving",
    "pos_embed_antialias",
    "pos_embed_align_corners",
    "pos_embed_use_grid_sample",
    "channels_last",
    "dynamic_img_pad",
    "enable_patch_interpolator",
)


def is_naflex(model) -> bool:
    from timm.models.naflexvit import NaFlexVit

    return isinstance(model, NaFlexVit)


def naflex_kwargs(family, grid: int) -> dict[str, Any]:
    """``timm.create_model`` arguments of a NaFlexVit architecture for ``family`` and a ``grid`` x ``grid``
    position table (timm drops ``None`` arguments, so the grid is given, not derived from ``img_size``)."""
    return dict(
        pos_embed_grid_size=[grid, grid],
        class_token=family.class_token,
        reg_tokens=family.reg_tokens,
        pre_norm=family.pre_norm,
        final_norm=family.final_norm,
        fc_norm=family.fc_norm,
        global_pool=family.global_pool,
        init_values=family.init_values,
        qkv_bias=family.qkv_bias,
        qk_norm=family.qk_norm,
        proj_bias=family.proj_bias,
    )


def naflex_problems(model) -> list[str]:
    """Every part of a NaFlexVit's embedding and pooling a spec cannot hold, as ``field=value (what is supported)``
    (its blocks are checked as a ViT's)."""
    embeds, problems = model.embeds, []
    if embeds.pos_embed_type != "learned":
        problems.append(f"pos_embed={embeds.pos_embed_type!r} (a learned 2-D grid)")
    elif embeds.pos_embed.shape[1] != embeds.pos_embed.shape[2]:
        problems.append(f"pos_embed_grid_size={tuple(embeds.pos_embed.shape[1:3])} (square)")
    if not embeds.is_linear:
        problems.append("embed_proj_type='conv' (the linear patch embedding)")
    if embeds.norm_input is not None:
        problems.append("input_norm_layer (none)")
    if embeds.patch_size[0] != embeds.patch_size[1]:
        problems.append(f"patch_size={embeds.patch_size} (square)")
    if model.pool_include_prefix:
        problems.append("pool_include_prefix=True")
    if model.global_pool not in ("token", "avg", "map"):
        problems.append(f"global_pool={model.global_pool!r} (token, avg, map)")
    return problems


def naflex_family_fields(model, block) -> dict[str, Any]:
    """The :class:`~learngene.vit.family.ViTFamily` fields read off a NaFlexVit (its MLP, norms, pooling and
    activation are read by the caller, as for a ViT)."""
    from torch import nn

    return dict(
        model_class="naflex",
        class_token=model.embeds.cls_token is not None,
        reg_tokens=model.num_reg_tokens,
        no_embed_class=True,  # the position grid covers the patches only
        pre_norm=not isinstance(model.norm_pre, nn.Identity),
        init_values=float(block.ls1.init_values) if hasattr(block.ls1, "gamma") else None,
        qkv_bias=block.attn.qkv.bias is not None,
        qk_norm=not isinstance(block.attn.q_norm, nn.Identity),
        dynamic_img_size=True,  # the grid is resized to every input
        embed_norm=not isinstance(model.embeds.norm, nn.Identity),
    )


def naflex_sizes(model) -> dict[str, int]:
    """The spec's sizes of a NaFlexVit's input: the construction-time grid as an image size."""
    patch = model.embeds.patch_size[0]
    return dict(img_size=int(model.embeds.pos_embed.shape[1]) * patch, patch_size=patch, in_chans=model.embeds.in_chans)


def image_input(model) -> tuple[int, int, bool] | None:
    """``(channels, image size, whether other sizes run)`` of a timm ViT or Eva (its patch embedding) or NaFlexVit
    (its position grid times its patch; any size runs); None for a model with neither."""
    embed = getattr(model, "patch_embed", None)
    if embed is not None and getattr(embed, "img_size", None) is not None:
        return embed.proj.in_channels, embed.img_size[0], bool(getattr(embed, "dynamic_img_size", False))
    embeds = getattr(model, "embeds", None)
    if embeds is not None and is_naflex(model) and embeds.pos_embed_grid_size is not None:
        return embeds.in_chans, embeds.pos_embed_grid_size[0] * embeds.patch_size[0], True
    return None


def settings_difference(model, reference) -> str | None:
    """The first forward-time setting of the embedding where ``model`` differs from ``reference``, else None."""
    for name in EMBED_SETTINGS:
        mine, theirs = getattr(model.embeds, name, None), getattr(reference.embeds, name, None)
        if mine != theirs:
            return f"embeds.{name} ({mine!r} vs {theirs!r})"
    # a setting from timm 1.0.29 (an older NaFlexVit has neither)
    mine, theirs = getattr(model, "use_key_only_attn_mask", None), getattr(reference, "use_key_only_attn_mask", None)
    if mine != theirs:
        return f"use_key_only_attn_mask ({mine!r} vs {theirs!r})"
    return None


# ---- the embedding's two layouts ------------------------------------------------------------------------
def _linear_to_conv(weight: Tensor, in_chans: int) -> Tensor:
    D, flat = weight.shape
    patch = round((flat // in_chans) ** 0.5)
    return weight.reshape(D, patch, patch, in_chans).permute(0, 3, 1, 2)


def to_vit_layout(state: dict[str, Tensor], in_chans: int) -> dict[str, Tensor]:
    """A NaFlexVit's tensors under a ViT's keys and shapes (differentiable views; other keys as they are)."""
    out = {}
    for key, t in state.items():
        if key == "embeds.pos_embed":
            t = t.reshape(t.shape[0], t.shape[1] * t.shape[2], t.shape[3])
        elif key == "embeds.proj.weight":
            t = _linear_to_conv(t, in_chans)
        out[VIT_KEYS.get(key, key)] = t
    return out


def to_model_layout(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A ViT layout's tensors under a NaFlexVit's keys and shapes (the inverse of :func:`to_vit_layout`)."""
    out = {}
    for key, t in state.items():
        if key == "pos_embed":
            grid = round(t.shape[1] ** 0.5)
            t = t.reshape(t.shape[0], grid, grid, t.shape[2])
        elif key == "patch_embed.proj.weight":
            t = t.permute(0, 2, 3, 1).flatten(1)
        out[MODEL_KEYS.get(key, key)] = t
    return out


def model_axes(axes: dict[str, tuple[Axis, ...]]) -> dict[str, tuple[Axis, ...]]:
    """A ViT layout's axes under a NaFlexVit's keys: the position grid (1, g, g, D), the patch embedding a
    Linear over flattened patches (D, p·p·C)."""
    moved = {"pos_embed": (Axis(KEEP),) * 3 + (Axis(WIDTH),), "patch_embed.proj.weight": (Axis(WIDTH), Axis(KEEP))}
    return {MODEL_KEYS.get(key, key): moved.get(key, axis) for key, axis in axes.items()}


def model_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """A ViT layout's shapes under a NaFlexVit's keys (as :func:`to_model_layout` moves the tensors)."""
    out = {}
    for key, shape in shapes.items():
        if key == "pos_embed":
            grid = round(shape[1] ** 0.5)
            shape = (shape[0], grid, grid, shape[2])
        elif key == "patch_embed.proj.weight":
            shape = (shape[0], shape[1] * shape[2] * shape[3])
        out[MODEL_KEYS.get(key, key)] = shape
    return out


def block_inputs(model, images):
    """``(tokens, kwargs)`` a NaFlexVit feeds its first block (standard mode: no patch mask, no RoPE)."""
    x, _ = model.embeds(images)
    return model.norm_pre(x), {}
