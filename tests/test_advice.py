"""Advice before compute: each method's declared reach (``Method.cannot_reach``) against what its ``expand`` does."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from learngene.advice import evidence_rows
from learngene.advice import methods_for as lg_methods_for
from learngene.binding import bind_gene
from learngene.comparison.choices import CompareChoices
from learngene.comparison.profile import compare_profile
from learngene.comparison.report import left_out_note
from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.registry import get_method
from learngene.training.loop import TrainConfig
from learngene.vit.spec import ViTSpec, check_state_shapes

from .conftest import SMALL_OPTIONS, TINY, cli_error, cli_ok, make_images, own_methods, saved_model


def _tool(name: str):
    """A module of tools/, loaded from its file (tools/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


advice_table = _tool("advice_table")

# shallower, as deep and deeper than TINY (L2-D32-H2), each at narrower, the same, wider and other head counts
TARGETS = [
    TINY.replace(depth=depth, embed_dim=width, num_heads=heads)
    for depth in (1, 2, 3)
    for width, heads in ((16, 1), (32, 1), (32, 2), (32, 4), (48, 3), (64, 2), (64, 4))
]


def condensed(name: str, options: dict):
    """A gene of ``name`` from TINY with ``options``; a method that reads data sees 16 toy images for one step."""
    cls = get_method(name)
    method = cls(**options)
    inputs = None
    if cls.needs_data:
        inputs = CondenseInputs(
            train=make_images(16, num_classes=TINY.num_classes, size=TINY.img_size),
            train_cfg=TrainConfig(epochs=1, max_steps=1, batch_size=8, progress=False, distill_lambda=1.0),
        )
    torch.manual_seed(0)
    ancestry = Ancestry(TINY.create_model().eval(), TINY)
    return method, method.condense(ancestry, inputs)


def refusal(gene, spec) -> str:
    """What expanding ``gene`` to ``spec`` refuses with (on ``meta``, as compare's grid decides), "" where it makes it."""
    try:
        bound = bind_gene(gene)
        check_state_shapes(bound.expand_on_meta(spec), spec, f"the {gene.method} gene")
    except LearngeneError as exc:
        return str(exc)
    return ""


# options that change a method's reach, beyond what compare gives it
OTHER_OPTIONS = [
    ("pool", {"design": "authors"}),
    ("wave", {"template_size": 32}),
    ("grow", {"width": "net2net"}),
    ("weight_selection", {"head_aware": False}),
    ("tleg", {"aux_embed_dim": 64, "aux_num_heads": 4}),
]


@pytest.mark.parametrize(("name", "given"), [(name, {}) for name in own_methods()] + OTHER_OPTIONS)
def test_declared_reach_is_what_expand_does(name, given):
    """For every size of the grid, a method declares a size out of reach exactly where expanding a real gene of it
    (condensed with the options compare gives it for these sizes) is refused: advice and ``compare``'s skipping
    rely on the declaration instead of condensing first."""
    cls = get_method(name)
    options = {**cls.bench_options(TARGETS), **SMALL_OPTIONS.get(name, {}), **given}
    method, gene = condensed(name, options)
    for spec in TARGETS:
        declared = cls.cannot_reach(method.config, TINY, spec)
        real = refusal(gene, spec)
        assert bool(declared) == bool(real), (spec.short(), declared, real)


# ---- advice ---------------------------------------------------------------------------------------------------
ANCESTRY = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)


@pytest.fixture(scope="module")
def tleg_gene(tmp_path_factory):
    """A tleg gene of ANCESTRY (its aux net as wide as the ancestry: 32) in a file."""
    _, gene = condensed("tleg", {})
    path = tmp_path_factory.mktemp("advice") / "tleg.lg"
    gene.save(path)
    return path


def test_methods_for_a_size_the_genes_method_cannot_make_says_so_and_names_those_that_can(tleg_gene, capsys):
    """The issue's done-when: a gene whose method cannot reach the size (tleg expands in depth only, L2-D16-H1 is
    narrower) is said to, with tleg's own refusal, and the methods that can make it from the same ancestry named."""
    cli_ok("methods", "--for", "L2-D16-H1", "--gene", str(tleg_gene))
    out = capsys.readouterr().out
    assert "this gene (tleg) cannot make L2-D16-H1: tleg expands in depth only" in out
    can = next(line for line in out.splitlines() if line.startswith("can make it: "))
    for name in ("weight_selection", "importance", "mimetic", "structured"):
        assert name in can
    for name in ("tleg", "pretrained", "grow"):
        assert name not in can and f"cannot: {name}: " in out


