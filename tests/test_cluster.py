"""Cluster-Learngene: attention distances, DBSCAN clusters, priority weight-sharing, inspect and plot."""

from __future__ import annotations

import pytest
import torch

from learngene.binding import bind_gene
from learngene.cli import main
from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.methods.cluster import (
    ClusterLearngene,
    cluster_heads,
    default_eps,
    mean_attention_distance,
    patch_distances,
    priority_sharing,
)
from learngene.vit.heads import join_qkv, split_proj, split_qkv
from learngene.vit.transfer import axis_map
from tests.bounds import U64, order_bound

from .head_methods_fixtures import TINY, save_tiny_ancestry, timm_strict_load, tiny_ancestry, tiny_data

D, H, d = TINY.embed_dim, TINY.num_heads, TINY.head_dim


def duplicate_heads_ancestry() -> Ancestry:
    """Layer 0: head 2 is a copy of head 0 (q, k, v rows and biases); layer 1: heads 1 and 3 are copies of head 0."""
    ancestry = tiny_ancestry()
    with torch.no_grad():
        for layer, copies in [(0, {2: 0}), (1, {1: 0, 3: 0})]:
            attn = ancestry.model.blocks[layer].attn
            q, k, v = (t.clone() for t in split_qkv(attn.qkv.weight, H))
            qb, kb, vb = (t.clone() for t in split_qkv(attn.qkv.bias, H))
            for dst, src in copies.items():
                for t in (q, k, v, qb, kb, vb):
                    t[dst] = t[src]
            attn.qkv.weight.copy_(join_qkv(q, k, v))
            attn.qkv.bias.copy_(join_qkv(qb, kb, vb))
    return ancestry


@pytest.fixture(scope="module")
def ancestry():
    return duplicate_heads_ancestry()


@pytest.fixture(scope="module")
def gene(ancestry):
    # a tiny eps: only heads with the same attention maps (the duplicates) share a cluster
    return ClusterLearngene(eps=1e-4, num_images=24).condense(ancestry, CondenseInputs(train=tiny_data(40)))


def test_uniform_attention_gives_the_mean_pixel_distance_between_patches():
    ancestry = tiny_ancestry(TINY.replace(img_size=16))
    with torch.no_grad():
        for block in ancestry.model.blocks:  # q = k = 0: every token attends uniformly, the class token too
            block.attn.qkv.weight[: 2 * D] = 0
            block.attn.qkv.bias[: 2 * D] = 0
    spec = ancestry.spec
    got = mean_attention_distance(ancestry.model, spec, tiny_data(8, spec), num_images=8, batch_size=3)
    grid = torch.tensor([(r, c) for r in range(4) for c in range(4)], dtype=torch.float64) * 4
    want = torch.cdist(grid, grid).mean()  # over patch keys only; the class token has no position
    # float32 attention (a softmax's sum over 17 tokens) weighting 16 distances: 2 sums of ≤ 17 terms, relative
    expected = torch.full((spec.depth, spec.num_heads), float(want))
    torch.testing.assert_close(got, expected, rtol=order_bound(17, 1.0, steps=2), atol=0)
    # float64 Euclidean distances: a 2-term sum of squares, then a square root (cdist's direct path below 25 points)
    torch.testing.assert_close(patch_distances(spec), torch.cdist(grid, grid), rtol=order_bound(2, 1.0, 2, U64), atol=0)


def test_distance_hooks_leave_the_model_as_they_found_it():
    ancestry = tiny_ancestry()
    model = ancestry.model.train()
    flags = [b.attn.fused_attn for b in model.blocks]
    mean_attention_distance(model, TINY, tiny_data(4), num_images=4)
    assert [b.attn.fused_attn for b in model.blocks] == flags
    assert all(not b.attn.attn_drop._forward_hooks for b in model.blocks)
    assert model.training


def test_local_heads_have_shorter_distances_than_uniform_ones():
    ancestry = tiny_ancestry(TINY.replace(img_size=16))
    spec = ancestry.spec
    with torch.no_grad():
        attn = ancestry.model.blocks[0].attn
        q, k, v = (t.clone() for t in split_qkv(attn.qkv.weight, H))
        qb, kb, vb = (t.clone() for t in split_qkv(attn.qkv.bias, H))
        ancestry.model.pos_embed.mul_(20)  # positions dominate the tokens
        q[0], k[0] = 4 * torch.eye(d, D), 4 * torch.eye(d, D)  # head 0 matches a token's position with itself
        q[1], k[1], qb[1], kb[1] = 0, 0, 0, 0  # head 1 is uniform
        attn.qkv.weight.copy_(join_qkv(q, k, v))
        attn.qkv.bias.copy_(join_qkv(qb, kb, vb))
    got = mean_attention_distance(ancestry.model, spec, tiny_data(8, spec), num_images=8)
    assert got[0, 0] < 0.5 * got[0, 1]


