"""PEG: convex mixtures in the gene, φ's repeat at init, adaptation that expand reproduces."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from learngene.binding import bind_gene
from learngene.cli import main
from learngene.descendant import make_descendant
from learngene.errors import GeneFormatError, LearngeneError
from learngene.gene import Learngene
from learngene.method import AdaptInputs
from learngene.methods.peg import PEG, apply_phi, default_gene_heads
from learngene.training.loop import TrainConfig, evaluate
from learngene.vit.heads import split_proj, split_qkv
from learngene.vit.transfer import axis_map, block_state

from .bounds import assert_same_forward, order_bound
from .head_methods_fixtures import TINY, save_tiny_ancestry, timm_strict_load, tiny_ancestry, tiny_data

D, H, d = TINY.embed_dim, TINY.num_heads, TINY.head_dim
PHI_BOUND = order_bound(12, 1.0, steps=3)  # relative to the largest weight compared


@pytest.fixture(scope="module")
def ancestry():
    return tiny_ancestry()


@pytest.fixture(scope="module")
def gene(ancestry):
    return PEG(gene_heads=2, gene_ffns=2, seed=3).condense(ancestry)


def convex_weights(targets: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    """Least-squares ``P`` with ``targets ≈ P @ sources`` (rows flattened); the sources are independent."""
    return torch.linalg.lstsq(sources.flatten(1).T.double(), targets.flatten(1).T.double()).solution.T


def read_back_bound(sources: torch.Tensor) -> float:
    """How far :func:`convex_weights` may read a mixing weight off: the float32 mixtures' rounding (a sum of one
    term per source, tests/bounds.py) times the sources' condition number (least squares amplifies it so much)."""
    rows = sources.flatten(1).double()
    return float(torch.linalg.cond(rows)) * order_bound(len(rows), 1.0)


def mixture_bound(sources: torch.Tensor) -> float:
    """A mixture of ``sources`` with read-back weights against the gene's: its own rounding plus each of the
    weights' read-back error, over the sources' largest value."""
    size = float(sources.abs().max())
    return order_bound(len(sources), size) + len(sources) * read_back_bound(sources) * size


def test_gene_heads_are_convex_mixtures_of_whole_heads(ancestry, gene):
    state = ancestry.state()
    for layer in range(TINY.depth):
        b = block_state(state, layer)
        q, k, v = split_qkv(b["attn.qkv.weight"], H)
        qb, kb, vb = split_qkv(b["attn.qkv.bias"], H)
        cols = split_proj(b["attn.proj.weight"], H)
        p, off = convex_weights(gene.tensors["msa.q"][layer], q), read_back_bound(q)
        assert p.shape == (2, H)
        assert (p > -off).all() and torch.allclose(p.sum(1), torch.ones(2, dtype=torch.float64), rtol=0, atol=H * off)
        # the same weights mix k, v, every bias and the W_O columns of the same heads
        for name, source in [("k", k), ("v", v), ("q_bias", qb), ("k_bias", kb), ("v_bias", vb), ("proj_cols", cols)]:
            want = torch.einsum("oh,h...->o...", p.float(), source)
            bound = mixture_bound(source) + read_back_bound(q) * H * float(source.abs().max())  # p read off q
            torch.testing.assert_close(gene.tensors[f"msa.{name}"][layer], want, rtol=0, atol=bound)
        assert torch.equal(gene.tensors["msa.norm_weight"][layer], b["norm1.weight"])  # a copy
    # the draws differ between layers (by a share of 1, not a rounding)
    first = convex_weights(gene.tensors["msa.q"][0], split_qkv(state["blocks.0.attn.qkv.weight"], H)[0])
    second = convex_weights(gene.tensors["msa.q"][1], split_qkv(state["blocks.1.attn.qkv.weight"], H)[0])
    assert (first - second).abs().max() > 0.01


def test_gene_ffns_are_convex_mixtures_of_layers(ancestry, gene):
    state = ancestry.state()
    stack = torch.stack([state[f"blocks.{i}.mlp.fc1.weight"] for i in range(TINY.depth)])
    p, off = convex_weights(gene.tensors["ffn.fc1_weight"], stack), read_back_bound(stack)
    assert p.shape == (2, TINY.depth) and (p > -off).all()
    torch.testing.assert_close(p.sum(1), torch.ones(2, dtype=torch.float64), atol=TINY.depth * off, rtol=0)
    for part, name in [("fc2_weight", "mlp.fc2.weight"), ("fc1_bias", "mlp.fc1.bias"), ("norm_weight", "norm2.weight")]:
        source = torch.stack([state[f"blocks.{i}.{name}"] for i in range(TINY.depth)])
        bound = mixture_bound(source) + off * TINY.depth * float(source.abs().max())  # p read off fc1
        torch.testing.assert_close(
            gene.tensors[f"ffn.{part}"], torch.einsum("ba,a...->b...", p.float(), source), atol=bound, rtol=0
        )