def test_methods_for_from_python_is_what_the_command_prints(tleg_gene, capsys):
    advice = lg_methods_for("L2-D16-H1", gene=tleg_gene)
    cli_ok("methods", "--for", "L2-D16-H1", "--gene", str(tleg_gene))
    assert capsys.readouterr().out == advice.text + "\n"
    assert advice.gene is not None and advice.gene[0] == "tleg" and advice.gene[1]
    assert "tleg" in advice.cannot and "mimetic" in advice.can


def test_methods_for_an_ancestry_size_ranks_the_stored_evidence_of_its_regime():
    """At a shallower size of the ancestry's width the stored held-out runs (L2 from L4, 20 and 100 labels per
    class) are the evidence: one "try first" line each, its first start the best mean among the methods that can."""
    advice = lg_methods_for("L2-D64-H4", ancestry=ANCESTRY.replace(depth=4, embed_dim=64, num_heads=4))
    rows = [r for r in evidence_rows() if (r["depth"], r["width"]) == ("shallower", "same width")]
    assert rows and len(advice.evidence) == len(rows)
    for row, line in zip(rows, advice.evidence, strict=True):
        best = next(s for s in row["starts"] if set(s["methods"]) & set(advice.can))
        assert row["source"] in line and f"{best['top1']:.1f}" in line.split("): ", 1)[1].split(";")[0]
    assert "grow" in advice.cannot  # grow only makes larger models


def test_without_gene_or_ancestry_every_methods_reach_is_listed(capsys):
    cli_ok("methods", "--for", "L2-D32-H2")
    out = capsys.readouterr().out
    assert "tleg" in out and "any depth at the aux net's width" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["methods", "--for", "L2-32"], "not of the form L<depth>-D<width>-H<heads>"),
        (["methods", "--gene", "x.lg"], "--gene and --ancestry go with --for SIZE"),
        (["methods", "--for", "L2-D30-H4", "--ancestry", "missing.safetensors"], "missing.safetensors"),
    ],
)
def test_bad_advice_input_is_one_line(capsys, argv, expected):
    assert expected in cli_error(capsys, argv)


def test_the_shipped_evidence_is_what_the_stored_reports_give():
    """tools/advice_table.py --check recomputes every row from docs/*/results.csv: the shipped file was written by
    it, not by hand, and is current."""
    assert advice_table.main(["--check"]) == 0


def test_the_evidence_table_tool_writes_a_file_that_loads(tmp_path):
    out = tmp_path / "evidence.json"
    assert advice_table.main(["--out", str(out)]) == 0
    assert json.loads(out.read_text())["rows"] == evidence_rows()


def test_compare_leaves_out_before_condensing_a_method_that_can_make_no_size_asked():
    """The Python guide's case: tleg (depth only) asked for a narrower size is left out of the profile, so nothing
    condenses it, with why; the recommendation line names it."""
    profile = compare_profile(
        ANCESTRY,
        "anc.safetensors",
        "digits",
        ["L2-D16-H1"],
        choices=CompareChoices(methods=("tleg", "mimetic"), seeds=2),
    )
    assert "tleg" not in (profile.methods or ())
    assert [name for name, _ in profile.left_out] == ["tleg"]
    assert "expands in depth only" in dict(profile.left_out)["tleg"]
    assert "left out before condensing" in left_out_note(profile) and "tleg (" in left_out_note(profile)
    kept = compare_profile(
        ANCESTRY,
        "anc.safetensors",
        "digits",
        ["L2-D16-H1", "L3-D32-H2"],
        choices=CompareChoices(methods=("tleg", "mimetic"), seeds=2),
    )
    assert "tleg" in (kept.methods or ()) and not kept.left_out  # one size it can make: it runs, n/a at the other


def test_the_python_guides_compare_leaves_tleg_out_without_condensing_it(tmp_path):
    """The Python guide's call, `lg.compare(..., ["L2-D32-H2"], methods=["tleg", "mimetic"])`, on an ancestry wider
    than the size: its recommendation names tleg and why, and no tleg gene is made."""
    import learngene as lg

    ancestry = saved_model(tmp_path / "anc.safetensors", ANCESTRY.replace(embed_dim=64, num_heads=4))
    said: list[str] = []
    report = lg.compare(
        ancestry,
        lg.DataRequest("digits", train_images=16),
        ["L2-D32-H2"],
        methods=["tleg", "mimetic"],
        seeds=2,
        train_cfg={"max_steps": 1, "eval_images": 8, "progress": False},
        out=tmp_path / "cmp",
        say=said.append,
    )
    line = report.recommendations["L2-D32-H2"]
    assert "left out before condensing" in line and "tleg (tleg expands in depth only" in line
    assert said[0].startswith("learngene compare: tleg left out, before condensing anything: tleg expands in depth")
    assert not list((tmp_path / "cmp").rglob("*tleg*"))  # nothing of tleg was condensed or cached
    assert "## Methods left out before condensing" in report.text
