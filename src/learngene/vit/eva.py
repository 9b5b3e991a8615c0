"""timm's ``Eva`` class as a :class:`~learngene.vit.spec.ViTSpec` family: EVA-02 (Fang et al., "EVA-02: A
Visual Representation for Neon Genesis", arXiv 2303.11331) and Meta's Perception Encoder ``vit_pe_*``
(Bolya et al., "Perception Encoder", arXiv 2504.13181).

Eva's state_dict is a ViT's with a few more rows: the same ``patch_embed``/``pos_embed``/``blocks``/
``attn_pool``/``head`` keys, plus, per block, EVA-02's separate q and v biases (``attn.q_bias``,
``attn.v_bias``; k has none), its sub-LayerNorms (``attn.norm`` on the heads' outputs before W_O,
``mlp.norm`` on the hidden channels before fc2) and layer scale named ``gamma_1``/``gamma_2``. Rotary
position embeddings (RoPE) mostly hold no weights: the architecture computes them from the head size and
the patch grid, so a descendant of another size gets its own, and a family may have no absolute position
table at all (DINOv3, Siméoni et al., arXiv 2508.10104; the RoPE ViTs of Heo et al., arXiv 2403.13298).
Mixed RoPE (Heo et al.) learns its frequencies per layer and head: timm stacks them across layers in
``rope.freqs``, which a spec holds per block (:meth:`~learngene.vit.spec.ViTSpec.split_layers`), so every method
moves them with their layer. What a spec records of an Eva are these rows
(:class:`~learngene.vit.family.ViTFamily`'s ``model_class="eva"``, ``qv_bias``, ``attn_norm``, ``mlp_norm``,
``rope``, ``abs_pos_embed``, ``rope_mixed``); this module translates them to and from Eva's own arguments.

EVA-02 B/L and the EVA-02 CLIP towers keep q, k and v apart (timm's ``qkv_fused=False``); loaded as
an ancestry (:func:`learngene.ancestry.load_ancestry`) they are fused (:func:`fuse_qkv_projections`, the
same attention), so they and their descendants have the one fused layout every method reads, and the
descendants build with ``qkv_fused=True``. Not described (refused in one line, naming the part):
grouped-query or gated attention and post-norm blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EVA_MODULE = "timm.models.eva"


def is_eva(model) -> bool:
    from timm.models.eva import Eva

    return isinstance(model, Eva)


def eva_kwargs(family) -> dict[str, Any]:
    """``timm.create_model`` arguments of an Eva architecture for ``family`` (Eva's names for the ViT's)."""
    # qk_norm only when set: Eva's constructor takes it from timm 1.0.31 (older ones build no qk-normed Eva)
    return dict(
        qkv_fused=True,
        class_token=family.class_token,
        num_reg_tokens=family.reg_tokens,
        no_embed_class=family.no_embed_class,
        use_pre_transformer_norm=family.pre_norm,
        use_fc_norm=family.final_norm and family.use_fc_norm,
        use_post_transformer_norm=family.final_norm and not family.use_fc_norm,
        global_pool=family.global_pool,
        init_values=family.init_values,
        qkv_bias=family.qkv_bias or family.qv_bias,
        **({"qk_norm": True} if family.qk_norm else {}),
        # only when off, as the architectures without it say: an Eva spec written before the field keeps its kwargs
        **({} if family.abs_pos_embed else {"use_abs_pos_emb": False}),
        scale_attn_inner=family.attn_norm,
        scale_mlp=family.mlp_norm,
        dynamic_img_size=family.dynamic_img_size,
    )


def eva_problems(model, block) -> list[str]:
    """Every part of an Eva a spec cannot hold, as ``field=value (what is supported)``."""
    from timm.layers import PatchEmbed
    from timm.models.eva import EvaBlock
    from torch import nn

    if type(block) is not EvaBlock:
        return [f"block_fn={type(block).__name__} (EvaBlock, pre-norm)"]
    attn, embed = block.attn, model.patch_embed
    fused = getattr(attn, "qkv", None) is not None
    plain_embed = (  # timm's PatchEmbed of square images and patches, without padding
        type(embed) is PatchEmbed
        and embed.img_size is not None
        and embed.img_size[0] == embed.img_size[1]
        and embed.patch_size[0] == embed.patch_size[1]
        and not getattr(embed, "dynamic_img_pad", False)
    )
    unsupported = {  # what the model has that a spec cannot hold: ``field=value (what is supported)``
        "qkv_fused=False (fused q/k/v projections only; load_ancestry fuses a checkpoint's)": not fused,
        "gated attention (none)": getattr(attn, "gate", None) is not None,
        "num_kv_heads (grouped-query attention: none)": getattr(attn, "num_kv_heads", attn.num_heads) != attn.num_heads,
        "use_abs_pos_emb=False without RoPE (no position information at all)": model.pos_embed is None
        and getattr(model, "rope", None) is None,
        f"global_pool={model.global_pool!r} (token, avg, map)": model.global_pool not in ("token", "avg", "map"),
        "patch_embed (timm's PatchEmbed, square images and patches, no padding)": not plain_embed,
        "proj_bias=False": attn.proj.bias is None,
        "attn_only_layer_scale=True": block.gamma_1 is not None and block.gamma_2 is None,
        "a packed SwiGLU with a norm": type(block.mlp).__name__ == "GluMlp"
        and not isinstance(getattr(block.mlp, "norm", nn.Identity()), nn.Identity),
    }
    return [problem for problem, found in unsupported.items() if found]


def eva_family_fields(model, block) -> dict[str, Any]:
    """The :class:`~learngene.vit.family.ViTFamily` fields read off an Eva (its MLP, norms and activation are read by
    the caller, as for a ViT)."""
    from torch import nn

    def present(module) -> bool:
        return module is not None and not isinstance(module, nn.Identity)

    return dict(
        model_class="eva",
        class_token=model.cls_token is not None,
        reg_tokens=0 if model.reg_token is None else int(model.reg_token.shape[1]),
        no_embed_class=bool(model.no_embed_class),
        pre_norm=present(model.norm_pre),
        init_values=float(block.init_values) if block.gamma_1 is not None else None,
        qkv_bias=block.attn.qkv.bias is not None,
        qv_bias=getattr(block.attn, "q_bias", None) is not None,
        qk_norm=present(block.attn.q_norm),
        attn_norm=present(block.attn.norm),
        mlp_norm=present(getattr(block.mlp, "norm", None)),
        rope=getattr(model, "rope", None) is not None,
        abs_pos_embed=model.pos_embed is not None,
        rope_mixed=bool(getattr(model, "rope_mixed", False)),
        dynamic_img_size=bool(model.dynamic_img_size),
    )


def block_inputs(model, images) -> tuple[Any, list[dict[str, Any]]]:
    """``(tokens, kwargs)``: what a timm ViT, Eva or NaFlexVit feeds its first block, and each block's keyword
    arguments (an Eva's RoPE table; with mixed RoPE, each block its own layer's)."""
    from .naflex import block_inputs as naflex_block_inputs
    from .naflex import is_naflex

    if is_naflex(model):
        x, kwargs = naflex_block_inputs(model, images)
        return x, [kwargs] * len(model.blocks)
    x = model.patch_embed(images)
    if is_eva(model):
        x, rope = model._pos_embed(x)
        per_layer = getattr(model, "rope_mixed", False) and rope is not None
        return model.norm_pre(x), [{"rope": rope[i] if per_layer else rope} for i in range(len(model.blocks))]
    return model.norm_pre(model.patch_drop(model._pos_embed(x))), [{}] * len(model.blocks)


def fuse_qkv_projections(
    state: dict, read_once: Callable[..., None] = lambda *tensors: None, place: Callable[[list], dict] | None = None
) -> tuple[dict, dict[str, Any]]:
    """An Eva checkpoint with q, k, v apart (EVA-02 B/L, EVA-02 CLIP: timm's ``qkv_fused=False``) as the same
    attention fused: ``qkv.weight`` = [q; k; v] rows, ``q_proj.bias``/``v_proj.bias`` -> ``q_bias``/``v_bias``
    (Eva's k has no bias). Returns the state and the ``create_model`` arguments that build it fused.

    ``read_once`` is called with each block's q, k, v weights once they are fused (e.g. to give back a mapped
    file's pages); ``place`` receives ``(key, make)`` pairs, ``make()`` computing one fused weight, and returns
    them by key (by default, computed in memory; :func:`learngene.host.memory.tensors_in_temporary_file` keeps them in a
    file's memory map instead).
    """
    import re

    import torch

    def fused(block: str):
        def make():
            parts = [state[f"{block}.{p}_proj.weight"] for p in "qkv"]
            weight = torch.cat(parts)
            read_once(*parts)
            return weight

        return make

    out, made, has_bias = {}, [], False
    for key, value in state.items():
        match = re.fullmatch(r"(blocks\.\d+\.attn)\.([qkv])_proj\.(weight|bias)", key)
        if match is None:
            out[key] = value
            continue
        block, part, kind = match.groups()
        if kind == "weight" and part == "q":
            made.append((f"{block}.qkv.weight", fused(block)))
        elif kind == "bias":
            out[f"{block}.{part}_bias"] = value
            has_bias = True
    out.update(place(made) if place is not None else {key: make() for key, make in made})
    return out, {"qkv_fused": True, "qkv_bias": has_bias}


def has_unfused_qkv(state: dict) -> bool:
    return "blocks.0.attn.q_proj.weight" in state
