"""Closed-form attention initialization (Trockman & Kolter, "Mimetic Initialization of Self-Attention
Layers", ICML 2023, arXiv 2305.09828), and the rule that judges whether stored attention was ever trained.

Each head's query-key product is set close to the identity and each layer's value-projection product
close to the negative identity, with 2-D sin-cos position embeddings. The ``mimetic`` method expands to
exactly these tensors; the benchmark's ablations (``blend_mimetic``, ``pos_embed="sincos"``) and
the block copiers' ``untrained_attention=mimetic`` use them on another method's descendant. No method
and no registry is imported here: every user imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from ..errors import LearngeneError, assigned, named
from ..host.memory import release_pages
from ..host.threads import one_thread
from ..settings import field
from ..validate import EXPAND
from .heads import join_qkv, split_qkv
from .spec import ViTSpec, block_key
from .transfer import StateDict


def canonical_svd(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``torch.linalg.svd(a)`` (batched) on one thread (:func:`~learngene.host.threads.one_thread`), each singular
    pair's sign fixed: the largest-magnitude entry of each left singular vector is positive (the right one flips with
    it, so ``u s vh`` is unchanged). Singular values come in LAPACK's descending order. Factors built from it are then
    unique wherever the singular values are distinct, not a choice of the LAPACK build."""
    with one_thread():
        u, s, vh = torch.linalg.svd(a)
    pivot = u.abs().argmax(dim=-2, keepdim=True)  # per column of u
    sign = torch.where(torch.gather(u, -2, pivot) < 0, -1.0, 1.0).to(u.dtype)  # (..., 1, k)
    return u * sign, s, vh * sign.transpose(-1, -2)


def value_noise_option(default: float) -> Any:
    """The option α of ``W_v W_proj = α·Z − β·I`` (mimetic's ``alpha2``, structured's ``alpha``)."""
    return field(default, phase=EXPAND, help="noise in W_v W_proj")


def value_identity_option(default: float) -> Any:
    """The option β of ``W_v W_proj = α·Z − β·I`` (mimetic's ``beta2``, structured's ``beta``)."""
    return field(default, phase=EXPAND, help="negative identity in W_v W_proj")


@dataclass(frozen=True)
class MimeticConfig:
    alpha1: float = field(0.7, phase=EXPAND, help="noise in W_q W_kᵀ")
    beta1: float = field(0.7, phase=EXPAND, help="identity in W_q W_kᵀ")
    alpha2: float = value_noise_option(0.4)
    beta2: float = value_identity_option(0.4)
    pos_scale: float = field(1.0, phase=EXPAND, help="factor on the sin-cos position embeddings")
    seed: int = field(0, phase=EXPAND, help="the noise draws (a descendant's seed sets it)")


