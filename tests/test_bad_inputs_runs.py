"""Hostile inputs, round 2: data that is not what it claims, sizes that cannot fit, runs that fail half-way.

Each refusal is one line on stderr with exit code 2 and leaves nothing behind; ``--overwrite`` of a hub
folder replaces only learngene's own files; a run stopped by a NaN resumes with a lower lr or clipping.
The first round of cases is in ``tests/test_bad_inputs.py``.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
from pathlib import Path

import pytest
import torch

from learngene.cli import main
from learngene.data import load_dataset, write_image_folder
from learngene.errors import LearngeneError, TrainingError
from learngene.training.loop import LOG, TrainConfig, train
from learngene.vit.spec import ViTSpec
from tests.conftest import FaultyData, cli_error, cli_ok, make_images, nan_images, saved_model, tiny_args
from tests.test_bad_inputs import ACTIONS

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
DATA = ["--data", "digits", "--train-images", "32", "--epochs", "1", "--batch-size", "16"]
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


@pytest.fixture(scope="module")
def anc(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory.mktemp("runs") / "anc.safetensors", SPEC)


def one_line_error(capsys, argv: list) -> str:
    err = cli_error(capsys, argv)
    assert any(a in err.lower() for a in ACTIONS), f"the message does not say what to do: {err}"
    return err


# ---- a torchvision root holding something else than the dataset ---------------------------------------
@pytest.mark.parametrize("content", ["pickle", "garbage"])
@pytest.mark.parametrize("name", ["MNIST", "FashionMNIST"])
def test_a_torchvision_root_of_other_files_is_refused(anc, capsys, tmp_path, name, content):
    raw = tmp_path / name / "raw"
    raw.mkdir(parents=True)
    for file in MNIST_FILES:
        (raw / file).write_bytes(pickle.dumps({"data": [1, 2, 3]}) if content == "pickle" else b"\x00garbage" * 20)
    out = tmp_path / "o.safetensors"
    err = one_line_error(capsys, ["train", anc, "--data", f"torchvision:{name}", "--data-dir", tmp_path, "-o", out])
    assert f"torchvision {name} under" in err and "is unreadable" in err, err
    assert not out.exists()


# ---- a library's warning never comes before or beside the one-line error (issue 47) ------------------------------
def _learngene(*argv):
    """The command in its own process: what a user's terminal shows (pytest catches warnings raised in-process)."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "PYTHONWARNINGS": "default"}
    return subprocess.run(
        [sys.executable, "-m", "learngene", *map(str, argv)], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.parametrize(
    "case",
    ["torchvision legacy pickle", "checkpoint of an old pickle protocol"],
)
@pytest.mark.integration  # the CLI in subprocesses
def test_a_librarys_warning_never_comes_with_a_one_line_error(anc, tmp_path, case):
    """torch warns of a pickle's protocol before refusing it (two lines), here on MNIST's legacy processed files and
    on a .pth checkpoint that holds a pickled object: only the one line is shown."""
    out = tmp_path / "o.safetensors"
    if case == "torchvision legacy pickle":
        processed = tmp_path / "MNIST" / "processed"
        processed.mkdir(parents=True)
        for file in ("training.pt", "test.pt"):
            (processed / file).write_bytes(pickle.dumps({"data": [1, 2, 3]}, protocol=4))
        done = _learngene("train", anc, "--data", "torchvision:MNIST", "--data-dir", tmp_path, "-o", out)
        says = "torchvision MNIST under"
    else:
        checkpoint = tmp_path / "model.pth"
        checkpoint.write_bytes(pickle.dumps({"state_dict": object()}, protocol=4))
        done = _learngene("condense", "--method", "pretrained", "--ancestry", checkpoint, "--timm-model",
                          "vit_tiny_patch16_224", "-o", out)  # fmt: skip
        says = "model.pth"
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert says in done.stderr and "Warning" not in done.stderr and not out.exists()


# ---- colour images for a grey model: refused, not silently read as grey ----------------------------------------
@pytest.mark.parametrize("command", ["condense", "train"])
def test_a_grey_ancestry_on_a_colour_folder_is_refused(anc, capsys, tmp_path, command):
    root = write_image_folder(tmp_path / "rgb", num_classes=2, per_class=2, size=20)
    out = tmp_path / "o.safetensors"
    argv = ["condense", "--method", "wave", "--ancestry", anc] if command == "condense" else ["train", anc]
    err = one_line_error(capsys, [*argv, "--data", f"folder:{root}", "--epochs", "1", "-o", out])
    assert "holds colour images but the model takes 1-channel (grey) input" in err, err
    assert not out.exists() and not list(tmp_path.glob("o.*"))


def test_grey_images_saved_as_rgb_are_read_by_a_grey_ancestry(tmp_path):
    from PIL import Image

    root = write_image_folder(tmp_path / "rgb", num_classes=2, per_class=2, size=20, splits=("train",))
    for path in root.rglob("*.jpg"):
        Image.open(path).convert("L").convert("RGB").save(path)
    data = load_dataset(f"folder:{root}", img_size=16, in_chans=1)
    assert data.in_chans == 1 and len(data) == 4


# ---- sizes whose activations cannot fit: refused before allocating -----------------------------------------
def test_an_image_size_whose_data_cannot_fit_is_refused_before_resizing(capsys, tmp_path, monkeypatch):
    # 32 grey images at the largest size a spec allows (16,384 px) need 32 * 16384**2 * 5 bytes = 40 GiB resized;
    # the free memory is set to 1 GiB so that the refusal holds on a machine with more memory than that too
    monkeypatch.setattr("learngene.host.memory.available_memory", lambda: 2**30)
    out = tmp_path / "o.safetensors"
    err = one_line_error(
        capsys,
        [
            "ancestry",
            "--depth",
            "1",
            "--embed-dim",
            "32",
            "--num-heads",
            "2",
            "--img-size",
            "16384",
            "--patch-size",
            "1024",
            *DATA,
            "-o",
            out,
        ],
    )
    assert (
        "resized to 16384x16384 px needs" in err and "choose a smaller img_size (--img-size), or fewer images" in err
    ), err
    assert list(tmp_path.iterdir()) == []


def test_a_batch_whose_activations_cannot_fit_is_refused_before_the_first_step(monkeypatch):
    """The estimate (a lower bound) against the free memory, here made small: no step runs."""
    model, data = SPEC.create_model(), make_images(32, 10, 16)
    # 64 KiB free once the model and data are made (a step here needs at least 0.6 MB)
    monkeypatch.setattr("learngene.host.memory.available_memory", lambda: 2**16)
    with pytest.raises(
        LearngeneError,
        match=r"a training step of 16 images of 17 tokens through 2 blocks of width 32 "
        r"\(its activations\) needs at least .* GiB, but this machine has 0.0 GiB free; "
        r"choose a smaller batch_size \(--batch-size\) or img_size \(--img-size\)",
    ):
        train(model, data, TrainConfig(epochs=1, batch_size=16, progress=False))


def test_the_activation_estimate_is_a_lower_bound_of_a_real_step():
    """What a step of a tiny ViT keeps for backward (measured by the autograd's saved tensors) exceeds the estimate."""
    spec = SPEC.replace(depth=2, embed_dim=64, num_heads=4)
    model, x = spec.create_model(), torch.randn(8, 1, 16, 16)
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum()
    assert sum(saved) >= spec.activation_bytes(8) > 0


def test_the_quiet_banner_is_gone_so_an_error_is_one_line(anc, capsys, tmp_path):
    """The error comes after the banner would have been printed (the device is checked by the loop)."""
    out = tmp_path / "o.safetensors"
    err = one_line_error(capsys, ["ancestry", *tiny_args(1), *DATA, "--quiet", "--device", "cuda:7", "-o", out])
    assert err.startswith("learngene ancestry: error:"), err
    cli_ok("ancestry", *tiny_args(1), *DATA, "--quiet", "-o", out)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("wrote ") and len(captured.err.splitlines()) == 1, captured


# ---- a full disk under the run directory: nothing left behind -----------------------------------------------
def _full_disk(monkeypatch):
    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_bytes", full)


def test_a_full_disk_leaves_no_run_dir_behind(anc, capsys, monkeypatch, tmp_path):
    _full_disk(monkeypatch)
    run = tmp_path / "run"
    err = one_line_error(capsys, ["train", anc, *DATA, "--quiet", "--run-dir", run, "-o", tmp_path / "o.safetensors"])
    assert "No space left on device" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "the run dir, its .lock or log.jsonl was left"


def test_a_full_disk_keeps_the_users_files_in_an_existing_run_dir(anc, capsys, monkeypatch, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    _full_disk(monkeypatch)
    one_line_error(capsys, ["train", anc, *DATA, "--quiet", "--run-dir", run, "-o", tmp_path / "o.safetensors"])
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"] and (run / "notes.txt").read_text() == "mine"


# ---- a NaN stop: resume with a lower lr or clipping, nothing else ------------------------------------------
def test_a_run_stopped_by_nan_resumes_with_a_lower_lr_and_clipping(tiny_spec, tmp_path):
    data = make_images(64)
    cfg = TrainConfig(epochs=2, batch_size=16, lr=3e-3, checkpoint_every=3, progress=False)
    torch.manual_seed(0)
    with pytest.raises(
        TrainingError,
        match=r"rerun with resume=True \(--resume\) and a lower lr \(--lr\) and/or a grad_clip \(--grad-clip\) \(only those "
        r"two may change\)",
    ):
        train(tiny_spec.create_model(), FaultyData(data, at=8, fault=nan_images), cfg, run_dir=tmp_path)
    assert json.loads((tmp_path / LOG).read_text().splitlines()[-1])["stopped"] == "non-finite"

    other = cfg.replace(weight_decay=0.1, lr=1e-3)
    with pytest.raises(
        LearngeneError,
        match=r"weight_decay was 0.05, now 0.1; after its stop on a non-finite loss only "
        r"lr \(--lr\) and grad_clip \(--grad-clip\) may change",
    ):
        train(tiny_spec.create_model(), data, other, run_dir=tmp_path, resume=True)

    model = tiny_spec.create_model()
    result = train(model, data, cfg.replace(lr=1e-3, grad_clip=0.5), run_dir=tmp_path, resume=True)
    assert result.steps == 8 and all(torch.isfinite(v).all() for v in model.state_dict().values())
    assert result.history[-1]["lr"] < 1e-3  # the new peak, decayed along the saved schedule
    assert "stopped" not in (tmp_path / LOG).read_text()  # the finished epoch's log replaces the stop record


class Fragile(torch.nn.Module):
    """A tiny ViT whose output turns NaN once its largest weight passes 22 (exp's float32 range / 4), as a real model overflows once a
    divergence has grown its weights and activations far enough."""

    def __init__(self, spec: ViTSpec):
        super().__init__()
        self.vit = spec.create_model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        largest = torch.stack([p.abs().max() for p in self.vit.parameters()]).max()
        return self.vit(x) + 0.0 * torch.exp(4.0 * largest)  # 0 × inf = NaN past exp's float32 range


def test_the_nan_advice_resumes_from_a_checkpoint_before_the_divergence(tiny_spec, tmp_path):
    from learngene.training.checkpoint import CHECKPOINT, load_checkpoint

    data = make_images(64)
    # lr 30 warms up over 8 steps: every step grows each weight by up to the lr, until the output overflows
    cfg = TrainConfig(epochs=10, batch_size=16, lr=8.0, checkpoint_every=1, grad_clip=None, progress=False)
    torch.manual_seed(0)
    with pytest.raises(
        TrainingError, match=r"loss became nan at epoch \d+, step \d; .*the last good checkpoint"
    ) as err:
        train(Fragile(tiny_spec), data, cfg, run_dir=tmp_path)
    epoch, step = map(int, re.search(r"at epoch (\d+), step (\d+)", str(err.value)).groups())
    kept = load_checkpoint(tmp_path / CHECKPOINT)
    largest = max(v.abs().max().item() for v in kept["model"].values())
    # not the last finite checkpoint (the step before the NaN), which had already diverged
    assert kept["sane"] and kept["global_step"] < 4 * (epoch - 1) + step - 2 and largest < 22 / 2, largest

    model = Fragile(tiny_spec)
    result = train(model, data, cfg.replace(lr=1e-3), run_dir=tmp_path, resume=True)  # what the advice says
    assert result.steps == 40 and all(torch.isfinite(v).all() for v in model.state_dict().values())


def test_a_run_diverged_at_its_first_checkpoint_is_told_to_start_over(tiny_spec, tmp_path):
    cfg = TrainConfig(epochs=4, batch_size=16, lr=1e4, checkpoint_every=1, grad_clip=None, progress=False)
    torch.manual_seed(0)
    with pytest.raises(
        TrainingError, match=r"no checkpoint of this run has sane weights and loss .* start the run over"
    ):
        train(Fragile(tiny_spec), make_images(64), cfg, run_dir=tmp_path)
    assert not (tmp_path / "checkpoint.pt").exists()


def test_a_run_not_stopped_by_nan_keeps_its_lr(tiny_spec, tmp_path):
    data = make_images(32)
    cfg = TrainConfig(epochs=2, batch_size=16, max_steps=1, progress=False)
    train(tiny_spec.create_model(), data, cfg, run_dir=tmp_path)
    with pytest.raises(
        LearngeneError,
        match=r"lr was 0.001, now 0.0001; only a run stopped by a non-finite loss may change lr \(--lr\) and "
        r"grad_clip \(--grad-clip\)",
    ):
        train(tiny_spec.create_model(), data, cfg.replace(lr=1e-4), run_dir=tmp_path, resume=True)


# ---- --overwrite of a hub folder: only learngene's files -------------------------------------------------------
def test_overwriting_a_hub_folder_keeps_the_users_files(anc, capsys, tmp_path):
    gene = tmp_path / "gene.safetensors"
    assert main(["condense", "--method", "pretrained", "--ancestry", str(anc), "--quiet", "-o", str(gene)]) == 0
    hub = tmp_path / "hub"
    assert main(["expand", str(gene), "--quiet", "-o", f"{hub}/"]) == 0
    (hub / "notes.txt").write_text("the user's own notes")
    (hub / "eval").mkdir()
    (hub / "eval" / "scores.csv").write_text("a,b\n")
    assert main(["expand", str(gene), "--depth", "1", "--quiet", "--overwrite", "-o", f"{hub}/"]) == 0
    capsys.readouterr()
    assert (hub / "notes.txt").read_text() == "the user's own notes"
    assert (hub / "eval" / "scores.csv").read_text() == "a,b\n"
    assert json.loads((hub / "config.json").read_text())["model_args"]["depth"] == 1  # learngene's files replaced
    assert sorted(p.name for p in hub.iterdir()) == [
        "README.md",
        "config.json",
        "eval",
        "model.safetensors",
        "notes.txt",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gene.safetensors", "hub"], "a temporary folder was left"


def test_a_folder_where_learngene_writes_a_file_is_not_replaced(anc, capsys, tmp_path):
    gene = tmp_path / "gene.safetensors"
    assert main(["condense", "--method", "pretrained", "--ancestry", str(anc), "--quiet", "-o", str(gene)]) == 0
    hub = tmp_path / "hub"
    (hub / "README.md").mkdir(parents=True)
    (hub / "README.md" / "keep.txt").write_text("x")
    capsys.readouterr()
    err = one_line_error(capsys, ["expand", gene, "--overwrite", "-o", f"{hub}/"])
    assert "is a folder, where learngene writes its README.md" in err, err
    assert sorted(p.name for p in hub.iterdir()) == ["README.md"] and (hub / "README.md" / "keep.txt").exists()


@pytest.mark.integration  # the CLI in a subprocess
def test_a_second_ctrl_c_while_stopping_prints_no_traceback(tmp_path):
    """The first Ctrl-C stops the command (one line, exit 130); a second one, at the interpreter's exit, is ignored
    (it used to print an atexit KeyboardInterrupt traceback)."""
    import subprocess
    import sys

    script = tmp_path / "twice.py"
    script.write_text(
        "import atexit, os, signal, sys, time\n"
        "from learngene.cli import dispatch\n"
        "def command(args):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"
        "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.05)))\n"
        "dispatch.handler = lambda args: command\n"
        "sys.argv = ['learngene', 'methods']\n"
        "sys.exit(dispatch.main())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "learngene methods: stopped by SIGINT; nothing was saved", done.stderr


@pytest.mark.parametrize("method", ["cluster", "importance"])
def test_a_data_driven_method_refuses_what_cannot_fit_before_allocating(method, monkeypatch):
    """As the aux-net methods do: the estimate of a forward pass (tokens, attention maps) against the free memory,
    refused in one line with the estimate, before a batch is read (a 34 GB allocation killed a RADIO run)."""
    from learngene.method import Ancestry, CondenseInputs
    from learngene.registry import get_method

    spec = ViTSpec(depth=1, embed_dim=32, num_heads=2, img_size=64, patch_size=4, in_chans=1, num_classes=4)
    monkeypatch.setattr("learngene.host.memory.available_memory", lambda: 2**20)  # 1 MiB free
    data = make_images(8, 4, 64)
    monkeypatch.setattr(type(data), "get_batch", lambda *a, **k: pytest.fail("a batch was read before refusing"))
    with pytest.raises(LearngeneError, match=rf"{method} runs 8 images of 257 tokens .* needs at least .* GiB"):
        get_method(method)().condense(Ancestry(spec.create_model(), spec), CondenseInputs(train=data))


# ---- count flags in their declared ranges, single-value flags given once (issue 47) ------------------------------
def _subparsers():
    import argparse

    from learngene.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


# a seed is any number 0 or more, not how many of something; --max-params and --max-flops are caps (a large one
# limits nothing, and costs nothing)
NOT_COUNTS = {"--seed", "--max-params", "--max-flops"}


def test_every_count_flag_of_every_command_has_an_upper_bound():
    """A count past any run (10^15 seeds, epochs, workers, images...) is refused while parsing, before anything
    starts (compare --seeds 100000 started a 200,000-cell grid): every integer flag, found in the parser, so that a
    flag added later is held to it too."""
    import argparse

    unbounded = []
    for command, parser in _subparsers().items():
        for action in parser._actions:
            if not action.option_strings or action.option_strings[0] in NOT_COUNTS:
                continue
            if getattr(action.type, "__name__", "") not in ("integer", "count", "_threads"):
                continue
            try:
                action.type(str(10**15))
            except argparse.ArgumentTypeError:
                continue
            unbounded.append(f"{command} {action.option_strings[0]}")
    assert not unbounded, unbounded


# DataRequest's counts (--workers, --train-images, --few-shot) are tried one step past each declared bound by
# tests/test_contract_flags.py; these flags' owners (CompareChoices, bench, TrainConfig) are not among its requests
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["compare", "--seeds", "100000"], "seeds (--seeds) must be in [1, 1000], got 100000"),
        (["bench", "--seeds", "0"], "seeds must be in [1, 1000], got 0"),
        (["train", "m", "--epochs", "10000000"], "epochs must be at most 1000000"),
        (["compare", "--adapt-steps", str(10**11)], "adapt_steps (--adapt-steps) must be in [1, 10000000000]"),
    ],
)
def test_a_count_past_its_range_is_one_line(capsys, argv, says):
    err = cli_error(capsys, argv)
    assert says in err, err


def test_python_callers_meet_the_same_bounds():
    from learngene.comparison.choices import CompareChoices
    from learngene.pipeline.requests import DataRequest

    for make, says in (
        (lambda: CompareChoices(seeds=100_000), "seeds"),
        (lambda: DataRequest(workers=10**6), "workers"),
        (lambda: DataRequest(few_shot=10**11), "few_shot"),
        (lambda: TrainConfig(epochs=10**7), "epochs"),
        (lambda: TrainConfig(max_steps=10**11), "max"),
    ):
        with pytest.raises(LearngeneError) as info:
            make()
        assert says in str(info.value) and "\n" not in str(info.value), str(info.value)


def _a_value(action) -> str:
    """A value the flag's parser takes (its first choice, else the first of a few that parse)."""
    import argparse

    if action.choices:
        return str(next(iter(action.choices)))
    for text in ("1", "0.5", "cpu", "L1-D32-H2", "0:1-2:0", "0,1", "x"):  # 0,1: a list of two classes
        try:
            (action.type or str)(text)
            return text
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
    raise AssertionError(f"no value for {action.option_strings}")


@pytest.mark.integration  # the CLI in subprocesses
def test_every_single_value_flag_given_twice_is_one_line(capsys):
    """Every flag that takes one value, of every command: given twice, refused in one line (argparse kept the last
    one without a word: --seed 1 --seed 2 ran seed 2); flags meant to repeat (--opt, --log) take both."""
    from learngene.cli import main

    checked = 0
    for command, parser in _subparsers().items():
        for action in parser._actions:
            if type(action).__name__ != "_StoreOnce" or not action.option_strings:
                continue
            flag, value = action.option_strings[0], _a_value(action)
            assert main([command, flag, value, flag, value]) == 2
            err = capsys.readouterr().err
            assert len(err.strip().splitlines()) == 1 and f"argument {flag}" in err and "given twice" in err, err
            checked += 1
    assert checked > 50  # every command's value flags, not a few


@pytest.mark.parametrize(
    "argv",
    [
        ["expand", "g.safetensors", "--stitch", "0:1-2:0", "--stitch", "0:1-2:0", "-o", "d.safetensors"],
        ["train", "m", "--seed", "1", "--seed", "2", "-o", "t.safetensors"],
        ["expand", "g.safetensors", "-o", "a.safetensors", "--out", "b.safetensors"],  # one flag's two spellings
    ],
)
def test_the_issues_repeats_are_refused(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    err = cli_error(capsys, argv)
    assert "given twice" in err and not list(tmp_path.iterdir())


def test_repeatable_flags_still_take_every_value():
    from learngene.cli.parser import build_parser

    args = build_parser().parse_args(["train", "m", "-o", "t", "--log", "tensorboard", "--log", "wandb"])
    assert args.log == ["tensorboard", "wandb"]
    args = build_parser().parse_args(["expand", "g", "-o", "d", "--opt", "a=1", "--opt", "b=2"])
    assert args.opt == ["a=1", "b=2"]
