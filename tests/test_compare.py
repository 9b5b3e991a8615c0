"""`learngene compare`: a tiny run end to end, and bad input (the statistics: test_compare_stats.py; several workers
on one folder: test_compare_workers.py)."""

import re

import pytest
import torch

from learngene.bench.gene_stages import condense_work, seen_images
from learngene.cli import main
from learngene.comparison.choices import CompareChoices
from learngene.comparison.profile import compare_profile
from learngene.gene import Learngene
from learngene.vit.spec import ViTSpec
from tests.conftest import cli_error, cli_ok, saved_model


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    return saved_model(tmp_path_factory.mktemp("compare") / "anc.safetensors", spec)


def _compare(ancestry, out, *flags) -> list:
    """``learngene compare`` of the tiny ancestry on digits at size L1-D32-H2, with ``flags``, into ``out``."""
    size = ["--data", "digits", "--sizes", "L1-D32-H2"]
    return ["compare", "--ancestry", ancestry, *size, *flags, "--out", out, "--quiet"]


def test_a_tiny_compare_prints_the_table_and_a_recommendation_line(ancestry, tmp_path, capsys):
    out = tmp_path / "cmp"
    flags = ["--methods", "pretrained,weight_selection", "--seeds", "1", "--epochs", "1", "--kd"]
    cli_ok(*_compare(ancestry, out, *flags, "--train-images", "100", "--eval-images", "100"))
    text = capsys.readouterr().out
    assert "| method | top-1 (%) | vs scratch | vs scratch ×10 | vs mimetic |" in text
    # at depth 1 of this depth-2 ancestry pretrained and weight_selection make the same descendant: one start
    for label in (
        "scratch",
        "scratch ×10",
        "mimetic",
        "pretrained = weight_selection",
        "pretrained +kd = weight_selection +kd",
    ):
        assert f"\n| {label} | " in text, label
    assert "pretrained = weight_selection at this size: the same function as fine-tuning begins" in text
    assert "**Recommendation** L1-D32-H2: one seed: no recommendation" in text
    assert "| pretrained = weight_selection | " in text and " | ? | ? | ? | ? | " in text  # one seed: no interval
    report = (out / "report.md").read_text()
    assert "**Recommendation** L1-D32-H2" in report and "λ = 0.5" in report
    header, *lines = [line.split(",") for line in (out / "results.csv").read_text().splitlines()]
    assert len(lines) > 7
    starts = {(line[1], line[2], line[3]): (line[header.index("start")], line[header.index("group")]) for line in lines}
    assert starts["pretrained", "", "1"][0] == starts["weight_selection", "", "1"][0]  # the digest of one start
    assert starts["pretrained", "", "1"][1] == "pretrained = weight_selection"
    assert starts["scratch", "", "1"][0] == starts["scratch", "", "10"][0]  # the same start, fine-tuned 10× as long
    assert starts["scratch", "", "10"][1] == "scratch ×10"  # ... is another row
    assert len({start for start, _ in starts.values()}) == 4  # scratch, mimetic, structured and pretrained
    assert (out / "plots" / "by-size.png").stat().st_size > 0 and (out / "plots" / "curves.png").stat().st_size > 0


def test_bad_input_is_one_line(ancestry, tmp_path, capsys):
    base = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--out", str(tmp_path / "bad"), "--quiet"]
    assert "unknown method 'nope'" in cli_error(capsys, [*base, "--sizes", "L1-D32-H2", "--methods", "tleg,nope"])
    assert "no method can make size L2-D30-H4" in cli_error(capsys, [*base, "--sizes", "L2-D30-H4"])
    # the training flags are TrainConfig's, checked as every command's are
    assert "epochs (--epochs) must be at least 1" in cli_error(capsys, [*base, "--sizes", "L1-D32-H2", "--epochs", "0"])
    assert "max steps must be in [1," in cli_error(capsys, [*base, "--sizes", "L1-D32-H2", "--max-steps", "0"])
    assert "adapt_steps (--adapt-steps) must be in [1," in cli_error(
        capsys, [*base, "--sizes", "L1-D32-H2", "--adapt-steps", "0"]
    )
    one_class = tmp_path / "one"
    for split in ("train", "test"):
        (one_class / split / "cat").mkdir(parents=True)
        for i in range(3):
            from PIL import Image

            Image.new("L", (16, 16), color=40 * i).save(one_class / split / "cat" / f"{i}.png")
    err = cli_error(capsys, [*base[:4], f"folder:{one_class}", *base[5:], "--sizes", "L1-D32-H2"])
    assert "one class" in err


