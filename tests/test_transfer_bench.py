"""The transfer protocol: upstreams on some classes, tasks on the others, ablation rows, and their marks."""

import pytest
import torch

from learngene.bench import BenchRun, Profile, Row, Task
from learngene.bench import cells as cell_stage
from learngene.bench.profiles import Upstream, Variant
from learngene.bench.tables import format_table
from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry
from learngene.methods.mimetic import Mimetic
from learngene.pipeline import training as pipeline_training
from learngene.registry import get_method
from learngene.training.config import TrainConfig
from learngene.vit.attention_init import blend_query_key, sincos_pos_embed
from learngene.vit.heads import split_qkv
from learngene.vit.spec import ViTSpec
from tests.bounds import order_bound


# ---- the marks on constructed numbers ------------------------------------------------------------------------
def _row(method, seed, acc, budget=1, variant=""):
    return Row(
        method=method,
        task="t",
        size="S",
        depth=1,
        embed_dim=8,
        num_heads=1,
        seed=seed,
        budget=budget,
        accs=[acc],
        variant=variant,
    )


def test_tables_mark_every_cell_against_scratch_scratch_x10_and_mimetic():
    rows = [_row("scratch", s, 0.30 + s / 100) for s in range(3)]
    rows += [_row("scratch", s, 0.60 + s / 100, budget=10) for s in range(3)]
    rows += [_row("mimetic", s, 0.50 + s / 100) for s in range(3)]
    rows += [_row("tleg", s, 0.55 + s / 100) for s in range(3)]
    table = format_table(rows, "t", mark=True)
    # every paired difference is the same at each seed (s = 0): resolved by any number of comparisons, its sign the mark
    assert "| tleg | 56.0 ± 1.0 S+ X− M+ |" in table
    assert "| mimetic | 51.0 ± 1.0 S+ X− |" in table  # no mark against itself
    assert "| scratch ×10 | 61.0 ± 1.0 S+ M+ |" in table


# ---- the descendant options the ablations use ------------------------------------------------------------------
SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)


def test_blend_is_the_gene_at_one_and_mimetic_at_zero():
    torch.manual_seed(0)
    gene_state = {"blocks.0.attn.qkv.weight": torch.randn(96, 32)}
    mimetic = Mimetic(seed=4).expand(Mimetic().condense(None), SPEC)

    def product(state):
        q, k, _ = split_qkv(state["blocks.0.attn.qkv.weight"], 2)
        return q.transpose(1, 2) @ k

    def refactored(target):  # an SVD of a 16 x 16 product (backward stable: ~16·u·σ₁) refactored, then multiplied
        # again (16 terms): 3 sums in a row of at most 16 terms, at the scale of the largest singular value
        return dict(rtol=0, atol=order_bound(16, float(torch.linalg.matrix_norm(target, ord=2).max()), steps=3))

    assert torch.allclose(
        product(blend_query_key(gene_state, SPEC, 1.0, seed=4)), product(gene_state), **refactored(product(gene_state))
    )
    assert torch.allclose(
        product(blend_query_key(gene_state, SPEC, 0.0, seed=4)), product(mimetic), **refactored(product(mimetic))
    )
    half = product(blend_query_key(gene_state, SPEC, 0.5, seed=4))
    assert (half - product(gene_state)).abs().max() > 0.01  # half way to mimetic's: a share of 1, not a rounding
    assert "blocks.1.attn.qkv.weight" not in blend_query_key(gene_state, SPEC, 0.5)  # only what the gene gives


def test_position_embedding_ablations_and_seeded_mimetic():
    gene = Mimetic().condense(None)
    assert torch.equal(make_descendant(gene, SPEC, seed=1).pos_embed, sincos_pos_embed(SPEC))
    learned = cell_stage.cell_descendant(gene, SPEC, 1, Variant("learned-pos", pos_embed="learned")).pos_embed
    torch.manual_seed(1)
    assert torch.equal(learned, SPEC.create_model().pos_embed)  # the table a scratch model of this seed starts from
    assert not torch.equal(learned, sincos_pos_embed(SPEC))
    scratch = get_method("scratch")().condense(None)
    sincos = cell_stage.cell_descendant(scratch, SPEC, 1, Variant("+sincos", pos_embed="sincos")).pos_embed
    assert torch.equal(sincos, sincos_pos_embed(SPEC))
    with pytest.raises(LearngeneError, match="pos_embed must be learned or sincos"):
        cell_stage.cell_descendant(scratch, SPEC, 1, Variant("typo", pos_embed="sin-cos"))
    # the descendant's seed draws mimetic's attention too, not only timm's initialization
    a, b = (make_descendant(gene, SPEC, seed=s).blocks[0].attn.qkv.weight for s in (1, 2))
    assert not torch.equal(a, b)


