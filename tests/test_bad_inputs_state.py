"""Hostile inputs, round 6 (issue 56): state read back from disk is checked against what learngene writes, result
objects check their fields, objects passed from Python get their file's checks, timm gets only architecture arguments.

Each refusal is one line (exit code 2 from the command line, a LearngeneError from Python) and leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from learngene.cli import main
from learngene.errors import LearngeneError, TrainingError
from learngene.training.checkpoint import CHECKPOINT, load_checkpoint
from tests.conftest import cli_error

RUN = [
    *("ancestry", "--data", "digits", "--depth", "1", "--embed-dim", "16", "--num-heads", "2", "--patch-size", "4"),
    *("--img-size", "16", "--train-images", "32", "--batch-size", "16", "--epochs", "1", "--eval-images", "16"),
    "--quiet",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished ancestry run's folder: its checkpoint is what each case edits (a copy of it)."""
    base = tmp_path_factory.mktemp("state")
    assert main([*RUN, "--run-dir", str(base / "run"), "--out", str(base / "a.safetensors")]) == 0
    return base / "run"


# ---- a checkpoint's fields --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key, value",
    [
        ("threads", 0),
        ("threads", -3),
        ("threads", "abc"),
        ("threads", True),
        ("epoch", -1),
        ("global_step", 2.5),
        ("seconds", float("nan")),
        ("epoch_sums", torch.zeros(2, dtype=torch.float64)),
        ("history", "none"),
        ("sane", "yes"),
        ("best_loss", "low"),
        ("rng", {"torch": torch.zeros(1)}),
        ("model", {"w": "not a tensor"}),
    ],
)
def test_a_checkpoint_field_learngene_would_not_write_is_refused_on_resume(run_dir, tmp_path, capsys, key, value):
    ckpt = load_checkpoint(run_dir / CHECKPOINT)
    ckpt[key] = value
    (tmp_path / "run").mkdir()
    torch.save(ckpt, tmp_path / "run" / CHECKPOINT)
    argv = [*RUN, "--run-dir", tmp_path / "run", "--out", tmp_path / "b.safetensors", "--resume"]
    err = cli_error(capsys, argv)
    assert f"records {key}=" in err and "delete it" in err, err
    assert not (tmp_path / "b.safetensors").exists()
    with pytest.raises(TrainingError, match=f"records {key}="):
        load_checkpoint(tmp_path / "run" / CHECKPOINT)


def test_a_checkpoint_whose_optimizer_state_does_not_fit_is_one_line(run_dir, tmp_path, capsys):
    """The fingerprint matched (the same run), but the optimizer's state was replaced: torch's several-line error is
    quoted in one line, after its colon."""
    ckpt = load_checkpoint(run_dir / CHECKPOINT)
    ckpt["optimizer"] = {"state": {}, "param_groups": []}
    (tmp_path / "run").mkdir()
    torch.save(ckpt, tmp_path / "run" / CHECKPOINT)
    err = cli_error(capsys, [*RUN, "--run-dir", tmp_path / "run", "--out", tmp_path / "b.safetensors", "--resume"])
    assert "cannot be restored" in err and "delete it" in err, err


def test_an_untouched_checkpoint_still_resumes(run_dir, tmp_path):
    """The checks refuse only what learngene would not write: the run's own checkpoint passes them."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / CHECKPOINT).write_bytes((run_dir / CHECKPOINT).read_bytes())
    assert main([*RUN, "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "b.safetensors"), "--resume"]) == 0
    assert (tmp_path / "b.safetensors").exists()


# ---- result objects check their fields when they are made ---------------------------------------------------
def test_a_comparison_without_a_profile_is_refused_before_any_folder_is_made(tmp_path):
    import learngene as lg

    with pytest.raises(LearngeneError, match="Comparison profile must be a Profile, got None"):
        lg.Comparison([], None).save(tmp_path / "report")
    assert not (tmp_path / "report").exists()
    with pytest.raises(LearngeneError, match="Comparison rows must be a Python list whose every item is a Row"):
        lg.Comparison([{"method": "pretrained"}], None)


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda lg: lg.Condensed(None), "Condensed gene must be a Learngene"),
        (lambda lg: lg.Condensed(_gene(), note=3), "Condensed note must be a string or null"),
        (lambda lg: lg.Condensed(_gene(), inputs=["a"]), "Condensed inputs must be a list"),
        (lambda lg: lg.Descendant(None, None, {}, None), "Descendant model must be a torch module"),
        (lambda lg: lg.Descendant(torch.nn.Linear(1, 1), "L2", {}, None), "Descendant spec must be a ViTSpec"),
        (lambda lg: lg.Descendant(torch.nn.Linear(1, 1), None, None, None), "Descendant origin must be"),
        (lambda lg: lg.Descendant(torch.nn.Linear(1, 1), None, {}, None, provided="x"), "Descendant provided must"),
    ],
)
def test_a_result_made_with_a_wrong_field_is_refused_by_name(make, says):
    import learngene as lg

    with pytest.raises(LearngeneError, match=says):
        make(lg)


def _gene():
    from learngene.gene import Learngene

    return Learngene("pretrained", {"w": torch.zeros(1)})


# ---- a compare cell read back from its cache ----------------------------------------------------------------
@pytest.mark.parametrize(
    "change", [{"accs": "0.5"}, {"accs": [0.5], "eval_epochs": [1, 2]}, {"seed": "0"}, {"train_seconds": None}]
)
def test_a_cached_cell_of_the_wrong_kind_is_taken_for_damaged_and_recomputed(tmp_path, capsys, change):
    """A cell's JSON that learngene would not write is refused when read (by the row's own check), and the cache
    removes it and computes the cell again instead of reporting from it."""
    import dataclasses
    import json

    from learngene.bench.rows import Row, row_from_dict
    from learngene.bench.stages import load_cached

    good = Row("pretrained", "digits", "L2-D32-H2", 2, 32, 2, 0, accs=[0.5], eval_epochs=[1])
    path = tmp_path / "cell.json"
    path.write_text(json.dumps({**dataclasses.asdict(good), **change}))
    assert load_cached(path, lambda f: row_from_dict(json.loads(f.read_text()))) is None
    assert "is damaged (a result row of 'pretrained'" in capsys.readouterr().err
    assert not path.exists()
    path.write_text(json.dumps(dataclasses.asdict(good)))
    assert load_cached(path, lambda f: row_from_dict(json.loads(f.read_text()))) == good
