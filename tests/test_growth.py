import pytest
import torch

from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry
from learngene.registry import get_method
from learngene.vit.spec import block_key

X = torch.randn(3, 1, 16, 16, generator=torch.Generator().manual_seed(0))


def _trained_looking(spec):
    """An ancestry with non-trivial LayerNorms and biases (timm's init has gains 1 and zero biases)."""
    torch.manual_seed(0)
    model = spec.create_model().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 or "token" in name or "pos_embed" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return Ancestry(model, spec)


def _grown(ancestry, spec, **opts):
    gene = get_method("grow")(**opts).condense(ancestry)
    return make_descendant(gene, spec).eval()


@pytest.mark.parametrize("pool", ["token", "avg"])
def test_hyperclone_computes_the_ancestry_function(tiny_spec, pool):
    spec = tiny_spec.replace(global_pool=pool, class_token=pool == "token")
    anc = _trained_looking(spec)
    for factor in (2, 3):
        wide = spec.replace(embed_dim=32 * factor, num_heads=2 * factor)
        model = _grown(anc, wide)
        assert torch.allclose(model(X), anc.model(X), rtol=1e-5, atol=1e-5), factor
        assert model.state_dict()[block_key(0, "attn.qkv.weight")].shape == (3 * wide.embed_dim, wide.embed_dim)


def test_hyperclone_noise_changes_weights_but_cancels_on_the_tiled_input(tiny_spec):
    anc = _trained_looking(tiny_spec)
    wide = tiny_spec.replace(embed_dim=64, num_heads=4)
    clean, noisy = _grown(anc, wide), _grown(anc, wide, snr_db=10.0)
    key = block_key(1, "mlp.fc2.weight")
    diff = (noisy.state_dict()[key] - clean.state_dict()[key]).pow(2).mean() / clean.state_dict()[key].pow(2).mean()
    assert 0.05 < diff < 0.2  # 10 dB: noise power a tenth of the signal's
    assert torch.allclose(noisy(X), anc.model(X), rtol=1e-4, atol=1e-4)


def test_net2net_keeps_the_function_of_the_mlp_but_not_through_layernorm(tiny_spec):
    anc = _trained_looking(tiny_spec)
    wider_mlp = tiny_spec.replace(mlp_ratio=6.0)  # 192 = 1.5 x 128 hidden units: only Net2Net can
    with pytest.raises(LearngeneError, match="net2net"):
        _grown(anc, wider_mlp)
    assert torch.allclose(_grown(anc, wider_mlp, width="net2net")(X), anc.model(X), rtol=1e-5, atol=1e-5)
    wider = tiny_spec.replace(embed_dim=48, num_heads=3)
    out = _grown(anc, wider, width="net2net")(X)
    assert out.shape == (3, 4) and not torch.allclose(out, anc.model(X), atol=1e-3)  # unequal copies under LayerNorm
    noisy = _grown(anc, wider_mlp, width="net2net", snr_db=20.0)(X)
    assert not torch.allclose(noisy, anc.model(X), atol=1e-6) and torch.allclose(noisy, anc.model(X), atol=0.3)


def test_depth_stacking_and_identity_layers(tiny_spec):
    anc = _trained_looking(tiny_spec)
    src = anc.model.state_dict()
    deep = tiny_spec.replace(depth=5)
    stacked = _grown(anc, deep).state_dict()
    for layer in range(5):  # G_stack: the whole model stacked, layer l = ancestry layer l mod 2
        for name in ("attn.qkv.weight", "mlp.fc2.bias", "norm1.weight"):
            assert torch.equal(stacked[block_key(layer, name)], src[block_key(layer % 2, name)])
    identity = _grown(anc, deep.replace(embed_dim=64, num_heads=4), depth="identity")
    assert torch.allclose(identity(X), anc.model(X), rtol=1e-5, atol=1e-5)
    assert identity.state_dict()[block_key(4, "attn.proj.weight")].abs().sum() == 0


def test_refuses_smaller_sizes_and_other_head_sizes(tiny_ancestry, tiny_spec):
    for spec in (
        tiny_spec.replace(depth=1),
        tiny_spec.replace(embed_dim=16, num_heads=1),
        tiny_spec.replace(num_heads=4),
    ):
        with pytest.raises(LearngeneError, match="use importance"):
            _grown(tiny_ancestry, spec)
