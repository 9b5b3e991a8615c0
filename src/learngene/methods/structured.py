"""Structured initialization (Zheng, Li, Saratchandran & Lucey, "Structured Initialization for Vision
Transformers", NeurIPS 2025, arXiv 2505.19985). Learning-free, no ancestry: the fair competitor to mimetic.

Each head's attention map starts as an impulse filter of a 3 × 3 convolution: head ``h`` attends from
patch ``(r, c)`` to patch ``(r + m_h, c + n_h)``, the offsets taken in the order centre, up, right, left,
down, then the corners (heads past nine start over). Rule of the authors' code (their ``impulse`` mode):

1. The position table is timm's random one scaled by ``pos_scale`` (18); ``P`` = its patch rows,
   LayerNorm'd (no affine), an ``N × D`` matrix.
2. Per layer and head, the target logits ``W`` (``N × N``) are ``impulse`` (1000) at the impulse entries
   and ``3·t`` elsewhere, ``t`` truncated normal (std 0.6, cut at ±2), drawn anew per layer.
3. ``A = P⁺ W P⁺ᵀ`` with ``P⁺ = (PᵀP)⁺_r Pᵀ``, the pseudo-inverse of ``PᵀP`` cut to its ``r = head_dim``
   largest singular values: the ``D × D`` bilinear form whose logits on the positions are closest to ``W``.
4. Its rank-``r`` factors ``U_r Σ_r^½`` and ``V_r Σ_r^½``, each divided by its Frobenius norm and scaled
   by ``qk_scale`` (7), are the head's query and key maps (``q = x W_q``, ``k = x W_k``, so ``q kᵀ =
   x W_q W_kᵀ xᵀ ∝ x A xᵀ``).
5. Values and projection as in mimetic: ``W_v W_proj = α·Z − β·I`` (α = β = 0.4), ``Z`` uniform with
   variance ``1/D`` (their default distribution), factored by SVD, times ``v_scale`` (1).

qkv biases (``qkv_bias``): ``pytorch`` (the default) is theirs: they train with ``weight_init=skip``, which
leaves ``nn.Linear``'s own init, biases uniform on ``±1/√D``; drawn here after every layer's weights, so the
weights are the same under either choice. ``timm`` keeps timm's zeros. Families whose attention has no fused
``qkv`` bias (separate q/v biases, or none) keep timm's.

Departures from their code: every other weight keeps timm's default initialization (``weight_init=skip``
leaves PyTorch's default Linear init there too; every method here starts from timm's); the random
position table is drawn as timm's ``VisionTransformer`` draws it (``N(0, 0.02²)``) with the descendant's
seed, and the class/register rows it has are scaled with it, as theirs are; q/k norms stay timm's (their
models have none).

Authors' code: github.com/osiriszjq/structured_initialization, read at 2623dcc (their rule is
``VisionTransformer.post_init_weights`` in the timm 1.0.22 copy it holds, from commit 7cd02f1; its
``impulse`` branch sets qkv and proj weights and the position table, nothing else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..errors import LearngeneError, Remedy
from ..gene import Learngene
from ..host.threads import one_thread
from ..method import Ancestry, CondenseInputs, Method, Paper
from ..registry import register_method
from ..settings import field
from ..validate import EXPAND
from ..vit.attention_init import canonical_svd, factor_value_projection, value_identity_option, value_noise_option
from ..vit.heads import join_qkv
from ..vit.spec import ViTSpec, block_key
from ..vit.transfer import StateDict

# impulse offsets (row, column) of a 3 x 3 kernel in their order: centre, up, right, left, down, corners
KERNEL_ORDER = (4, 1, 5, 3, 7, 0, 2, 6, 8)


@dataclass(frozen=True)
class StructuredConfig:
    pos_scale: float = field(18.0, phase=EXPAND, help="their norm_p")
    qk_scale: float = field(7.0, phase=EXPAND, help="their norm_q")
    v_scale: float = field(1.0, phase=EXPAND, help="their norm_v")
    impulse: float = field(1000.0, phase=EXPAND, help="logit of the impulse entries in the target map")
    kernel_size: int = field(
        3, at_least=1, odd=True, phase=EXPAND, help="their 3 x 3, odd: centred on the query patch (others: row-major)"
    )
    alpha: float = value_noise_option(0.4)
    beta: float = value_identity_option(0.4)
    seed: int = field(0, phase=EXPAND, help="the random positions and noise draws (a descendant's seed sets it)")
    qkv_bias: Literal["pytorch", "timm"] = field(
        "pytorch", phase=EXPAND, help="theirs: nn.Linear's uniform ±1/√D; timm: zeros"
    )


def impulse_offsets(heads: int, kernel_size: int = 3) -> list[tuple[int, int]]:
    """``(m, n)`` row and column offset of each head's impulse."""
    order = KERNEL_ORDER if kernel_size == 3 else tuple(range(kernel_size**2))
    half = kernel_size // 2
    return [
        (order[h % kernel_size**2] // kernel_size - half, order[h % kernel_size**2] % kernel_size - half)
        for h in range(heads)
    ]


def impulse_targets(heads: int, grid: int, kernel_size: int, impulse: float, generator: torch.Generator) -> Tensor:
    """Step 2: ``(H, N, N)`` target logits, ``impulse`` where patch ``(r, c)`` meets ``(r + m, c + n)``."""
    n = grid * grid
    mask = torch.zeros(heads, n, n, dtype=torch.float64)
    rows, cols = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    for h, (m, o) in enumerate(impulse_offsets(heads, kernel_size)):
        valid = (rows + m >= 0) & (rows + m < grid) & (cols + o >= 0) & (cols + o < grid)
        src = (rows * grid + cols)[valid]
        dst = ((rows + m) * grid + cols + o)[valid]
        mask[h, src, dst] = 1.0
    noise = torch.empty(heads, n, n, dtype=torch.float64)
    torch.nn.init.trunc_normal_(noise, std=0.6, a=-2.0, b=2.0, generator=generator)
    return impulse * mask + 3.0 * noise * (mask == 0)


def query_key_maps(positions: Tensor, targets: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """Steps 3–4: per head ``(H, D, r)`` query and key maps with ``W_q W_kᵀ ∝ P⁺ W P⁺ᵀ`` (unit Frobenius factors).

    In float64 on one thread, the factors' signs fixed (:func:`~learngene.vit.attention_init.canonical_svd`): the
    same bytes at any ``--threads`` (factored on 2 threads, ViT-S's q and k differed from 1 thread's while their
    products agreed)."""
    with one_thread():  # the products too: a matmul's sums are split by the thread count as well
        p = torch.nn.functional.layer_norm(positions, positions.shape[-1:])
        u, s, vh = torch.linalg.svd(p.T @ p)  # P⁺ below is the same whatever the signs
        s_inv = torch.zeros_like(s)
        s_inv[:rank] = 1 / s[:rank]
        p_inv = (vh.T * s_inv) @ u.T @ p.T  # (D, N)
        a = p_inv @ targets @ p_inv.T  # (H, D, D)
    u, s, vh = canonical_svd(a)
    root = s[:, :rank].sqrt()
    q = u[:, :, :rank] * root[:, None, :]
    k = vh[:, :rank].transpose(1, 2) * root[:, None, :]
    return q / q.norm(dim=(1, 2), keepdim=True), k / k.norm(dim=(1, 2), keepdim=True)


def value_projection(width: int, alpha: float, beta: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Step 5: timm's v rows ``(D, D)`` and proj weight with ``W_v W_proj = α·Z − β·I`` as maps on row vectors."""
    bound = 3**0.5 / width**0.5
    z = (torch.rand(width, width, generator=generator, dtype=torch.float64) * 2 - 1) * bound
    return factor_value_projection(z, alpha, beta, canonical=True)


@register_method
class Structured(Method):
    """Impulse-filter attention in closed form; the learngene is empty (any spec, no ancestry)."""

    name = "structured"
    stores = "nothing: each head's attention starts as an impulse of a 3×3 convolution over the patch grid"
    expands_to = "any size"
    summary = "closed-form attention init: each head an impulse of a 3x3 conv over the patch grid (no ancestry)"
    paper = Paper(
        "Structured Initialization for Vision Transformers",
        "Zheng, Li, Saratchandran & Lucey",
        "NeurIPS",
        2025,
        "2505.19985",
    )
    Config = StructuredConfig
    needs_vit_ancestry = False
    seed_option = "seed"

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        spec = ancestry.spec if ancestry else None
        if spec is not None:  # its descendants take the ancestry's family: refused here, not at every expand after
            _require_position_table(spec)
        return self.new_gene({}, None, spec)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        cfg = self.config
        D, H, d = spec.embed_dim, spec.num_heads, spec.head_dim
        widest = max(3, 2 * spec.grid_size - 1)  # the authors' 3 × 3 always (a 1-patch grid keeps its centre)
        if cfg.kernel_size > widest:  # offsets past the grid match no patch: heads with an empty impulse
            raise LearngeneError(
                f"structured kernel_size={cfg.kernel_size} reaches past the {spec.grid_size}×{spec.grid_size} patch "
                f"grid of {spec.short()}; give an odd kernel_size up to {widest}"
            )
        _require_position_table(spec)
        generator = torch.Generator().manual_seed(cfg.seed)
        shape = spec.non_block_shapes(vit_layout=True)["pos_embed"]
        pos = torch.randn(shape, generator=generator, dtype=torch.float64) * 0.02 * cfg.pos_scale
        patches = pos[0, spec.family.pos_prefix_tokens :]
        out: StateDict = spec.model_layout({"pos_embed": pos.float()})
        for layer in range(spec.depth):
            targets = impulse_targets(H, spec.grid_size, cfg.kernel_size, cfg.impulse, generator)
            q, k = query_key_maps(patches, targets, d)
            v, proj = value_projection(D, cfg.alpha, cfg.beta, generator)
            qkv = join_qkv(
                cfg.qk_scale * q.transpose(1, 2), cfg.qk_scale * k.transpose(1, 2), cfg.v_scale * v.reshape(H, d, D)
            )
            out[block_key(layer, "attn.qkv.weight")] = qkv.float()
            out[block_key(layer, "attn.proj.weight")] = (cfg.v_scale * proj).float()
        if cfg.qkv_bias == "pytorch" and "attn.qkv.bias" in spec.block_shapes():
            bound = 1 / D**0.5  # nn.Linear.reset_parameters: U(±1/√fan_in)
            for layer in range(spec.depth):
                bias = (torch.rand(3 * D, generator=generator, dtype=torch.float64) * 2 - 1) * bound
                out[block_key(layer, "attn.qkv.bias")] = bias.float()
        return out


def _require_position_table(spec: ViTSpec) -> None:
    if not spec.family.abs_pos_embed:  # its q/k maps are solved on the position table
        instead = Remedy("mimetic")
        raise LearngeneError(
            f"structured builds its attention on a learned absolute position table, which {spec.arch} does not "
            f"have (its positions are RoPE's alone); {instead.text}, whose attention needs none",
            advice=[instead],
        )
