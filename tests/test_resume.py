"""Durability: a run killed with SIGKILL mid-epoch and resumed ends bit for bit where an uninterrupted run
ends; a non-finite loss stops training and leaves the last good checkpoint, loadable, on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from learngene.cli import main
from learngene.errors import TrainingError
from learngene.host.threads import usable_cpus
from learngene.registry import get_method, list_methods
from learngene.training.checkpoint import load_checkpoint
from learngene.training.config import FINGERPRINT_KEYS
from learngene.training.loop import CHECKPOINT, LOG, TrainConfig, train
from learngene.vit.spec import ViTSpec
from tests.conftest import TINY_ARGS, FaultyData, make_images, nan_images, saved_model

ROOT = Path(__file__).resolve().parents[1]
SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
# 640 digits training images in batches of 16: 40 steps per epoch, a checkpoint every 7 steps
TRAIN = [
    *("--data", "digits", "--train-images", "640", "--batch-size", "16", "--epochs", "3", "--lr", "0.002"),
    *("--checkpoint-every", "7", "--augment", "--quiet", "--seed", "3"),
]
STEPS_PER_EPOCH, TOTAL_STEPS = 40, 120
TRAINED = [m for m in list_methods() if get_method(m).needs_data]


def _command(kind: str, ancestry: Path, run_dir: Path, out: Path) -> list[str]:
    run = [*TRAIN, "--run-dir", str(run_dir), "--out", str(out)]
    if kind == "ancestry":
        return ["ancestry", *TINY_ARGS, *run]
    return ["condense", "--method", kind, "--ancestry", str(ancestry), *run]


def _kill_mid_epoch(argv: list[str], run_dir: Path) -> dict:
    """Run ``learngene argv`` as a process; SIGKILL it in its second epoch, once a checkpoint exists there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "learngene", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    ckpt_path = run_dir / CHECKPOINT
    deadline, seen = time.monotonic() + 240, None
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            stamp = ckpt_path.stat().st_mtime_ns if ckpt_path.exists() else None
            if stamp != seen:  # a new checkpoint: read it only then, so as not to slow the run down
                seen = stamp
                ckpt = load_checkpoint(ckpt_path)
                if ckpt["epoch"] >= 1 and ckpt["step_in_epoch"] > 0:
                    proc.send_signal(signal.SIGKILL)
                    break
            time.sleep(0.005)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, (
        f"the run was to be killed mid-run but ended with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}"
    )
    return load_checkpoint(ckpt_path)


@pytest.fixture(scope="module")
def ancestry_file(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory.mktemp("anc") / "anc.safetensors", SPEC)


# One condensation in the default suite (tleg where registered), the others and a plain ViT with --runslow;
# until a method that trains is registered, the plain ViT stands in.
DEFAULT_KIND = ("tleg" if "tleg" in TRAINED else TRAINED[0]) if TRAINED else "ancestry"
KINDS = [k if k == DEFAULT_KIND else pytest.param(k, marks=pytest.mark.slow) for k in ["ancestry", *TRAINED]]


@pytest.mark.integration  # the CLI in subprocesses, killed and resumed
@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_mid_epoch_then_resume_is_bit_exact(kind, ancestry_file, tmp_path):
    reference = tmp_path / "reference.safetensors"
    assert main(_command(kind, ancestry_file, tmp_path / "reference_run", reference)) == 0
    if not (tmp_path / "reference_run" / CHECKPOINT).exists():
        pytest.skip(f"{kind} does not train through the loop")

    run_dir, out = tmp_path / "run", tmp_path / "out.safetensors"
    ckpt = _kill_mid_epoch(_command(kind, ancestry_file, run_dir, out), run_dir)
    assert not out.exists()
    assert STEPS_PER_EPOCH < ckpt["global_step"] < TOTAL_STEPS and ckpt["step_in_epoch"] > 0, "not killed mid-epoch"

    assert main(_command(kind, ancestry_file, run_dir, out) + ["--resume"]) == 0
    resumed, expected = load_file(out), load_file(reference)
    assert resumed.keys() == expected.keys()
    different = [k for k in expected if not torch.equal(resumed[k], expected[k])]
    assert not different, f"resumed run differs from the uninterrupted one in {different[:5]}"

    def history(folder: Path) -> list[dict]:
        return [
            {k: v for k, v in json.loads(line).items() if k != "seconds"}
            for line in (folder / LOG).read_text().splitlines()
        ]

    assert history(run_dir) == history(tmp_path / "reference_run")
    assert not list(run_dir.glob("*.tmp")), "a temporary file of the killed run was left behind"