def test_condensing_on_other_classes_than_those_compared():
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=5)

    def profile(**choices):
        return compare_profile(spec, "anc.safetensors", "fashion_mnist", ["L1-D32-H2"], None, CompareChoices(**choices))

    user = profile(methods=["tleg"], classes=[5, 6, 7, 8, 9])
    assert user.tasks[0].classes == (5, 6, 7, 8, 9) and user.upstreams[0].classes == (5, 6, 7, 8, 9)
    own = profile(methods=["tleg"], classes=[5, 6, 7, 8, 9], condense_classes=[0, 1, 2, 3, 4])
    assert own.tasks[0].classes == (5, 6, 7, 8, 9) and own.upstreams[0].classes == (0, 1, 2, 3, 4)
    other = profile(methods=["tleg"], classes=[5, 6], condense_data="digits")
    assert other.upstreams == () and other.upstream_data == "digits"


def test_condense_classes_that_are_not_indices_are_one_line(ancestry, tmp_path, capsys):
    err = cli_error(capsys, _compare(ancestry, tmp_path / "bad", "--condense-classes", "0,one"))
    assert "argument --condense-classes: condense_classes takes a list separated by commas" in err, err


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--lr", "-1"], "learning rate must be positive"),
        (["--lr", "0"], "learning rate must be positive"),
        (["--batch-size", "0"], "batch size must be above 0"),
        (["--seeds", "0"], "argument --seeds: seeds (--seeds) must be in [1, 1000], got 0"),
        (["--seeds", "100000"], "argument --seeds: seeds (--seeds) must be in [1, 1000], got 100000"),
        (
            ["--kd", "2"],
            "argument --kd: kd_lambda (--kd) must be above 0 and at most 1, got 2.0; pass e.g. kd_lambda=0.5 (--kd 0.5)",
        ),
        (["--methods", ","], "methods (--methods) names no method"),
        (["--classes", "5,5,6"], "classes (--classes) names 5 twice"),
        (["--condense-classes", "0,1,1"], "condense_classes (--condense-classes) names 1 twice"),
        (["--sizes", "L1-D32-H2,L1-D32-H2"], "sizes (--sizes) names L1-D32-H2 twice"),
        (["--methods", "pretrained,mimetic", "--condense-classes", "0,1"], "none of pretrained, mimetic does"),
        (["--drop-head"], "drop_head (--drop-head) applies to model folders"),
        (["--classes", " , "], "classes (--classes) names no class; give 2 or more class indices"),
        (["--classes", "3"], "classes=(3,) (--classes 3) keeps one class"),
        (
            ["--methods", "cluster", "--condense-classes", "1"],
            "condense_classes=(1,) (--condense-classes 1) keeps one class",
        ),
    ],
)
def test_compare_flags_are_checked_before_anything_runs(ancestry, tmp_path, capsys, flags, expected):
    out = tmp_path / "bad"
    base = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--out", str(out), "--quiet"]
    sizes = [] if "--sizes" in flags else ["--sizes", "L1-D32-H2"]
    assert expected in cli_error(capsys, [*base, *sizes, *flags])
    assert not out.exists()


