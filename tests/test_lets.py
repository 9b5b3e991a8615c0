"""LeTs against a re-typing of the authors' transformation (their TransLinear / TransLayeredNorm, lets.py)."""

import pytest
import torch

from learngene.descendant import GeneNet, make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.registry import get_method
from learngene.training.loop import TrainConfig
from learngene.vit.spec import ViTSpec, block_key
from tests.bounds import assert_same_forward, order_bound
from tests.conftest import make_images

AUX = ViTSpec(depth=4, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)


def random_gene(**options):
    """A gene shaped for AUX (compact: 2 layers, width 16, MLP 64) with every tensor random, G included."""
    method = get_method("lets")(**options)
    torch.manual_seed(0)
    tensors = {k: torch.randn_like(v) for k, v in method.initial_tensors(AUX).items()}
    return method, method.new_gene(tensors, AUX, AUX)


def their_linear(w_small, b_small, g_w, g_b, f_in, f_out):
    """TransLinear.get_params: per compact layer cat([W, W F_inᵀ], 1), then cat([W', F_out W'], 0), bias
    cat([b, F_out b]); stacked over the layers and summed with the depth weights (bias: the depth bias)."""
    weights, biases = [], []
    for w, b, fi, fo in zip(w_small, b_small, f_in, f_out):
        w1 = torch.cat([w, w @ fi.T], 1) if fi is not None else w
        weights.append(torch.cat([w1, fo @ w1], 0) if fo is not None else w1)
        biases.append(torch.cat([b, fo @ b], 0) if fo is not None else b)
    return (torch.stack(weights, -1) * g_w).sum(-1), (torch.stack(biases, -1) * g_b).sum(-1)


def _abs(x):
    return [_abs(v) for v in x] if isinstance(x, (list, tuple)) else (x.abs() if x is not None else None)


def theirs(*args):
    """:func:`their_linear`'s weight and bias, and how far another order of its sums may put each (tests/bounds.py):
    W·F_inᵀ, F_out·W' (at most 64 terms, the MLP's) and the depth mixture, 3 sums in a row, over the sums of the
    absolute products, which are :func:`their_linear` of the absolute values."""
    w, b = their_linear(*args)
    aw, ab = their_linear(*_abs(args))
    return w, b, order_bound(64, float(aw.max()), steps=3), order_bound(64, float(ab.max()), steps=3)


def test_aux_layers_are_their_transformation_of_the_compact_pair():
    method, gene = random_gene()
    t, out = gene.tensors, method.expand(gene, AUX)
    for layer in range(4):
        row = layer // 2  # e2: aux layers (0, 1) and (2, 3) share G
        q_small = t["small.attn.qkv.weight"][:, :16]
        qb_small = t["small.attn.qkv.bias"][:, :16]
        w, b, bw, bb = theirs(q_small, qb_small, t["G.q.weight"][row], t["G.q.bias"][row], [t["F.emb"]] * 2, t["F.q"])
        assert torch.allclose(out[block_key(layer, "attn.qkv.weight")][:32], w, rtol=0, atol=bw)
        assert torch.allclose(out[block_key(layer, "attn.qkv.bias")][:32], b, rtol=0, atol=bb)
        v_rows = slice(32, 48)  # the compact v rows sit at 32:48 of its fused (48, 16) qkv
        w, b, bw, bb = theirs(
            t["small.attn.qkv.weight"][:, v_rows],
            t["small.attn.qkv.bias"][:, v_rows],
            t["G.v.weight"][row],
            t["G.v.bias"][row],
            [t["F.emb"]] * 2,
            t["F.v"],
        )
        assert torch.allclose(out[block_key(layer, "attn.qkv.weight")][64:], w, rtol=0, atol=bw)
        w, b, bw, bb = theirs(
            t["small.attn.proj.weight"],
            t["small.attn.proj.bias"],
            t["G.proj.weight"][row],
            t["G.proj.bias"][row],
            t["F.v"],
            [t["F.emb"]] * 2,
        )  # W_O reads v's channels
        assert torch.allclose(out[block_key(layer, "attn.proj.weight")], w, rtol=0, atol=bw)
        w, b, bw, bb = theirs(
            t["small.mlp.fc2.weight"],
            t["small.mlp.fc2.bias"],
            t["G.fc2.weight"][row],
            t["G.fc2.bias"][row],
            t["F.ffn"],
            [t["F.emb"]] * 2,
        )
        assert torch.allclose(out[block_key(layer, "mlp.fc2.weight")], w, rtol=0, atol=bw)
        assert torch.allclose(out[block_key(layer, "mlp.fc2.bias")], b, rtol=0, atol=bb)

        def layered_norm(f, gains, g):  # TransLayeredNorm: F·n per compact layer, mixed over the depth
            return (torch.stack([torch.cat([n, f @ n]) for n in gains], -1) * g).sum(-1)

        norm = layered_norm(t["F.emb"], t["small.norm1.weight"], t["G.norm1.weight"][row])
        size = layered_norm(t["F.emb"].abs(), t["small.norm1.weight"].abs(), t["G.norm1.weight"][row].abs())
        got = out[block_key(layer, "norm1.weight")]
        assert torch.allclose(got, norm, rtol=0, atol=order_bound(16, float(size.max()), steps=2))
    head = t["small.head.weight"]
    size = float((head.abs() @ t["F.cls"].abs().T).max())  # one sum of 16 products: its own F
    expected = torch.cat([head, head @ t["F.cls"].T], 1)
    assert torch.allclose(out["head.weight"], expected, rtol=0, atol=order_bound(16, size))
    assert torch.equal(out["pos_embed"], t["aux.pos_embed"])