@pytest.mark.parametrize("depth,heads", [(3, 4), (5, 6), (2, 2), (4, 1)])
def test_unadapted_phi_is_an_exact_repeat_of_the_gene(gene, depth, heads):
    spec = TINY.replace(depth=depth, num_heads=heads, embed_dim=heads * d)
    out = bind_gene(gene, check=False).method.expand(gene, spec)
    t = gene.tensors
    width = axis_map(D, spec.embed_dim)
    copies = torch.bincount(torch.arange(heads) % 2, minlength=2).float()
    for layer in range(depth):
        msa_src, ffn_src = layer * TINY.depth // depth, layer * 2 // depth  # stretched layers
        q, k, v = split_qkv(out[f"blocks.{layer}.attn.qkv.weight"], heads)
        qb, _, vb = split_qkv(out[f"blocks.{layer}.attn.qkv.bias"], heads)
        cols = split_proj(out[f"blocks.{layer}.attn.proj.weight"], heads)
        for c in range(heads):
            g = c % 2  # cyclic repeat of the 2 gene heads
            assert torch.equal(q[c], t["msa.q"][msa_src, g][:, width.index] * width.reader_scale)
            assert torch.equal(v[c], t["msa.v"][msa_src, g][:, width.index] * width.reader_scale)
            assert torch.equal(qb[c], t["msa.q_bias"][msa_src, g]) and torch.equal(vb[c], t["msa.v_bias"][msa_src, g])
            torch.testing.assert_close(  # a division, or a product by the reciprocal: 2 roundings
                cols[c], t["msa.proj_cols"][msa_src, g][width.index] / copies[g], atol=0, rtol=order_bound(1, 1.0, 2)
            )
        assert torch.equal(out[f"blocks.{layer}.norm1.weight"], t["msa.norm_weight"][msa_src][width.index])
        assert torch.equal(out[f"blocks.{layer}.mlp.fc2.bias"], t["ffn.fc2_bias"][ffn_src][width.index])
        assert torch.equal(out[f"blocks.{layer}.norm2.bias"], t["ffn.norm_bias"][ffn_src][width.index])
    assert torch.equal(out["patch_embed.proj.weight"], t["patch_embed.proj.weight"][width.index])
    assert "head.weight" not in out  # the classifier is not inherited (App. B)


@pytest.mark.parametrize("heads", [1, 12])  # narrower (every 4th column), wider (3 copies, each read at 1/3)
def test_a_trained_phi_on_the_narrowed_gene_equals_phi_then_narrowing(gene, heads):
    """expand moves the widths before φ (a ViT-g gene never goes through φ at its full width): φ is elementwise
    over those axes and positively homogeneous, so this is φ at full width, then narrowed, up to rounding."""
    spec = TINY.replace(depth=3, num_heads=heads, embed_dim=heads * d, mlp_ratio=3.0 if heads > 1 else 2.0)
    gen = torch.Generator().manual_seed(0)
    phi = {k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in PEG().initial_phi(gene, spec).items()}
    out = PEG().expand(dataclasses.replace(gene, tensors={**gene.tensors, **phi}), spec)
    t, width, hidden = gene.tensors, axis_map(D, spec.embed_dim), axis_map(TINY.mlp_hidden, spec.mlp_hidden)
    fc1 = apply_phi(phi["phi.ffn_layers.w1"], phi["phi.ffn_layers.w2"], t["ffn.fc1_weight"])
    fc2 = apply_phi(phi["phi.ffn_layers.w1"], phi["phi.ffn_layers.w2"], t["ffn.fc2_weight"])
    q = apply_phi(
        phi["phi.heads.w1"],
        phi["phi.heads.w2"],
        apply_phi(phi["phi.msa_layers.w1"], phi["phi.msa_layers.w2"], t["msa.q"]),
        batch_dims=1,
    )
    # φ mixes at most 12 heads (or 3 layers), twice for q, then a reader scale: 3 steps of at most 12 terms,
    # in another order when the widths move first
    for layer in range(3):
        torch.testing.assert_close(
            out[f"blocks.{layer}.mlp.fc1.weight"],
            fc1[layer][hidden.index][:, width.index] * width.reader_scale,
            atol=PHI_BOUND * max(1.0, float(out[f"blocks.{layer}.mlp.fc1.weight"].abs().max())),
            rtol=0,
        )
        torch.testing.assert_close(
            out[f"blocks.{layer}.mlp.fc2.weight"],
            fc2[layer][width.index][:, hidden.index] * hidden.reader_scale,
            atol=PHI_BOUND * max(1.0, float(out[f"blocks.{layer}.mlp.fc2.weight"].abs().max())),
            rtol=0,
        )
        torch.testing.assert_close(
            split_qkv(out[f"blocks.{layer}.attn.qkv.weight"], heads)[0],
            q[layer][..., width.index] * width.reader_scale,
            atol=PHI_BOUND * max(1.0, float(out[f"blocks.{layer}.attn.qkv.weight"].abs().max())),
            rtol=0,
        )


