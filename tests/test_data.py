import gzip
import os
import shutil
from pathlib import Path

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
    normalize,
)
from learngene.errors import DataError
from tests.conftest import make_images


def test_fashion_mnist_from_a_folder_is_ungzipped_once(fake_fashion, tmp_path):
    train = fashion_mnist("train", data_dir=fake_fashion)
    test = fashion_mnist("test", data_dir=fake_fashion)
    assert train.images.shape == (40, 1, 28, 28) and train.images.dtype == torch.uint8
    assert len(test) == 20 and train.labels.tolist()[:3] == [0, 1, 2] and train.num_classes == 10
    [raw] = (tmp_path / "cache" / "fashion-mnist").glob("*/FashionMNIST/raw")
    stamp = os.path.getmtime(raw / "train-images-idx3-ubyte")
    fashion_mnist("train", data_dir=fake_fashion)
    assert os.path.getmtime(raw / "train-images-idx3-ubyte") == stamp
    assert fashion_mnist("train", data_dir=fake_fashion, img_size=14).img_size == 14


def test_fashion_mnist_from_the_environment(fake_fashion, monkeypatch):
    monkeypatch.setenv("LEARNGENE_DATA", str(fake_fashion))
    assert len(fashion_mnist("test")) == 20


def test_missing_data_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr("learngene.data.sources.DEBIAN_FASHION_MNIST", tmp_path / "nowhere")
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


@pytest.mark.parametrize("rank, world", [(0, 1), (1, 2)])
def test_batches_for_a_device_are_the_cpu_batches_made_there(rank, world, toy_data):
    """With ``device``, in-memory images travel as uint8 and are normalized and augmented where the batches go: the
    same operations as the CPU batches, so on the CPU (the only device here) the same tensors, bit for bit; soft
    targets and DDP shares included."""
    data = toy_data.with_soft_targets(torch.randn(len(toy_data), 4))
    cpu = torch.device("cpu")
    for augment in (False, True):
        made = [
            Batches(data, 10, shuffle=True, seed=3, rank=rank, world=world, augment=augment, device=d)
            for d in (None, cpu)
        ]
        assert made[1]._raw and not made[0]._raw
        for before, after in zip(*made, strict=True):
            assert after.x.dtype == torch.float32 and after.global_size == before.global_size
            assert (
                torch.equal(after.x, before.x)
                and torch.equal(after.y, before.y)
                and torch.equal(after.soft, before.soft)
            )
    x, y, soft = data.gather(torch.tensor([3, 1]))
    assert (
        x.dtype == torch.uint8 and torch.equal(x, data.images[[3, 1]]) and torch.equal(soft, data.soft_targets[[3, 1]])
    )
    assert torch.equal(data.get_batch(torch.tensor([3, 1]))[0], normalize(x, data.mean, data.std))


def test_normalization_is_applied(toy_data):
    x, _, _ = toy_data.get_batch(torch.arange(4))
    expected = (toy_data.images[:4].float() / 255 - 0.3) / 0.3
    assert torch.equal(x, expected)  # the same three float32 operations, in the same order


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


# ---- image folders streamed with the ancestry's preprocessing ------------------------------------------
@pytest.fixture(scope="module")
def rgb_folder(tmp_path_factory):
    from learngene.data import write_image_folder

    return write_image_folder(tmp_path_factory.mktemp("rgb"), num_classes=3, per_class=5, size=40)


