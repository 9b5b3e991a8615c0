"""Every bad input we know of, in one table: each gives one line that says what to do, never a traceback.

CLI cases run ``learngene.cli.main`` in-process and check: exit code 2, exactly one line on stderr,
no ``Traceback``, the expected words, a hint of what to do, and no output (not even a temporary file)
left behind. API cases check that the library raises :class:`LearngeneError` with a one-line message.
A few CLI cases also run as a real subprocess, to see what a user sees. Declared-bound refusals of generated flags
(a value one step outside a request field's declared range, an empty text) are tested once, by
tests/test_contract_flags.py, for every such flag and its Python call; this table keeps one of them.
"""

from __future__ import annotations

import gc
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from learngene.ancestry import load_ancestry
from learngene.cli import main
from learngene.data import Batches, ImageData, class_subset, few_shot, image_folder, load_dataset
from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.formats.model_file import load_model_file, save_model
from learngene.formats.weights import load_weights
from learngene.gene import Learngene
from learngene.method import Ancestry, refuse_unread
from learngene.registry import get_method, list_methods
from learngene.training.loop import TrainConfig, resolve_device, train
from learngene.vit.spec import ViTFamily, ViTSpec
from tests.conftest import SCRATCH_HEADER, cli_error, condense_tiny, make_images, tiny_args

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
SIZE = ["--img-size", "16"]
DATA = ["--data", "digits", "--train-images", "48", "--epochs", "1", "--batch-size", "16", "--quiet"]


def data_but(flag: str) -> list[str]:
    """DATA without ``flag`` and its value: a case gives its own (a flag given twice is refused, issue 47)."""
    at = DATA.index(flag)
    return DATA[:at] + DATA[at + 2 :]


# every message must tell the user what to do; one of these words shows it does
ACTIONS = (
    "use",
    "give",
    "pass",
    "choose",
    "check",
    "create",
    "delete",
    "upgrade",
    "lower",
    "load",
    "build",
    "keep",
    "remove",
    "convert",
    "rename",
    "pick",
    "run",
    "put",
    "install",
    "download",
    "see --help",
    "re-create",
    "expand",
    "start",
    "add",
    "set",
    "make",
    "ask",
)