def test_same_size_descendant_computes_the_gene_net(gene):
    """At the ancestry's size with H_c = 2·H_b, each gene head twice at half its W_O: the gene's 2-head function."""
    spec = TINY
    model = make_descendant(gene, spec).eval()
    # a net with exactly the 2 gene heads per layer but the ancestry's residual width: built by hand
    ref = make_descendant(gene, spec).eval()
    for layer, block in enumerate(ref.blocks):
        attn = block.attn
        q, k, v = (gene.tensors[f"msa.{n}"][layer] for n in "qkv")
        qb, kb, vb = (gene.tensors[f"msa.{n}_bias"][layer] for n in "qkv")
        attn.qkv = torch.nn.Linear(D, 3 * 2 * d)
        attn.qkv.weight.data = torch.cat([q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)])
        attn.qkv.bias.data = torch.cat([qb.flatten(), kb.flatten(), vb.flatten()])
        attn.proj = torch.nn.Linear(2 * d, D)
        attn.proj.weight.data = gene.tensors["msa.proj_cols"][layer].permute(1, 0, 2).reshape(D, 2 * d)
        attn.proj.bias.data = gene.tensors["msa.proj_bias"][layer]
        attn.num_heads, attn.attn_dim = 2, 2 * d
    x = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        assert_same_forward(model(x), ref(x), depth=TINY.depth, widest=TINY.mlp_hidden)


def test_adapt_trains_phi_and_expand_gives_the_adapted_net(gene):
    spec = TINY.replace(depth=2, num_heads=2, embed_dim=2 * d)
    data, held_out = tiny_data(48), tiny_data(32, seed=1)
    cfg = TrainConfig(epochs=1, max_steps=4, batch_size=12, lr=1e-2, progress=False)
    adapted, result = bind_gene(gene, check=False).method.adapt(gene, spec, AdaptInputs(data, cfg, eval=held_out))
    initial = bind_gene(gene, check=False).method.initial_phi(gene, spec)
    assert result.steps == 4
    assert any(not torch.equal(adapted.tensors[k], v) for k, v in initial.items())  # φ moved
    assert all(torch.equal(adapted.tensors[k], v) for k, v in gene.tensors.items())  # the gene did not
    assert {k for k in adapted.tensors if k.startswith("descendant.")} == {
        "descendant.head.weight",
        "descendant.head.bias",
    }
    model = make_descendant(adapted, spec)
    assert evaluate(model, held_out)["acc"] == result.final_acc  # expand(adapted) is the net adapt trained
    assert "adapted for 2 layers of 2 heads" in " ".join(bind_gene(adapted, check=False).method.describe(adapted))
    with pytest.raises(LearngeneError, match="adapted for 2 layers of 2 heads"):
        make_descendant(adapted, TINY)


def test_adapt_is_deterministic_whatever_the_global_rng(gene):
    runs = []
    for global_seed in (1, 2):  # e.g. two processes: torch seeds each one differently
        torch.manual_seed(global_seed)
        adapted, _ = bind_gene(gene, check=False).method.adapt(
            gene,
            TINY.replace(depth=2),
            AdaptInputs(tiny_data(24), TrainConfig(max_steps=1, batch_size=12, progress=False)),
        )
        runs.append(adapted.tensors)
    assert runs[0].keys() == runs[1].keys() and all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_adapted_gene_round_trips_through_a_file(gene, tmp_path):
    spec = TINY.replace(depth=2)
    adapted, _ = bind_gene(gene, check=False).method.adapt(
        gene, spec, AdaptInputs(tiny_data(24), TrainConfig(max_steps=2, batch_size=12, progress=False))
    )
    adapted.save(tmp_path / "a.safetensors")
    loaded = Learngene.load(tmp_path / "a.safetensors")
    a, b = make_descendant(adapted, spec).state_dict(), make_descendant(loaded, spec).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_default_gene_heads_follow_the_authors_two_thirds():
    assert [default_gene_heads(h) for h in (12, 6, 4, 3, 2, 1)] == [8, 4, 3, 2, 1, 1]


