import math

import pytest
import torch

from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.methods.front import dct_matrix
from learngene.registry import get_method
from learngene.spec import block_key

X = torch.randn(3, 1, 16, 16, generator=torch.Generator().manual_seed(0))


def test_dct_matrix_is_orthonormal_dct_ii():
    c = dct_matrix(5)
    assert torch.allclose(c @ c.T, torch.eye(5, dtype=c.dtype), atol=1e-12)
    x = torch.arange(5, dtype=torch.float64)
    n, k = torch.arange(5.0, dtype=torch.float64), 2  # textbook DCT-II, orthonormal scaling
    expected = math.sqrt(2 / 5) * (x * torch.cos(math.pi * (2 * n + 1) * k / 10)).sum()
    assert torch.allclose((c @ x)[k], expected)


def test_keep_ratio_one_gives_back_the_ancestry(tiny_ancestry, tiny_spec):
    gene = get_method("front")(keep_ratio=1.0).condense(tiny_ancestry)
    model = make_descendant(gene, tiny_spec).eval()
    for key, value in tiny_ancestry.model.state_dict().items():
        assert torch.allclose(model.state_dict()[key], value, atol=1e-5), key
    assert torch.allclose(model(X), tiny_ancestry.model(X), rtol=1e-5, atol=1e-5)
    assert gene.num_stored_params == tiny_spec.num_params


def test_a_smaller_keep_ratio_stores_fewer_coefficients(tiny_ancestry, tiny_spec):
    gene = get_method("front")(keep_ratio=0.5).condense(tiny_ancestry)
    L, D, M = 1, 16, 64  # ⌈0.5·2⌉, ⌈0.5·32⌉, ⌈0.5·128⌉
    assert gene.tensors["dct.attn.qkv.weight"].shape == (L, 3, D, D)
    assert gene.tensors["dct.mlp.fc1.weight"].shape == (L, M, D)
    assert gene.tensors["dct.pos_embed"].shape == (1, tiny_spec.num_tokens, D)
    assert gene.num_stored_params < tiny_spec.num_params / 4
    # at the ancestry's size the result is a low-pass projection: condensing it again changes nothing
    model = make_descendant(gene, tiny_spec)
    again = get_method("front")(keep_ratio=0.5).condense(type(tiny_ancestry)(model, tiny_spec))
    for key, value in gene.tensors.items():
        assert torch.allclose(again.tensors[key], value, atol=1e-5), key


def test_expands_to_smaller_and_larger_sizes_keeping_magnitudes(tiny_ancestry, tiny_spec):
    state = {k: v.clone() for k, v in tiny_ancestry.model.state_dict().items()}
    shared = state[block_key(0, "mlp.fc1.weight")]
    for layer in range(tiny_spec.depth):  # the same layer everywhere: only the layer axis's DC term
        state[block_key(layer, "mlp.fc1.weight")] = shared
    tiny_ancestry.model.load_state_dict(state)
    gene = get_method("front")(keep_ratio=1.0).condense(tiny_ancestry)
    for spec in (tiny_spec.replace(depth=1, embed_dim=16, num_heads=1), tiny_spec.replace(depth=5, embed_dim=64, num_heads=4)):
        out = make_descendant(gene, spec).state_dict()
        assert out[block_key(0, "attn.qkv.weight")].shape == (3 * spec.embed_dim, spec.embed_dim)
        for layer in range(spec.depth):
            assert torch.allclose(out[block_key(layer, "norm1.weight")], torch.ones(spec.embed_dim), atol=1e-5)
            if spec.embed_dim == tiny_spec.embed_dim * 2:  # √(target/source) keeps a resampled layer's scale
                fc1 = out[block_key(layer, "mlp.fc1.weight")]
                assert 0.5 < fc1.std() / shared.std() < 1.5
        assert torch.isfinite(make_descendant(gene, spec)(X)).all()
    same_width = make_descendant(gene, tiny_spec.replace(depth=5)).state_dict()
    for layer in range(5):  # a layer-constant stack stays that layer at any depth
        assert torch.allclose(same_width[block_key(layer, "mlp.fc1.weight")], shared, atol=1e-5)


def test_expand_is_differentiable_in_the_coefficients(tiny_ancestry, tiny_spec):
    method = get_method("front")(keep_ratio=0.5)
    gene = method.condense(tiny_ancestry)
    coeffs = gene.tensors["dct.mlp.fc2.weight"].requires_grad_()
    out = method.expand(gene, tiny_spec.replace(depth=3, embed_dim=48, num_heads=3))
    out[block_key(2, "mlp.fc2.weight")].sum().backward()
    assert coeffs.grad is not None and coeffs.grad.abs().sum() > 0


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1])
def test_refuses_a_keep_ratio_outside_0_1(bad):
    with pytest.raises(LearngeneError, match="keep_ratio"):
        get_method("front")(keep_ratio=bad)