def test_dbscan_chains_neighbours_and_orders_clusters_by_size():
    distances = torch.tensor([1.0, 5.0, 1.3, 9.0, 5.4, 1.7, 9.9])
    labels, centroids = cluster_heads(distances, eps=0.45)
    groups = {tuple((labels == labels[c]).nonzero().flatten().tolist()) for c in centroids}
    assert groups == {(0, 2, 5), (1, 4), (3,), (6,)}  # 1.0-1.3-1.7 chains although 1.0 and 1.7 are 0.7 apart
    assert centroids == [2, 1, 3, 6]  # largest first; centroid = member nearest the mean (1.33 -> head 2)
    labels, centroids = cluster_heads(distances, eps=0.45, min_heads=3)
    assert centroids == [2] and (labels[[1, 3, 4, 6]] == -1).all()  # too few heads nearby: noise


def test_priority_sharing_divisible_and_remainder_cases():
    assert priority_sharing(3, 6).tolist() == [0, 1, 2, 0, 1, 2]  # every centroid twice
    assert priority_sharing(3, 7).tolist() == [0, 1, 2, 0, 1, 2, 0]  # the largest cluster gets the extra head
    assert torch.bincount(priority_sharing(3, 8)).tolist() == [3, 3, 2]  # first (8 mod 3) centroids once more
    assert priority_sharing(4, 2).tolist() == [0, 1]  # fewer heads than centroids: the largest clusters win


def test_clustering_finds_the_duplicate_heads(gene):
    labels = gene.tensors["clusters.labels"]
    assert labels[0, 0] == labels[0, 2] and len(set(labels[0].tolist())) == 3
    assert labels[1, 0] == labels[1, 1] == labels[1, 3] and labels[1, 2] != labels[1, 0]
    assert len(set(labels[2].tolist())) == 4  # layer 2 has no duplicates
    assert gene.tensors["clusters.centroids.0"].tolist() == [0, 1, 3]  # {0, 2} first, its tie -> lowest index
    assert gene.tensors["clusters.centroids.1"].tolist() == [0, 2]
    distance = gene.tensors["clusters.distance"]
    # two copies of one head, computed at other places of the same batched products: q·k (16 terms), the softmax's
    # sum and the distance-weighted sum (17 tokens each), at the scale of the largest distance
    assert distance[0, 0] == pytest.approx(float(distance[0, 2]), abs=order_bound(17, float(distance.max()), 3))


@pytest.mark.parametrize("heads", [4, 5, 2, 8])
def test_descendant_heads_are_exact_copies_of_the_right_centroids(ancestry, gene, heads):
    spec = TINY.replace(num_heads=heads, embed_dim=heads * d)
    model = make_descendant(gene, spec)
    width = axis_map(D, spec.embed_dim)
    state = ancestry.state()
    for layer, centroids in enumerate([[0, 1, 3], [0, 2], [0, 1, 2, 3]]):
        src = [centroids[i % len(centroids)] for i in range(heads)]  # priority weight-sharing
        a_q, a_k, a_v = split_qkv(state[f"blocks.{layer}.attn.qkv.weight"], H)
        a_bias = split_qkv(state[f"blocks.{layer}.attn.qkv.bias"], H)
        a_cols = split_proj(state[f"blocks.{layer}.attn.proj.weight"], H)
        q, k, v = split_qkv(model.blocks[layer].attn.qkv.weight.detach(), heads)
        bias = split_qkv(model.blocks[layer].attn.qkv.bias.detach(), heads)
        cols = split_proj(model.blocks[layer].attn.proj.weight.detach(), heads)
        for i, h in enumerate(src):
            for got, want in [(q, a_q), (k, a_k), (v, a_v)]:
                if heads == H:
                    assert torch.equal(got[i], want[h])
                assert torch.equal(got[i], want[h][:, width.index] * width.reader_scale)
            for got, want in zip(bias, a_bias):
                assert torch.equal(got[i], want[h])
            assert torch.equal(cols[i], a_cols[h][width.index])
        assert torch.equal(
            model.blocks[layer].mlp.fc1.bias.detach(),
            state[f"blocks.{layer}.mlp.fc1.bias"][axis_map(4 * D, 4 * spec.embed_dim).index],
        )


