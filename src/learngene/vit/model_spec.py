"""The spec of a timm model (:func:`spec_from_model`): its size and family, or one line saying what a
spec cannot describe.

A model is described only when the spec rebuilds it exactly: the family read from its modules, the
model built again from the spec (on ``meta``) must have the same modules, else the first difference
is named.
"""

from __future__ import annotations

import math
from typing import Any, cast

from ..errors import SpecError
from .family import MLP_LAYERS, POOLS, MlpLayer, NormLayer, ViTFamily
from .spec import TIMM_ARCH, ViTSpec, is_distilled, mlp_layer_of

ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu", "silu", "relu")


def _activation(act) -> str | None:
    """timm's name of an activation module (None: one a spec cannot name)."""
    from timm.layers import get_act_layer
    from torch import nn

    if type(act) is nn.GELU:
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    for name in ACTIVATIONS:
        if type(act) is get_act_layer(name):
            return name
    return None


def _mlp_ratio(width: int, hidden: int) -> float:
    """A ratio that timm's ``int(width * ratio)`` turns back into ``hidden`` (a plain division can land just below)."""
    ratio = hidden / width
    while int(width * ratio) < hidden:
        ratio = math.nextafter(ratio, math.inf)
    return ratio


def _not_a_vit(model) -> str:
    """Why a timm model that is not a VisionTransformer cannot be described, naming its parts."""
    if type(model).__name__ == "Beit":
        return _why_not_beit(model)
    blocks = getattr(model, "blocks", None)
    block = blocks[0] if blocks is not None and len(blocks) else None
    parts = []
    if getattr(model, "rope", None) is not None or any("rope" in n for n, _ in model.named_modules()):
        parts.append("RoPE")
    mlp = getattr(block, "mlp", None)
    if mlp is not None and "glu" in type(mlp).__name__.lower():
        parts.append("SwiGLU")
    attn = getattr(block, "attn", None)
    if attn is not None and getattr(attn, "q_bias", None) is not None:
        parts.append("separate q/v biases")
    return f"{type(model).__name__} is not a timm VisionTransformer" + (f" ({', '.join(parts)})" if parts else "")


def _why_not_beit(model) -> str:
    """timm's BEiT (Bao et al., arXiv 2106.08254) differs from a ViT where the axis table has no rule: every block holds
    a relative position bias table, (2g-1)^2 + 3 offsets between the cells of the g x g patch grid (and the class
    token) x one bias per head. Its offset axis is a function of the image inside the blocks (a descendant at another
    image size needs another table; no block tensor moves with the image), its head axis is one value per head (a
    role the table lacks: head axes are heads x head_dim channels); and no BEiT in timm has absolute position
    embeddings, which every spec holds. Its q/v biases and gamma_1/gamma_2 would be Eva's rows."""
    parts = []
    table = getattr(model.blocks[0].attn, "relative_position_bias_table", None) if len(model.blocks) else None
    if table is not None:
        parts.append(
            f"a relative position bias table in every block ({table.shape[0]} offsets of the patch grid x "
            f"{table.shape[1]} heads: no rule of the axis table moves a block tensor with the image size, "
            f"or one value per head)"
        )
    if getattr(model, "rel_pos_bias", None) is not None:
        parts.append("use_shared_rel_pos_bias=True (a relative position table shared by the blocks)")
    if getattr(model, "pos_embed", None) is None:
        parts.append("use_abs_pos_emb=False (learned absolute position embeddings)")
    return "timm's Beit is not described: " + (
        "; ".join(parts) or "its own Block and Attention (q/v biases, gamma_1/gamma_2), which no spec family builds"
    )


def spec_from_model(model, arch: str | None = None) -> ViTSpec:
    """Read the spec (architecture, family, size) of a timm ``VisionTransformer``, ``VisionTransformerDistilled``,
    ``Eva`` (:mod:`learngene.vit.eva`) or ``NaFlexVit`` (:mod:`learngene.vit.naflex`).

    The architecture is the name timm built ``model`` from (``model.pretrained_cfg``), or ``arch``.
    The spec is checked by building that architecture with the read arguments on the meta device:
    same tensors and same modules, or the spec is refused.

    Raises:
        SpecError: naming, in one line, every part of ``model`` a spec cannot describe.
    """
    from .eva import is_eva
    from .naflex import is_naflex, naflex_sizes

    eva, naflex = is_eva(model), is_naflex(model)
    arch = _architecture(model, arch, eva, naflex)
    name = f"{arch}: "
    block: Any = model.blocks[0] if len(model.blocks) else None
    problems = _problems(model, block, eva, naflex)
    if problems:
        raise SpecError(name + "; ".join(problems))
    family = _family(model, block, eva, naflex)
    D = model.embed_dim
    # timm's ViT reads mlp_ratio as fc1's outputs (a packed SwiGLU's two halves), Eva as fc2's inputs
    hidden = block.mlp.fc2.in_features * (2 if family.mlp_layer == "swiglu_packed" and not eva else 1)
    embed: Any = None if naflex else model.patch_embed
    spec = ViTSpec(
        depth=len(model.blocks),
        embed_dim=D,
        num_heads=block.attn.num_heads,
        mlp_ratio=_mlp_ratio(D, hidden),
        **(
            naflex_sizes(model)
            if naflex
            else dict(img_size=embed.img_size[0], patch_size=embed.patch_size[0], in_chans=embed.proj.in_channels)
        ),
        num_classes=model.num_classes,
        arch=arch,
        family=family,
    )
    _check_rebuilds(model, spec, naflex)
    return spec


