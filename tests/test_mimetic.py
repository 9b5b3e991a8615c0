"""Mimetic initialization: the products timm really computes, what is left alone, the top-up hook."""

from __future__ import annotations

import pytest
import torch

from learngene.cli import main
from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.methods.mimetic import Mimetic
from learngene.registry import get_method
from learngene.vit.heads import split_qkv
from learngene.vit.spec import ViTSpec

from .bounds import order_bound
from .conftest import cli_ok
from .head_methods_fixtures import TINY, save_tiny_ancestry, timm_strict_load, tiny_ancestry

# random small specs: (width, heads) with head sizes from 8 to full width
SPECS = [
    ViTSpec(depth=2, embed_dim=D, num_heads=H, img_size=16, patch_size=4, in_chans=1, num_classes=5)
    for D, H in [(32, 2), (48, 3), (64, 4), (32, 1)]
]
MIMETIC_KEYS = ("attn.qkv.weight", "attn.proj.weight")


def linear_map(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """What the module does to row vectors ``x``, without its bias."""
    return layer(x) - layer(torch.zeros_like(x))


def module_products(model, spec: ViTSpec, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head ``x ↦ x W_q W_kᵀ`` (H, D, D) and the layer's ``x ↦ proj(v(x))`` (D, D), as timm applies them."""
    attn = model.blocks[layer].attn
    eye = torch.eye(spec.embed_dim)
    with torch.no_grad():
        qkv = linear_map(attn.qkv, eye)  # row i: the token e_i mapped
    q, k, v = qkv.split(spec.embed_dim, dim=1)
    heads = spec.num_heads
    q = q.reshape(-1, heads, spec.head_dim).transpose(0, 1)  # (H, D, d), timm's reshape in Attention.forward
    k = k.reshape(-1, heads, spec.head_dim).transpose(0, 1)
    with torch.no_grad():
        return q @ k.transpose(1, 2), linear_map(attn.proj, v)


def truncation_stats(D: int, d: int, alpha: float, beta: float, draws: int = 40) -> tuple[float, float, float]:
    """Mean diagonal (and its spread over draws) and off-diagonal std of the rank-d truncation of αZ + βI."""
    gen = torch.Generator().manual_seed(1234)
    diag, off = [], []
    for _ in range(draws):
        a = alpha * torch.randn(D, D, generator=gen, dtype=torch.float64) / D**0.5 + beta * torch.eye(
            D, dtype=torch.float64
        )
        u, s, vh = torch.linalg.svd(a)
        t = u[:, :d] @ torch.diag(s[:d]) @ vh[:d]
        diag.append(t.diagonal().mean())
        off.append(t[~torch.eye(D, dtype=torch.bool)].std())
    diag_t = torch.stack(diag)
    return float(diag_t.mean()), float(diag_t.std()), float(torch.stack(off).mean())


def off_diagonal(m: torch.Tensor) -> torch.Tensor:
    return m[..., ~torch.eye(m.shape[-1], dtype=torch.bool)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_query_key_product_is_rank_d_identity_plus_noise(spec):
    model = make_descendant(Mimetic().condense(None), spec)
    want_diag, spread, want_off = truncation_stats(spec.embed_dim, spec.head_dim, 0.7, 0.7)
    for layer in range(spec.depth):
        qk, _ = module_products(model, spec, layer)
        for head in range(spec.num_heads):
            # statistical bounds on seeded draws (the same on every machine; rounding is ~1e-7 of them): the mean
            # diagonal within 5 of its spreads over 40 draws, plus 0.01 for the 40-draw estimate of its mean; the
            # sample std of D(D-1) ≥ 992 entries has a relative standard error 1/√(2·992) ≈ 0.022: 0.12 is 5 of it
            assert qk[head].diagonal().mean() == pytest.approx(want_diag, abs=5 * spread + 0.01)
            assert off_diagonal(qk[head]).std() == pytest.approx(want_off, rel=0.12)
            # singular values past d are rounding, at most 2γ(D)·σ₁ (tests/bounds.py); the d kept ones are ≥ ~β/2·σ₁:
            # a cutoff 10x above the rounding counts d
            cutoff = 10 * order_bound(spec.embed_dim, 1.0)
            assert torch.linalg.matrix_rank(qk[head], rtol=cutoff) == spec.head_dim
        # Z is drawn anew for every head: no two heads share their product (theirs differ by ~α/√D, not by rounding)
        assert spec.num_heads == 1 or (qk[0] - qk[-1]).abs().max() > 0.01


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_value_projection_product_is_minus_identity_plus_noise(spec):
    model = make_descendant(Mimetic().condense(None), spec)
    D = spec.embed_dim
    for layer in range(spec.depth):
        _, vo = module_products(model, spec, layer)
        # the mean of D diagonal entries of -β + noise of std α/√D: a standard error α/D, 4 of them plus 0.01; the
        # sample std of D(D-1) entries: relative standard error ≤ 1/√(2·992) ≈ 0.022, 0.1 is 4.5 of it
        assert vo.diagonal().mean() == pytest.approx(-0.4, abs=4 * 0.4 / D + 0.01)
        assert off_diagonal(vo).std() == pytest.approx(0.4 / D**0.5, rel=0.1)


def test_alphas_and_betas_are_the_options():
    spec = SPECS[2]
    model = make_descendant(get_method("mimetic")(alpha1=0.3, beta1=0.0, alpha2=0.1, beta2=0.9).condense(None), spec)
    qk, vo = module_products(model, spec, 0)
    # as above, at D = 64: a diagonal mean's standard error is α/D ≤ 0.005, so 0.05 and 0.02 are ≥ 4 of it
    assert qk.diagonal(dim1=1, dim2=2).mean().abs() < 0.05  # β1 = 0: no identity left
    assert vo.diagonal().mean() == pytest.approx(-0.9, abs=0.02)
    assert off_diagonal(vo).std() == pytest.approx(0.1 / spec.embed_dim**0.5, rel=0.1)


def test_other_weights_keep_timm_default_init():
    spec = SPECS[1]
    model = make_descendant(Mimetic().condense(None), spec, seed=7)
    torch.manual_seed(7)
    reference = spec.create_model().state_dict()
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, reference[k])}
    assert changed == {"pos_embed"} | {f"blocks.{i}.{n}" for i in range(spec.depth) for n in MIMETIC_KEYS}
    for layer in range(spec.depth):  # the qkv bias stays timm's zeros
        assert torch.equal(model.blocks[layer].attn.qkv.bias, reference[f"blocks.{layer}.attn.qkv.bias"])


def test_sincos_position_embedding_with_scale():
    from timm.layers import build_sincos2d_pos_embed

    spec = SPECS[0]
    model = make_descendant(Mimetic(pos_scale=2.5).condense(None), spec)
    pos = model.pos_embed.detach()[0]
    assert torch.equal(pos[0], torch.zeros(spec.embed_dim))  # class token
    assert torch.equal(pos[1:], 2.5 * build_sincos2d_pos_embed([spec.grid_size] * 2, dim=spec.embed_dim))  # timm's
    avg = spec.replace(global_pool="avg", class_token=False)
    assert make_descendant(Mimetic().condense(None), avg).pos_embed.shape == (1, avg.num_patches, avg.embed_dim)


def test_deterministic_by_seed():
    spec = SPECS[2]
    a = Mimetic().expand(Mimetic().condense(None), spec)
    b = Mimetic().expand(Mimetic().condense(None), spec)
    c = Mimetic(seed=1).expand(Mimetic().condense(None), spec)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["blocks.0.attn.qkv.weight"], c["blocks.0.attn.qkv.weight"])