def test_a_run_dir_with_a_checkpoint_needs_resume_or_another_dir(ancestry_file, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / CHECKPOINT).write_bytes(b"an earlier run")
    argv = [
        "train",
        str(ancestry_file),
        "--data",
        "digits",
        "--train-images",
        "32",
        "--epochs",
        "1",
        "--quiet",
        "--run-dir",
        str(tmp_path / "run"),
        "--out",
        str(tmp_path / "o.safetensors"),
    ]
    assert main(argv) == 2
    assert "pass resume (--resume) to continue it" in capsys.readouterr().err
    assert (tmp_path / "run" / CHECKPOINT).read_bytes() == b"an earlier run"


def test_non_finite_loss_keeps_the_last_good_checkpoint(tiny_spec, tmp_path):
    data = make_images(64)
    cfg = TrainConfig(epochs=2, batch_size=16, lr=3e-3, checkpoint_every=3, progress=False)
    torch.manual_seed(0)
    reference = tiny_spec.create_model()
    train(reference, data, cfg)

    torch.manual_seed(0)
    with pytest.raises(
        TrainingError,
        match=r"loss became nan at epoch 2, step 4; lower lr \(--lr\) or check the data; "
        r"the last good checkpoint \(sane weights and loss\) is .*checkpoint.pt",
    ):
        train(tiny_spec.create_model(), FaultyData(data, at=8, fault=nan_images), cfg, run_dir=tmp_path)
    ckpt = load_checkpoint(tmp_path / CHECKPOINT)
    assert (ckpt["epoch"], ckpt["step_in_epoch"], ckpt["global_step"]) == (1, 2, 6)  # the last one before the NaN
    model = tiny_spec.create_model()
    model.load_state_dict(ckpt["model"], strict=True)
    assert all(torch.isfinite(v).all() for v in model.state_dict().values())

    resumed = tiny_spec.create_model()
    train(resumed, data, cfg, run_dir=tmp_path, resume=True)  # the data fixed, the run goes on from there
    assert all(torch.equal(resumed.state_dict()[k], v) for k, v in reference.state_dict().items())


# ---- --resume checks the run's fingerprint (train.run_fingerprint) -------------------------------------------
QUICK = ["--train-images", "48", "--batch-size", "16", "--epochs", "1", "--eval-images", "16", "--quiet"]


def _ancestry_run(tmp_path: Path, *extra: str) -> list[str]:
    args = [
        "ancestry",
        "--data",
        "digits",
        "--depth",
        "1",
        "--embed-dim",
        "16",
        "--num-heads",
        "2",
        "--patch-size",
        "4",
        "--img-size",
        "16",
        *QUICK,
        "--run-dir",
        str(tmp_path / "run"),
        "--out",
        str(tmp_path / "a.safetensors"),
        "--overwrite",
    ]
    return _with(args, extra)


def _with(args: list[str], extra: tuple[str, ...]) -> list[str]:
    """The arguments with each of extra's flags added, or its value replaced where given already
    (the command line refuses a value flag given twice)."""
    args = list(args)
    rest = list(extra)
    while rest:
        flag = rest.pop(0)
        value = rest.pop(0) if rest and not rest[0].startswith("--") else None
        if flag in args and value is not None:
            args[args.index(flag) + 1] = value
        else:
            args += [flag] if value is None else [flag, value]
    return args


