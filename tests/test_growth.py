import pytest
import torch

from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry
from learngene.registry import get_method
from learngene.vit.spec import block_key
from tests.bounds import assert_same_forward, forward_steps, order_bound

X = torch.randn(3, 1, 16, 16, generator=torch.Generator().manual_seed(0))
ROUNDING = order_bound(192, 1.0, forward_steps(2))  # the widest forward pass compared here: Net2Net's 192-wide MLP


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
        assert_same_forward(model(X), anc.model(X), depth=2, widest=128 * factor, msg=str(factor))  # sums tiled
        assert model.state_dict()[block_key(0, "attn.qkv.weight")].shape == (3 * wide.embed_dim, wide.embed_dim)


def test_hyperclone_noise_changes_weights_but_cancels_on_the_tiled_input(tiny_spec):
    anc = _trained_looking(tiny_spec)
    wide = tiny_spec.replace(embed_dim=64, num_heads=4)
    clean, noisy = _grown(anc, wide), _grown(anc, wide, snr_db=10.0)
    key = block_key(1, "mlp.fc2.weight")
    diff = (noisy.state_dict()[key] - clean.state_dict()[key]).pow(2).mean() / clean.state_dict()[key].pow(2).mean()
    assert 0.05 < diff < 0.2  # 10 dB: noise power a tenth of the signal's
    # the noise cancels exactly in exact arithmetic; in floats each sum also carries every noise value and its
    # negation: twice the terms of the wide clean net's (MLP 4 x 64)
    assert_same_forward(noisy(X), anc.model(X), depth=2, widest=2 * 256)


def test_net2net_keeps_the_function_of_the_mlp_but_not_through_layernorm(tiny_spec):
    anc = _trained_looking(tiny_spec)
    wider_mlp = tiny_spec.replace(mlp_ratio=6.0)  # 192 = 1.5 x 128 hidden units: only Net2Net can
    with pytest.raises(LearngeneError, match="net2net"):
        _grown(anc, wider_mlp)
    assert_same_forward(_grown(anc, wider_mlp, width="net2net")(X), anc.model(X), depth=2, widest=192)
    wider = tiny_spec.replace(embed_dim=48, num_heads=3)
    out = _grown(anc, wider, width="net2net")(X)
    # unequal copies under LayerNorm: another function, farther off than any rounding of this forward pass
    assert out.shape == (3, 4) and (out - anc.model(X)).abs().max() > ROUNDING
    noisy = _grown(anc, wider_mlp, width="net2net", snr_db=20.0)(X)
    # 20 dB: noise amplitude a tenth of the weights', which moves outputs of scale ~1 by about 0.1: 0.3 is 3x that
    assert ROUNDING < (noisy - anc.model(X)).abs().max() < 0.3


def test_depth_stacking_and_identity_layers(tiny_spec):
    anc = _trained_looking(tiny_spec)
    src = anc.model.state_dict()
    deep = tiny_spec.replace(depth=5)
    stacked = _grown(anc, deep).state_dict()
    for layer in range(5):  # G_stack: the whole model stacked, layer l = ancestry layer l mod 2
        for name in ("attn.qkv.weight", "mlp.fc2.bias", "norm1.weight"):
            assert torch.equal(stacked[block_key(layer, name)], src[block_key(layer % 2, name)])
    identity = _grown(anc, deep.replace(embed_dim=64, num_heads=4), depth="identity")
    assert_same_forward(identity(X), anc.model(X), depth=5, widest=256)
    assert identity.state_dict()[block_key(4, "attn.proj.weight")].abs().sum() == 0


def test_refuses_smaller_sizes_and_other_head_sizes(tiny_ancestry, tiny_spec):
    for spec in (
        tiny_spec.replace(depth=1),
        tiny_spec.replace(embed_dim=16, num_heads=1),
        tiny_spec.replace(num_heads=4),
    ):
        with pytest.raises(LearngeneError, match="use weight_selection"):
            _grown(tiny_ancestry, spec)