def test_deterministic_and_seeded(ancestry, gene):
    again = PEG(gene_heads=2, gene_ffns=2, seed=3).condense(ancestry)
    other = PEG(gene_heads=2, gene_ffns=2, seed=4).condense(ancestry)
    assert all(torch.equal(gene.tensors[k], again.tensors[k]) for k in gene.tensors)
    assert not torch.equal(gene.tensors["msa.q"], other.tensors["msa.q"])
    assert PEG().condense(ancestry).tensors["msa.q"].shape[:2] == (3, 3)  # defaults: about 2/3 of the 4 heads
    assert PEG().condense(ancestry).tensors["ffn.fc1_weight"].shape[0] == 2  # and half the depth, rounded up


def test_bad_sizes_are_one_line_errors(ancestry, gene):
    with pytest.raises(LearngeneError, match=r"pass embed_dim=16 \(--embed-dim 16\)"):
        make_descendant(gene, TINY.replace(num_heads=2))
    with pytest.raises(LearngeneError, match="gene_heads"):
        PEG(gene_heads=5).condense(ancestry)


def test_a_gene_of_another_float_dtype_than_its_method_computes_in_is_refused_in_one_line(gene):
    """Every tensor float16: an unadapted gene's φ is made by the method, in float32 (``phi_init``), and ``meta``'s
    kernels do not compare dtypes (the real expansion failed in a matmul), so the check notes an operation given two
    floating dtypes."""
    half = dataclasses.replace(gene, tensors={k: v.half() for k, v in gene.tensors.items()})
    with pytest.raises(GeneFormatError) as info:
        make_descendant(half, TINY)
    message = str(info.value)
    assert "\n" not in message, message
    assert (
        "its method computes torch.float16 and torch.float32 tensors together (mm); its tensors are torch.float16"
        in (message)
    ), message
    assert message.endswith("create it again with `learngene condense`"), message


def test_cli_condense_expand_adapt(tmp_path):
    anc, gene = tmp_path / "anc.safetensors", tmp_path / "peg.safetensors"
    save_tiny_ancestry(anc)
    assert (
        main(
            [
                "condense",
                "--method",
                "peg",
                "--ancestry",
                str(anc),
                "--opt",
                "gene_heads=3",
                "--out",
                str(gene),
                "--quiet",
            ]
        )
        == 0
    )
    for i, sizes in enumerate(
        [[], ["--depth", "5", "--num-heads", "2", "--embed-dim", "16"], ["--num-heads", "6", "--embed-dim", "48"]]
    ):
        out = tmp_path / f"d{i}.safetensors"
        assert main(["expand", str(gene), *sizes, "--out", str(out), "--quiet"]) == 0
        timm_strict_load(out)
    out, adapted = tmp_path / "adapted.safetensors", tmp_path / "adapted_gene.safetensors"
    assert (
        main(
            [
                "adapt",
                str(gene),
                "--data",
                "digits",
                "--img-size",
                "8",
                "--train-images",
                "40",
                "--max-steps",
                "2",
                "--batch-size",
                "20",
                "--depth",
                "2",
                "--num-heads",
                "2",
                "--embed-dim",
                "16",
                "--out",
                str(out),
                "--gene-out",
                str(adapted),
                "--quiet",
            ]
        )
        == 0
    )
    model = timm_strict_load(out)
    assert model.head.out_features == 10
    assert Learngene.load(adapted).tensors["phi.heads.w2"].shape[:2] == (2, 2)
    assert main(["expand", str(gene), "--num-heads", "2", "--out", str(tmp_path / "bad.safetensors")]) == 2


def test_gene_net_gradients_reach_only_phi_and_classifier(gene):
    from learngene.descendant import GeneNet

    spec = TINY.replace(depth=2)
    method = bind_gene(gene, check=False).method
    start = dataclasses.replace(gene, tensors={**gene.tensors, **method.initial_phi(gene, spec)})
    net = GeneNet(method, start, spec, trainable=lambda k: k.startswith(("phi.", "descendant.")))
    net(torch.randn(2, 1, 8, 8)).sum().backward()
    trained = {n for n, p in net.named_parameters() if p.grad is not None}
    assert {n for n in trained if n.startswith("gene_tensors.")} == {
        f"gene_tensors.phi::{m}::{w}" for m in ("msa_layers", "ffn_layers", "heads") for w in ("w1", "w2")
    }
    assert {n for n in trained if n.startswith("skeleton.")} == {"skeleton.head.weight", "skeleton.head.bias"}
