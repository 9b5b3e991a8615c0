import torch

from learngene.vit.heads import join_proj, join_qkv, mix_heads, select_matrix, split_proj, split_qkv
from learngene.vit.spec import ViTSpec
from tests.bounds import assert_same_forward, order_bound


def test_split_join_is_the_identity():
    w, b, proj = torch.randn(3 * 24, 24), torch.randn(3 * 24), torch.randn(24, 24)
    assert torch.equal(join_qkv(*split_qkv(w, 3)), w)
    assert torch.equal(join_qkv(*split_qkv(b, 3)), b)
    assert torch.equal(join_proj(split_proj(proj, 3)), proj)
    q, k, v = split_qkv(w, 3)
    assert q.shape == (3, 8, 24)
    assert torch.equal(k[1], w[24 + 8 : 24 + 16])  # [Q; K; V] rows, head-major inside each
    assert torch.equal(split_proj(proj, 3)[2], proj[:, 16:24])


def _attention_by_hand(attn, x):
    """Multi-head attention written from the per-head slices (checks the layout against timm)."""
    H = attn.num_heads
    q, k, v = split_qkv(attn.qkv.weight, H)
    qb, kb, vb = split_qkv(attn.qkv.bias, H)
    cols = split_proj(attn.proj.weight, H)
    out = attn.proj.bias.expand(x.shape[0], x.shape[1], -1).clone()
    for h in range(H):
        qh, kh, vh = x @ q[h].T + qb[h], x @ k[h].T + kb[h], x @ v[h].T + vb[h]
        a = torch.softmax(qh @ kh.transpose(-1, -2) * qh.shape[-1] ** -0.5, dim=-1)
        out = out + (a @ vh) @ cols[h].T
    return out


def test_per_head_slices_are_the_heads_timm_computes():
    torch.manual_seed(0)
    attn = ViTSpec(depth=1, embed_dim=24, num_heads=3, img_size=8, patch_size=4).create_model().blocks[0].attn
    x = torch.randn(2, 5, 24)
    # q·kᵀ (8 terms), the softmax's sum and a·v (5 tokens), the projection (24): 4 sums in a row of at most 24
    torch.testing.assert_close(_attention_by_hand(attn, x), attn(x), rtol=0, atol=order_bound(24, 1.0, steps=4))


def test_permuting_heads_with_their_wo_columns_keeps_the_output():
    torch.manual_seed(0)
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=4, img_size=8, patch_size=4, num_classes=3)
    model = spec.create_model().eval()
    x = torch.randn(2, 3, 8, 8)
    before = model(x)
    perm = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        for block in model.blocks:
            a = block.attn
            w, b, p = mix_heads(a.qkv.weight, a.qkv.bias, a.proj.weight, select_matrix(perm, 4))
            assert not torch.equal(w, a.qkv.weight)
            a.qkv.weight.copy_(w), a.qkv.bias.copy_(b), a.proj.weight.copy_(p)
    assert_same_forward(model(x), before, depth=2, widest=128)  # the heads' sums in another order


def test_mixing_combines_heads_linearly():
    w, b, p = torch.randn(3 * 12, 12), torch.randn(3 * 12), torch.randn(12, 12)
    m = torch.tensor([[0.25, 0.75, 0.0], [0.0, 0.0, 1.0]])
    nw, nb, np_ = mix_heads(w, b, p, m)
    assert nw.shape == (3 * 8, 12) and nb.shape == (24,) and np_.shape == (12, 8)
    q, k, v = split_qkv(w, 3)
    nq, nk, nv = split_qkv(nw, 2)
    # a mixture of 3 heads (a matmul, its zero terms included) against two products and a sum: a 3-term sum each
    mixed = dict(rtol=0, atol=order_bound(3, float(w.abs().max())))
    torch.testing.assert_close(nq[0], 0.25 * q[0] + 0.75 * q[1], **mixed)
    torch.testing.assert_close(nv[1], v[2], **mixed)
    mixed = dict(rtol=0, atol=order_bound(3, float(p.abs().max())))
    torch.testing.assert_close(split_proj(np_, 2)[0], 0.25 * split_proj(p, 3)[0] + 0.75 * split_proj(p, 3)[1], **mixed)
