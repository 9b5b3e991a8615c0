"""SWS: the aux net's stages share one layer each; a descendant expands each stage's layer to its stage's depth."""

import pytest
import torch

from learngene.descendant import GeneNet, make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.methods.sws import middle_first_stages, spread
from learngene.registry import get_method
from learngene.training.loop import TrainConfig
from learngene.vit.spec import ViTSpec, block_key
from tests.conftest import make_images

AUX = ViTSpec(depth=4, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)


def test_default_stages_are_five_as_even_as_possible_the_extra_layers_in_the_middle():
    assert middle_first_stages(16) == [3, 3, 4, 3, 3]  # theirs
    assert middle_first_stages(6) == [1, 1, 2, 1, 1] and middle_first_stages(8) == [1, 2, 2, 2, 1]
    assert middle_first_stages(3) == [1, 1, 1]
    assert spread(12, 5) == [3, 3, 2, 2, 2] and spread(2, 5) == [1, 1, 0, 0, 0]


def test_the_aux_net_shares_weights_within_a_stage_and_trains_one_layer_per_stage():
    data = make_images(16, num_classes=4, size=16)
    torch.manual_seed(0)
    ancestry = Ancestry(AUX.create_model().eval(), AUX)
    method = get_method("sws")(aux_depth=6)
    gene = method.condense(
        ancestry, CondenseInputs(train=data, train_cfg=TrainConfig(max_steps=2, batch_size=8, progress=False))
    )
    assert gene.tensors["stage.attn.qkv.weight"].shape == (5, 96, 32)  # stages 1, 1, 2, 1, 1
    state = method.expand(gene, gene.layout)
    key = "attn.proj.weight"
    assert torch.equal(state[block_key(2, key)], state[block_key(3, key)])
    assert not torch.equal(state[block_key(1, key)], state[block_key(2, key)])
    net = GeneNet(method, gene, gene.layout)
    net(data.get_batch(torch.arange(2))[0]).sum().backward()
    grads = net.gene_tensors["stage::attn::proj::weight"].grad
    assert all(g.abs().sum() > 0 for g in grads)  # every stage's layer learns


def test_descendants_follow_the_stages():
    method = get_method("sws")(stages="1,2,1")
    torch.manual_seed(0)
    tensors = {k: torch.randn_like(v) for k, v in method.initial_tensors(AUX).items()}
    gene = method.new_gene(tensors, AUX, AUX)
    out = method.expand(gene, AUX.replace(depth=8))  # 8 layers over 3 stages, earlier ones longer: 3, 3, 2
    stage = gene.tensors["stage.mlp.fc1.weight"]
    assert [
        next(s for s in range(3) if torch.equal(out[block_key(t, "mlp.fc1.weight")], stage[s])) for t in range(8)
    ] == [0, 0, 0, 1, 1, 1, 2, 2]
    chosen = get_method("sws")(stages="1,2,1", descendant_stages="3,0,2").expand(gene, AUX.replace(depth=5))
    assert torch.equal(chosen[block_key(3, "mlp.fc1.weight")], stage[2])
    with pytest.raises(LearngeneError, match="descendant_stages"):
        get_method("sws")(stages="1,2,1", descendant_stages="3,3").expand(gene, AUX.replace(depth=6))
    with pytest.raises(LearngeneError, match="embed_dim"):
        method.expand(gene, AUX.replace(embed_dim=16, num_heads=1))
    assert torch.isfinite(make_descendant(gene, AUX.replace(depth=2))(torch.randn(1, 1, 16, 16))).all()
