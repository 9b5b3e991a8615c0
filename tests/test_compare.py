"""`learngene compare`: the recommendation rule on constructed numbers, a tiny run end to end, and bad input."""

import pytest
import torch

from learngene.cli import main
from learngene.formats.model_file import save_model
from learngene.pipeline.compare import LONG_LABEL, compare_profile, recommend
from learngene.vit.spec import ViTSpec

REFS = ("scratch", LONG_LABEL, "mimetic")
BASE = {"scratch": [0.50, 0.52, 0.51], LONG_LABEL: [0.70, 0.71, 0.69], "mimetic": [0.60, 0.62, 0.61]}


def test_the_method_that_beats_every_reference_by_two_std_is_recommended():
    line = recommend("L4", {**BASE, "tleg": [0.80, 0.81, 0.79], "wave": [0.65, 0.66, 0.64]}, REFS)
    assert line.startswith("L4: use tleg (80.0 ± 1.0): it beats scratch, scratch ×10, mimetic by more than 2 std")


def test_nothing_wins_names_the_reference_no_method_beats():
    line = recommend("L4", {**BASE, "tleg": [0.72, 0.60, 0.80], "wave": [0.55, 0.56, 0.57]}, REFS)
    assert (
        line
        == "L4: no method beats scratch ×10 here (70.0 ± 1.0): training from scratch 10× longer is the better start"
    )
    mimetic_best = {**BASE, "mimetic": [0.75, 0.76, 0.74], "tleg": [0.73, 0.74, 0.72]}
    assert recommend("L2", mimetic_best, REFS).startswith("L2: no method beats mimetic here (75.0 ± 1.0): use mimetic")


def test_a_method_that_beats_only_some_references_is_not_recommended():
    # tleg beats scratch and mimetic by 2 std but not scratch ×10; wave's mean is above scratch ×10's, within the noise
    accs = {**BASE, "tleg": [0.66, 0.67, 0.65], "wave": [0.60, 0.90, 0.75]}
    assert recommend("L4", accs, REFS).startswith("L4: no method beats scratch ×10 here (70.0 ± 1.0)")


def test_two_winners_within_two_std_are_a_tie():
    line = recommend("L4", {**BASE, "tleg": [0.80, 0.82, 0.81], "wave": [0.81, 0.80, 0.79]}, REFS)
    assert line.startswith("L4: use tleg or wave (a tie: each beats")
    apart = recommend("L4", {**BASE, "tleg": [0.90, 0.91, 0.89], "wave": [0.80, 0.81, 0.79]}, REFS)
    assert apart.startswith("L4: use tleg (90.0 ± 1.0)")


def test_one_seed_gives_no_recommendation():
    one = {label: accs[:1] for label, accs in {**BASE, "tleg": [0.9]}.items()}
    assert "one seed: no recommendation" in recommend("L4", one, REFS)


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("compare") / "anc.safetensors"
    save_model(path, spec.create_model(), spec)
    return path