def test_compare_refuses_an_empty_out_a_missing_gpu_and_an_out_holding_its_ancestry(
    ancestry, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    base = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--sizes", "L1-D32-H2", "--quiet"]
    assert "--out is empty" in cli_error(capsys, [*base, "--out", ""])  # the command line's own check
    assert "--out is empty" in cli_error(capsys, [*base, "--out", " "])
    assert list(tmp_path.iterdir()) == []
    if not torch.cuda.is_available():
        assert "no GPU is visible" in cli_error(capsys, [*base, "--out", "cmp", "--device", "cuda"])
    assert "never replaces" in cli_error(capsys, [*base, "--out", str(ancestry.parent)])


def test_a_damaged_cache_cell_is_recomputed_and_said(ancestry, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = [
        "compare", "--ancestry", str(ancestry), "--data", "digits", "--sizes", "L1-D32-H2", "--methods",
        "pretrained", "--references", "scratch", "--seeds", "1", "--max-steps", "2", "--train-images", "32",
        "--eval-images", "32", "--out", str(out), "--quiet", "--no-plots",
    ]  # fmt: skip
    assert main(argv) == 0
    first = capsys.readouterr().out
    cells = sorted((out / "cells").rglob("*.json"))
    assert cells
    cells[0].write_text('{"method": "pretrained", "acc": ')  # a crash mid-write by an older version
    (out / "profile.json").write_text("[")
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err.count("is damaged") == 1 and "recomputing it" in captured.err, captured.err
    # the same rows: the cell computed again gives the same result (its measured seconds aside)
    assert _without_seconds(captured.out) == _without_seconds(first)


def _without_seconds(text: str) -> str:
    """``compare``'s printed tables with the measured columns (``condense s``, ``fine-tune s``) blanked: a cell
    computed again takes other seconds, but must give the same accuracies and verdicts."""
    out, timed = [], set()
    for line in text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| method |"):
            timed = {i for i, c in enumerate(cells) if c.endswith(" s")}
        elif line.startswith("| ") and timed:
            cells = ["?" if i in timed else c for i, c in enumerate(cells)]
        out.append(" | ".join(cells))
    return "\n".join(out)


def test_drop_head_on_a_folder_without_a_head_is_refused(tmp_path):
    from learngene.errors import LearngeneError
    from learngene.formats.hf_to_timm import without_head

    state = {"blocks.0.norm1.weight": torch.ones(2)}
    with pytest.raises(LearngeneError, match="has no classifier head to drop"):
        without_head(state, ("head.",), "folder")
    assert list(without_head({**state, "head.weight": torch.ones(1)}, ("head.",), "folder")) == list(state)


class _Built(Exception):
    """Raised instead of running a comparison: the test needs only what would run."""


def _profile_run(monkeypatch, call):
    """The profile (and the run's options) ``call`` would run, by ``learngene.compare``'s one path."""
    from learngene.comparison import comparing

    def start(profile, out, **options):
        raise _Built(profile, options)

    monkeypatch.setattr(comparing, "start_compare", start)
    with pytest.raises(_Built) as built:
        call()
    return built.value.args


def test_the_command_is_learngene_compare_with_the_flags_arguments(ancestry, tmp_path, monkeypatch):
    """The command's training flags are TrainConfig's settings and the others compare()'s choices: the same values
    from Python make the same profile (so the same cache keys) and run options, given or left at the command's
    defaults, because the command calls learngene.compare."""
    import learngene as lg
    from learngene.cli.compare import run
    from learngene.cli.parser import build_parser
    from learngene.training.config import TrainConfig

    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    sizes = ["L1-D32-H2", "L2-D32-H2"]
    out = tmp_path / "cmp"
    base = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--sizes", ",".join(sizes)]
    base += ["--out", str(out), "--device", "cpu", "--quiet"]
    flags = [
        "--methods", "pretrained,tleg", "--references", "scratch,mimetic", "--seeds", "2", "--max-steps", "7",
        "--batch-size", "16", "--lr", "0.01", "--eval-images", "40", "--few-shot", "3", "--kd", "0.3",
        "--classes", "1,2,3", "--condense-epochs", "1", "--condense-images", "50", "--adapt-steps", "3",
        "--time-limit", "2", "--no-plots",
    ]  # fmt: skip

    def command(argv):
        args = build_parser().parse_args(argv)
        args.command_line = "learngene compare ..."
        return lambda: run(args)

    from_flags, options = _profile_run(monkeypatch, command([*base, *flags]))
    train = TrainConfig(epochs=5, max_steps=7, batch_size=16, lr=0.01, eval_images=40, device="cpu", progress=False)
    choices = dict(
        methods=["pretrained", "tleg"],
        references=["scratch", "mimetic"],
        seeds=2,
        few_shot=3,
        kd_lambda=0.3,
        classes=[1, 2, 3],
        condense_epochs=1,
        condense_images=50,
        adapt_steps=3,
    )
    from_python, python_options = _profile_run(
        monkeypatch,
        lambda: lg.compare(
            str(ancestry), "digits", sizes, train_cfg=train, out=out, time_limit=2, plots=False,
            command="learngene compare ...", **choices,
        ),
    )  # fmt: skip
    assert from_python == from_flags and python_options == options
    assert options["time_limit"] == 120 and options["plots"] is False and options["device"] == "cpu"
    assert compare_profile(spec, str(ancestry), "digits", sizes, train, CompareChoices(**choices)) == from_flags
    assert from_flags.train.lr == 0.01 and from_flags.train.batch_size == 16 and from_flags.tasks[0].max_steps == 7
    # the defaults: the command's (USE_CASE_DEFAULTS["compare"]), from Python too
    defaults, _ = _profile_run(monkeypatch, command(base))
    assert compare_profile(spec, str(ancestry), "digits", sizes) == defaults
    assert (defaults.tasks[0].epochs, defaults.train.batch_size) == (5, 64)
    # settings by name go over the same defaults
    assert compare_profile(spec, str(ancestry), "digits", sizes, {"lr": 0.01}).train == defaults.train.replace(lr=0.01)


def test_compare_choices_are_checked_as_declared():
    from learngene.errors import LearngeneError

    for seeds in (0, 100_000):  # 1 to bench/stats.py's MAX_SEEDS
        with pytest.raises(
            LearngeneError, match=rf"^seeds \(--seeds\) must be in \[1, 1000\], got {seeds}; give a count in that"
        ):
            CompareChoices(seeds=seeds)
    with pytest.raises(
        LearngeneError,
        match=r"^kd_lambda \(--kd\) must be above 0 and at most 1, got 1.5; pass e.g. kd_lambda=0.5 \(--kd 0.5\)$",
    ):
        CompareChoices(kd_lambda=1.5)
    assert CompareChoices(classes=[3, 4]).classes == (3, 4)  # a list is taken as the tuple it declares


def test_a_full_disk_stops_compare_with_one_line_and_exit_2(ancestry, tmp_path, capsys, monkeypatch):
    """A nearly full disk: the report's small files still fit, a cell's checkpoint does not. Every later stage would
    fail alike, so the command stops at the first (it wrote a report of every cell refused, and exited 0)."""
    import errno
    import os
    from pathlib import Path

    write = Path.write_bytes

    def nearly_full(self, data):
        if len(data) > 16 * 1024:  # a checkpoint of the 27k-parameter descendant: ~110 KB; a report: ~3 KB
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return write(self, data)

    monkeypatch.setattr(Path, "write_bytes", nearly_full)
    base = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--sizes", "L1-D32-H2", "--quiet"]
    flags = ["--methods", "pretrained", "--seeds", "1", "--epochs", "1", "--train-images", "32", "--no-plots"]
    err = cli_error(capsys, [*base, *flags, "--eval-images", "16", "--out", str(tmp_path / "cmp")])
    assert "No space left on device; free some disk space" in err


@pytest.mark.integration  # a whole compare run, condensing two methods
def test_every_table_carries_the_condense_cost_and_the_protocol(ancestry, tmp_path, capsys):
    """A tiny run condensing on 128 images for 1 epoch (2 steps of 64): results.csv, report.md and the terminal carry
    the images the condensation saw and its GFLOP, and the report the fine-tuning's images and labels per class."""
    out = tmp_path / "cost"
    flags = ["--methods", "tleg,importance", "--references", "scratch,scratch_fix_init", "--seeds", "1"]
    flags += ["--epochs", "1"]
    flags += ["--few-shot", "5", "--condense-images", "128", "--condense-epochs", "1", "--eval-images", "50"]
    cli_ok(*_compare(ancestry, out, *flags))
    terminal = capsys.readouterr().out
    header, *lines = (line.split(",") for line in (out / "results.csv").read_text().splitlines())
    rows = {line[1]: dict(zip(header, line)) for line in lines}
    anc = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    # tleg trains its aux net (recorded in the gene) on every image once and distils the ancestry: the rule of
    # learngene.bench.gene_stages.condense_work, typed again: 3 forwards per image seen, the ancestry's once per image
    gene = Learngene.load(next((out / "genes").glob("tleg-*.safetensors")))
    depth, width, heads = (int(x) for x in re.fullmatch(r"L(\d+)-D(\d+)-H(\d+)", gene.cost["aux"]).groups())
    aux = anc.replace(depth=depth, embed_dim=width, num_heads=heads)
    assert rows["tleg"]["condense_steps"] == "2" and rows["tleg"]["condense_images"] == "128"
    assert float(rows["tleg"]["condense_gflop"]) == (3 * aux.flops * 128 + anc.flops * 128) / 1e9
    # importance measures the ancestry on the images, no gradient: one forward each
    assert rows["importance"]["condense_images"] == "128"
    assert float(rows["importance"]["condense_gflop"]) == anc.flops * 128 / 1e9
    assert rows["scratch"]["condense_images"] == "0" and float(rows["scratch"]["condense_gflop"]) == 0
    for row in rows.values():  # 5 labelled images of each of digits' 10 classes
        assert (row["train_images"], row["labels_per_class"]) == ("50", "5")
    report = (out / "report.md").read_text()
    columns = (
        "| condense steps | condense images | condense GFLOP | fine-tune epochs | fine-tune images | labels per class |"
    )
    assert columns in report
    tleg = next(line for line in report.splitlines() if line.startswith("| tleg |")).split(" | ")
    cells = dict(zip(next(line for line in report.splitlines() if line.startswith("| method |")).split(" | "), tleg))
    assert (cells["condense images"], cells["fine-tune images"], cells["labels per class"]) == ("128", "50", "5")
    assert cells["condense GFLOP"] == f"{float(rows['tleg']['condense_gflop']):.3g}"
    # the terminal's table stays narrow: the GFLOP, not the images
    assert "| condense steps | condense GFLOP | fine-tune epochs | fine-tune s |" in terminal
    # the random starts named: timm's weight_init for scratch (the installed timm's default), fix_init's rescaling
    assert (
        "| method | top-1 (%) | vs scratch | vs scratch_fix_init |" in terminal
        and "\n| scratch_fix_init | " in terminal
    )
    assert "- scratch: a timm ViT of the size as timm " in report and "(`weight_init=''`, `fix_init=False`" in report
    assert "- scratch_fix_init: scratch's draws of the same seed with timm's `fix_init=True`" in report


def test_images_seen_count_each_epochs_short_last_batch():
    """100 images in batches of 64: 2 steps an epoch, the second of 36 images (no batch is dropped)."""
    assert [seen_images(steps, 100, 64) for steps in (1, 2, 3, 4, 5)] == [64, 100, 164, 200, 264]


def test_condense_work_counts_each_aux_net_and_knows_no_other_net():
    """condense_work's rule on recorded costs: pool's two aux nets summed, each 3 forwards per image seen plus the
    ancestry's outputs once per image; a net the gene does not name (tal's hypernetwork) has images but no GFLOP."""
    anc = ViTSpec(depth=4, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    small, large = anc.replace(depth=1), anc.replace(depth=3)
    one = {"steps": 4, "aux": "L1-D32-H2", "distill_lambda": 1.0}
    pool = {"steps": 6, "instances": [one, {**one, "steps": 2, "aux": "L3-D32-H2", "distill_lambda": 0.0}]}
    work = condense_work(pool, anc, 100, 64)  # 4 steps: 2 epochs of 100 images; 2 steps: 1 epoch
    assert work["images_seen"] == 300
    assert work["gflop"] == (3 * small.flops * 200 + anc.flops * 100 + 3 * large.flops * 100) / 1e9
    assert condense_work({"steps": 4, "epochs": 2}, anc, 100, 64) == {"images_seen": 200, "gflop": None}
    assert condense_work({"images": 64}, anc, 100, 64) == {"images_seen": 64, "gflop": anc.flops * 64 / 1e9}


def _compare_parser():
    import argparse

    from learngene.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["compare"]


def test_compares_flags_are_made_from_the_declarations_of_its_choices():
    """Each setting of CompareChoices is declared once, as its field (issue 55): cli/compare.py names none of their
    flags, and the command line offers each with the field's help, default and range."""
    import ast
    import dataclasses
    from pathlib import Path

    import learngene.cli.compare as cli_compare

    flags = {f.metadata["flag"]: f for f in dataclasses.fields(CompareChoices) if f.metadata.get("flag")}
    written = {
        node.value
        for node in ast.walk(ast.parse(Path(cli_compare.__file__).read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert written.isdisjoint(flags), sorted(written & set(flags))
    actions = {a.option_strings[0]: a for a in _compare_parser()._actions if a.option_strings}
    for flag, f in flags.items():
        assert actions[flag].help.startswith(f.metadata["help"]), flag
    parsed = _compare_parser().parse_args(
        ["--ancestry", "a", "--data", "digits", "--sizes", "L1-D32-H2", "--out", "o", "--classes", "5, 6,7", "--kd"]
    )
    assert (parsed.classes, parsed.kd, parsed.methods) == ((5, 6, 7), 0.5, None)
    assert parsed.references == CompareChoices().references and parsed.seeds == CompareChoices().seeds
    assert _compare_parser().parse_args(
        ["--ancestry", "a", "--data", "d", "--sizes", "s", "--out", "o", "--methods", "a,b"]
    ).methods == ("a", "b")


def test_the_flags_give_the_choices_the_python_call_takes(ancestry, tmp_path):
    """The command line's choices are CompareChoices as a Python caller makes them: every flagged field read back."""
    from learngene.cli.compare import choices_from_args

    argv = ["--ancestry", "a", "--data", "d", "--sizes", "s", "--out", "o", "--methods", "all", "--kd", "0.3"]
    argv += ["--condense-classes", "0,1", "--condense-epochs", "1", "--adapt-steps", "3", "--references", "scratch"]
    chosen = CompareChoices(**choices_from_args(_compare_parser().parse_args(argv)))
    expected = CompareChoices(
        kd_lambda=0.3, condense_classes=(0, 1), condense_epochs=1, adapt_steps=3, references=("scratch",)
    )
    assert chosen == expected


def test_a_launchers_workers_need_out_and_name_their_inputs_absolute(ancestry, tmp_path, monkeypatch):
    """A launched worker may start in another folder than the call: refused without the folder ``out`` its workers
    share, and given the ancestry, the data's folder and ``out`` as absolute paths, with the command the report
    names."""
    import os

    import learngene as lg
    from learngene.comparison import comparing
    from learngene.errors import LearngeneError
    from learngene.pipeline.requests import DataRequest

    launched = []

    def launch(launcher, worker, profile, say, data_dir):
        launched.append(worker)
        return [], {}

    monkeypatch.setattr(comparing, "launch_compare", launch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    near = os.path.relpath(ancestry)
    with pytest.raises(LearngeneError, match=r"^launcher local runs workers that share the folder out; give out"):
        lg.compare(near, "digits", ["L1-D32-H2"], launcher="local")
    assert not launched
    data = DataRequest("digits", data_dir="data")
    lg.compare(near, data, ["L1-D32-H2"], launcher="local", out="cmp", methods=["pretrained"])
    (worker,) = launched
    assert worker.ancestry.path == str(ancestry) and worker.data.data_dir == str(tmp_path / "data")
    assert worker.out == str(tmp_path / "cmp") and worker.run.command == "learngene.compare(...)"
    assert worker.choices == {"methods": ["pretrained"]} and worker.sizes == ("L1-D32-H2",)
