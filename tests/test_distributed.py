"""Two processes under torchrun (gloo, CPU) against one process: same images, same results, files once.

One ``torchrun --standalone --nproc_per_node 2`` run does every job of ``tests/ddp_jobs.py`` (a plain ViT
trained by ``learngene ancestry``, the same streamed from an image folder by DataLoader workers, a GeneNet condensed through the loop, ``learngene condense`` for every
registered method that needs data, and a NaN that only rank 1 sees); the same jobs run in this process
with the same global batch as the reference.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from learngene.data import write_image_folder
from learngene.formats.model_file import save_model
from learngene.registry import get_method, list_methods
from learngene.vit.spec import ViTSpec
from tests import ddp_jobs
from tests.bounds import assert_same_training, order_bound

# torchrun runs; the module's runs (its first test's set-up) took 135 s on the 2-core machine at load 9
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
TRAINED = [m for m in list_methods() if get_method(m).needs_data]
JOBS = ["ancestry", "folder", "genenet", *(f"condense:{m}" for m in TRAINED)]
OUTPUTS = {
    "ancestry": "ancestry.safetensors",
    "folder": "folder.safetensors",
    "genenet": "genenet.safetensors",
    **{f"condense:{m}": f"{m}.safetensors" for m in TRAINED},
}
RUN_DIRS = {
    "ancestry": "ancestry_run",
    "folder": "folder_run",
    "genenet": "genenet_run",
    **{f"condense:{m}": f"{m}_run" for m in TRAINED},
}


def _record_renames(monkeypatch, log: Path) -> None:
    for name, put in ddp_jobs.logged_puts(log).items():
        monkeypatch.setattr(os, name, put)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Reference jobs in this process, then all of them under torchrun with 2 processes."""
    root = tmp_path_factory.mktemp("ddp")
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    torch.manual_seed(0)
    ancestry = root / "anc.safetensors"
    save_model(ancestry, spec.create_model(), spec)
    images = write_image_folder(root / "images", num_classes=3, per_class=11, size=20)  # 33, as the digits jobs
    for path in images.rglob("*.jpg"):  # grey, as the 1-channel jobs take (colour for a grey model is refused)
        Image.open(path).convert("L").save(path)
    one, two = root / "one", root / "two"
    one.mkdir()
    two.mkdir()
    failed: dict[str, str] = {}
    with pytest.MonkeyPatch.context() as mp:
        _record_renames(mp, one / "writes-rank0.txt")
        for job in JOBS:
            try:
                ddp_jobs.run(one, ancestry, [job])
            except SystemExit as exc:  # reported by the tests of that job, not hidden by a skip
                failed[job] = str(exc)
    jobs = [j for j in JOBS if j not in failed]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script finds the repository itself
    # torchrun's module, not the script on PATH: a venv's bin/ is on PATH only when the venv is activated
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc = subprocess.run(
        [*torchrun, str(ROOT / "tests" / "ddp_jobs.py"), str(two), str(ancestry), *jobs, "nan"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:  # the cause is usually far above torchrun's summary: show the lines that name it
        causes = [
            ln for ln in proc.stderr.splitlines() if any(w in ln for w in ("Error", "terminate", "what()", "abort"))
        ]
        pytest.fail("torchrun failed:\n" + "\n".join(causes[:40]) + "\n--- tail ---\n" + proc.stderr[-3000:])
    return {"one": one, "two": two, "failed": failed, "stdout": proc.stdout, "stderr": proc.stderr}


def _fail_if_failed(runs, job: str) -> None:
    if job in runs["failed"]:
        pytest.fail(f"{job} failed in one process: {runs['failed'][job]}")


def _history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("job", JOBS)
def test_two_processes_give_the_loss_curve_of_one(runs, job):
    _fail_if_failed(runs, job)
    run_one = runs["one"] / RUN_DIRS[job]
    if not (run_one / "log.jsonl").exists():
        pytest.skip(f"{job} does not train through the loop")
    one, two = _history(run_one), _history(runs["two"] / RUN_DIRS[job])
    assert [r["step"] for r in one] == [r["step"] for r in two] and len(one) == 2
    for a, b in zip(one, two):
        for key in ("train_loss", "eval_loss"):
            assert b[key] == pytest.approx(a[key], rel=LOSS_REL, abs=LOSS_ABS), (key, a, b)
        for key in ("train_acc", "eval_acc"):  # counts of argmax hits: equal unless a near tie flips one
            assert b[key] == pytest.approx(a[key], abs=1 / IMAGES), (key, a, b)
        assert b["lr"] == a["lr"]  # one formula of the step count: exact


# The two runs differ only in the order of their float32 sums (half batches per process, then an all-reduce).
# Logits: 10 reductions in a row (patch embedding, 4 per block × 2 blocks, head) of at most 128 terms (the MLP's
# hidden width), each off by up to 2·γ(128) of what it carries; a loss is relatively that far off, and one near 0
# (a distillation KL ~1e-3) absolutely: its last sum has 10 classes' terms of at most log 10 each.
LOSS_REL = order_bound(terms=128, magnitude=1.0, steps=10)  # ≈ 1.5e-4
LOSS_ABS = order_bound(terms=10, magnitude=math.log(10))  # ≈ 2.7e-6
IMAGES = 33  # the jobs' training images (ddp_jobs.TRAIN): one flipped prediction among them


@pytest.mark.parametrize("job", JOBS)
def test_two_processes_give_the_weights_of_one(runs, job):
    _fail_if_failed(runs, job)
    one, two = load_file(runs["one"] / OUTPUTS[job]), load_file(runs["two"] / OUTPUTS[job])
    assert one.keys() == two.keys() and one
    # 6 AdamW steps (33 images in batches of 16, 2 epochs) at lr 3e-3; a gradient sums 16 images x 17 tokens
    assert_same_training(two, one, lr=3e-3, steps=6, terms=16 * 17, depth=2)


def _puts_inside(folder: Path, log: Path) -> list[Path]:
    """The files an atomic write put in place under ``folder`` (a library's own cache elsewhere, e.g. a compiler's
    on a fresh machine, is not an output of the jobs)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [Path(line) for line in lines if Path(line).is_relative_to(folder)]


def test_files_are_written_once_by_rank_0(runs):
    by_rank1 = _puts_inside(runs["two"], runs["two"] / "writes-rank1.txt")
    assert not by_rank1, f"rank 1 wrote files: {by_rank1}"

    def written(folder: Path) -> Counter:
        lines = _puts_inside(folder, folder / "writes-rank0.txt")
        return Counter(str(line.relative_to(folder)) for line in lines if "nan_run" not in str(line))

    one, two = written(runs["one"]), written(runs["two"])
    assert two == one, "the 2-process run wrote other files, or as often, than the 1-process run"
    for job in JOBS:
        if job not in runs["failed"]:
            assert two[OUTPUTS[job]] == 1
    assert runs["stderr"].count("wrote ") == sum(
        j.startswith(("ancestry", "folder", "condense")) for j in JOBS if j not in runs["failed"]
    )
    leftovers = [p.name for p in runs["two"].rglob("*.tmp")]
    assert not leftovers


def test_a_nan_on_one_rank_stops_every_rank_with_the_checkpoint_kept(runs):
    rank0 = (runs["two"] / "nan-rank0.txt").read_text()
    rank1 = (runs["two"] / "nan-rank1.txt").read_text()
    assert "loss became nan at epoch 1, step 3" in rank1
    assert "loss became non-finite on another process at epoch 1, step 3" in rank0
    assert "the last good checkpoint (sane weights and loss) is" in rank0
    ckpt = torch.load(runs["two"] / "nan_run" / "checkpoint.pt", weights_only=True)
    assert ckpt["global_step"] == 2 and all(torch.isfinite(v).all() for v in ckpt["model"].values())


def test_the_cli_refuses_commands_that_write_many_files_under_torchrun(monkeypatch, capsys):
    from learngene.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["demo", "--quick"]) == 2
    assert "run it without torchrun" in capsys.readouterr().err
