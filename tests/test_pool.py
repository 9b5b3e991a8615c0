"""Learngene Pool at one width: small distilled instances, stitched from the smallest to the largest."""

import torch

from learngene.binding import bind_gene
from learngene.descendant import make_descendant
from learngene.method import Ancestry, CondenseInputs
from learngene.methods.pool import share, stitched_layers
from learngene.registry import get_method
from learngene.training.loop import TrainConfig
from learngene.vit.spec import ViTSpec, block_key
from tests.conftest import make_images

SPEC = ViTSpec(depth=4, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)


def test_layers_are_shared_by_depth_and_stitched_small_to_large():
    assert share(3, [1, 2]) == [1, 2] and share(1, [1, 2]) == [0, 1] and share(6, [1, 2]) == [2, 4]
    assert stitched_layers([1, 2], 3) == [(0, 0), (1, 0), (1, 1)]
    assert stitched_layers([2, 4], 3) == [(0, 0), (1, 2), (1, 3)]  # the small one's first, the large one's last
    assert stitched_layers([1, 2], 6) == [(0, 0), (0, 0), (1, 0), (1, 0), (1, 1), (1, 1)]  # more than held: repeated


def test_each_instance_distils_apart_and_a_descendant_takes_their_blocks():
    data = make_images(16, num_classes=4, size=16)
    torch.manual_seed(0)
    ancestry = Ancestry(SPEC.create_model().eval(), SPEC)
    method = get_method("pool")()
    gene = method.condense(
        ancestry, CondenseInputs(train=data, train_cfg=TrainConfig(max_steps=2, batch_size=8, progress=False))
    )
    assert gene.config["instance_depths"] == "1,2" and gene.cost["steps"] == 4  # ⌈4/4⌉, ⌈4/2⌉; 2 steps each
    assert {k.split(".")[0] for k in gene.tensors} == {"instance0", "instance1"}
    out = make_descendant(gene, SPEC.replace(depth=3)).state_dict()
    for layer, (i, block) in enumerate([(0, 0), (1, 0), (1, 1)]):
        assert torch.equal(
            out[block_key(layer, "mlp.fc1.weight")], gene.tensors[f"instance{i}.blocks.{block}.mlp.fc1.weight"]
        )
    assert torch.equal(out["pos_embed"], gene.tensors["instance0.pos_embed"])  # embeddings of the smallest
    assert torch.equal(out["head.weight"], gene.tensors["instance1.head.weight"])  # head of the largest
    # stored: what descendants read (the smallest's embeddings, the largest's norm and head), nothing else
    assert "instance0.head.weight" not in gene.tensors and "instance1.pos_embed" not in gene.tensors
    # an instance alone in its own aux net (condensation) is its own weights, as they are
    lone = type(gene)(
        **{
            **gene.__dict__,
            "tensors": {k: v for k, v in gene.tensors.items() if k.startswith("instance1.")},
            "layout": SPEC.replace(depth=2),
        }
    )
    state = bind_gene(gene, check=False).method.expand(lone, SPEC.replace(depth=2))
    assert state.keys() == {k[len("instance1.") :] for k in lone.tensors}
    assert all(state[k[len("instance1.") :]] is v for k, v in lone.tensors.items())
