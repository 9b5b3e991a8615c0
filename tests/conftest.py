"""Shared fixtures: tiny specs, tiny datasets and a tiny trained ancestry, all on CPU in seconds."""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np
import pytest
import torch

from learngene.data import ImageData
from learngene.method import Ancestry
from learngene.vit.spec import ViTSpec

# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine two spinning OpenMP
# threads per process made the suite several times slower; subprocesses (the CLI, torchrun) inherit it.
# LEARNGENE_TEST_THREADS=N runs the suite with N threads instead: the numeric bounds (tests/bounds.py) must hold at
# any thread count, and this is how that is checked.
TEST_THREADS = os.environ.get("LEARNGENE_TEST_THREADS", "1")
os.environ["OMP_NUM_THREADS"] = TEST_THREADS
torch.set_num_threads(int(TEST_THREADS))

TINY = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
# methods whose defaults are too large for tests, made small: TAL's own hypernetwork (hidden 128, 5 layers) has ~20M
# weights
SMALL_OPTIONS = {
    "tal": {"hid": 16, "heads": 2, "layers": 2, "lora_r": 4, "max_ck": 512},
    "pith": {"hid": 16, "heads": 2, "layers": 2, "lora_r": 4, "max_ck": 512},
}


def tiny_args(depth: int = 2) -> list[str]:
    """TINY's sizes as the command line's flags, at ``depth`` blocks (in_chans and num_classes come from the data)."""
    return ["--depth", str(depth), "--embed-dim", "32", "--num-heads", "2", "--patch-size", "4", "--img-size", "16"]


TINY_ARGS = tiny_args()


def cli_ok(*argv) -> None:
    """Run ``learngene argv`` in this process (paths and numbers are passed as strings); it must exit 0."""
    from learngene.cli import main

    code = main([str(a) for a in argv])
    assert code == 0, f"learngene {argv[0]} exited with {code}"


def cli_error(capsys, argv) -> str:
    """Run ``learngene argv`` in this process; it must exit 2 with one line on stderr and no traceback: that line."""
    from learngene.cli import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, (code, err)
    assert err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "Traceback" not in captured.out, err
    return err


def saved_model(path, spec: ViTSpec, seed: int = 0, **save_kwargs):
    """A fresh timm ViT of ``spec``, its weights drawn after ``torch.manual_seed(seed)``, saved as a learngene model
    file at ``path`` (``save_kwargs``: origin, preprocessing, ...); returns ``path``."""
    from learngene.formats.model_file import save_model

    torch.manual_seed(seed)
    save_model(path, spec.create_model(), spec, **save_kwargs)
    return path


def timm_vit(name: str = "vit_tiny_patch16_224", **sizes):
    """timm's own model (no learngene code in between) of the sizes given: what a user loads a descendant into."""
    import timm

    return timm.create_model(name, pretrained=False, **sizes)


# the fewest header fields a gene file is read with: a scratch gene's (no tensors it must hold, no ancestry)
SCRATCH_HEADER = dict(format="learngene", format_version="1", method="scratch", config="{}", ancestry="null", cost="{}")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


# The suite's numbers are CPU numbers: outside the tests marked `gpu`, CUDA is hidden, so that `--device auto`
# (the CLI's and TrainConfig's default) means the CPU, in fp32, on a machine with a GPU too; otherwise a test that
# compares against CPU results or runs two processes would train in bf16 on the GPU, or bind ranks to GPUs it has
# not got. Hidden in this process (torch.cuda.is_available() is False) and in the processes a test starts (the CLI,
# torchrun: CUDA_VISIBLE_DEVICES is empty), from the test's setup (its fixtures, module-scoped ones included) to
# its teardown. A test that needs the GPU says so with the `gpu` mark (tests/test_gpu.py).
CUDA_PRESENT = torch.cuda.is_available()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CUDA_PRESENT or item.get_closest_marker("gpu") is not None:
        return (yield)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "is_available", lambda: False)
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        return (yield)


def pytest_collection_modifyitems(config, items):
    # GPU tests never make the suite depend on a GPU: without CUDA they skip, whatever else is selected
    if not CUDA_PRESENT:
        needs_cuda = pytest.mark.skip(reason="needs CUDA")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(needs_cuda)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: pass --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tiny_spec() -> ViTSpec:
    return TINY