@pytest.mark.parametrize(
    "change, said",
    [
        (["--train-images", "64"], "training images was 48, now 64"),
        (["--data", "fashion_mnist"], "data was 'digits-train-48', now 'fashion_mnist-train-48'"),
        (["--augment"], "augment was False, now True"),
        (["--img-size", "12"], "image size was 16, now 12"),
        (["--lr", "0.01"], "lr was 0.001, now 0.01"),
        (["--label-smoothing", "0.1"], "label_smoothing was 0.0, now 0.1"),
        (["--embed-dim", "32"], "model was"),
    ],
)
def test_resume_refuses_a_run_with_other_data_or_settings(change, said, tmp_path, capsys, fashion_data):
    assert main(_ancestry_run(tmp_path)) == 0
    checkpoint = (tmp_path / "run" / CHECKPOINT).read_bytes()
    capsys.readouterr()
    assert main(_ancestry_run(tmp_path, "--resume", *change)) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "cannot resume" in errors[0] and said in errors[0], errors
    assert (tmp_path / "run" / CHECKPOINT).read_bytes() == checkpoint


def test_resume_accepts_the_same_run_and_speed_flags(tmp_path, capsys):
    assert main(_ancestry_run(tmp_path)) == 0
    first = load_file(tmp_path / "a.safetensors")
    assert main(_ancestry_run(tmp_path, "--resume", "--workers", "0", "--no-sdpa", "--no-fused-adamw")) == 0
    assert "cannot resume" not in capsys.readouterr().err
    again = load_file(tmp_path / "a.safetensors")
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_resume_refuses_another_method_or_options(ancestry_file, tmp_path, capsys):
    def condense(*extra: str) -> list[str]:
        return [
            "condense",
            "--ancestry",
            str(ancestry_file),
            "--data",
            "digits",
            *QUICK,
            "--max-steps",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "g.safetensors"),
            "--overwrite",
            *extra,
        ]

    assert main(condense("--method", "tleg")) == 0
    capsys.readouterr()
    assert main(condense("--method", "share_init", "--resume")) == 2
    assert "method was 'tleg', now 'share_init'" in capsys.readouterr().err
    assert main(condense("--method", "tleg", "--opt", "layers=1", "--resume")) == 2
    assert "options was {'aux_" in capsys.readouterr().err
    assert main(condense("--method", "tleg", "--resume")) == 0


def test_a_checkpoint_without_a_fingerprint_is_resumed_with_a_warning(tmp_path, capsys):
    assert main(_ancestry_run(tmp_path)) == 0
    path = tmp_path / "run" / CHECKPOINT
    ckpt = load_checkpoint(path)
    legacy = {k: v for k, v in ckpt.items() if k != "fingerprint"}
    legacy["config"] = {k: ckpt["fingerprint"][k] for k in FINGERPRINT_KEYS}
    torch.save(legacy, path)
    with pytest.warns(UserWarning, match="predates run fingerprints"):
        assert main(_ancestry_run(tmp_path, "--resume")) == 0
    torch.save(legacy, path)
    assert main(_ancestry_run(tmp_path, "--resume", "--lr", "0.01")) == 2  # its training settings are still checked
    assert "lr was 0.001, now 0.01" in capsys.readouterr().err


