"""Every registered data source, as test_registry.py runs every registered method.

Each source has a usage and a help line that ``--data``'s help and the unknown-name error list, and loads,
from the example input this file gives it, a train and a test split of the same classes whose labels lie
within them. A source registered without an example here fails: give it one.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from learngene.cli.parser import build_parser
from learngene.data import load_dataset
from learngene.errors import DataError
from learngene.registry import list_sources


def fashion(tmp_path, request):
    return "fashion_mnist", {"data_dir": request.getfixturevalue("fake_fashion")}


def digits(tmp_path, request):
    return "digits", {}


def folder(tmp_path, request):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for cls in ("cat", "dog"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(3):
                image = rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)
                Image.fromarray(image).save(tmp_path / split / cls / f"{i}.png")
    return f"folder:{tmp_path}", {"img_size": 16}


def torchvision(tmp_path, request):
    """torchvision's MNIST as its download leaves it (``MNIST/raw``: four IDX files), written here in its format:
    nothing is downloaded. Without a folder, or with one that does not hold it, the source says so in one line."""
    pytest.importorskip("torchvision")
    from tests.conftest import write_fashion

    with pytest.raises(DataError, match=r"^torchvision datasets need data_dir \(--data-dir\)"):
        load_dataset("torchvision:MNIST")
    with pytest.raises(DataError, match=r"^torchvision MNIST not found under "):
        load_dataset("torchvision:MNIST", data_dir=tmp_path)
    (tmp_path / "MNIST").mkdir()
    raw = write_fashion(tmp_path / "MNIST" / "raw", train=12, test=6)
    for packed in raw.glob("*.gz"):  # torchvision reads the files unpacked
        packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
    return "torchvision:MNIST", {"data_dir": tmp_path, "img_size": 16}


def hf(tmp_path, request):
    pytest.importorskip(
        "datasets", reason="the datasets extra is not installed (pip install 'learngene-vit[datasets]')"
    )
    from tests.hub_fixtures import tiny_image_dataset

    tiny_image_dataset(tmp_path / "ds", train=6, test=3)
    return f"hf:{tmp_path / 'ds'}", {"img_size": 16}


EXAMPLES = {"fashion_mnist": fashion, "digits": digits, "folder": folder, "torchvision": torchvision, "hf": hf}


@pytest.mark.parametrize("name", list(list_sources()))
def test_every_data_source_is_listed_and_loads(name, tmp_path, request):
    source = list_sources()[name]
    assert source.help or source.package, f"data source {name}: give it a help line"
    train_parser = next(a for a in build_parser()._actions if a.dest == "command").choices["train"]
    assert (source.name if source.package else source.usage) in train_parser.format_help()  # a plugin's: unloaded
    with pytest.raises(DataError) as refused:
        load_dataset("no_such_source")
    assert source.usage in str(refused.value)
    if source.package:  # an installed plugin's: its own name loads it where it takes no argument
        if source.argument:
            pytest.skip(f"{name} of {source.package} takes {source.argument}, which only its package can give")
        data_name, kwargs = name, {}
    else:
        assert name in EXAMPLES, f"data source {name}: give tests/test_data_sources.py an example to load"
        data_name, kwargs = EXAMPLES[name](tmp_path, request)
    train, test = (load_dataset(data_name, split, **kwargs) for split in ("train", "test"))
    assert len(train) and len(test) and train.num_classes == test.num_classes
    for data in (train, test):
        labels = getattr(data, "labels", None)
        if labels is not None:
            assert 0 <= int(labels.min()) and int(labels.max()) < data.num_classes
