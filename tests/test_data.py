import os

import numpy as np
import pytest
import torch

from learngene.data import (
    Batches,
    ImageData,
    class_subset,
    digits,
    fashion_mnist,
    few_shot,
    fraction,
    image_folder,
    load_dataset,
)
from learngene.errors import DataError
from tests.conftest import make_images


def test_fashion_mnist_from_a_folder_is_ungzipped_once(fake_fashion, tmp_path):
    train = fashion_mnist("train", data_dir=fake_fashion)
    test = fashion_mnist("test", data_dir=fake_fashion)
    assert train.images.shape == (40, 1, 28, 28) and train.images.dtype == torch.uint8
    assert len(test) == 20 and train.labels.tolist()[:3] == [0, 1, 2] and train.num_classes == 10
    raw = tmp_path / "cache" / "fashion-mnist" / "FashionMNIST" / "raw"
    stamp = os.path.getmtime(raw / "train-images-idx3-ubyte")
    fashion_mnist("train", data_dir=fake_fashion)
    assert os.path.getmtime(raw / "train-images-idx3-ubyte") == stamp
    assert fashion_mnist("train", data_dir=fake_fashion, img_size=14).img_size == 14


def test_fashion_mnist_from_the_environment(fake_fashion, monkeypatch):
    monkeypatch.setenv("LEARNGENE_DATA", str(fake_fashion))
    assert len(fashion_mnist("test")) == 20


def test_missing_data_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr("learngene.data.DEBIAN_FASHION_MNIST", tmp_path / "nowhere")
    monkeypatch.delenv("LEARNGENE_DATA", raising=False)
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        fashion_mnist("train")
    with pytest.raises(DataError, match="not found in"):
        fashion_mnist("train", data_dir=tmp_path)


def test_corrupt_gzip_is_reported(fake_fashion):
    (fake_fashion / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(DataError, match="corrupt"):
        fashion_mnist("test", data_dir=fake_fashion)


def test_digits_are_resized_and_split_stably():
    train, test = digits("train", img_size=16), digits("test", img_size=16)
    assert train.images.shape[1:] == (1, 16, 16) and len(train) + len(test) == 1797
    assert set(test.labels.tolist()) == set(range(10))
    assert torch.equal(digits("train", img_size=16).labels, train.labels)


def test_subsets(toy_data):
    shot = few_shot(toy_data, 3, seed=1)
    assert torch.bincount(shot.labels).tolist() == [3, 3, 3, 3]
    with pytest.raises(DataError, match="fewer than"):
        few_shot(toy_data, 100)
    assert len(fraction(toy_data, 0.25)) == 16
    sub = class_subset(toy_data, [3, 1])
    assert sub.num_classes == 2 and set(sub.labels.tolist()) == {0, 1} and len(sub) == 32
    assert torch.equal(sub.images[sub.labels == 0], toy_data.images[toy_data.labels == 3])
    empty = ImageData(toy_data.images[:2], torch.tensor([0, 0]), 4, (0.3,), (0.3,), name="e")
    with pytest.raises(DataError, match="class 2 has no images"):
        class_subset(empty, [0, 2])


def test_batches_are_deterministic_and_sharded_like_one_process(toy_data):
    one = list(Batches(toy_data, 10, shuffle=True, seed=3))
    again = list(Batches(toy_data, 10, shuffle=True, seed=3))
    assert all(torch.equal(a.y, b.y) and torch.equal(a.x, b.x) for a, b in zip(one, again))
    r0 = list(Batches(toy_data, 10, shuffle=True, seed=3, rank=0, world=2))
    r1 = list(Batches(toy_data, 10, shuffle=True, seed=3, rank=1, world=2))
    for whole, a, b in zip(one, r0, r1):
        assert whole.global_size == a.global_size == len(a.y) + len(b.y)
        assert sorted(whole.y.tolist()) == sorted(a.y.tolist() + b.y.tolist())
    skipping = Batches(toy_data, 10, shuffle=True, seed=3)
    skipping.set_epoch(0, start_step=4)
    assert torch.equal(next(iter(skipping)).x, one[4].x)
    other_epoch = Batches(toy_data, 10, shuffle=True, seed=3)
    other_epoch.set_epoch(1)
    assert not torch.equal(next(iter(other_epoch)).y, one[0].y)
    with pytest.raises(DataError, match="empty"):
        Batches(toy_data.subset([]), 4, shuffle=False)


def test_normalization_is_applied(toy_data):
    x, _, _ = toy_data.get_batch(torch.arange(4))
    expected = (toy_data.images[:4].float() / 255 - 0.3) / 0.3
    torch.testing.assert_close(x, expected)


def test_image_folder_in_memory_and_streamed(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(tmp_path / cls / f"{i}.png")
    mem = image_folder(tmp_path, img_size=16, in_chans=3)
    assert mem.images.shape == (6, 3, 16, 16) and mem.num_classes == 2
    grey = image_folder(tmp_path, img_size=8, in_chans=1)
    assert grey.images.shape == (6, 1, 8, 8)
    stream = image_folder(tmp_path, img_size=16, in_chans=3, in_memory=False)
    batch = next(iter(Batches(stream, 4, shuffle=False)))
    assert batch.x.shape == (4, 3, 16, 16) and batch.x.dtype == torch.float32
    via_name = load_dataset(f"folder:{tmp_path}", "train", img_size=16)
    assert len(via_name) == 6
    with pytest.raises(DataError, match="does not exist"):
        image_folder(tmp_path / "nope", 16)


def test_torchvision_dataset_on_disk(fake_fashion, tmp_path):
    raw = tmp_path / "tv" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    import gzip
    import shutil
    for f in fake_fashion.iterdir():
        with gzip.open(f) as src, open(raw / f.name.removesuffix(".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    data = load_dataset("torchvision:FashionMNIST", "test", data_dir=tmp_path / "tv", in_chans=3)
    assert data.images.shape == (20, 3, 28, 28)
    with pytest.raises(DataError, match="not found"):
        load_dataset("torchvision:CIFAR10", "train", data_dir=tmp_path)
    with pytest.raises(DataError, match="unknown dataset"):
        load_dataset("imagenet22k")


def test_toy_task_generator_is_balanced():
    data = make_images(20, 4)
    assert torch.bincount(data.labels).tolist() == [5] * 4