def test_ffn_random_option_leaves_the_mlp_to_timm(ancestry):
    gene = ClusterLearngene(ffn="random", num_images=8).condense(ancestry, CondenseInputs(train=tiny_data(8)))
    provided = bind_gene(gene, check=False).method.provided_keys(gene, TINY)
    assert not any(".mlp." in k for k in provided) and "blocks.0.attn.qkv.bias" in provided
    assert "blocks.0.norm2.weight" in provided and "pos_embed" in provided and "head.weight" not in provided
    with pytest.raises(LearngeneError, match="one of 'inherit', 'random'"):
        ClusterLearngene(ffn="some")


def test_depth_is_stretched(gene):
    out = bind_gene(gene, check=False).method.expand(gene, TINY.replace(depth=6))
    for layer in range(6):
        assert torch.equal(
            out[f"blocks.{layer}.attn.qkv.weight"],
            bind_gene(gene, check=False).method.expand(gene, TINY)[f"blocks.{layer // 2}.attn.qkv.weight"],
        )


def test_impossible_head_counts_and_missing_data_are_one_line_errors(ancestry, gene):
    with pytest.raises(LearngeneError, match=r"pass embed_dim=16 \(--embed-dim 16\)"):
        make_descendant(gene, TINY.replace(num_heads=2))
    with pytest.raises(LearngeneError, match=r"give training data \(data, --data\)$"):
        ClusterLearngene().condense(ancestry)


def test_deterministic(ancestry, gene):
    again = ClusterLearngene(eps=1e-4, num_images=24).condense(ancestry, CondenseInputs(train=tiny_data(40)))
    assert gene.tensors.keys() == again.tensors.keys()
    assert all(torch.equal(gene.tensors[k], again.tensors[k]) for k in gene.tensors)


def test_default_eps_scales_the_papers_ten_pixels():
    assert default_eps(224) == 10.0 and default_eps(28) == 1.25  # 10 x 28/224: exact in binary


def test_cli_condense_expand_inspect_and_plot(tmp_path, capsys):
    anc, gene = tmp_path / "anc.safetensors", tmp_path / "cluster.safetensors"
    save_tiny_ancestry(anc)
    assert (
        main(
            [
                "condense",
                "--method",
                "cluster",
                "--ancestry",
                str(anc),
                "--data",
                "digits",
                "--img-size",
                "8",
                "--opt",
                "num_images=16",
                "--opt",
                "eps=0.5",
                "--out",
                str(gene),
                "--quiet",
            ]
        )
        == 0
    )
    for i, sizes in enumerate(
        [
            [],
            ["--depth", "2", "--num-heads", "2", "--embed-dim", "16"],
            ["--depth", "5", "--num-heads", "6", "--embed-dim", "48"],
        ]
    ):
        out = tmp_path / f"d{i}.safetensors"
        assert main(["expand", str(gene), *sizes, "--out", str(out), "--quiet"]) == 0
        timm_strict_load(out)
    capsys.readouterr()
    plot = tmp_path / "attn.png"
    assert main(["inspect", str(gene), "--plot", str(plot)]) == 0
    shown = capsys.readouterr().out
    # layers numbered from 1, as on the plot's axis
    assert "layer 0:" not in shown and "layer 1:" in shown and "layer 3:" in shown and "*" in shown
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["inspect", str(gene), "--plot", str(plot)]) == 2  # an existing plot needs --overwrite
    assert main(["inspect", str(gene), "--plot", str(plot), "--overwrite"]) == 0
    assert main(["inspect", str(tmp_path / "d0.safetensors"), "--plot", str(tmp_path / "x.png")]) == 2
    assert main(["expand", str(gene), "--num-heads", "2", "--out", str(tmp_path / "bad.safetensors")]) == 2


def test_inspect_plot_of_a_gene_whose_method_draws_none_is_one_line_and_writes_nothing(tmp_path, capsys):
    from learngene.methods.baselines import Pretrained

    path = tmp_path / "g.safetensors"
    Pretrained().condense(tiny_ancestry()).save(path)
    capsys.readouterr()
    assert main(["inspect", str(path), "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "method pretrained draws no plot" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.safetensors"]