def test_streamed_folder_batches_do_not_depend_on_workers_or_ranks(rgb_folder):
    """DeiT augmentation draws per image from (seed, epoch, position): 0 or 2 workers, 1 or 2 ranks, the same images."""

    def epoch(workers, rank=0, world=1, start_step=0):
        data = load_dataset(f"folder:{rgb_folder}", "train", img_size=32, augment="deit", workers=workers)
        batches = Batches(data, 6, shuffle=True, seed=1, rank=rank, world=world)
        batches.set_epoch(2, start_step)
        return list(batches)

    torch.manual_seed(5)
    one = epoch(0)
    after_main = torch.rand(1)
    torch.manual_seed(5)
    after_plain = torch.rand(1)
    assert torch.equal(after_main, after_plain), "decoding in the main process moved the training RNG"
    two_workers = epoch(2)
    assert [len(b.y) for b in one] == [6, 6, 3] and one[0].x.shape == (6, 3, 32, 32)
    assert all(torch.equal(a.x, b.x) and torch.equal(a.y, b.y) for a, b in zip(one, two_workers))
    r0, r1 = epoch(1, 0, 2), epoch(1, 1, 2)
    for whole, a, b in zip(one, r0, r1):
        assert whole.global_size == a.global_size == b.global_size
        assert torch.equal(whole.x[0::2], a.x) and torch.equal(whole.x[1::2], b.x)
    assert torch.equal(epoch(0, start_step=2)[0].x, one[2].x)
    assert not torch.equal(epoch(0)[0].x, load_and_plain(rgb_folder)[0].x)


def load_and_plain(folder):
    data = load_dataset(f"folder:{folder}", "train", img_size=32)
    batches = Batches(data, 6, shuffle=True, seed=1)
    batches.set_epoch(2)
    return list(batches)


def test_a_rank_with_no_share_of_the_last_batch_gets_an_empty_one(rgb_folder):
    data = load_dataset(f"folder:{rgb_folder}", "train", img_size=16, workers=1).subset(range(13))
    last = list(Batches(data, 6, shuffle=False, rank=1, world=2))[-1]
    assert last.x.shape == (0, 3, 16, 16) and last.global_size == 1


def test_folder_follows_the_ancestrys_preprocessing(rgb_folder):
    import timm

    from learngene.data import preprocessing_cfg

    deit = timm.create_model("deit_tiny_patch16_224", pretrained=False, depth=2)
    pre = preprocessing_cfg(deit)
    assert pre == {
        "input_size": (3, 224, 224),
        "interpolation": "bicubic",
        "mean": (0.485, 0.456, 0.406),
        "std": (0.229, 0.224, 0.225),
        "crop_pct": 0.9,
        "crop_mode": "center",
    }
    dino = timm.create_model("vit_small_patch14_dinov2", pretrained=False, depth=1, img_size=112)
    assert preprocessing_cfg(dino)["input_size"] == (3, 112, 112) and preprocessing_cfg(dino)["crop_pct"] == 1.0
    data = load_dataset(f"folder:{rgb_folder}", "test", img_size=32, preprocessing=pre)
    assert preprocessing_cfg(data) == {**pre, "input_size": (3, 32, 32)}
    # resize the short side to 32 / 0.9 = 35 px (bicubic), centre crop 32, normalize: the same numbers by hand
    from PIL import Image
    from torchvision import transforms as T

    by_hand = T.Compose(
        [
            T.Resize(35, T.InterpolationMode.BICUBIC),
            T.CenterCrop(32),
            T.ToTensor(),
            T.Normalize(pre["mean"], pre["std"]),
        ]
    )
    x = data.get_batch(torch.tensor([0]))[0][0]
    assert torch.equal(x, by_hand(Image.open(data.samples[0][0]).convert("RGB")))  # PIL's resize, then the same ops
    default = load_dataset(f"folder:{rgb_folder}", "test", img_size=32).get_batch(torch.tensor([0]))[0][0]
    assert (default - x).abs().max() > 0.05  # another resize and crop: another image, not a rounding apart
    grey = preprocessing_cfg(pre, in_chans=1)
    assert grey["input_size"] == (1, 224, 224) and len(grey["mean"]) == 1
    with pytest.raises(DataError, match="lacks"):
        preprocessing_cfg({"mean": (0.5,)})