def _architecture(model, arch: str | None, eva: bool, naflex: bool) -> str:
    """The timm architecture ``model`` was built from: ``arch``, else its ``pretrained_cfg``'s, else the plain (or
    distilled) ViT's. A model of no class a spec describes, or an Eva or NaFlexVit without its name, is refused."""
    from timm.models.vision_transformer import VisionTransformer

    arch = arch or (getattr(model, "pretrained_cfg", None) or {}).get("architecture")
    name = f"{arch}: " if arch else ""
    if not isinstance(model, VisionTransformer) and not eva and not naflex:
        raise SpecError(f"{name}{_not_a_vit(model)}")
    if arch is None and (eva or naflex):
        raise SpecError(
            f"a {type(model).__name__} model without its timm architecture name; pass arch= "
            f"(e.g. eva02_tiny_patch14_224, naflexvit_base_patch16_siglip)"
        )
    return arch or ("deit_tiny_distilled_patch16_224" if is_distilled(model) else TIMM_ARCH)


def _problems(model, block, eva: bool, naflex: bool) -> list[str]:
    """Every part of ``model`` a spec cannot hold, by its model class: an Eva's, a NaFlexVit's or a ViT's."""
    from .eva import eva_problems
    from .naflex import naflex_problems

    if eva:
        problems = eva_problems(model, block) if block is not None else ["depth=0 (at least one block)"]
        return problems or _undescribable_parts(block)
    if naflex:
        return naflex_problems(model) + (
            _block_problems(block) if block is not None else ["depth=0 (at least one block)"]
        )
    return _undescribable(model, block)


def _family(model, block, eva: bool, naflex: bool) -> ViTFamily:
    """The family read off ``model``: what every model class has (final norm, pooling, MLP, activation, norms,
    projection biases) and its class's own fields (:func:`_vit_family_fields`, an Eva's, a NaFlexVit's)."""
    from .eva import eva_family_fields
    from .naflex import naflex_family_fields

    norm = model.fc_norm if not isinstance(model.fc_norm, _identity()) else model.norm
    own = (
        eva_family_fields(model, block)
        if eva
        else naflex_family_fields(model, block)
        if naflex
        else _vit_family_fields(model, block)
    )
    return ViTFamily(
        distilled=is_distilled(model),
        final_norm=not isinstance(norm, _identity()),
        fc_norm=_fc_norm_arg(model),
        global_pool=model.global_pool,
        # named, since the problems found nothing a spec cannot hold
        act_layer=cast(str, _activation(block.mlp.act)),
        mlp_layer=cast(MlpLayer, mlp_layer_of(block.mlp)),
        norm_layer=cast(NormLayer, _norm_layer(block.norm1)),
        proj_bias=block.attn.proj.bias is not None,
        **own,
    )


def _vit_family_fields(model, block) -> dict[str, Any]:
    """The :class:`~learngene.vit.family.ViTFamily` fields read off a timm VisionTransformer (tokens, embedding,
    layer scale, attention biases and norms)."""
    return dict(
        class_token=model.cls_token is not None,
        reg_tokens=model.num_reg_tokens,
        no_embed_class=model.no_embed_class,
        pre_norm=not isinstance(model.norm_pre, _identity()),
        init_values=float(block.ls1.init_values) if hasattr(block.ls1, "gamma") else None,
        qkv_bias=block.attn.qkv.bias is not None,
        qk_norm=not isinstance(block.attn.q_norm, _identity()),
        dynamic_img_size=bool(model.dynamic_img_size),
        embed_norm=not isinstance(model.patch_embed.norm, _identity()),
    )


def _check_rebuilds(model, spec: ViTSpec, naflex: bool) -> None:
    """Refuse a spec that does not rebuild ``model`` exactly: other tensors, or, built again on the meta device,
    another module or NaFlexVit setting (the first difference named)."""
    from .naflex import settings_difference

    name = f"{spec.arch}: "
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if have != spec.state_shapes():
        differ = sorted(set(have) ^ set(spec.state_shapes())) or sorted(
            k for k in have if have[k] != spec.state_shapes()[k]
        )
        raise SpecError(
            f"{name}its tensors differ from the layout read from it at {differ[:3]}; learngene cannot describe this ViT"
        )
    reference = _build_on_meta(spec)
    if reference is None:
        raise SpecError(
            f"{name}timm cannot build {spec.arch} with the arguments read from this model "
            f"({spec.family.short()}); pass the ancestry's own architecture name"
        )
    mismatch = _first_module_difference(model, reference) or (settings_difference(model, reference) if naflex else None)
    if mismatch:
        raise SpecError(
            f"{name}this model differs from timm's {spec.arch} built with the arguments read from it at "
            f"{mismatch}; load the checkpoint with its own architecture name and no extra arguments"
        )