class Evil:
    """Unpickling this would create the file ``marker``: proof that a loader ran pickled code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@dataclass
class Workspace:
    root: Path

    def __getattr__(self, name: str) -> str:
        return str(self.root / FILES[name])


FILES = {
    "anc": "anc.safetensors",
    "gene": "gene.safetensors",
    "ws_gene": "ws_gene.safetensors",
    "plain": "plain.safetensors",
    "corrupt": "corrupt.safetensors",
    "truncated": "truncated.safetensors",
    "empty": "empty.safetensors",
    "unknown_method": "unknown_method.safetensors",
    "newer": "newer.safetensors",
    "bad_config": "bad_config.safetensors",
    "bad_gene_ancestry": "bad_gene_ancestry.safetensors",
    "model_bad_spec": "model_bad_spec.safetensors",
    "model_no_spec": "model_no_spec.safetensors",
    "model_bad_origin": "model_bad_origin.safetensors",
    "model_wrong_shapes": "model_wrong_shapes.safetensors",
    "model_unknown_field": "model_unknown_field.safetensors",
    "pth": "weights.pth",
    "pth_as_gene": "weights_pth.safetensors",
    "evil_pth": "evil.pth",
    "evil_gene": "evil.safetensors",
    "not_state": "not_state.pth",
    "marker": "UNPICKLED",
    "a_dir": "a_dir",
    "folder_no_images": "folder_no_images",
    "folder_empty_class": "folder_empty_class",
    "folder_corrupt_image": "folder_corrupt_image",
    "folder_one_channel": "folder_one_channel",
    "folder_bomb": "folder_bomb",
    "folder_one_class": "folder_one_class",
    "folder_other_classes": "folder_other_classes",
    "idx_garbage": "idx_garbage",
    "run_corrupt": "run_corrupt",
    "run_evil": "run_evil",
    "run_other_lr": "run_other_lr",
    "out": "out/o.safetensors",
    "out_dir": "out",
    "not_a_dir": "file.txt",
    "readonly": "readonly",
}


def _write_png(path: Path, value: int) -> None:
    from PIL import Image

    Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(path)


def _write_png_bomb(path: Path, side: int = 40_000) -> None:
    """A 60-byte PNG whose header claims side × side pixels (1.6 G): PIL refuses it as a decompression bomb."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    root = tmp_path_factory.mktemp("bad")
    w = Workspace(root)
    torch.manual_seed(0)
    model = SPEC.create_model()
    save_model(w.anc, model, SPEC)
    ancestry = Ancestry(model, SPEC)
    get_method("pretrained")().condense(ancestry).save(w.gene)
    get_method("weight_selection")().condense(ancestry).save(w.ws_gene)
    save_file({"w": torch.zeros(2)}, w.plain)
    Path(w.corrupt).write_bytes(b"\x13\x37 this is not a safetensors file" * 8)
    gene_bytes = Path(w.gene).read_bytes()
    Path(w.truncated).write_bytes(gene_bytes[: len(gene_bytes) // 2])
    Path(w.empty).write_bytes(b"")
    header = SCRATCH_HEADER
    save_file({"w": torch.zeros(2)}, w.unknown_method, metadata={**header, "method": "alchemy"})
    save_file({"w": torch.zeros(2)}, w.newer, metadata={**header, "format_version": "99"})
    save_file({"w": torch.zeros(2)}, w.bad_config, metadata={**header, "config": "{not json"})
    save_file({"w": torch.zeros(2)}, w.bad_gene_ancestry, metadata={**header, "ancestry": '{"depth": 0}'})
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model_header = {"format": "learngene-model", "spec": SPEC.to_json(), "origin": "{}"}
    save_file(state, w.model_bad_spec, metadata={**model_header, "spec": "{not json"})
    save_file(state, w.model_no_spec, metadata={"format": "learngene-model"})
    save_file(state, w.model_bad_origin, metadata={**model_header, "origin": "[1, "})
    save_file(state, w.model_wrong_shapes, metadata={**model_header, "spec": SPEC.replace(embed_dim=48).to_json()})
    save_file(
        state, w.model_unknown_field, metadata={**model_header, "spec": json.dumps({**SPEC.to_dict(), "colour": 1})}
    )
    torch.save(state, w.pth)
    shutil.copy(w.pth, w.pth_as_gene)
    Path(w.evil_pth).write_bytes(pickle.dumps({"model": Evil(Path(w.marker))}))
    Path(w.evil_gene).write_bytes(pickle.dumps(Evil(Path(w.marker))))
    torch.save({"epochs": 3, "lr": 0.1}, w.not_state)
    Path(w.a_dir).mkdir()
    for folder, classes in [
        (w.folder_no_images, {"a": 0, "b": 0}),
        (w.folder_empty_class, {"a": 2, "b": 0}),
        (w.folder_corrupt_image, {"a": 2, "b": 2}),
    ]:
        for name, count in classes.items():
            (Path(folder) / name).mkdir(parents=True)
            for i in range(count):
                _write_png(Path(folder) / name / f"{i}.png", 40 * i)
    (Path(w.folder_corrupt_image) / "b" / "1.png").write_bytes(b"not really a png")
    for name in ("a", "b"):
        (Path(w.folder_one_channel) / name).mkdir(parents=True)
        _write_png(Path(w.folder_one_channel) / name / "0.png", 100)
    for name in ("a", "b"):
        (Path(w.folder_bomb) / name).mkdir(parents=True)
        _write_png(Path(w.folder_bomb) / name / "0.png", 100)
    _write_png_bomb(Path(w.folder_bomb) / "b" / "1.png")
    (Path(w.folder_one_class) / "only").mkdir(parents=True)
    _write_png(Path(w.folder_one_class) / "only" / "0.png", 100)
    for split, names in (("train", ("cat", "dog")), ("test", ("cat", "fox"))):
        for name in names:
            (Path(w.folder_other_classes) / split / name).mkdir(parents=True)
            _write_png(Path(w.folder_other_classes) / split / name / "0.png", 100)
    Path(w.idx_garbage).mkdir()
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        Path(w.idx_garbage, name).write_bytes(b"\x00\x00\x08\x03 not an idx file" * 10)
    for run in (w.run_corrupt, w.run_evil):
        Path(run).mkdir()
    Path(w.run_corrupt, "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated zip")
    Path(w.run_evil, "checkpoint.pt").write_bytes(pickle.dumps(Evil(Path(w.marker))))
    assert (
        main(
            [
                "train",
                w.anc,
                *DATA,
                "--lr",
                "0.001",
                "--out",
                str(root / "trained.safetensors"),
                "--run-dir",
                w.run_other_lr,
            ]
        )
        == 0
    )
    Path(w.out_dir).mkdir()
    Path(w.not_a_dir).write_text("a file, not a folder")
    Path(w.readonly).mkdir()
    return w


def registered(*names: str) -> bool:
    return all(n in list_methods() for n in names)


def _skip_unless(*names: str):
    return pytest.mark.skipif(not registered(*names), reason=f"{', '.join(names)} not registered yet")


# (id, argv from the workspace, words the message must contain[, marks])
def train_with(*flags: str) -> Callable[[Workspace], list]:
    """``learngene train`` of the workspace's ancestry with ``flags``."""
    return lambda w: ["train", w.anc, *flags, "-o", w.out]


def train_on_folder(folder: Callable[[Workspace], Path]) -> Callable[[Workspace], list]:
    """``learngene train`` of the workspace's ancestry on one of its image folders."""
    return lambda w: ["train", w.anc, "--data", f"folder:{folder(w)}", "-o", w.out]


def condense_with(method: str, option: str) -> Callable[[Workspace], list]:
    """``learngene condense`` of the workspace's ancestry by ``method`` with one ``--opt``."""
    return lambda w: ["condense", "--method", method, "--ancestry", w.anc, "--opt", option, "-o", w.out]


CLI_CASES: list[tuple[str, Callable[[Workspace], list[str]], str] | pytest.ParameterSet] = [
    # ---- files ----------------------------------------------------------------------------------
    ("missing gene", lambda w: ["expand", w.root / "missing.safetensors", "-o", w.out], "does not exist"),
    ("directory as gene", lambda w: ["expand", w.a_dir, "-o", w.out], "is a directory; give the path of a file"),
    ("corrupt gene", lambda w: ["expand", w.corrupt, "-o", w.out], "not a readable safetensors"),
    ("truncated gene", lambda w: ["expand", w.truncated, "-o", w.out], "not a readable safetensors"),
    ("empty gene file", lambda w: ["expand", w.empty, "-o", w.out], "is empty"),
    ("safetensors that is not a gene", lambda w: ["expand", w.plain, "-o", w.out], "not a learngene"),
    ("model file given as gene", lambda w: ["expand", w.anc, "-o", w.out], "not a learngene"),
    ("gene of unknown method", lambda w: ["expand", w.unknown_method, "-o", w.out], "unknown method 'alchemy'"),
    ("gene of newer format", lambda w: ["expand", w.newer, "-o", w.out], "newer than this library"),
    ("gene with corrupt header", lambda w: ["expand", w.bad_config, "-o", w.out], "corrupt learngene header"),
    ("gene with impossible ancestry", lambda w: ["inspect", w.bad_gene_ancestry], "corrupt learngene header"),
    ("pickle as gene", lambda w: ["expand", w.pth_as_gene, "-o", w.out], "looks like a pickle"),
    ("malicious pickle as gene", lambda w: ["inspect", w.evil_gene], "looks like a pickle"),
    (
        "malicious pickle as checkpoint",
        lambda w: [
            "condense",
            "--method",
            "pretrained",
            "--ancestry",
            w.evil_pth,
            "--timm-model",
            "vit_tiny_patch16_224",
            "-o",
            w.out,
        ],
        "could not be loaded as weights",
    ),
    (
        "pickle that is not a state_dict",
        lambda w: [
            "condense",
            "--method",
            "pretrained",
            "--ancestry",
            w.not_state,
            "--timm-model",
            "vit_tiny_patch16_224",
            "-o",
            w.out,
        ],
        "does not hold a state_dict",
    ),
    (
        "gene given as ancestry",
        lambda w: ["condense", "--method", "pretrained", "--ancestry", w.gene, "-o", w.out],
        "is a learngene, not a model",
    ),
    ("model file with corrupt spec", lambda w: ["train", w.model_bad_spec, *DATA, "-o", w.out], "corrupt"),
    ("model file without spec", lambda w: ["train", w.model_no_spec, *DATA, "-o", w.out], "records no spec"),
    ("model file with corrupt origin", lambda w: ["train", w.model_bad_origin, *DATA, "-o", w.out], "corrupt"),
    (
        "model file whose tensors do not fit its spec",
        lambda w: ["train", w.model_wrong_shapes, *DATA, "-o", w.out],
        "sizes are incompatible",
    ),
    ("model file with unknown spec field", lambda w: ["inspect", w.model_unknown_field], "unknown spec field"),
    (
        "checkpoint for the wrong timm model",
        lambda w: [
            "condense",
            "--method",
            "pretrained",
            "--ancestry",
            w.pth,
            "--timm-model",
            "vit_small_patch16_224",
            "-o",
            w.out,
        ],
        "pick the matching",
    ),
    (
        "unknown timm model",
        lambda w: [
            "condense",
            "--method",
            "pretrained",
            "--ancestry",
            w.pth,
            "--timm-model",
            "vit_colossal",
            "-o",
            w.out,
        ],
        "timm has no model",
    ),
    # ---- specs ----------------------------------------------------------------------------------
    ("heads do not divide width", lambda w: ["expand", w.gene, "--num-heads", "3", "-o", w.out], "does not divide"),
    ("patch does not divide image", lambda w: ["expand", w.gene, "--patch-size", "5", "-o", w.out], "does not divide"),
    ("depth 0", lambda w: ["expand", w.gene, "--depth", "0", "-o", w.out], "depth (--depth) must be a positive"),
    (
        "negative width",
        lambda w: ["expand", w.ws_gene, "--embed-dim", "-8", "-o", w.out],
        "embed_dim (--embed-dim) must be",
    ),
    (
        "mlp ratio 0",
        lambda w: ["expand", w.gene, "--mlp-ratio", "0", "-o", w.out],
        "mlp_ratio (--mlp-ratio) must be a positive",
    ),
    ("non-integer depth", lambda w: ["expand", w.gene, "--depth", "two", "-o", w.out], "invalid int value"),
    ("unknown preset", lambda w: ["expand", w.gene, "--preset", "huge", "-o", w.out], "invalid choice"),
    (
        "other input channels than the ancestry",
        lambda w: ["expand", w.gene, "--in-chans", "3", "-o", w.out],
        "1-channel images but the target asks for 3",
    ),
    (
        "block copy to another width",
        lambda w: ["expand", w.gene, "--embed-dim", "64", "--num-heads", "2", "-o", w.out],
        "embed_dim must be 32",
    ),
    (
        "weight selection growing the width",
        lambda w: ["expand", w.ws_gene, "--embed-dim", "64", "-o", w.out],
        "can only shrink",
    ),
    (
        "weight selection with more heads",
        lambda w: ["expand", w.ws_gene, "--num-heads", "4", "-o", w.out],
        "at most 2 heads",
    ),
    pytest.param(
        "wave width not tiling the templates",
        lambda w: ["expand", w.root / "wave.safetensors", "--embed-dim", "36", "--num-heads", "2", "-o", w.out],
        "tiles",
        marks=_skip_unless("wave"),
        id="wave width not tiling the templates",
    ),
    pytest.param(
        "peg head count it cannot make",
        lambda w: ["expand", w.root / "peg.safetensors", "--num-heads", "3", "--embed-dim", "33", "-o", w.out],
        "wide",
        marks=_skip_unless("peg"),
        id="peg head count it cannot make",
    ),
    pytest.param(
        "cluster head count it cannot make",
        lambda w: ["expand", w.root / "cluster.safetensors", "--num-heads", "64", "--embed-dim", "64", "-o", w.out],
        "wide",
        marks=_skip_unless("cluster"),
        id="cluster head count it cannot make",
    ),
    # ---- options ----------------------------------------------------------------------------------
    (
        "unknown method",
        lambda w: ["condense", "--method", "alchemy", "--ancestry", w.anc, "-o", w.out],
        "unknown method",
    ),
    (
        "unknown method option",
        lambda w: ["condense", "--method", "pretrained", "--ancestry", w.anc, "--opt", "colour=red", "-o", w.out],
        "KEY=VALUE",
    ),
    (
        "bad method option value",
        lambda w: ["condense", "--method", "pretrained", "--ancestry", w.anc, "--opt", "variant=sideways", "-o", w.out],
        "one of 'first', 'last', 'middle'",
    ),
    ("adapt a method without adapt", lambda w: ["adapt", w.gene, *DATA, *SIZE, "-o", w.out], "no adapt step"),
    (
        "gene without ancestry and no size",
        lambda w: ["expand", w.root / "scratch.safetensors", "-o", w.out],
        "records no ancestry size",
    ),
    ("learning rate 0", lambda w: ["train", w.anc, *DATA, "--lr", "0", "-o", w.out], "learning rate must be positive"),
    (
        "epochs 0",
        lambda w: ["train", w.anc, *data_but("--epochs"), "--epochs", "0", "-o", w.out],
        "epochs (--epochs) must be at least 1",
    ),
    (
        "batch size 0",
        lambda w: ["train", w.anc, *data_but("--batch-size"), "--batch-size", "0", "-o", w.out],
        "batch size must be above 0",
    ),
    (
        "distillation lambda 2",
        lambda w: ["condense", "--method", "pretrained", "--ancestry", w.anc, "--distill-lambda", "2", "-o", w.out],
        "must be in [0, 1]",
    ),
    (
        "device that does not exist",
        lambda w: ["train", w.anc, *DATA, "--device", "tpu:9", "-o", w.out],
        "unknown device",
    ),
    ("cuda without a gpu", lambda w: ["train", w.anc, *DATA, "--device", "cuda", "-o", w.out], "no GPU is visible"),
    (
        "resume without a run dir",
        lambda w: ["train", w.anc, *DATA, "--resume", "-o", w.out],
        "pass run_dir (--run-dir) too",
    ),
    (
        "negative checkpoint interval",
        lambda w: ["train", w.anc, *DATA, "--checkpoint-every", "-1", "-o", w.out],
        "checkpoint interval must be in [0,",
    ),
    ("max steps 0", lambda w: ["train", w.anc, *DATA, "--max-steps", "0", "-o", w.out], "max steps must be in [1,"),
    (
        "run dir holding an earlier run",
        lambda w: ["train", w.anc, *DATA, "--run-dir", w.run_other_lr, "-o", w.out],
        "pass resume (--resume) to continue it",
    ),
    (
        "resume from a corrupt checkpoint",
        lambda w: ["train", w.anc, *DATA, "--run-dir", w.run_corrupt, "--resume", "-o", w.out],
        "delete it",
    ),
    (
        "resume from a malicious checkpoint",
        lambda w: ["train", w.anc, *DATA, "--run-dir", w.run_evil, "--resume", "-o", w.out],
        "delete it",
    ),
    (
        "resume with other settings",
        lambda w: ["train", w.anc, *DATA, "--lr", "0.01", "--run-dir", w.run_other_lr, "--resume", "-o", w.out],
        "lr was 0.001, now 0.01",
    ),
    # ---- numbers out of range: refused before any arithmetic or allocation meets them -------------------
    (
        "warmup epochs nan",
        lambda w: ["train", w.anc, *DATA, "--warmup-epochs", "nan", "-o", w.out],
        "not a finite number",
    ),
    ("learning rate inf", lambda w: ["train", w.anc, *DATA, "--lr", "inf", "-o", w.out], "not a finite number"),
    (
        "label smoothing 2",
        lambda w: ["train", w.anc, *DATA, "--label-smoothing", "2", "-o", w.out],
        "label smoothing must be in [0, 1)",
    ),
    ("seed 2^70", lambda w: ["train", w.anc, *DATA, "--seed", str(2**70), "-o", w.out], "below 2^63"),
    (
        "weight decay -1",
        lambda w: ["train", w.anc, *DATA, "--weight-decay", "-1", "-o", w.out],
        "weight decay must be 0",
    ),
    ("grad clip -1", lambda w: ["train", w.anc, *DATA, "--grad-clip", "-1", "-o", w.out], "gradient clipping must be"),
    ("budget inf", lambda w: ["expand", w.gene, "--max-params", "inf", "-o", w.out], "finite count"),
    ("budget nan", lambda w: ["expand", w.gene, "--max-flops", "nan", "-o", w.out], "finite count"),
    ("mlp ratio inf", lambda w: ["expand", w.gene, "--mlp-ratio", "inf", "-o", w.out], "not a finite number"),
    (
        "depth 10^8",
        lambda w: ["expand", w.gene, "--depth", str(10**8), "-o", w.out],
        "depth=100000000 (--depth 100000000) is beyond",
    ),
    (
        "image size 100000",
        lambda w: ["expand", w.gene, "--img-size", "100000", "-o", w.out],
        "img_size=100000 (--img-size 100000) is beyond",
    ),
    (
        "too many tokens",
        lambda w: ["expand", w.gene, "--img-size", "4096", "--patch-size", "4", "-o", w.out],
        "tokens, more than",
    ),
    (
        "width beyond memory",
        lambda w: ["expand", w.gene, "--embed-dim", "65536", "--num-heads", "2", "--depth", "4000", "-o", w.out],
        "free; choose a smaller",
    ),
    ("negative method option", condense_with("heru_lg", "layers=-1"), "layers must be at least 1"),
    ("string for an int option", condense_with("heru_lg", "layers=three"), "must be an integer"),
    ("null for an int option", condense_with("heru_lg", "layers=null"), "must be an integer"),
    ("float for an int option", condense_with("heru_lg", "layers=2.5"), "must be an integer"),
    ("infinite float option", condense_with("auto_lg", "fraction=Infinity"), "must be a finite number"),
    # ---- data ---------------------------------------------------------------------------------------
    ("unknown dataset", lambda w: ["train", w.anc, "--data", "imagenet", "-o", w.out], "unknown dataset"),
    (
        "missing image folder",
        lambda w: ["train", w.anc, "--data", f"folder:{w.root / 'nowhere'}", "-o", w.out],
        "does not exist",
    ),
    ("image folder without images", train_on_folder(lambda w: w.folder_no_images), "no images"),
    ("image folder with an empty class", train_on_folder(lambda w: w.folder_empty_class), "class b has no images"),
    ("corrupt image in a folder", train_on_folder(lambda w: w.folder_corrupt_image), "cannot read image"),
    ("torchvision dataset without data dir", train_with("--data", "torchvision:CIFAR10"), "need data_dir (--data-dir)"),
    (
        "torchvision dataset not downloaded",
        lambda w: ["train", w.anc, "--data", "torchvision:CIFAR10", "--data-dir", w.a_dir, "-o", w.out],
        "not found under",
    ),
    (
        "fashion-mnist not in data dir",
        lambda w: ["train", w.anc, "--data-dir", w.a_dir, "--train-images", "48", "--epochs", "1", "-o", w.out],
        "not found in",
    ),
    (
        "more shots than a class has",
        train_with("--data", "digits", "--few-shot", "1000", "--epochs", "1"),
        "fewer than the 1000",
    ),
    (  # the one declared bound of a generated flag kept here: it runs that refusal through main end to end
        "zero training images",
        train_with("--data", "digits", "--train-images", "0", "--epochs", "1"),
        "train_images (--train-images) must be in [1,",
    ),
    ("decompression-bomb PNG in a folder", train_on_folder(lambda w: w.folder_bomb), "decompression bomb"),
    ("image folder of one class", train_on_folder(lambda w: w.folder_one_class), "has one class"),
    (
        "test folder with other classes than train",
        train_on_folder(lambda w: w.folder_other_classes),
        "same class sub-folders",
    ),
    (
        "garbage IDX files in --data-dir",
        lambda w: ["train", w.anc, "--data", "fashion_mnist", "--data-dir", w.idx_garbage, "-o", w.out],
        "not a Fashion-MNIST IDX file",
    ),
    (
        "image folder with 2 channels",
        lambda w: [
            "ancestry",
            *tiny_args(1),
            "--in-chans",
            "2",
            "--data",
            f"folder:{w.folder_one_channel}",
            "-o",
            w.out,
        ],
        "1 or 3 channels",
    ),
    # ---- outputs ----------------------------------------------------------------------------------
    (
        "existing output without --overwrite",
        lambda w: ["expand", w.gene, "-o", w.ws_gene],
        "pass overwrite=True (--overwrite)",
    ),
    (
        "output is the input, even with --overwrite",
        lambda w: ["expand", w.gene, "-o", w.gene, "--overwrite"],
        "never replaces",
    ),
    (
        "output under a regular file, folders deep",
        lambda w: ["expand", w.gene, "-o", Path(w.not_a_dir) / "a" / "b" / "o.safetensors"],
        "is not a directory",
    ),
    (
        "output under a regular file",
        lambda w: ["expand", w.gene, "-o", Path(w.not_a_dir) / "o.safetensors"],
        "is not a directory",
    ),
    (
        "output is a directory",
        lambda w: ["condense", "--method", "scratch", "--ancestry", w.anc, "-o", w.a_dir],
        "is a directory; give a file path",
    ),
    (
        "hub folder exists",
        lambda w: ["expand", w.gene, "-o", w.a_dir],
        "already exists; pass overwrite=True (--overwrite)",
    ),
    ("hub folder over a file", lambda w: ["expand", w.gene, "-o", w.not_a_dir, "--format", "hub"], "is not a folder"),
    (
        "output in a read-only directory",
        lambda w: ["expand", w.gene, "-o", Path(w.readonly) / "o.safetensors"],
        "not writable",
    ),
    (
        "plot over an existing file",
        lambda w: ["inspect", w.gene, "--plot", w.not_a_dir],
        "pass overwrite=True (--overwrite)",
    ),
    ("plot over the gene itself", lambda w: ["inspect", w.gene, "--plot", w.gene, "--overwrite"], "never replaces"),
    (
        "two outputs of one name",
        lambda w: ["adapt", w.gene, *DATA, *SIZE, "-o", w.out, "--gene-out", w.out],
        "same file",
    ),
    (
        "run dir that is a file",
        lambda w: ["train", w.anc, *DATA, "--run-dir", w.not_a_dir, "-o", w.out],
        "is not a directory",
    ),
    (
        "run dir under a file",
        lambda w: ["train", w.anc, *DATA, "--run-dir", Path(w.not_a_dir) / "run", "-o", w.out],
        "cannot create the run directory",
    ),
]


def _case_params():
    for case in CLI_CASES:
        yield case if isinstance(case, type(pytest.param(0))) else pytest.param(*case, id=case[0])


def _extra_setup(ws: Workspace, case_id: str) -> None:
    if case_id == "gene without ancestry and no size" and not (ws.root / "scratch.safetensors").exists():
        get_method("scratch")().condense(None).save(ws.root / "scratch.safetensors")
    if case_id == "output in a read-only directory":
        if subprocess.run(["chattr", "+i", ws.readonly], capture_output=True).returncode != 0:
            pytest.skip("cannot make a read-only directory here (root ignores permissions and chattr +i failed)")
    for name in ("wave", "peg", "cluster"):
        if case_id.startswith(name) and not (ws.root / f"{name}.safetensors").exists():
            try:
                condense_tiny(name, load_ancestry(ws.anc), 16, 10).save(ws.root / f"{name}.safetensors")
            except LearngeneError as exc:
                pytest.skip(f"{name} cannot condense the tiny ancestry: {exc}")


@pytest.mark.parametrize("case_id, argv, words", list(_case_params()))
def test_cli_bad_input(ws, capsys, case_id, argv, words):
    _extra_setup(ws, case_id)
    before = sorted(p.name for p in Path(ws.out_dir).iterdir())
    try:
        err = cli_error(capsys, argv(ws))
    finally:
        if case_id == "output in a read-only directory":
            subprocess.run(["chattr", "-i", ws.readonly], capture_output=True)
        leftover = sorted(p.name for p in Path(ws.out_dir).iterdir())
        for name in set(leftover) - set(before):  # keep one wrong case from failing the next ones
            (Path(ws.out_dir) / name).unlink()
    assert err.startswith("learngene "), err
    assert words in err, (words, err)
    assert any(a in err.lower() for a in ACTIONS), f"the message does not say what to do: {err}"
    assert leftover == before, "a failed run left output behind"
    assert not Path(ws.marker).exists(), "a pickle was unpickled"


def test_the_table_is_long_enough():
    assert len(CLI_CASES) >= 30


# ---- the same through the library ------------------------------------------------------------------
API_CASES: list[tuple[str, Callable[[Workspace], object], str]] = [
    ("spec heads do not divide width", lambda w: ViTSpec(embed_dim=32, num_heads=3), "does not divide"),
    ("spec patch does not divide image", lambda w: ViTSpec(img_size=16, patch_size=5), "does not divide"),
    ("spec depth 0", lambda w: ViTSpec(depth=0), "depth (--depth) must be"),
    ("spec token pool without class token", lambda w: ViTFamily(class_token=False), "needs class_token"),
    ("spec from unknown fields", lambda w: ViTSpec.from_dict({"depht": 3}), "unknown spec field"),
    ("load a corrupt gene", lambda w: Learngene.load(w.corrupt), "not a readable safetensors"),
    ("load a model file as gene", lambda w: Learngene.load(w.anc), "not a learngene"),
    ("load weights from a malicious pickle", lambda w: load_weights(w.evil_pth), "could not be loaded"),
    ("load a model file with a corrupt spec", lambda w: load_model_file(w.model_bad_spec), "corrupt"),
    (
        "expand into an impossible size",
        lambda w: make_descendant(Learngene.load(w.gene), SPEC.replace(embed_dim=64)),
        "embed_dim must be 32",
    ),
    (
        "train on 3-channel data",
        lambda w: train(SPEC.create_model(), make_images(8, 10, 16, chans=3), TrainConfig(epochs=1, progress=False)),
        "3-channel images",
    ),
    (
        "train on 8px data",
        lambda w: train(SPEC.create_model(), make_images(8, 10, 8), TrainConfig(epochs=1, progress=False)),
        "8px images but the model expects 16px",
    ),
    (
        "train with more classes than the head",
        lambda w: train(
            SPEC.replace(num_classes=2).create_model(), make_images(8, 4, 16), TrainConfig(epochs=1, progress=False)
        ),
        "4 classes but the model's head has 2",
    ),
    ("batches of an empty dataset", lambda w: Batches(make_images(4).subset([]), 2, shuffle=True), "is empty"),
    (
        "train on an empty dataset",
        lambda w: train(SPEC.create_model(), make_images(4, 10, 16).subset([]), TrainConfig(epochs=1, progress=False)),
        "is empty",
    ),
    ("few-shot beyond a class", lambda w: few_shot(make_images(8), 5), "fewer than the 5"),
    (
        "class subset with an empty class",
        lambda w: class_subset(make_images(8).subset([0, 1, 2]), [0, 3]),
        "class 3 has no images",
    ),
    ("image folder without images", lambda w: image_folder(w.folder_no_images, 16), "no images"),
    ("dataset of unknown name", lambda w: load_dataset("imagenet"), "unknown dataset"),
    (
        "labels outside the label space",
        lambda w: ImageData(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.tensor([0, 7]), 3, (0.5,), (0.5,)),
        "labels",
    ),
    ("unknown device", lambda w: resolve_device("tpu:9"), "unknown device"),
    (
        "spec with an infinite MLP ratio",
        lambda w: ViTSpec(mlp_ratio=float("inf")),
        "mlp_ratio (--mlp-ratio) must be a positive finite",
    ),
    ("spec deeper than any buildable", lambda w: ViTSpec(depth=10**8), "depth=100000000 (--depth 100000000) is beyond"),
    (
        "spec with a string width",
        lambda w: ViTSpec(embed_dim="192"),
        "embed_dim (--embed-dim) must be a positive integer",
    ),
    ("spec beyond memory", lambda w: ViTSpec(depth=4000, embed_dim=65536, num_heads=64).create_model(), "GiB free"),
    (
        "training with label smoothing 2",
        lambda w: TrainConfig(label_smoothing=2),
        "label_smoothing (--label-smoothing) must be in [0, 1)",
    ),
    (
        "training with a nan warmup",
        lambda w: TrainConfig(warmup_epochs=float("nan")),
        "warmup_epochs (--warmup-epochs) must be a finite",
    ),
    (
        "training with a string batch size",
        lambda w: TrainConfig(batch_size="8"),
        "batch_size (--batch-size) must be an integer",
    ),
    ("training with a huge seed", lambda w: TrainConfig(seed=2**70), "below 2^63"),
    ("method option of the wrong type", lambda w: get_method("heru_lg")(layers="3"), "layers must be an integer"),
    ("negative method option", lambda w: get_method("heru_lg")(layers=-1), "must be at least 1"),
    (
        "distil without a teacher",
        lambda w: train(
            SPEC.create_model(), make_images(8, 10, 16), TrainConfig(epochs=1, distill_lambda=1.0, progress=False)
        ),
        "needs a teacher",
    ),
]


@pytest.mark.parametrize("case_id, call, words", [pytest.param(*c, id=c[0]) for c in API_CASES])
def test_api_bad_input(ws, case_id, call, words):
    with pytest.raises(LearngeneError) as info:
        call(ws)
    message = str(info.value)
    assert words in message, message
    assert len(message.splitlines()) == 1, message
    assert not Path(ws.marker).exists()


def test_unreadable_file_is_refused(ws, capsys):
    """chmod 000; root reads anyway, so where that is so the test says it cannot check it."""
    path = Path(ws.root / "locked.safetensors")
    shutil.copy(ws.gene, path)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: permissions do not stop reads here")
        err = cli_error(capsys, ["expand", path, "-o", ws.out])
        assert "not readable" in err
    finally:
        path.chmod(0o644)


@pytest.mark.integration  # the installed command in subprocesses
def test_what_a_user_sees_from_the_installed_command(ws):
    """A malicious pickle given as a checkpoint, in a real process: refused in one line, its code never run."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    argv = [
        "condense",
        "--method",
        "pretrained",
        "--ancestry",
        ws.evil_pth,
        "--timm-model",
        "vit_tiny_patch16_224",
        "-o",
        ws.out,
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "learngene", *argv], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "pickles objects other than tensors, which are never unpickled here" in proc.stderr, proc.stderr
    assert not Path(ws.marker).exists() and not Path(ws.out).exists()


# ---- files and directories ----------------------------------------------------------------------------
def test_a_long_valid_output_name_is_written(ws, capsys):
    """The temporary file's name keeps only the start of the target's, so any name the filesystem takes works."""
    out = Path(ws.out_dir) / ("x" * 240 + ".safetensors")  # 252 bytes: valid, but too long with a prefix and suffix
    try:
        assert main(["expand", ws.gene, "-o", str(out)]) == 0, capsys.readouterr().err
        assert out.exists()
    finally:
        out.unlink(missing_ok=True)


def test_a_name_with_a_newline_cannot_split_the_error(ws, capsys):
    err = cli_error(capsys, ["expand", ws.root / "no\nsuch\rgene.safetensors", "-o", ws.out])
    assert "'" in err and "\\n" in err, err


def test_a_plot_never_replaces_a_file(ws, capsys):
    before = Path(ws.not_a_dir).read_bytes()
    cli_error(capsys, ["inspect", ws.gene, "--plot", ws.not_a_dir])
    gene_before = Path(ws.gene).read_bytes()
    cli_error(capsys, ["inspect", ws.gene, "--plot", ws.gene, "--overwrite"])
    assert Path(ws.not_a_dir).read_bytes() == before and Path(ws.gene).read_bytes() == gene_before


def test_cache_that_is_a_file(ws, capsys, monkeypatch, fashion_data):
    monkeypatch.setenv("LEARNGENE_CACHE", ws.not_a_dir)
    err = cli_error(capsys, ["train", ws.anc, "--data", "fashion_mnist", "--train-images", "8", "-o", ws.out])
    assert "LEARNGENE_CACHE" in err and "is not a directory" in err


def test_a_full_disk_keeps_the_old_file(tmp_path, monkeypatch):
    """ENOSPC while a checkpoint is written: one line, the old checkpoint intact, no temporary file left."""
    import errno

    from learngene.formats.atomic import save_torch_atomic

    path = tmp_path / "checkpoint.pt"
    save_torch_atomic(path, {"step": torch.tensor(1)})
    old = path.read_bytes()

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(LearngeneError) as info:
        save_torch_atomic(path, {"step": torch.tensor(2)})
    monkeypatch.undo()
    assert "No space left on device" in str(info.value) and "free some disk space" in str(info.value)
    assert len(str(info.value).splitlines()) == 1
    assert path.read_bytes() == old and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    del info
    gc.collect()  # the failed write's frames go here: CPython 3.12.1 crashed in this collection (save_torch_atomic)


def test_a_real_full_disk(ws, capsys, tmp_path):
    """The same on a real 64 KiB tmpfs, through the CLI (needs root to mount; skipped elsewhere)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        err = cli_error(capsys, ["expand", ws.gene, "-o", mnt / "o.safetensors"])
        assert "No space left on device" in err, err
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


# ---- races ---------------------------------------------------------------------------------------------
def test_two_writers_of_one_output_cannot_both_succeed(tmp_path):
    """Both writers pass the existence check before either publishes: the second one's exclusive link fails."""
    from learngene.formats.atomic import atomic_path

    target = tmp_path / "o.txt"
    with pytest.raises(LearngeneError, match="another process wrote it meanwhile"):
        with atomic_path(target, overwrite=False) as first:
            first.write_text("first")
            with atomic_path(target, overwrite=False) as second:
                second.write_text("second")
    assert target.read_text() == "second"  # the first to publish wins; the loser left nothing behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.txt"]


@pytest.mark.integration  # a second process holds the run folder
def test_two_runs_on_one_run_dir_are_refused(ws, capsys, tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from learngene.training.run_dirs import lock_run_dir; "
            f"lock_run_dir({str(run_dir)!r}); print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        err = cli_error(capsys, ["train", ws.anc, *DATA, "--run-dir", run_dir, "-o", ws.out])
        assert "another learngene run is using" in err
    finally:
        holder.kill()
        holder.wait()
    assert main(["train", ws.anc, *DATA, "--run-dir", str(run_dir), "-o", str(tmp_path / "t.safetensors")]) == 0


# ---- forged or inconsistent gene and model files: refused before anything is built --------------------------
def _forge(src: str, dst: Path, tensors=None, **meta_changes) -> Path:
    from safetensors import safe_open

    with safe_open(src, framework="pt") as fh:
        state = {k: fh.get_tensor(k) for k in fh.keys()}
        meta = dict(fh.metadata())
    state = tensors(state) if tensors else state
    save_file({k: v.contiguous() for k, v in state.items()}, str(dst), metadata={**meta, **meta_changes})
    return dst


def _nan_first(state: dict) -> dict:
    key = sorted(state)[0]
    state[key] = state[key].clone().fill_(float("nan"))
    return state


FORGED = [
    ("config not an object", "gene", dict(config="[1, 2]"), None, "config is not a JSON object"),
    ("cost not an object", "gene", dict(cost='"cheap"'), None, "cost is not a JSON object"),
    (
        "ancestry depth 10^9",
        "gene",
        dict(ancestry=json.dumps({**SPEC.to_dict(), "depth": 10**9})),
        None,
        "corrupt learngene header",
    ),
    (
        "ancestry width 10^6",
        "gene",
        dict(ancestry=json.dumps({**SPEC.to_dict(), "embed_dim": 10**6})),
        None,
        "corrupt learngene header",
    ),
    (
        "ancestry mlp ratio Infinity",
        "gene",
        dict(ancestry=json.dumps({**SPEC.to_dict(), "mlp_ratio": float("inf")})),
        None,
        "corrupt learngene header",
    ),
    ("option of the wrong type", "gene", dict(config='{"variant": 3}'), None, "variant must be one of"),
    (
        "tensor named blocks.x",
        "gene",
        {},
        lambda s: {("blocks.x.norm1.weight" if k == "blocks.0.norm1.weight" else k): v for k, v in s.items()},
        "not a valid pretrained learngene",
    ),
    (
        "tensor of the wrong shape",
        "gene",
        {},
        lambda s: {**s, "blocks.0.attn.qkv.weight": torch.zeros(5, 7)},
        "not a valid pretrained learngene",
    ),
    ("gene holding NaN", "gene", {}, _nan_first, "holds NaN or infinite values"),
    ("ancestry holding NaN", "anc", {}, _nan_first, "holds NaN or infinite values"),
]


@pytest.mark.parametrize("case_id, source, meta, tensors, words", [pytest.param(*c, id=c[0]) for c in FORGED])
def test_forged_files_are_refused_before_building(ws, capsys, case_id, source, meta, tensors, words):
    forged = _forge(getattr(ws, source), ws.root / f"forged-{case_id.replace(' ', '_')}.safetensors", tensors, **meta)
    if source == "anc":
        argv = ["condense", "--method", "pretrained", "--ancestry", forged, "-o", ws.out]
    else:
        argv = ["expand", forged, "-o", ws.out]
    err = cli_error(capsys, argv)
    assert words in err, err
    assert not Path(ws.out).exists()
    if source != "anc":
        assert words in cli_error(capsys, ["inspect", forged])


def _alias(target: Path, link: str) -> Path:
    """``target`` itself, or a new symbolic or hard link to it."""
    import os

    if link == "same name":
        return target
    alias = target.with_name(f"alias-{target.name}")
    alias.symlink_to(target) if link == "symlink" else os.link(target, alias)
    return alias


@pytest.mark.parametrize("link", ["same name", "symlink", "hard link"])
def test_an_output_that_is_an_input_is_refused_even_with_overwrite(ws, tmp_path, capsys, link):
    """The teacher, ancestry or gene a command reads is never its output, by any name, --overwrite or not."""
    import shutil

    for name in ("teacher", "anc", "gene"):
        shutil.copy(ws.gene if name == "gene" else ws.anc, tmp_path / f"{name}.safetensors")
    teacher, anc, gene = (tmp_path / f"{n}.safetensors" for n in ("teacher", "anc", "gene"))
    before = {p: p.read_bytes() for p in (teacher, anc, gene)}
    for argv in (
        ["train", ws.anc, *DATA, "--teacher", teacher, "--overwrite", "-o", _alias(teacher, link)],
        ["expand", gene, "--overwrite", "-o", _alias(gene, link)],
        ["condense", "--method", "scratch", "--ancestry", anc, "--overwrite", "-o", _alias(anc, link)],
    ):
        assert "never replaces" in cli_error(capsys, argv)
    assert {p: p.read_bytes() for p in before} == before


def test_a_hub_folder_output_holding_the_gene_is_refused(ws, tmp_path, capsys):
    import shutil

    folder = tmp_path / "hub"
    folder.mkdir()
    shutil.copy(ws.gene, folder / "g.safetensors")
    argv = ["expand", folder / "g.safetensors", "--format", "hub", "--overwrite", "-o", folder]
    assert "never replaces" in cli_error(capsys, argv)
    assert sorted(p.name for p in folder.iterdir()) == ["g.safetensors"]


@pytest.fixture(scope="module")
def resnets(tmp_path_factory) -> dict[int, Path]:
    """Tiny timm ResNet checkpoints (CNN teachers) reading 1- and 3-channel images, 10 classes."""
    import timm
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("resnets")
    paths = {}
    for chans in (1, 3):
        torch.manual_seed(0)
        model = timm.create_model("resnet10t", num_classes=10, in_chans=chans)
        paths[chans] = root / f"resnet{chans}.safetensors"
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, paths[chans])
    return paths


def test_a_cnn_teacher_of_the_datas_channels_is_distilled(ws, resnets, tmp_path, capsys):
    out = tmp_path / "o.safetensors"
    argv = ["train", ws.anc, *DATA, "--teacher", resnets[1], "--teacher-timm-model", "resnet10t", "-o", out]
    assert main([str(a) for a in argv]) == 0, capsys.readouterr().err
    assert out.is_file()


def test_a_cnn_teacher_of_other_channels_or_a_lone_teacher_arch_is_one_line(ws, resnets, tmp_path, capsys):
    out = tmp_path / "o.safetensors"
    argv = ["train", ws.anc, *DATA, "--teacher", resnets[3], "--teacher-timm-model", "resnet10t", "-o", out]
    assert "the teacher takes 3-channel" in cli_error(capsys, argv)
    argv = ["train", ws.anc, *DATA, "--teacher-timm-model", "resnet10t", "-o", out]
    assert "pass --teacher too" in cli_error(capsys, argv)  # the command line's own pair of flags
    assert not out.exists()


def test_condense_refuses_in_chans_other_than_the_ancestrys(ws, tmp_path, capsys):
    out = tmp_path / "g.safetensors"
    argv = ["condense", "--method", "tleg", "--ancestry", ws.anc, *DATA, "--in-chans", "3", "-o", out]
    assert "leave in_chans (--in-chans) out" in cli_error(capsys, argv)
    assert not out.exists()


def _numeric_options():
    import dataclasses
    import typing

    from learngene.registry import list_methods

    for name in list_methods():
        config = get_method(name).Config
        hints = typing.get_type_hints(config)
        for f in dataclasses.fields(config):
            if hints[f.name] in (int, float):
                yield pytest.param(name, f, hints[f.name], id=f"{name}.{f.name}")


@pytest.mark.parametrize("method, field, kind", list(_numeric_options()))
def test_every_numeric_option_refuses_values_past_its_boundary(method, field, kind):
    """Each option's range, tried at its edge: the value just outside is refused in one line and the edge itself
    accepted; an automatic option's 0 (its 'automatic' marker) is refused when given by hand, as it reads as 'none'."""
    from learngene.validate import parse_options

    cls = get_method(method)
    if field.name in getattr(cls.Config, "AUTO_OPTIONS", ()):
        with pytest.raises(LearngeneError, match=f"{field.name}=auto"):
            parse_options(cls.Config, [f"{field.name}=0"])
        assert parse_options(cls.Config, [f"{field.name}=auto"]) == {field.name: field.default}
    limits = field.metadata
    lowest = limits.get("at_least", limits.get("above", 0 if "at_most" not in limits else None))
    if lowest is not None:
        below = lowest - 1 if kind is int else math.nextafter(lowest, -math.inf)  # the next value out of range
        with pytest.raises(LearngeneError, match=f"{method} option {field.name} must be"):
            cls(**{field.name: kind(below) if "above" not in limits else kind(lowest)})
        if "above" not in limits and not limits.get("odd") and not limits.get("multiple_of"):
            cls(**{field.name: kind(lowest)})
    if "at_most" in limits:
        with pytest.raises(LearngeneError, match=f"{method} option {field.name} must be"):
            most = limits["at_most"]
            cls(**{field.name: most + 1 if kind is int else math.nextafter(most, math.inf)})  # the next value out
    if limits.get("odd"):
        with pytest.raises(LearngeneError, match="an odd number"):
            cls(**{field.name: 2})


@pytest.mark.parametrize(
    "method, options, words",
    [
        ("sws", {"stages": "0,2"}, "needs positive layer counts"),
        # descendant_stages: 0 skips a stage when expanding; what means nothing is refused
        ("sws", {"descendant_stages": "0,0,0"}, "with a positive sum"),
        ("sws", {"descendant_stages": "0,2"}, "needs 3 layer counts (one per stage) summing to"),
        ("sws", {"descendant_stages": "0,2,1"}, "stage 0 would get none: its stored layer would never train"),
        ("pool", {"instance_depths": "1,1,1,1,1,1,1,1"}, "repeats a depth"),
        ("pool", {"instance_depths": "1,9"}, "deeper than the aux net"),
        ("structured", {"kernel_size": 1001}, "reaches past the"),
    ],
)
def test_method_options_that_mean_nothing_for_the_ancestry_are_one_line(ws, tmp_path, capsys, method, options, words):
    opts = [x for k, v in options.items() for x in ("--opt", f"{k}={v}")]
    out = tmp_path / "g.safetensors"
    argv = ["condense", "--method", method, "--ancestry", ws.anc, *DATA, *opts, "-o", out]
    if method == "structured":
        argv = ["condense", "--method", method, "--ancestry", ws.anc, "-o", out]
        assert main([str(a) for a in argv]) == 0
        argv = ["expand", out, *opts, "-o", tmp_path / "d.safetensors"]
    capsys.readouterr()
    assert words in cli_error(capsys, argv)
    assert not (tmp_path / "d.safetensors").exists()


def test_text_from_a_gene_header_and_its_name_stays_on_its_card_line(ws, tmp_path, capsys):
    """Header fields, label names and the file name carry newlines, headings and YAML keys: the card keeps each
    on its own `- **key**:` line, and its front matter holds only what learngene writes."""
    import json as _json

    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(ws.gene, framework="pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        header = dict(fh.metadata())
    evil = "x\n---\nlicense: evil\n# Heading\r\n- item"
    names = [f"c{i}\n# class heading" for i in range(10)]
    header.update(
        created=evil,
        library_version=evil,
        label_space=_json.dumps({"data": evil, "names": names, "num_classes": 10}),
    )
    gene = tmp_path / "g\n# name heading.safetensors"
    save_file(tensors, str(gene), metadata=header)
    hub = tmp_path / "hub"
    code = main(["expand", str(gene), "--format", "hub", "-o", str(hub), "--quiet"])
    assert code == 0, capsys.readouterr().err
    card = (hub / "README.md").read_text()
    front = card.split("---\n")[1]
    assert "evil" not in front and "license" not in front, front
    headings = [line for line in card.splitlines() if line.startswith("#")]
    assert not any("heading" in h for h in headings), headings
    assert not any(line.startswith(("license:", "- item", "---x")) for line in card.splitlines()[8:])
    assert card.count("\n---\n") == 1  # the front matter's end only


@pytest.mark.parametrize("licence", ["((((", "(", "MIT)("])
def test_a_licence_that_is_no_identifier_is_refused(ws, tmp_path, capsys, licence):
    out = tmp_path / "hub"
    assert "not a licence identifier" in cli_error(capsys, ["expand", ws.gene, "--license", licence, "-o", out])
    assert not out.exists()


def test_depth_with_a_budget_keeps_the_depth_and_says_so(ws, tmp_path, capsys):
    out = tmp_path / "d.safetensors"
    assert main(["expand", ws.gene, "--max-params", "5M", "--depth", "1", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "depth (--depth) 1 kept (it wins over the budget)" in said and "picked L1-" in said, said


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: TrainConfig(lr=-1), "lr (--lr) must be positive, got -1; pass e.g. lr=0.001 (--lr 0.001)"),
        (lambda: TrainConfig(grad_clip=-1), "; pass grad_clip=None (--grad-clip 0) for no clipping, or a positive"),
        (
            lambda: TrainConfig(epochs=0),
            "epochs (--epochs) must be at least 1, got 0; pass epochs=1 (--epochs 1) or more",
        ),
        (
            lambda: TrainConfig(label_smoothing=2),
            "label_smoothing (--label-smoothing) must be in [0, 1), got 2; pass a",
        ),
        (lambda: TrainConfig(min_lr=-1), "min_lr must be 0 or more, got -1; pass a non-negative finite number"),
        (lambda: TrainConfig(lr="x"), "(help(learngene.TrainConfig) lists each setting's; learngene COMMAND --help"),
        (lambda: get_method("structured")(kernel_size=2), "; pass kernel_size=VALUE (--opt kernel_size=VALUE) with"),
        (lambda: get_method("structured")(kernel_size="a"), "(see help(learngene.get_method('structured').Config), or"),
        (
            lambda: refuse_unread(get_method("tleg"), {"aux_depth": 3}, "expand"),
            "condense again with aux_depth=3 (--opt aux_depth=3)",
        ),
    ],
)
def test_a_declared_setting_is_named_in_both_callers_words(make, words):
    """One declaration (``field(...)``) names the setting both ways in one plain message: the Python argument, then
    the command line's flag in parentheses (``lr (--lr)``, ``lr=0.001 (--lr 0.001)``); a setting without a flag
    (``min_lr``) by its name alone."""
    with pytest.raises(LearngeneError) as raised:
        make()
    assert words in str(raised.value), raised.value


def test_the_command_line_is_told_flags_for_settings_and_options(ws, tmp_path, capsys):
    argv = ["compare", "--ancestry", ws.anc, "--data", "digits", "--sizes", "L1-D32-H2", "--epochs", "0"]
    err = cli_error(capsys, [*argv, "--out", tmp_path / "cmp"])
    assert err.endswith("epochs (--epochs) must be at least 1, got 0; pass epochs=1 (--epochs 1) or more"), err
    out = tmp_path / "g.safetensors"
    argv = ["condense", "--method", "structured", "--ancestry", ws.anc, "--opt", "kernel_size=2", "-o", out]
    assert "pass kernel_size=VALUE (--opt kernel_size=VALUE) with" in cli_error(capsys, argv)
    assert not out.exists() and not (tmp_path / "cmp").exists()
