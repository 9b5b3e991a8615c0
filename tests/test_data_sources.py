"""Every registered data source, as test_registry.py runs every registered method.

Each source has a usage and a help line that ``--data``'s help and the unknown-name error list, and loads,
from the example input this file gives it, a train and a test split of the same classes whose labels lie
within them. A source registered without an example here fails: give it one.
"""

from __future__ import annotations

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
    pytest.importorskip("torchvision")
    # no torchvision dataset is downloaded here: its loading is left to its own tests; what it says without one
    with pytest.raises(DataError, match="--data-dir"):
        load_dataset("torchvision:CIFAR10")
    with pytest.raises(DataError, match="CIFAR10"):
        load_dataset("torchvision:CIFAR10", data_dir=tmp_path)
    return None, {}


def hf(tmp_path, request):
    pytest.importorskip("datasets", reason="the datasets extra is not installed (pip install 'learngene[datasets]')")
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
    if data_name is None:
        return
    train, test = (load_dataset(data_name, split, **kwargs) for split in ("train", "test"))
    assert len(train) and len(test) and train.num_classes == test.num_classes
    for data in (train, test):
        labels = getattr(data, "labels", None)
        if labels is not None:
            assert 0 <= int(labels.min()) and int(labels.max()) < data.num_classes
