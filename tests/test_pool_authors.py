"""Learngene Pool as its authors build it (ZhenuYang/Yuanmou at b3e20a0): instances of other widths, linear stitches."""

import pytest
import torch

from learngene.binding import bind_gene
from learngene.descendant import load_gene
from learngene.errors import LearngeneError
from learngene.formats.model_file import save_model
from learngene.method import Ancestry, CondenseInputs
from learngene.methods.pool import (
    least_squares_stitch,
    paired_stitches,
    read_stitched,
    stitch_choices,
    stitched_descendant,
)
from learngene.registry import get_method
from learngene.training.loop import TrainConfig, distill_loss, train
from learngene.vit.spec import ViTSpec, block_key
from tests.bounds import assert_same_forward, order_bound
from tests.conftest import make_images

SPEC = ViTSpec(depth=4, embed_dim=32, num_heads=4, img_size=16, patch_size=4, in_chans=1, num_classes=4)
QUICK = TrainConfig(max_steps=2, batch_size=8, progress=False)


def authors_paired_stitching(depth: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Their ``paired_stitching(depth, kernel_size=2, stride=1)`` (utils.py), typed again from reading it."""
    cfgs, ids, stitch_id = [], [], -1
    for i in range(depth):
        window, new = list(range(depth))[i : i + 2], False
        for j in window:
            for k in window:
                if (j, k) not in cfgs:
                    new = True
                    cfgs.append((j, k))
                    ids.append(stitch_id + 1)
        stitch_id += new
    return cfgs, ids


@pytest.mark.parametrize("depth", [1, 3, 6, 9])
def test_stitches_are_their_paired_stitching(depth):
    cfgs, ids = authors_paired_stitching(depth)
    assert [(j, k, layer) for (j, k), layer in zip(cfgs, ids)] == paired_stitches(depth)
    assert len(paired_stitches(6)) == 16  # their 16 tiny-to-base configurations of 6-block instances


def test_a_stitch_starts_as_the_least_squares_affine_map():
    torch.manual_seed(0)
    x = torch.randn(2, 50, 8)
    w, b = torch.randn(16, 8), torch.randn(16)
    fit_w, fit_b = least_squares_stitch(x, x @ w.T + b)
    # exact data: read back up to the targets' rounding (a sum of 8 products and the bias, tests/bounds.py) times
    # the conditioning of the inputs with their column of ones
    inputs = torch.cat([x.reshape(-1, 8), torch.ones(100, 1)], 1).double()
    size = float((x.abs() @ w.abs().T + b.abs()).max())
    bound = float(torch.linalg.cond(inputs)) * order_bound(9, size)
    assert torch.allclose(fit_w, w, rtol=0, atol=bound) and torch.allclose(fit_b, b, rtol=0, atol=bound)


@pytest.fixture(scope="module")
def gene():
    data = make_images(16, num_classes=4, size=16)
    torch.manual_seed(0)
    ancestry = Ancestry(SPEC.create_model().eval(), SPEC)
    return get_method("pool")(design="authors").condense(ancestry, CondenseInputs(train=data, train_cfg=QUICK))


def test_instances_have_a_quarter_half_and_the_whole_width_at_half_the_depth(gene):
    assert gene.config["widths"] == "8,16,32" and gene.config["instance_depth"] == 2
    assert gene.tensors["instance0.blocks.0.attn.qkv.weight"].shape == (24, 8)
    assert gene.tensors["instance2.blocks.1.attn.qkv.weight"].shape == (96, 32)
    assert gene.tensors["stitch0_2.0.weight"].shape == (32, 8) and "stitch1_2.0.bias" in gene.tensors
    method = bind_gene(gene, check=False).method
    state = method.expand(gene, SPEC.replace(depth=4, embed_dim=16, num_heads=2))  # the middle instance, stretched
    assert torch.equal(state[block_key(3, "mlp.fc1.weight")], gene.tensors["instance1.blocks.1.mlp.fc1.weight"])
    with pytest.raises(LearngeneError, match="stitched"):
        method.expand(gene, SPEC.replace(embed_dim=24, num_heads=2))


def test_stitched_descendants_compute_their_parts_save_load_and_train(gene, tmp_path):
    assert (0, 2, 1, 0) in stitch_choices(gene) and (0, 2, 0, 1) in stitch_choices(gene)
    model = stitched_descendant(gene, 0, 2, 1, 0)  # both blocks of the narrowest, then both of the widest
    assert model.depth == 4
    x = torch.randn(2, 1, 16, 16)
    small, big = (bind_gene(gene, check=False).method.instance_specs(gene.layout)[i].create_model() for i in (0, 2))
    for net, i in ((small, 0), (big, 2)):
        net.load_state_dict(
            {k[len(f"instance{i}.") :]: v for k, v in gene.tensors.items() if k.startswith(f"instance{i}.")}
        )
    with torch.no_grad():  # by hand: the small net's embedding and blocks, the stitch, the big net's blocks and head
        t = small.blocks(small.norm_pre(small._pos_embed(small.patch_embed(x))))
        t = t @ gene.tensors["stitch0_2.0.weight"].T + gene.tensors["stitch0_2.0.bias"]
        expected = big.forward_head(big.norm(big.blocks(t)))
        assert_same_forward(model.eval()(x), expected, depth=4, widest=128)  # the stitch by nn.Linear or by hand
    path = tmp_path / "stitched.safetensors"
    save_model(path, model, None)  # in the format pool declares for it
    again, _ = read_stitched(path)
    with torch.no_grad():
        assert torch.equal(again.eval()(x), model(x))
    before = again.stitch.weight.detach().clone()
    train(again, make_images(16, num_classes=4, size=16), QUICK)
    assert not torch.equal(again.stitch.weight, before)  # the stitch is learned with the rest
    with pytest.raises(LearngeneError, match="stitch_choices"):
        stitched_descendant(gene, 0, 2, 0, 3)


def test_the_gene_saves_and_loads(gene, tmp_path):
    path = tmp_path / "pool.safetensors"
    gene.save(path)
    loaded = load_gene(path)
    assert set(loaded.tensors) == set(gene.tensors)
    assert torch.equal(stitched_descendant(loaded, 1, 2, 0, 0).stitch.weight, gene.tensors["stitch1_2.0.weight"])


@pytest.mark.parametrize("family", ["deit_tiny", "dinov2", "siglip", "naflex_siglip"])
def test_the_authors_design_condenses_and_stitches_other_families(family):
    from tests.test_families import condense, family_ancestry

    ancestry = family_ancestry(family)
    gene = condense("pool", ancestry, design="authors")
    front, end, j, k = stitch_choices(gene)[-1]
    model = stitched_descendant(gene, front, end, j, k).eval()
    out = model(torch.randn(2, 3, 28, 28))
    assert out.shape[0] == 2 and torch.isfinite(out).all()


def test_a_rope_family_is_refused_in_one_line():
    from tests.test_families import condense, family_ancestry

    with pytest.raises(LearngeneError, match="RoPE"):
        condense("pool", family_ancestry("eva02"), design="authors")


def kd_loss(gene, ancestry, data) -> float:
    """Mean KL to the ancestry over what the joint step trains: the narrowest and widest instances and the stitches
    between them, on the calibration data."""
    method = bind_gene(gene, check=False).method
    specs = method.instance_specs(gene.layout)
    nets = []
    for i in (0, len(specs) - 1):
        net = specs[i].create_model()
        net.load_state_dict({k.split(".", 1)[1]: v for k, v in gene.tensors.items() if k.startswith(f"instance{i}.")})
        nets.append(net)
    nets += [stitched_descendant(gene, *choice) for choice in stitch_choices(gene) if choice[:2] == (0, 2)]
    x, y = data.get_batch(torch.arange(len(data)))[:2]
    with torch.no_grad():
        target = ancestry.model(x)
        return float(sum(distill_loss(net.eval()(x), y, target, 1.0, 1.0).mean() for net in nets) / len(nets))


def test_joint_training_moves_stitches_and_instances_lowers_the_loss_and_repeats_bit_for_bit():
    data = make_images(16, num_classes=4, size=16)
    torch.manual_seed(0)
    ancestry = Ancestry(SPEC.create_model().eval(), SPEC)
    cfg = TrainConfig(epochs=2, batch_size=8, progress=False, distill_lambda=1.0)

    def condense(joint_epochs: int):
        method = get_method("pool")(design="authors", joint_epochs=joint_epochs)
        return method.condense(ancestry, CondenseInputs(train=data, train_cfg=cfg))

    alone, joint, again = condense(0), condense(8), condense(8)
    assert joint.cost["joint"]["steps"] == 16 and joint.cost["joint"]["configurations"] == 6  # 2 instances + 4 stitches
    changed = {k for k in alone.tensors if not torch.equal(alone.tensors[k], joint.tensors[k])}
    assert "stitch0_2.0.weight" in changed and "instance0.blocks.0.mlp.fc1.weight" in changed
    assert "instance2.head.weight" in changed
    assert not any(k.startswith(("instance1.", "stitch0_1", "stitch1_2")) for k in changed)  # never drawn
    assert kd_loss(joint, ancestry, data) < 0.9 * kd_loss(alone, ancestry, data)
    assert all(torch.equal(joint.tensors[k], again.tensors[k]) for k in joint.tensors)


def test_joint_training_refuses_a_headless_ancestry_in_one_line():
    data = make_images(16, num_classes=4, size=16)
    headless = SPEC.replace(num_classes=0)
    ancestry = Ancestry(headless.create_model().eval(), headless)
    method = get_method("pool")(design="authors", joint_epochs=1)
    with pytest.raises(LearngeneError, match="joint_epochs=0"):
        method.condense(ancestry, CondenseInputs(train=data, train_cfg=QUICK))
