"""Structured initialization against a re-typing of the authors' ``impulse`` rule (arXiv 2505.19985)."""

import torch

from learngene.descendant import make_descendant
from learngene.methods.structured import impulse_offsets, impulse_targets
from learngene.registry import get_method
from learngene.vit.heads import split_qkv
from learngene.vit.spec import ViTSpec, block_key
from tests.bounds import order_bound

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=4, img_size=16, patch_size=4, in_chans=1, num_classes=4)


def expanded(spec=SPEC, **options):
    method = get_method("structured")(**options)
    return method.expand(method.condense(None), spec)


def test_impulse_offsets_follow_their_kernel_order():
    # centre, up, right, left, down, then the corners; the tenth head starts over
    assert impulse_offsets(10) == [(0, 0), (-1, 0), (0, 1), (0, -1), (1, 0), (-1, -1), (-1, 1), (1, -1), (1, 1), (0, 0)]


def test_targets_are_impulses_over_bounded_noise():
    w = impulse_targets(2, 4, 3, 1000.0, torch.Generator().manual_seed(0))
    assert w.shape == (2, 16, 16)
    big = w > 100
    assert torch.equal(big[0], torch.eye(16, dtype=torch.bool))  # head 0: the centre, every patch to itself
    up = torch.zeros(16, 16, dtype=torch.bool)
    for r in range(1, 4):
        for c in range(4):
            up[r * 4 + c, (r - 1) * 4 + c] = True  # head 1: (r, c) to (r - 1, c); the top row has none
    assert torch.equal(big[1], up)
    # 3 x a normal of std 0.6 cut at ±2: |w| ≤ 6 by construction; its std ≈ 3 x 0.6 = 1.8, and 480 draws put the
    # sample's within a few percent of it: 0.5 only says the noise is there
    assert w[~big].abs().max() <= 6.0 and w[~big].std() > 0.5


def test_query_key_products_are_the_least_squares_form_of_the_targets():
    """Re-typed: A = P⁺ W P⁺ᵀ (P the LayerNorm'd patch positions, 16 x 32, of full rank 16 = head_dim, so the cut
    pseudo-inverse is pinv), and each head's W_q W_kᵀ = qk_scale² · A / (‖U_r Σ½‖_F ‖V_r Σ½‖_F) = 49 · A / Σ σ."""
    spec = SPEC.replace(num_heads=2)
    out = expanded(spec)
    gen = torch.Generator().manual_seed(0)
    pos = torch.randn(1, 17, 32, generator=gen, dtype=torch.float64) * 0.02 * 18.0
    assert torch.equal(out["pos_embed"], pos.float())  # the same float64 draws, cast once
    p = torch.nn.functional.layer_norm(pos[0, 1:], (32,))
    w = impulse_targets(2, 4, 3, 1000.0, gen)  # layer 0's draws come right after the positions
    a = torch.linalg.pinv(p) @ w @ torch.linalg.pinv(p).T
    q, k, _ = split_qkv(out[block_key(0, "attn.qkv.weight")].double(), 2)
    for h in range(2):
        expected = 49.0 * a[h] / torch.linalg.svdvals(a[h]).sum()
        # W_q, W_k are float32 (one rounding each) and their product sums 16 terms: 2 steps over Σ|q||k|
        bound = order_bound(16, float((q[h].abs().T @ k[h].abs()).max()), steps=2)
        assert torch.allclose(q[h].T @ k[h], expected, rtol=0, atol=bound), h
        logits = p @ q[h].T @ k[h] @ p.T  # on the positions alone: every patch's largest logit is its impulse
        m, n = [(0, 0), (-1, 0)][h]
        for r in range(max(0, -m), 4 - max(0, m)):
            for c in range(max(0, -n), 4 - max(0, n)):
                assert logits[r * 4 + c].argmax() == (r + m) * 4 + c + n


def test_values_and_projection_are_minus_beta_identity_plus_bounded_noise():
    out = expanded()
    _, _, v = split_qkv(out[block_key(1, "attn.qkv.weight")].double(), 4)
    product = v.reshape(32, 32).T @ out[block_key(1, "attn.proj.weight")].double().T  # x ↦ x W_vᵀ W_projᵀ
    noise = product + 0.4 * torch.eye(32, dtype=torch.float64)
    # uniform noise of at most 0.4·√3/√32 by construction, plus the float32 factors' rounding over their 32 terms
    size = float((v.reshape(32, 32).T.abs() @ out[block_key(1, "attn.proj.weight")].double().T.abs()).max())
    assert noise.abs().max() <= 0.4 * 3**0.5 / 32**0.5 + order_bound(32, size, steps=2) and noise.std() > 0.02