def test_a_tiny_compare_prints_the_table_and_a_recommendation_line(ancestry, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--ancestry",
                str(ancestry),
                "--data",
                "digits",
                "--sizes",
                "L1-D32-H2",
                "--methods",
                "pretrained,weight_selection",
                "--seeds",
                "1",
                "--epochs",
                "1",
                "--train-images",
                "100",
                "--eval-images",
                "100",
                "--kd",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "| method | top-1 (%) | vs scratch | vs scratch ×10 | vs mimetic |" in text
    for label in ("scratch", "scratch ×10", "mimetic", "pretrained", "weight_selection", "pretrained +kd"):
        assert f"\n| {label} | " in text, label
    assert "**Recommendation** L1-D32-H2: one seed: no recommendation" in text
    report = (out / "report.md").read_text()
    assert "**Recommendation** L1-D32-H2" in report and "λ = 0.5" in report
    assert (out / "results.csv").read_text().count("\n") > 7
    assert (out / "plots" / "by-size.png").stat().st_size > 0 and (out / "plots" / "curves.png").stat().st_size > 0


def _error_line(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_bad_input_is_one_line(ancestry, tmp_path, capsys):
    base = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--out", str(tmp_path / "bad"), "--quiet"]
    assert "unknown method 'nope'" in _error_line(capsys, [*base, "--sizes", "L1-D32-H2", "--methods", "tleg,nope"])
    assert "no method can make size L2-D30-H4" in _error_line(capsys, [*base, "--sizes", "L2-D30-H4"])
    assert "a budget of 0" in _error_line(capsys, [*base, "--sizes", "L1-D32-H2", "--epochs", "0"])
    assert "a budget of 0" in _error_line(capsys, [*base, "--sizes", "L1-D32-H2", "--max-steps", "0"])
    one_class = tmp_path / "one"
    for split in ("train", "test"):
        (one_class / split / "cat").mkdir(parents=True)
        for i in range(3):
            from PIL import Image

            Image.new("L", (16, 16), color=40 * i).save(one_class / split / "cat" / f"{i}.png")
    err = _error_line(capsys, [*base[:4], f"folder:{one_class}", *base[5:], "--sizes", "L1-D32-H2"])
    assert "one class" in err


def test_condensing_on_other_classes_than_those_compared():
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=5)
    user = compare_profile(spec, "anc.safetensors", "fashion_mnist", ["L1-D32-H2"], ["tleg"], classes=[5, 6, 7, 8, 9])
    assert user.tasks[0].classes == (5, 6, 7, 8, 9) and user.upstreams[0].classes == (5, 6, 7, 8, 9)
    own = compare_profile(
        spec,
        "anc.safetensors",
        "fashion_mnist",
        ["L1-D32-H2"],
        ["tleg"],
        classes=[5, 6, 7, 8, 9],
        condense_classes=[0, 1, 2, 3, 4],
    )
    assert own.tasks[0].classes == (5, 6, 7, 8, 9) and own.upstreams[0].classes == (0, 1, 2, 3, 4)
    other = compare_profile(
        spec, "anc.safetensors", "fashion_mnist", ["L1-D32-H2"], ["tleg"], classes=[5, 6], condense_data="digits"
    )
    assert other.upstreams == () and other.upstream_data == "digits"


def test_condense_classes_that_are_not_indices_are_one_line(ancestry, tmp_path, capsys):
    err = _error_line(
        capsys,
        [
            "compare",
            "--ancestry",
            str(ancestry),
            "--data",
            "digits",
            "--sizes",
            "L1-D32-H2",
            "--condense-classes",
            "0,one",
            "--out",
            str(tmp_path / "bad"),
            "--quiet",
        ],
    )
    assert "--condense-classes takes class indices" in err, err


def test_one_seed_with_repeated_results_still_gives_no_recommendation():
    # two results per label from one seed (e.g. a size counted twice) have a spread of 0: never a recommendation
    twice = {label: [accs[0], accs[0]] for label, accs in {**BASE, "tleg": [0.9]}.items()}
    assert recommend("L4", twice, REFS, seeds=1) == (
        "L4: one seed: no recommendation (the 2-std rule needs --seeds 2 or more)"
    )


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--lr", "-1"], "learning rate must be positive"),
        (["--lr", "0"], "learning rate must be positive"),
        (["--batch-size", "0"], "a budget of 0"),
        (["--methods", ","], "--methods names no method"),
        (["--classes", "5,5,6"], "--classes names 5 twice"),
        (["--condense-classes", "0,1,1"], "--condense-classes names 1 twice"),
        (["--sizes", "L1-D32-H2,L1-D32-H2"], "--sizes names L1-D32-H2 twice"),
        (["--methods", "pretrained,mimetic", "--condense-classes", "0,1"], "none of pretrained, mimetic does"),
        (["--drop-head"], "--drop-head applies to model folders"),
        (["--classes", " , "], "--classes names no class; give 2 or more class indices"),
        (["--classes", "3"], "--classes 3 keeps one class"),
        (["--methods", "cluster", "--condense-classes", "1"], "--condense-classes 1 keeps one class"),
    ],
)
def test_compare_flags_are_checked_before_anything_runs(ancestry, tmp_path, capsys, flags, expected):
    out = tmp_path / "bad"
    base = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--out", str(out), "--quiet"]
    sizes = [] if "--sizes" in flags else ["--sizes", "L1-D32-H2"]
    assert expected in _error_line(capsys, [*base, *sizes, *flags])
    assert not out.exists()


def test_compare_refuses_an_empty_out_a_missing_gpu_and_an_out_holding_its_ancestry(
    ancestry, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    base = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--sizes", "L1-D32-H2", "--quiet"]
    assert "--out is empty" in _error_line(capsys, [*base, "--out", ""])
    assert "--out is empty" in _error_line(capsys, [*base, "--out", " "])
    assert list(tmp_path.iterdir()) == []
    if not torch.cuda.is_available():
        assert "no GPU is visible" in _error_line(capsys, [*base, "--out", "cmp", "--device", "cuda"])
    assert "never replaces" in _error_line(capsys, [*base, "--out", str(ancestry.parent)])


def test_a_second_compare_on_one_out_is_refused_while_the_first_runs(ancestry, tmp_path, capsys):
    from learngene.run_dirs import lock_run_dir, unlock_run_dir

    out = tmp_path / "cmp"
    held = lock_run_dir(out)  # stands for a first compare writing there (another process)
    import subprocess
    import sys

    try:
        argv = ["compare", "--ancestry", str(ancestry), "--data", "digits", "--sizes", "L1-D32-H2", "--out", str(out)]
        done = subprocess.run(
            [sys.executable, "-m", "learngene", *argv, "--quiet"], capture_output=True, text=True, timeout=300
        )
    finally:
        unlock_run_dir(held)
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.strip().splitlines()
        == [
            f"learngene: error: another learngene run is using the report folder {str(out)!r}; wait for it to "
            "finish, or give another --out"
        ]
        or "another learngene run is using the report folder" in done.stderr
    ), done.stderr


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
    assert captured.out == first  # the same rows: the cell computed again gives the same result


def test_drop_head_on_a_folder_without_a_head_is_refused(tmp_path):
    from learngene.errors import LearngeneError
    from learngene.formats.convert import without_head

    state = {"blocks.0.norm1.weight": torch.ones(2)}
    with pytest.raises(LearngeneError, match="has no classifier head to drop"):
        without_head(state, ("head.",), "folder")
    assert list(without_head({**state, "head.weight": torch.ones(1)}, ("head.",), "folder")) == list(state)


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
    err = _error_line(capsys, [*base, *flags, "--eval-images", "16", "--out", str(tmp_path / "cmp")])
    assert "No space left on device; free some disk space" in err