def _identity():
    from torch import nn

    return nn.Identity


def _fc_norm_arg(model) -> bool | None:
    """timm's ``fc_norm`` argument: None when the model follows timm's rule (after pooling for avg)."""
    has_fc_norm = not isinstance(model.fc_norm, _identity())
    has_norm = not isinstance(model.norm, _identity())
    if not (has_fc_norm or has_norm):
        return None
    return None if has_fc_norm == (model.global_pool == "avg") else has_fc_norm


def _undescribable(model, block) -> list[str]:
    """Every field of a VisionTransformer a spec cannot hold, as ``field=value (what is supported)``."""
    from timm.layers import PatchEmbed
    from torch import nn

    problems = []
    if block is None:
        return ["depth=0 (at least one block)"]
    if model.global_pool not in POOLS:
        problems.append(f"global_pool={model.global_pool!r} ({', '.join(POOLS)})")
    if model.pos_embed is None:
        problems.append("pos_embed=none (learned absolute position embeddings only)")
    if getattr(model, "pool_include_prefix", False):
        problems.append("pool_include_prefix=True")
    embed = model.patch_embed
    if type(embed) is not PatchEmbed:
        problems.append(f"embed_layer={type(embed).__name__} (timm's PatchEmbed)")
    else:
        if (
            embed.img_size is None
            or embed.img_size[0] != embed.img_size[1]
            or embed.patch_size[0] != embed.patch_size[1]
        ):
            problems.append(f"img_size={embed.img_size}, patch_size={embed.patch_size} (square only)")
        if not isinstance(embed.norm, nn.Identity) and _norm_layer(embed.norm) != _norm_layer(block.norm1):
            problems.append(f"embed_norm_layer={type(embed.norm).__name__} (none, or the blocks' norm)")
        if getattr(embed, "dynamic_img_pad", False):
            problems.append("dynamic_img_pad=True")
    return problems + _block_problems(block)


def _block_problems(block) -> list[str]:
    """What a spec cannot hold of a ViT's (or NaFlexVit's) block."""
    from timm.layers import Attention
    from timm.models.vision_transformer import Block
    from torch import nn

    if type(block) is not Block:
        return [f"block_fn={type(block).__name__} (timm's Block: no RoPE, SwiGLU or EVA attention)"]
    problems = []
    if type(block.attn) is not Attention:
        problems.append(f"attn_layer={type(block.attn).__name__} (timm's Attention)")
    elif not isinstance(getattr(block.attn, "norm", nn.Identity()), nn.Identity):
        problems.append("scale_attn_norm=True")
    return problems + _undescribable_parts(block, vit=True)


def _undescribable_parts(block, vit: bool = False) -> list[str]:
    """What a spec cannot hold of a block's MLP and norms (a ViT's or an Eva's)."""
    from torch import nn

    problems = []
    mlp_kind = mlp_layer_of(block.mlp)
    if mlp_kind not in MLP_LAYERS:
        problems.append(f"mlp_layer={mlp_kind} (timm's Mlp, SwiGLUPacked or SwiGLU)")
    elif vit and not isinstance(getattr(block.mlp, "norm", nn.Identity()), nn.Identity):
        problems.append("scale_mlp_norm=True")
    elif _activation(block.mlp.act) is None:
        problems.append(f"act_layer={type(block.mlp.act).__name__} ({', '.join(ACTIVATIONS)})")
    if _norm_layer(block.norm1) is None:
        problems.append(f"norm_layer={type(block.norm1).__name__} (LayerNorm or RmsNorm)")
    return problems


def _norm_layer(norm) -> str | None:
    """Our name for a norm module (None: one a spec cannot name)."""
    from timm.layers import LayerNorm, RmsNorm
    from torch import nn

    if type(norm) in (nn.LayerNorm, LayerNorm):
        return "layernorm"
    if type(norm) is RmsNorm:
        return "rmsnorm"
    return None


def _build_on_meta(spec: ViTSpec):
    import torch

    try:
        with torch.device("meta"):
            return spec.create_model()
    except (SpecError, TypeError, ValueError, AssertionError, RuntimeError):
        return None


def _first_module_difference(model, reference) -> str | None:
    """The first module (ignoring dropout and stochastic depth) where two timm models differ, else None."""
    from timm.layers import DropPath
    from torch import nn

    skip = (nn.Dropout, DropPath, nn.Identity)

    def signature(m):
        return [(n, type(x).__name__, x.extra_repr()) for n, x in m.named_modules() if not isinstance(x, skip)]

    mine, theirs = signature(model), signature(reference)
    for a, b in zip(mine, theirs):
        if a != b:
            return f"{a[0] or 'the model'} ({a[1]}({a[2]}) vs {b[1]}({b[2]}))"
    if len(mine) != len(theirs):
        return f"{len(mine)} vs {len(theirs)} modules"
    return None
