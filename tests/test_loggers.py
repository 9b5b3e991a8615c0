"""``--log tensorboard`` / ``--log wandb``: the one training loop writes per-step and per-epoch curves and the settings,
read back here with TensorBoard's own event reader and from W&B's offline run files; a resumed run continues the
same curves. Each logger's tests skip when its extra is not installed; W&B runs offline, nothing reaches the network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from learngene.cli import main
from learngene.data import ImageData
from learngene.errors import LearngeneError
from learngene.training.loop import TrainConfig, train
from learngene.vit.spec import ViTSpec
from tests.conftest import FaultyData, make_images
from tests.hub_fixtures import (
    offline_wandb,
    tensorboard_scalars,
    tensorboard_texts,
    wandb_config,
    wandb_history,
    wandb_run_ids,
)

SPEC = ViTSpec(depth=1, embed_dim=16, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
needs_tensorboard = pytest.mark.skipif(
    __import__("importlib").util.find_spec("tensorboard") is None,
    reason="the tensorboard extra is not installed (pip install 'learngene-vit[tensorboard]')",
)
needs_wandb = pytest.mark.skipif(
    __import__("importlib").util.find_spec("wandb") is None,
    reason="the wandb extra is not installed (pip install 'learngene-vit[wandb]')",
)


@pytest.fixture(autouse=True)
def wandb_offline(tmp_path, monkeypatch):
    offline_wandb(monkeypatch, tmp_path / "wandb-home")


def _crash(x, y, soft):
    raise RuntimeError("the machine went down")


def _runs(tmp_path: Path, log: tuple[str, ...]) -> tuple[Path, Path, list[dict], int]:
    """An uninterrupted run and one that crashes after a checkpoint and is resumed, both logging to ``log``;
    the uninterrupted run's JSONL records and the resumed run's checkpoint step."""
    data = make_images(n=64, num_classes=4)
    evaluate = make_images(n=16, num_classes=4, seed=1)
    # 8 steps per epoch, 16 in all; checkpoints at steps 3, 6, 8 (epoch end) and 9; the 11th batch crashes
    cfg = TrainConfig(epochs=2, batch_size=8, seed=3, checkpoint_every=3, progress=False, log=log, desc="toy")

    def fresh():
        torch.manual_seed(0)
        return SPEC.create_model()

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    result = train(fresh(), data, cfg, eval_data=evaluate, run_dir=whole)
    with pytest.raises(RuntimeError, match="went down"):
        train(fresh(), FaultyData(data, at=11, fault=_crash), cfg, eval_data=evaluate, run_dir=resumed)
    train(fresh(), data, cfg, eval_data=evaluate, run_dir=resumed, resume=True)
    return whole, resumed, result.history, 9


@needs_tensorboard
def test_tensorboard_curves_match_the_log_and_continue_across_a_resume(tmp_path):
    whole, resumed, history, _ = _runs(tmp_path, ("tensorboard",))
    reference = tensorboard_scalars(whole / "tensorboard")
    assert [step for step, _ in reference["train/loss"]] == list(range(1, 17))
    for key in ("train/acc", "train/lr", "train/images_per_second"):
        assert len(reference[key]) == 16
    # the epoch points are the JSONL records (TensorBoard stores float32)
    for name, key in (("epoch/train_loss", "train_loss"), ("eval/acc", "eval_acc"), ("eval/loss", "eval_loss")):
        assert reference[name] == [(r["step"], pytest.approx(r[key], rel=1e-6)) for r in history]
    assert len(reference["eval/images_per_second"]) == 2
    # resumed bit for bit: the same curve, each step once (what the crashed run logged after its checkpoint, step 10,
    # is discarded by the reader)
    got = tensorboard_scalars(resumed / "tensorboard")
    for key in ("train/loss", "train/acc", "train/lr", "epoch/train_loss", "eval/acc"):
        assert got[key] == reference[key], key
    settings = tensorboard_texts(resumed / "tensorboard")["settings/text_summary"]
    assert len(settings) == 1 and '"batch_size": 8' in settings[0]  # once, by the first run
    # the run named by its command and method (desc), data and seed, and that recorded
    assert '"run": "toy on toy, seed 3"' in settings[0] and '"data": "toy"' in settings[0], settings[0]


@needs_wandb
def test_wandb_offline_run_matches_the_log_and_resumes_the_same_run(tmp_path):
    whole, resumed, history, checkpoint_step = _runs(tmp_path, ("wandb",))
    reference = [row for row in wandb_history(whole) if "train/loss" in row]
    assert [row["_step"] for row in reference] == list(range(1, 17))
    epochs = [row for row in wandb_history(whole) if "epoch/train_loss" in row]
    assert [(row["_step"], row["eval/acc"]) for row in epochs] == [(r["step"], r["eval_acc"]) for r in history]
    assert wandb_config(whole)["batch_size"] == 8
    assert (wandb_config(whole)["run"], wandb_config(whole)["data"]) == ("toy on toy, seed 3", "toy")
    # one run id for both processes; the second continues after the checkpoint (step 9) with the same values
    assert len(wandb_run_ids(resumed)) == 1 and (resumed / "wandb-run-id").read_text().strip() in wandb_run_ids(resumed)
    rows = [row for row in wandb_history(resumed) if "train/loss" in row]
    first, second = rows[:10], rows[10:]  # the crashed run logged steps 1..10, the resumed one 10..16
    assert [r["_step"] for r in first] == list(range(1, 11)) and [r["_step"] for r in second] == list(range(10, 17))
    curve = {r["_step"]: r["train/loss"] for r in first if r["_step"] <= checkpoint_step}
    curve.update({r["_step"]: r["train/loss"] for r in second})
    assert curve == {r["_step"]: r["train/loss"] for r in reference}


@needs_tensorboard
def test_log_needs_a_place_and_the_package(tmp_path, monkeypatch):
    data = make_images(n=16, num_classes=4)
    cfg = TrainConfig(epochs=1, batch_size=8, progress=False, log=("tensorboard",))
    with pytest.raises(LearngeneError, match="needs a place for its files"):
        train(SPEC.create_model(), data, cfg)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(LearngeneError, match=r"pip install 'learngene-vit\[wandb\]'"):
        TrainConfig(log=("wandb",))
    with pytest.raises(LearngeneError, match="training setting log"):
        TrainConfig(log=("mlflow",))  # type: ignore[arg-type]


@needs_tensorboard
@needs_wandb
def test_cli_condense_and_train_log_to_both_and_resume_their_curves(tmp_path, monkeypatch, capsys):
    """condense (an aux net) and train write TensorBoard events and an offline W&B run; a run stopped by a signal and
    resumed with --resume continues them."""
    from learngene.training.loop import request_stop
    from learngene.training.stopping import STOPS

    monkeypatch.chdir(tmp_path)
    data = make_images(n=48, num_classes=4, size=16, chans=1)
    monkeypatch.setattr("learngene.data.load_splits", lambda *a, **k: (data, make_images(16, 4, 16, 1, 1)))
    tiny = ["--depth", "2", "--embed-dim", "16", "--num-heads", "2", "--img-size", "16", "--patch-size", "4"]
    common = ["--epochs", "2", "--batch-size", "8", "--log", "tensorboard", "--log", "wandb", "--quiet"]
    assert main(["ancestry", *tiny, "--out", "a.safetensors", "--epochs", "1", "--batch-size", "8", "--quiet"]) == 0

    calls = {"n": 0}
    real_gather = ImageData.gather

    def stop_at_8(self, idx, **kwargs):  # the 8th training batch: as the CLI's SIGTERM handler asks
        calls["n"] += STOPS.loops > 0
        if calls["n"] == 8 and STOPS.loops:
            assert request_stop("SIGTERM")
        return real_gather(self, idx, **kwargs)

    condense = ["condense", "--method", "tleg", "--ancestry", "a.safetensors", "--opt", "aux_depth=2", *common]
    monkeypatch.setattr(ImageData, "gather", stop_at_8)
    assert main([*condense, "--run-dir", "c", "--out", "g.safetensors"]) == 143  # stopped, checkpointed
    assert "--resume" in capsys.readouterr().err
    monkeypatch.setattr(ImageData, "gather", real_gather)
    assert main([*condense, "--run-dir", "c", "--out", "g.safetensors", "--resume"]) == 0
    steps = json.loads((tmp_path / "c" / "log.jsonl").read_text().splitlines()[-1])["step"]
    assert [s for s, _ in tensorboard_scalars(tmp_path / "c" / "tensorboard")["train/loss"]] == list(
        range(1, steps + 1)
    )
    assert len(wandb_run_ids(tmp_path / "c")) == 1
    logged = sorted(r["_step"] for r in wandb_history(tmp_path / "c") if "train/loss" in r)
    assert logged == list(range(1, steps + 1))  # stopped at a checkpoint: nothing to discard

    assert main(["expand", "g.safetensors", "--depth", "1", "--out", "d.safetensors", "--quiet"]) == 0
    assert main(["train", "d.safetensors", "--run-dir", "t", "--out", "t.safetensors", *common]) == 0
    assert tensorboard_scalars(tmp_path / "t" / "tensorboard")["eval/acc"]
    assert any("eval/acc" in r for r in wandb_history(tmp_path / "t"))
    assert main(["train", "d.safetensors", "--out", "u.safetensors", *common]) == 2
    assert "pass run_dir (--run-dir) too" in capsys.readouterr().err


def test_wandb_goes_offline_without_a_login_or_a_server(tmp_path, monkeypatch):
    """No WANDB_MODE: offline without an API key (no login prompt), and offline when the server does not answer
    (a closed port on this machine: nothing leaves it)."""
    from learngene.training.loggers import wandb_mode

    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc from `wandb login`
    assert wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "https://127.0.0.1:9")
    assert wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_MODE", "online")
    assert wandb_mode() == "online"


@needs_wandb
@pytest.mark.parametrize("server", ["silent", "no such host", "closed port"])
def test_wandb_online_with_no_server_stops_in_one_line_within_seconds(tmp_path, monkeypatch, capfd, server):
    """WANDB_MODE=online and a server that swallows requests, does not resolve or refuses: one line in seconds, before
    W&B's own start-up (which waited 100 s, then said it in 2 lines); as training is asked to log, so from the CLI.
    The bound is on WANDB_CONNECT_SECONDS (3 s), the one try learngene makes; 5 s leaves 2 s for a loaded machine."""
    import time

    from learngene.training.loggers import WANDB_CONNECT_SECONDS, open_loggers
    from tests.hub_fixtures import NO_SUCH_HOST, SilentServer

    silent = SilentServer() if server == "silent" else None
    url = silent.url if silent else NO_SUCH_HOST if server == "no such host" else "http://127.0.0.1:9"
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", url)
    import wandb  # noqa: F401  imported before the clock starts: the bound is on the one try, not on imports

    capfd.readouterr()
    start = time.monotonic()
    with pytest.raises(LearngeneError) as info:
        open_loggers(TrainConfig(log=("wandb",), progress=False), tmp_path / "run", None)
    seconds = time.monotonic() - start
    assert seconds < WANDB_CONNECT_SECONDS + 2, seconds
    message = str(info.value)
    assert "\n" not in message and url in message and "WANDB_MODE=offline" in message, message
    assert capfd.readouterr().err == ""  # nothing of W&B's own
    if silent is not None:
        silent.close()
    print(f"W&B online, {server}: {seconds:.2f} s")


@needs_wandb
def test_wandb_online_with_no_server_is_one_line_from_the_cli(tmp_path, monkeypatch, capsys):
    from tests.conftest import cli_error

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.chdir(tmp_path)
    size = ["--depth", "1", "--embed-dim", "16", "--num-heads", "2", "--img-size", "8", "--patch-size", "4"]
    data = ["--data", "digits", "--train-images", "16", "--eval-images", "16", "--epochs", "1", "--batch-size", "8"]
    err = cli_error(capsys, ["ancestry", *size, *data, "--log", "wandb", "--run-dir", "r", "--out", "a.safetensors"])
    assert "did not answer" in err and "WANDB_MODE=offline" in err
    assert not (tmp_path / "a.safetensors").exists()