def _stop_signal_at(batch: int, signame: str):
    """A fault for FaultyData: at that batch the running loop is asked to stop, as the CLI's handler asks."""
    from learngene.training.loop import request_stop

    def fault(x, y, soft):
        assert request_stop(signame)
        return x, y, soft

    return fault


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_checkpoints_at_the_step_reached_and_resume_is_bit_exact(signame, tmp_path):
    from learngene.training.loop import RunInterrupted

    data = make_images(n=96, num_classes=4)
    spec = ViTSpec(depth=1, embed_dim=16, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
    cfg = TrainConfig(epochs=3, batch_size=16, lr=2e-3, augment=True, seed=5, progress=False)  # 6 steps per epoch

    def fresh():
        torch.manual_seed(0)
        return spec.create_model()

    reference = fresh()
    train(reference, data, cfg, run_dir=tmp_path / "reference")
    model = fresh()
    with pytest.raises(RunInterrupted) as stopped:  # asked during the 9th batch: epoch 2, after its 3rd step
        train(model, FaultyData(data, at=9, fault=_stop_signal_at(9, signame)), cfg, run_dir=tmp_path / "run")
    assert (stopped.value.signame, stopped.value.step, stopped.value.checkpoint) == (
        signame,
        9,
        tmp_path / "run" / CHECKPOINT,
    )
    ckpt = load_checkpoint(tmp_path / "run" / CHECKPOINT)
    assert (ckpt["epoch"], ckpt["step_in_epoch"], ckpt["global_step"]) == (
        1,
        3,
        9,
    )  # the step reached, not epoch 1's end

    resumed = fresh()
    result = train(resumed, data, cfg, run_dir=tmp_path / "run", resume=True)
    assert result.steps == 18
    expected = reference.state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in resumed.state_dict().items())
    # and the stop was for that run only: the next one trains to its end
    assert train(fresh(), data, cfg).steps == 18


@pytest.mark.integration  # the CLI in subprocesses
@pytest.mark.skipif(usable_cpus() < 2, reason="the run computes with 2 threads and its resume is handed 1")
def test_a_resumed_cpu_run_computes_with_the_thread_count_its_checkpoint_recorded(tmp_path):
    """The default thread count follows the machine's load, and a CPU run's float sums follow the count: a run
    interrupted at 2 threads and resumed by a caller at 1 computes its remaining steps at 2 again, ends bit for bit
    where the uninterrupted 2-thread run ends, and gives the caller its 1 thread back."""
    from learngene.training.loop import RunInterrupted

    data = make_images(n=96, num_classes=4)
    spec = ViTSpec(depth=2, embed_dim=64, num_heads=4, img_size=16, patch_size=4, in_chans=1, num_classes=4)
    cfg = TrainConfig(epochs=2, batch_size=16, lr=2e-3, augment=True, seed=5, progress=False)  # 6 steps per epoch
    seen: list[int] = []

    def fresh():
        torch.manual_seed(0)
        return spec.create_model()

    def note_threads(x, y, soft):
        seen.append(torch.get_num_threads())
        return x, y, soft

    caller = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        reference = fresh()
        train(reference, data, cfg, run_dir=tmp_path / "reference")
        with pytest.raises(RunInterrupted):
            train(fresh(), FaultyData(data, at=4, fault=_stop_signal_at(4, "SIGINT")), cfg, run_dir=tmp_path / "run")
        assert load_checkpoint(tmp_path / "run" / CHECKPOINT)["threads"] == 2
        torch.set_num_threads(1)
        resumed = fresh()
        train(resumed, FaultyData(data, at=1, fault=note_threads), cfg, run_dir=tmp_path / "run", resume=True)
        assert seen == [2]  # the first resumed step ran at the recorded count
        assert torch.get_num_threads() == 1  # and the caller's came back
    finally:
        torch.set_num_threads(caller)
    expected = reference.state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in resumed.state_dict().items())


@pytest.mark.integration  # the CLI in a subprocess
def test_sigterm_to_the_cli_checkpoints_and_says_how_to_continue(tmp_path):
    """A real signal to a real process: exit 143, one line naming the checkpoint and --resume."""
    run_dir, out = tmp_path / "run", tmp_path / "out.safetensors"
    data = ["--data", "digits", "--train-images", "640", "--batch-size", "16", "--epochs", "30", "--quiet"]
    argv = ["ancestry", *TINY_ARGS, *data, "--run-dir", str(run_dir), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "learngene", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while proc.poll() is None and not (run_dir / CHECKPOINT).exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # training has begun once the first epoch's checkpoint exists
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    last = err.strip().splitlines()[-1]  # (--quiet sends the run's description line to stderr too)
    assert last.startswith("learngene ancestry: stopped by SIGTERM after step") and "--resume" in last, err
    ckpt = load_checkpoint(run_dir / CHECKPOINT)
    assert f"after step {ckpt['global_step']};" in last and not out.exists()