def make_images(n: int = 64, num_classes: int = 4, size: int = 16, chans: int = 1, seed: int = 0) -> ImageData:
    """A learnable toy task: class c is a stripe pattern of period c + 2 pixels (plus noise), visible in every patch."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % num_classes
    images = torch.randint(0, 60, (n, chans, size, size), generator=gen, dtype=torch.uint8)
    cols = torch.arange(size)
    for i, c in enumerate(labels.tolist()):
        stripes = ((cols % (c + 2)) == 0).to(torch.uint8) * 150
        images[i] += stripes.view(1, 1, size)
    return ImageData(images, labels, num_classes, (0.3,) * chans, (0.3,) * chans, name="toy")


class FaultyData:
    """Wraps data so that batch number ``at`` (counted over the whole run) goes wrong: ``fault(x, y, soft)``
    raises (a crash) or returns a bad batch (e.g. NaN images from a corrupt shard)."""

    def __init__(self, data, at: int, fault):
        self.data, self.at, self.fault, self.calls = data, at, fault, 0

    def __getattr__(self, name):
        return getattr(self.data, name)

    def __len__(self):
        return len(self.data)

    def get_batch(self, idx):
        self.calls += 1
        batch = self.data.get_batch(idx)
        return self.fault(*batch) if self.calls == self.at else batch


def nan_images(x, y, soft):
    return x * float("nan"), y, soft


@pytest.fixture
def toy_data() -> ImageData:
    return make_images()


@pytest.fixture
def tiny_ancestry(tiny_spec) -> Ancestry:
    torch.manual_seed(0)
    model = tiny_spec.create_model().eval()
    return Ancestry(model, tiny_spec)


def write_idx(folder, prefix: str, images: np.ndarray, labels: np.ndarray) -> None:
    """Write IDX files (gzipped) as Fashion-MNIST ships them."""
    n, h, w = images.shape
    with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as fh:
        fh.write(struct.pack(">IIII", 2051, n, h, w) + images.astype(np.uint8).tobytes())
    with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as fh:
        fh.write(struct.pack(">II", 2049, n) + labels.astype(np.uint8).tobytes())


def write_fashion(folder, train: int, test: int):
    """Make ``folder`` with tiny Fashion-MNIST-format IDX files: random pixels, labels cycling through the 10 classes."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    write_idx(folder, "train", rng.integers(0, 255, (train, 28, 28)), np.arange(train) % 10)
    write_idx(folder, "t10k", rng.integers(0, 255, (test, 28, 28)), np.arange(test) % 10)
    return folder


@pytest.fixture
def fake_fashion(tmp_path, monkeypatch):
    """A folder with tiny Fashion-MNIST-format IDX files; the cache goes to tmp."""
    folder = write_fashion(tmp_path / "fm", train=40, test=20)
    monkeypatch.setenv("LEARNGENE_CACHE", str(tmp_path / "cache"))
    return folder


@pytest.fixture
def fashion_data(tmp_path, monkeypatch):
    """Fashion-MNIST as ``--data fashion_mnist`` reads it, without the real files: 128 training and 20 test images
    in its IDX format, found through $LEARNGENE_DATA, so a test that only needs some Fashion-MNIST runs on a machine
    without the Debian package too."""
    folder = write_fashion(tmp_path / "fashion-mnist", train=128, test=20)
    monkeypatch.setenv("LEARNGENE_DATA", str(folder))
    return folder


def own_methods() -> list[str]:
    """learngene's own registered methods: the suite holds them to the project's rules (docs, papers, examples),
    whatever plugins are installed beside them."""
    from learngene.registry import get_method, list_methods

    return [name for name in list_methods() if get_method(name).__module__.startswith("learngene.")]


def condense_tiny(name: str, ancestry, img_size: int, num_classes: int):
    """A gene of method ``name`` from a tiny ancestry; data-driven methods see 16 toy images for one step."""
    from learngene.method import CondenseInputs
    from learngene.registry import get_method
    from learngene.training.loop import TrainConfig

    method = get_method(name)()
    inputs = None
    if method.needs_data:
        inputs = CondenseInputs(
            train=make_images(16, num_classes=num_classes, size=img_size),
            train_cfg=TrainConfig(epochs=1, max_steps=1, batch_size=8, progress=False, distill_lambda=1.0),
        )
    return method.condense(ancestry, inputs)