def test_a_descendant_takes_the_first_rows_of_f_and_their_layer_mapping():
    method, gene = random_gene(mapping_layer="0,3", mapping_layer_coeff="0,2")
    t = gene.tensors
    out = method.expand(gene, AUX.replace(depth=2, embed_dim=24, num_heads=2))
    w, _, bw, _ = theirs(
        t["small.mlp.fc1.weight"],
        t["small.mlp.fc1.bias"],
        t["G.fc1.weight"][1],
        t["G.fc1.bias"][1],
        [t["F.emb"][:8]] * 2,
        [f[:32] for f in t["F.ffn"]],
    )  # MLP 96 = 64 + 32 new rows
    assert torch.allclose(out[block_key(1, "mlp.fc1.weight")], w, rtol=0, atol=bw)
    assert torch.equal(out["pos_embed"], t["aux.pos_embed"][..., :24])


def test_their_initial_transformations():
    method = get_method("lets")()
    torch.manual_seed(0)
    start = method.initial_tensors(AUX)
    g = start["G.fc1.weight"]  # stackbert_noisy: 1 at (owner layer mod 2) plus uniform(0, 0.03), normalized
    normalized = dict(rtol=0, atol=order_bound(16, 1.0, steps=2))  # divided by a row's sum, summed again: ≤ 16 terms
    assert torch.allclose(g.sum(-1), torch.ones(2), **normalized) and (g.argmax(-1) == 0).all()
    assert (g[:, 1] < 0.03).all()
    f = start["F.emb"]  # rand: uniform rows normalized to sum 1
    assert f.shape == (16, 16) and torch.allclose(f.sum(-1), torch.ones(16), **normalized) and (f >= 0).all()
    assert start["F.q"].shape == (2, 16, 16) and start["F.ffn"].shape == (2, 64, 64)


def test_condensed_through_the_aux_net_and_its_size_computes_the_aux_net():
    data = make_images(16, num_classes=4, size=16)
    torch.manual_seed(0)
    ancestry = Ancestry(AUX.create_model().eval(), AUX)
    inputs = CondenseInputs(train=data, train_cfg=TrainConfig(epochs=1, max_steps=2, batch_size=8, progress=False))
    method = get_method("lets")()
    gene = method.condense(ancestry, inputs)
    assert gene.cost["steps"] == 2
    x = data.get_batch(torch.arange(4))[0]
    with torch.no_grad():
        # the expanded weights in a timm ViT, or expanded inside the aux net's forward: other orders of its sums
        assert_same_forward(make_descendant(gene, AUX).eval()(x), GeneNet(method, gene, AUX).eval()(x), 4, 128)


@pytest.mark.parametrize("size", [dict(embed_dim=64, num_heads=4), dict(embed_dim=8, num_heads=1)])
def test_widths_outside_gene_to_aux_are_refused_in_one_line(size):
    method, gene = random_gene()
    with pytest.raises(LearngeneError, match="lets"):
        method.expand(gene, AUX.replace(**size))