def test_every_family_gets_its_prefix_rows_and_a_working_descendant():
    for spec in (SPEC, SPEC.replace(depth=3, embed_dim=64, num_heads=8)):
        model = make_descendant(get_method("structured")().condense(None), spec, seed=3)
        assert torch.isfinite(model(torch.randn(2, 1, 16, 16))).all()
    a, b = (make_descendant(get_method("structured")().condense(None), SPEC, seed=s).state_dict() for s in (0, 1))
    assert not torch.equal(a["pos_embed"], b["pos_embed"])


def test_qkv_biases_are_pytorch_linear_defaults_unless_asked_for_timms_zeros():
    """Theirs train with weight_init=skip: nn.Linear's bias U(±1/√D) stays; the weights do not depend on the choice."""
    ours, zeros = expanded(), expanded(qkv_bias="timm")
    for layer in range(SPEC.depth):
        bias = ours[block_key(layer, "attn.qkv.bias")]
        # U(±1/√32): bounded by construction, std 1/√(3·32); 96 draws put the sample's within ~10% of it, so half of
        # it only says the draws are there
        assert bias.shape == (96,) and bias.abs().max() <= 1 / 32**0.5 and bias.std() > 0.5 / (3 * 32) ** 0.5
        assert block_key(layer, "attn.qkv.bias") not in zeros
        assert torch.equal(ours[block_key(layer, "attn.qkv.weight")], zeros[block_key(layer, "attn.qkv.weight")])
    assert not torch.equal(ours[block_key(0, "attn.qkv.bias")], ours[block_key(1, "attn.qkv.bias")])
    assert torch.equal(expanded()[block_key(1, "attn.qkv.bias")], ours[block_key(1, "attn.qkv.bias")])  # seeded
    model = make_descendant(get_method("structured")().condense(None), SPEC)
    assert torch.equal(model.state_dict()[block_key(0, "attn.qkv.bias")], ours[block_key(0, "attn.qkv.bias")])


def test_the_factors_are_the_same_bytes_at_any_thread_count():
    """At this size the SVDs factored on 2 threads gave other q and k than on 1 (their products agreed): ViT-S's
    expansion differed by --threads (issue 47). Now one thread factors them, with fixed signs."""
    spec = ViTSpec(depth=1, embed_dim=64, num_heads=2, img_size=32, patch_size=4, in_chans=3, num_classes=4)
    kept = torch.get_num_threads()
    try:
        outs = []
        for count in (1, 2):
            torch.set_num_threads(count)
            outs.append(expanded(spec))
            assert torch.get_num_threads() == count  # given back after the factorization
    finally:
        torch.set_num_threads(kept)
    assert all(torch.equal(outs[0][k], outs[1][k]) for k in outs[0])


def test_canonical_svd_fixes_each_pairs_sign_and_keeps_the_product():
    from learngene.vit.attention_init import canonical_svd

    a = torch.randn(3, 40, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u, s, vh = canonical_svd(a)
    pivot = u.abs().argmax(dim=-2, keepdim=True)
    assert (torch.gather(u, -2, pivot) > 0).all()  # the largest entry of every left singular vector is positive
    # a backward-stable SVD: errors of about n·eps·‖a‖ = 40 · 2.2e-16 · (‖a‖ ≤ 2√40 + 3 for these draws) ≈ 1e-13;
    # 1e-12 leaves 10x. Singular vectors move by that over the gap between singular values (≥ 1e-3 here): 1e-9
    torch.testing.assert_close(u @ torch.diag_embed(s) @ vh, a, rtol=0, atol=1e-12)
    flipped_u, flipped_s, _ = canonical_svd(-a)  # the same factors, the sign convention applied again
    torch.testing.assert_close(flipped_s, s, rtol=0, atol=1e-12)
    torch.testing.assert_close(flipped_u, u, rtol=0, atol=1e-9)
