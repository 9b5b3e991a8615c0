import math

import pytest
import torch

from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.methods.importance import residual_order
from learngene.registry import get_method
from learngene.vit.heads import split_qkv
from learngene.vit.spec import block_key
from tests.bounds import assert_same_forward, order_bound

X = torch.randn(3, 1, 16, 16, generator=torch.Generator().manual_seed(0))


def _condense(ancestry, data, **opts):
    return get_method("importance")(**opts).condense(ancestry, CondenseInputs(train=data))


def _ancestry(spec, edit):
    torch.manual_seed(0)
    model = spec.create_model().eval()
    state = model.state_dict()
    with torch.no_grad():
        edit(state)
    model.load_state_dict(state)
    return Ancestry(model, spec)


def test_at_the_ancestry_size_the_permuted_gene_computes_the_ancestry(tiny_ancestry, tiny_spec, toy_data):
    gene = _condense(tiny_ancestry, toy_data, rescale=False)
    model = make_descendant(gene, tiny_spec).eval()
    assert_same_forward(model(X), tiny_ancestry.model(X), depth=2, widest=128)  # permuted channels: other orders
    assert not torch.equal(
        gene.tensors["patch_embed.proj.weight"], tiny_ancestry.model.state_dict()["patch_embed.proj.weight"]
    )  # the gene is reordered
    # the descendant's residual stream is back in the ancestry's order
    assert torch.equal(
        model.state_dict()["patch_embed.proj.weight"], tiny_ancestry.model.state_dict()["patch_embed.proj.weight"]
    )


def test_the_largest_unit_comes_first(tiny_spec, toy_data):
    channel, neuron, head = 7, 29, 1

    def edit(state):
        for key in ("patch_embed.proj.weight", "patch_embed.proj.bias"):
            state[key][channel] *= 30  # a residual channel far larger than the others
        state[block_key(0, "mlp.fc1.weight")][neuron] *= 10
        state[block_key(0, "mlp.fc1.bias")][neuron] = 3.0
        v = split_qkv(state[block_key(1, "attn.qkv.weight")], tiny_spec.num_heads)[2]
        v[head] *= 20  # (a view into the fused weight)

    ancestry = _ancestry(tiny_spec, edit)
    src = ancestry.model.state_dict()
    gene = _condense(ancestry, toy_data)
    assert torch.equal(gene.tensors["patch_embed.proj.weight"][0], src["patch_embed.proj.weight"][channel])
    assert torch.equal(gene.tensors[block_key(0, "mlp.fc1.bias")][0], src[block_key(0, "mlp.fc1.bias")][neuron])
    first_v = split_qkv(gene.tensors[block_key(1, "attn.qkv.weight")], tiny_spec.num_heads)[2][0]
    head_v = split_qkv(src[block_key(1, "attn.qkv.weight")], tiny_spec.num_heads)[2][head]
    assert torch.equal(first_v.flatten().sort().values, head_v.flatten().sort().values)  # same head, channels reordered
    # a one-head, half-width descendant keeps exactly that head, neuron and channel
    small = tiny_spec.replace(embed_dim=16, num_heads=1, depth=2)
    out = make_descendant(gene, small).state_dict()
    q_small = split_qkv(out[block_key(1, "attn.qkv.weight")], 1)[2][0]
    v_src = split_qkv(src[block_key(1, "attn.qkv.weight")], tiny_spec.num_heads)[2][head]
    kept = gene.tensors["importance.width_order"][:16].long().sort().values.tolist()  # in the ancestry's order
    assert torch.equal(q_small[:, kept.index(channel)], v_src[:, channel])
    assert torch.equal(out[block_key(0, "mlp.fc1.bias")][0], src[block_key(0, "mlp.fc1.bias")][neuron])


def test_depth_keeps_the_layers_that_change_their_input_most(tiny_spec, toy_data):
    spec = tiny_spec.replace(depth=3)

    def edit(state):  # layer 1 is the identity: its residual writers are zero
        for name in ("attn.proj.weight", "attn.proj.bias", "mlp.fc2.weight", "mlp.fc2.bias"):
            state[block_key(1, name)].zero_()

    ancestry = _ancestry(spec, edit)
    gene = _condense(ancestry, toy_data, rescale=False)
    # the layer adds zeros: its score is 0 up to the rounding of two 32-wide sums of unit-scale (normed) values
    assert gene.tensors["importance.layer"][1] == pytest.approx(0.0, abs=order_bound(32, 1.0, steps=2))
    out = make_descendant(gene, spec.replace(depth=2)).state_dict()
    back = residual_order(gene, spec.embed_dim)  # the residual rows return to the ancestry's order
    assert torch.equal(out[block_key(1, "mlp.fc2.weight")], gene.tensors[block_key(2, "mlp.fc2.weight")][back])
    assert torch.equal(out[block_key(0, "mlp.fc2.weight")], gene.tensors[block_key(0, "mlp.fc2.weight")][back])


def test_layernorm_gains_are_rescaled_by_sqrt_of_the_width_ratio(tiny_ancestry, tiny_spec, toy_data):
    gene = _condense(tiny_ancestry, toy_data)
    small = tiny_spec.replace(embed_dim=16, num_heads=1)
    out = make_descendant(gene, small).state_dict()
    for key in (block_key(0, "norm1.weight"), block_key(1, "norm2.weight"), "norm.weight"):
        expected = gene.tensors[key][residual_order(gene, 16)] * math.sqrt(2)  # one product: within 2 roundings
        torch.testing.assert_close(out[key], expected, rtol=order_bound(1, 1.0, steps=2), atol=0, msg=key)
    assert torch.equal(
        out[block_key(0, "norm1.bias")], gene.tensors[block_key(0, "norm1.bias")][residual_order(gene, 16)]
    )


def test_refuses_larger_sizes_and_other_head_sizes(tiny_ancestry, tiny_spec, toy_data):
    gene = _condense(tiny_ancestry, toy_data)
    # grow keeps the heads' 16 dims, so 4 heads of 8 are advised to weight_selection's plain rows instead
    for spec, advice in (
        (tiny_spec.replace(depth=3), "use grow"),
        (tiny_spec.replace(embed_dim=64, num_heads=4), "use grow"),
        (tiny_spec.replace(num_heads=4), "use weight_selection with head_aware=False"),
    ):
        with pytest.raises(LearngeneError, match=advice):
            make_descendant(gene, spec)


def test_needs_calibration_data(tiny_ancestry):
    with pytest.raises(LearngeneError, match=r"give training data \(data, --data\)"):
        get_method("importance")().condense(tiny_ancestry, CondenseInputs())