def test_width_not_divisible_by_four_is_a_clear_error():
    with pytest.raises(LearngeneError, match="divisible by 4"):
        make_descendant(Mimetic().condense(None), ViTSpec(depth=1, embed_dim=30, num_heads=2, img_size=8, patch_size=4))


def test_top_up_fills_only_what_the_gene_leaves_out():
    ancestry = tiny_ancestry()
    gene = get_method("auto_lg")().condense(ancestry)  # first 2 of 3 layers + embeddings
    spec = TINY.replace(depth=4)
    plain = make_descendant(gene, spec, seed=3)
    topped = make_descendant(gene, spec, seed=3, top_up="mimetic")
    mimetic = Mimetic(seed=3).expand(Mimetic().condense(None), spec)  # drawn with the descendant's seed
    for layer in range(spec.depth):
        for name in MIMETIC_KEYS:
            key = f"blocks.{layer}.{name}"
            want = plain.state_dict()[key] if layer < 2 else mimetic[key]
            assert torch.equal(topped.state_dict()[key], want), key
    assert torch.equal(topped.pos_embed, plain.pos_embed)  # the gene's own position embedding wins
    q, _, _ = split_qkv(topped.blocks[3].attn.qkv.weight, spec.num_heads)
    assert q.shape == (spec.num_heads, spec.head_dim, spec.embed_dim)
    others = [k for k in plain.state_dict() if not any(k.endswith(n) for n in MIMETIC_KEYS)]
    assert all(torch.equal(topped.state_dict()[k], plain.state_dict()[k]) for k in others)
    with pytest.raises(LearngeneError, match="top-up"):
        make_descendant(gene, spec, top_up="pretrained")


def test_cli_expand_and_top_up(tmp_path):
    save_tiny_ancestry(tmp_path / "anc.safetensors")
    gene = tmp_path / "mimetic.safetensors"
    cli_ok("condense", "--method", "mimetic", "--ancestry", tmp_path / "anc.safetensors", "--out", gene, "--quiet")
    for i, sizes in enumerate([[], ["--depth", "2", "--num-heads", "2"], ["--embed-dim", "48", "--num-heads", "6"]]):
        out = tmp_path / f"d{i}.safetensors"
        assert main(["expand", str(gene), *sizes, "--out", str(out), "--quiet"]) == 0
        timm_strict_load(out)
    heru = tmp_path / "heru.safetensors"
    cli_ok("condense", "--method", "heru_lg", "--ancestry", tmp_path / "anc.safetensors", "--out", heru, "--quiet")
    out = tmp_path / "topped.safetensors"
    assert main(["expand", str(heru), "--depth", "5", "--top-up", "mimetic", "--out", str(out), "--quiet"]) == 0
    model = timm_strict_load(out)
    mimetic = Mimetic().expand(Mimetic().condense(None), TINY.replace(depth=5))
    assert torch.equal(model.blocks[0].attn.qkv.weight, mimetic["blocks.0.attn.qkv.weight"])
    assert main(["expand", str(heru), "--top-up", "tleg_nope", "--out", str(tmp_path / "x.safetensors")]) == 2