def test_the_blend_changes_only_the_attention_the_gene_gives():
    torch.manual_seed(0)
    gene = get_method("pretrained")().condense(Ancestry(SPEC.create_model(), SPEC))
    plain = make_descendant(gene, SPEC, seed=3).state_dict()
    blended = cell_stage.cell_descendant(gene, SPEC, 3, Variant("blend0.5", blend_mimetic=0.5)).state_dict()
    qkv = [k for k in plain if k.endswith("attn.qkv.weight")]
    expected = blend_query_key({k: plain[k] for k in qkv}, SPEC, 0.5, seed=3)  # mimetic drawn with the cell's seed
    assert all(torch.equal(blended[k], expected.get(k, plain[k])) for k in plain)
    assert all(not torch.equal(blended[k], plain[k]) for k in qkv)


# ---- the protocol on fake Fashion-MNIST ------------------------------------------------------------------------
TRANSFER = Profile(
    name="micro-transfer",
    ancestry=ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=28, patch_size=7, in_chans=1, num_classes=10),
    ancestry_epochs=1,
    ancestry_images=None,
    condense_epochs=1,
    condense_images=None,
    sizes=((1, 32, 2),),
    tasks=(
        Task(
            "other",
            "fashion_mnist",
            epochs=2,
            shots=2,
            new_head=True,
            other_classes=True,
            eval_every=0,
            scratch_factor=2,
            batch_size=5,
        ),
    ),
    adapt_steps=1,
    seeds=(0, 1),
    methods=("scratch", "mimetic", "pretrained"),
    train=TrainConfig(batch_size=8),
    upstreams=(Upstream("A", (0, 1, 2, 3, 4), 1, 1, ablations=True), Upstream("A-long", (0, 1, 2, 3, 4), 2, 1)),
    variants=(
        Variant("+sincos", methods=("pretrained",), pos_embed="sincos"),
        Variant("head-reuse", methods=("pretrained",), head="reuse"),
        Variant("+mimetic", methods=("pretrained",), top_up="mimetic"),
        Variant("+fix", methods=("pretrained",), options=(("untrained_attention", "mimetic"),), upstreams=("A-long",)),
    ),
)


def test_transfer_tasks_train_on_the_unseen_classes_and_share_reference_cells(tmp_path, fake_fashion, monkeypatch):
    monkeypatch.setenv("LEARNGENE_DATA", str(fake_fashion))
    seen = []
    real = cell_stage.train

    def spy(model, data, cfg, **kwargs):
        seen.append((str(kwargs.get("run_dir")), data.classes, model.get_classifier().out_features))
        return real(model, data, cfg, **kwargs)

    # the ancestry's training (learngene ancestry's, train_ancestry) and the cells' fine-tunes
    monkeypatch.setattr(pipeline_training, "train_loop", spy)
    monkeypatch.setattr(cell_stage, "train", spy)
    rows = BenchRun(TRANSFER, tmp_path / "o", progress=False, plots=False).run()
    ancestries = [s for s in seen if "/ancestry/" in s[0]]
    assert [classes for _, classes, _ in ancestries] == [("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat")] * 2
    cells = [s for s in seen if "/cells/" in s[0]]
    assert all(classes == ("Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot") and out == 5 for _, classes, out in cells)
    # scratch and mimetic do not depend on the ancestry: trained once, reported under both upstreams
    assert sum("/scratch/" in run for run, _, _ in cells) == 4  # 2 seeds x (budget 1, budget 2)
    assert {r.upstream for r in rows if r.method == "scratch"} == {"A", "A-long"}
    labels = {r.label for r in rows if r.upstream == "A"}
    assert {"pretrained +sincos", "pretrained head-reuse", "scratch ×2"} <= labels
    assert not {r.label for r in rows if r.upstream == "A-long"} & {"pretrained +sincos"}  # ablations on A only
    fixed = [r for r in rows if r.label == "pretrained +fix"]  # a method option, on the upstream named only
    assert {r.upstream for r in fixed} == {"A-long"} and len(fixed) == 2
    assert all(r.ok or "untrained_attention=mimetic changes nothing" in r.note for r in fixed)
    no_op = [r for r in rows if r.label == "pretrained +mimetic"]
    assert no_op and all(not r.ok and "changes nothing" in r.note for r in no_op)
    finished = [r for r in rows if r.ok and r.budget == 1]
    assert all(r.eval_epochs == [2] for r in finished)  # evaluated once, at the end
    assert all(r.eval_epochs == [2, 4] for r in rows if r.budget == 2)  # the long run: at every multiple
    report = (tmp_path / "o" / "report.md").read_text()
    for text in (
        "## Ancestries",
        "## Upstream A",
        "### other (A-long)",
        "gain by upstream",
        "Holm over the m comparisons of each size",
        "S= ",
        "the top-up changes nothing",
    ):
        assert text in report, text
