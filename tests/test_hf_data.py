"""``--data hf:...``: a Hugging Face ``datasets`` dataset built here and saved with ``save_to_disk`` trains as an image
folder does (preprocessing, subsets, few-shot, label space); bad input is one line. Skipped without ``datasets``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learngene.cli import main
from learngene.data import few_shot, fraction, load_dataset, load_splits
from learngene.errors import DataError
from learngene.formats.model_file import load_model_file
from tests.hub_fixtures import offline_hub, tiny_image_dataset

datasets = pytest.importorskip(
    "datasets", reason="the datasets extra is not installed (pip install 'learngene[datasets]')"
)


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "cifar"
    return path, tiny_image_dataset(path)


def test_a_saved_dataset_streams_with_the_models_preprocessing(saved):
    path, ds = saved
    pre = {"input_size": (3, 16, 16), "interpolation": "bilinear", "mean": (0.5,) * 3, "std": (0.25,) * 3,
           "crop_pct": 1.0, "crop_mode": "center"}  # fmt: skip
    train, test = load_splits(f"hf:{path}", img_size=16, in_chans=3, preprocessing=pre)
    assert (len(train), len(test)) == (24, 12) and train.num_classes == 3
    assert train.label_space == {"dataset": "hf:cifar", "classes": ["kind0", "kind1", "kind2"]}
    assert train.labels.tolist() == list(ds["train"]["label"])
    x, y, _ = train.get_batch(torch.tensor([0, 5]))
    assert x.shape == (2, 3, 16, 16) and y.tolist() == [0, 2]
    # the first image through timm's eval transform by hand: resize the short side to 16, centre crop, normalize
    from timm.data import create_transform

    expected = create_transform(input_size=(3, 16, 16), interpolation="bilinear", mean=(0.5,) * 3, std=(0.25,) * 3,
                                crop_pct=1.0, crop_mode="center")(ds["train"][0]["img"].convert("RGB"))  # fmt: skip
    torch.testing.assert_close(x[0], expected, rtol=0, atol=0)


def test_subsets_and_few_shot_follow_the_folder_rules(saved):
    path, _ = saved
    train = load_dataset(f"hf:{path}", img_size=16)
    shots = few_shot(train, 2, seed=0)
    assert len(shots) == 6 and sorted(np.bincount(shots.labels.numpy()).tolist()) == [2, 2, 2]
    part = fraction(train, 0.5, seed=1)
    assert len(part) == 12 and part.classes == train.classes
    x, _, _ = part.get_batch(torch.tensor([0]))
    row = int(part.samples[0][0].rsplit("/", 1)[1])  # the subset reads the rows it names
    assert torch.equal(x[0], train.get_batch(torch.tensor([row]))[0][0])


def test_named_columns_and_a_named_evaluation_split(tmp_path):
    from PIL import Image

    def split(n):
        images = [Image.fromarray(np.full((8, 8), 40 * (i % 2), np.uint8)) for i in range(n)]
        return datasets.Dataset.from_dict(
            {"picture": images, "fine_label": [i % 2 for i in range(n)], "coarse": [0] * n}
        )

    datasets.DatasetDict(train=split(6), validation=split(4)).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(DataError, match="no label column"):
        load_dataset(f"hf:{tmp_path / 'ds'}")
    train, test = load_splits(f"hf:{tmp_path / 'ds'},label=fine_label", img_size=8, in_chans=1)
    assert len(test) == 4 and train.classes == ["0", "1"]  # no test split: validation
    assert len(load_dataset(f"hf:{tmp_path / 'ds'}:train,label=fine_label", split="test", img_size=8)) == 6


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("hf:{path}:nope", "no 'nope' split"),
        ("hf:{path},colour=img", "not image=COLUMN or label=COLUMN"),
        ("hf:{path},image=nothing", "no image column named 'nothing'"),
        ("hf:{tmp}", "not a dataset saved by datasets' save_to_disk"),
    ],
)
def test_bad_input_is_one_line(saved, tmp_path, data, says):
    path, _ = saved
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(DataError) as info:
        load_splits(data.format(path=path, tmp=tmp_path / "empty-dir"))
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_hub_name_not_in_the_cache_says_what_to_download(tmp_path, monkeypatch):
    offline_hub(monkeypatch, tmp_path / "hf-cache")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "ds-cache"))
    with pytest.raises(DataError) as info:
        load_dataset("hf:learngene-tests/no-such-dataset")
    message = str(info.value)
    assert "\n" not in message and "HF_HUB_OFFLINE=1" in message and "save_to_disk" in message


def test_cli_trains_from_a_saved_dataset(saved, tmp_path, monkeypatch):
    path, _ = saved
    monkeypatch.chdir(tmp_path)
    tiny = ["--depth", "1", "--embed-dim", "32", "--num-heads", "2", "--img-size", "16", "--patch-size", "4"]
    assert main(["ancestry", *tiny, "--data", f"hf:{path}", "--epochs", "1", "--batch-size", "8", "--workers", "0",
                 "--out", "a.safetensors", "--quiet"]) == 0  # fmt: skip
    _, spec, origin = load_model_file("a.safetensors")
    assert spec.num_classes == 3 and origin["label_space"]["classes"] == ["kind0", "kind1", "kind2"]
    assert origin["data"] == "hf:cifar"