def test_train_and_test_folders_must_have_the_same_classes(tmp_path):
    from learngene.data import load_splits, write_image_folder

    write_image_folder(tmp_path, num_classes=3, per_class=2, size=12)
    (tmp_path / "test" / "class_2").rename(tmp_path / "test" / "class_9")
    with pytest.raises(DataError, match="class_9 only here.*class_2 missing here"):
        load_splits(f"folder:{tmp_path}", img_size=8)
    (tmp_path / "test" / "class_9").rename(tmp_path / "test" / "class_2")
    train, test = load_splits(f"folder:{tmp_path}", img_size=8)
    assert train.classes == test.classes == ["class_0", "class_1", "class_2"]


def test_a_folder_of_one_class_is_refused(tmp_path):
    from learngene.data import write_image_folder

    write_image_folder(tmp_path, num_classes=1, per_class=2, size=12, splits=("train",))
    with pytest.raises(DataError, match="one class"):
        load_dataset(f"folder:{tmp_path}", img_size=8)


@pytest.mark.parametrize("side", [10_000, 20_000])  # PIL warns above 89 M pixels and refuses above 179 M
def test_a_decompression_bomb_found_while_streaming_is_one_line(rgb_folder, tmp_path, side):
    from tests.test_bad_inputs import _write_png_bomb

    shutil.copytree(rgb_folder / "train", tmp_path / "train")
    data = load_dataset(f"folder:{tmp_path}", "train", img_size=16, workers=1)
    _write_png_bomb(Path(data.samples[3][0]), side)  # replaced after the header check, before decoding
    with pytest.raises(DataError, match="decompression bomb") as info:
        list(Batches(data, 4, shuffle=False))
    assert len(str(info.value).splitlines()) == 1


def test_fashion_mnist_files_replaced_by_garbage_are_refused_not_served_from_the_cache(fake_fashion):
    assert len(fashion_mnist("train", data_dir=fake_fashion)) == 40
    garbage = fake_fashion / "train-images-idx3-ubyte.gz"
    with gzip.open(garbage, "wb") as fh:
        fh.write(b"\x00\x00\x08\x03" + b"garbage" * 50)
    with pytest.raises(DataError, match="not a Fashion-MNIST IDX file"):
        fashion_mnist("train", data_dir=fake_fashion)


def test_a_registered_data_source_is_loaded_by_name_and_unknown_names_list_the_sources(monkeypatch):
    from learngene.data import DATA_SOURCES, DataSource, register_source

    monkeypatch.setitem(DATA_SOURCES, "toy", DATA_SOURCES.get("toy"))  # restored (removed) after the test
    seen = {}

    def load(argument, req):
        seen.update(argument=argument, split=req.split, img_size=req.img_size)
        return make_images(n=8, size=req.img_size or 16)

    register_source(DataSource("toy", load, argument="SEED"))
    data = load_dataset("toy:7", "test", img_size=12, in_chans=3)
    assert seen == {"argument": "7", "split": "test", "img_size": 12}
    assert data.images.shape == (8, 3, 12, 12)  # channel conversion still applies to every source
    with pytest.raises(DataError, match="unknown dataset 'toy'.*toy:SEED"):
        load_dataset("toy")  # a source that takes an argument, named without one
    with pytest.raises(DataError, match="unknown dataset 'digits:3'"):
        load_dataset("digits:3")
    with pytest.raises(DataError, match=r"aug='deit' \(--aug deit\) is for image folders"):
        load_dataset("toy:1", augment="deit")  # only streamed sources augment per image


def test_an_image_broken_after_listing_is_one_line_when_read_without_workers(rgb_folder, tmp_path):
    """``get_batch`` (evaluation, calibration) reads in this process: a corrupt image is the DataError a worker gives."""
    shutil.copytree(rgb_folder / "train", tmp_path / "train")
    data = load_dataset(f"folder:{tmp_path}", "train", img_size=16, workers=0)
    Path(data.samples[2][0]).write_bytes(b"not really a png")
    with pytest.raises(DataError) as info:
        data.get_batch(torch.arange(4))
    assert len(str(info.value).splitlines()) == 1