def query_key_factors(
    width: int, head_dim: int, heads: int, alpha: float, beta: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Per-head timm q and k weights with ``W_q^h W_k^hᵀ`` the rank-``d`` part of ``α·Z + β·I`` (Eqs. 1, 3, 5-7).

    ``Z`` has N(0, 1/D) entries and is drawn anew for every head. With ``A = U Σ Vᵀ``, the maps
    ``x ↦ x W_q^h`` and ``x ↦ x W_k^h`` are ``W_q^h = U_d Σ_d^½`` and ``W_k^h = V_d Σ_d^½`` (D×d);
    timm computes ``x Wᵀ``, so it stores their transposes.

    Returns:
        q, k of shape ``(H, d, D)`` (timm's per-head rows, see :func:`~learngene.vit.heads.split_qkv`).
    """
    z = torch.randn(heads, width, width, generator=generator, dtype=torch.float64) / width**0.5
    u, s, vh = torch.linalg.svd(alpha * z + beta * torch.eye(width, dtype=torch.float64))
    root = s[:, :head_dim].sqrt().unsqueeze(-1)
    q = root * u[:, :, :head_dim].transpose(1, 2)
    k = root * vh[:, :head_dim]
    return q.float(), k.float()


def value_projection_factors(
    width: int, alpha: float, beta: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """timm v and proj weights with ``W_v W_proj = α·Z' − β·I`` exactly (Eqs. 2, 4).

    ``W_v = U Σ^½`` and ``W_proj = Σ^½ Vᵀ`` as maps on row vectors; stored transposed for timm.

    Returns:
        v of shape ``(D, D)`` (rows in timm's head order) and proj of shape ``(D, D)``.
    """
    z = torch.randn(width, width, generator=generator, dtype=torch.float64) / width**0.5
    v, proj = factor_value_projection(z, alpha, beta)
    return v.float(), proj.float()


def factor_value_projection(z: Tensor, alpha: float, beta: float, canonical: bool = False) -> tuple[Tensor, Tensor]:
    """timm's v rows and proj weight, ``(D, D)`` each in float64, with ``W_v W_proj = α·Z − β·I`` exactly for a
    drawn ``(D, D)`` noise ``Z``: ``W_v = U Σ^½`` and ``W_proj = Σ^½ Vᵀ`` as maps on row vectors, stored transposed.
    ``canonical``: factored by :func:`canonical_svd` (one thread, fixed signs; mimetic keeps LAPACK's signs, as it
    has)."""
    a = alpha * z - beta * torch.eye(z.shape[0], dtype=torch.float64)
    u, s, vh = canonical_svd(a) if canonical else torch.linalg.svd(a)
    root = s.sqrt()
    return root.unsqueeze(1) * u.T, vh.T * root


def sincos_pos_embed(spec: ViTSpec, scale: float = 1.0) -> Tensor:
    """timm's 2-D sin-cos position embedding for ``spec`` times ``scale``; the prefix tokens' rows (if any) are zero."""
    from timm.layers import build_sincos2d_pos_embed

    if spec.embed_dim % 4:
        raise LearngeneError(
            f"mimetic's 2-D sin-cos position embedding needs a width divisible by 4, "
            f"got {spec.embed_dim}; choose another {named('embed_dim')}"
        )
    patches = build_sincos2d_pos_embed([spec.grid_size, spec.grid_size], dim=spec.embed_dim) * scale
    prefix = torch.zeros(spec.family.pos_prefix_tokens, spec.embed_dim)
    return torch.cat([prefix, patches]).unsqueeze(0)


def blend_query_key(
    state: StateDict, spec: ViTSpec, alpha: float, seed: int = 0, config: MimeticConfig = MimeticConfig()
) -> StateDict:
    """``state`` with every head's ``W_q^h W_k^hᵀ`` replaced by ``α·(state's) + (1−α)·(mimetic's)``.

    The blend has rank up to 2d; its best rank-d approximation is factored as in
    :func:`query_key_factors` (``U_d Σ_d^½``, ``V_d Σ_d^½``). Values, biases and every layer whose
    attention ``state`` does not give are left as they are. α = 1 keeps the product (not the factors).
    """
    if not 0.0 <= alpha <= 1.0:
        raise LearngeneError(f"the mimetic blend α must be in [0, 1], got {alpha}")
    D, H, d = spec.embed_dim, spec.num_heads, spec.head_dim
    generator = torch.Generator().manual_seed(seed)
    out = dict(state)
    for layer in range(spec.depth):
        q_m, k_m = query_key_factors(D, d, H, config.alpha1, config.beta1, generator)
        value_projection_factors(D, config.alpha2, config.beta2, generator)  # keep the draws in step with expand
        key = block_key(layer, "attn.qkv.weight")
        if key not in state:
            continue
        q, k, v = split_qkv(state[key], H)
        # per head: W_q W_kᵀ = qᵀ k as maps on row vectors (timm stores the transposes)
        product = (
            alpha * q.double().transpose(1, 2) @ k.double() + (1 - alpha) * q_m.double().transpose(1, 2) @ k_m.double()
        )
        u, sv, vh = torch.linalg.svd(product)
        root = sv[:, :d].sqrt().unsqueeze(-1)
        q_new = root * u[:, :, :d].transpose(1, 2)
        k_new = root * vh[:, :d]
        out[key] = join_qkv(q_new.to(q.dtype), k_new.to(k.dtype), v)
    return out


def mimetic_attention(spec: ViTSpec, config: MimeticConfig = MimeticConfig()) -> StateDict:
    """Mimetic's closed-form tensors for ``spec``: the sin-cos position table and, per layer, q, k, v and proj.

    Layer by layer, one generator seeded with ``config.seed`` draws ``Z`` for each head's ``W_q W_kᵀ``
    (:func:`query_key_factors`), then ``Z'`` for ``W_v W_proj`` (:func:`value_projection_factors`).
    """
    D, H, d = spec.embed_dim, spec.num_heads, spec.head_dim
    generator = torch.Generator().manual_seed(config.seed)
    # a family without an absolute position table (RoPE alone: DINOv3) gets the attention; its RoPE gives positions
    positions = {"pos_embed": sincos_pos_embed(spec, config.pos_scale)} if spec.family.abs_pos_embed else {}
    out: StateDict = spec.model_layout(positions)
    for layer in range(spec.depth):
        q, k = query_key_factors(D, d, H, config.alpha1, config.beta1, generator)
        v, proj = value_projection_factors(D, config.alpha2, config.beta2, generator)
        out[block_key(layer, "attn.qkv.weight")] = join_qkv(q, k, v.reshape(H, d, D))
        out[block_key(layer, "attn.proj.weight")] = proj
    return out


@dataclass(frozen=True)
class UntrainedAttentionOptions:
    """The options of a method that copies ancestry attention and may swap it for mimetic's when untrained."""

    untrained_attention: Literal["keep", "mimetic"] = field(
        "keep", phase=EXPAND, help="mimetic: mimetic's attention + sin-cos if untrained"
    )
    seed: int = field(
        0, phase=EXPAND, help="mimetic's draws (untrained_attention=mimetic); a descendant's seed sets it"
    )


# An attention layer whose logits vary by less than this (std over isotropic unit-variance tokens) is
# untrained: Gaussian logits of std σ lower the attention's entropy by about σ²/2 nats below uniform, 0.02
# at 0.2. Measured (benchmarks/transfer_why.py, docs/RESULTS.md): timm's init 0.025; ancestries of the transfer
# profile trained 2 epochs 0.05-0.10 (attention within 0.05 nats of uniform on their images); trained 30
# epochs 0.28-0.65; mimetic 1.49.
UNTRAINED_ATTENTION_SCALE = 0.2


def attention_logit_scale(state: StateDict, spec: ViTSpec, layer: int) -> float:
    """Mean over heads of the std of layer ``layer``'s attention logits for isotropic tokens: ‖G W_q^hᵀ W_k^h G‖_F / √d.

    G is the diagonal of the layer's ``norm1`` gain (1 where ``state`` gives none): tokens after the
    LayerNorm have unit-variance coordinates times G, and for independent such x, y the logit
    ``x A yᵀ / √d`` has variance ‖A‖_F² / d. The biases are left out. Data-free, so a rule built on
    it can be computed from a gene alone.
    """
    q, k, _ = split_qkv(state[block_key(layer, "attn.qkv.weight")].detach().double(), spec.num_heads)
    gain = state.get(block_key(layer, "norm1.weight"))
    g = torch.ones(spec.embed_dim, dtype=torch.float64) if gain is None else gain.detach().double()
    a, b = q * g, k * g  # (H, d, D)
    # ‖aᵀb‖_F² = tr((a aᵀ)(b bᵀ)): two (H, d, d) Gram matrices instead of the (H, D, D) product, which at
    # ViT-g width is 450 MB per layer
    squared = ((a @ a.transpose(1, 2)) * (b @ b.transpose(1, 2))).sum(dim=(1, 2))
    return float(squared.clamp_min(0).sqrt().mean() / spec.head_dim**0.5)


def mimetic_where_untrained(
    state: StateDict, spec: ViTSpec, seed: int = 0, threshold: float = UNTRAINED_ATTENTION_SCALE
) -> StateDict:
    """``state`` with mimetic's attention and sin-cos positions when its attention was never trained.

    "Never trained": every layer whose attention ``state`` gives has :func:`attention_logit_scale`
    below ``threshold``. Then those layers' q, k, v and projection weights become mimetic's (drawn
    with ``seed`` exactly as ``mimetic``'s own descendant of ``spec``), their biases zero, and the
    position table (if ``state`` gives one) the 2-D sin-cos one; every other tensor is kept. Otherwise
    ``state`` is returned as it is. Why: an ancestry trained briefly (2 epochs in the transfer profile)
    has near-uniform attention over a barely-trained position table, and its descendants fine-tune
    below mimetic's on unseen classes; with this swap they reach mimetic's level, while a trained
    ancestry's attention carries what it learned and replacing it costs accuracy (docs/RESULTS.md).
    """
    layers = [i for i in range(spec.depth) if block_key(i, "attn.qkv.weight") in state]
    if not layers or max(attention_logit_scale(state, spec, i) for i in layers) >= threshold:
        return state
    filler = mimetic_attention(spec, MimeticConfig(seed=seed))
    out = dict(state)
    for i in layers:
        for name in ("attn.qkv", "attn.proj"):
            out[block_key(i, f"{name}.weight")] = filler[block_key(i, f"{name}.weight")]
            if block_key(i, f"{name}.bias") in state:
                out[block_key(i, f"{name}.bias")] = torch.zeros_like(state[block_key(i, f"{name}.bias")])
    if spec.key("pos_embed") in state:
        out[spec.key("pos_embed")] = filler[spec.key("pos_embed")]
    return out


def untrained_attention_note(gene_tensors: StateDict, layout: ViTSpec) -> str | None:
    """A hint for a gene of copied blocks whose attention looks untrained (:data:`UNTRAINED_ATTENTION_SCALE`):
    with such an ancestry its descendants fine-tune below mimetic's on new classes unless they are expanded
    with ``untrained_attention=mimetic`` (docs/RESULTS.md, transfer). None when the attention looks trained."""
    layers = sorted(
        {int(k.split(".")[1]) for k in gene_tensors if k.startswith("blocks.") and k.endswith(".attn.qkv.weight")}
    )
    if not layers:
        return None
    scale = 0.0
    for i in layers:
        scale = max(scale, attention_logit_scale(gene_tensors, layout, i))
        release_pages(gene_tensors[block_key(i, "attn.qkv.weight")])  # a memory-mapped ViT-g: read once, give back
    if scale >= UNTRAINED_ATTENTION_SCALE:
        return None
    return (
        f"note: the ancestry's attention looks untrained (largest attention-logit scale {scale:.3f} < "
        f"{UNTRAINED_ATTENTION_SCALE}); for new classes, expand with {assigned('untrained_attention', 'mimetic', flag='--opt')} "
        f"to give descendants mimetic's attention instead (docs/RESULTS.md, transfer)"
    )
