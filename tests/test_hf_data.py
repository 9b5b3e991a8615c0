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
    "datasets", reason="the datasets extra is not installed (pip install 'learngene-vit[datasets]')"
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


# ---- checked as folders are (issue 47): every row's image, empty splits, the pixel limit -----------------------------
def _grey(value: int = 60):
    from PIL import Image

    return Image.fromarray(np.full((8, 8), value, np.uint8))


def _colour(value: int = 60):
    from PIL import Image

    pixels = np.full((8, 8, 3), value, np.uint8)
    pixels[..., 0] = 200  # red: the channels differ
    return Image.fromarray(pixels)


def _saved(tmp_path, train, test=None, name="ds"):
    """``train`` and ``test`` (image lists; a test split of two grey images unless given) as a DatasetDict with an
    Image column ``img`` and labels alternating 0, 1, saved with save_to_disk."""
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})

    def split(images):
        return datasets.Dataset.from_dict({"img": images, "label": [i % 2 for i in range(len(images))]}, features)

    datasets.DatasetDict(
        train=split(train), test=split(test if test is not None else [_grey(), _grey(9)])
    ).save_to_disk(str(tmp_path / name))
    return tmp_path / name


@pytest.mark.parametrize(
    "train",
    [
        pytest.param(lambda: [_grey(), _colour(), _colour(90), _colour(30)], id="grey first, then colour"),
        pytest.param(lambda: [_colour(), _grey(), _grey(90), _grey(30)], id="colour first"),
        pytest.param(lambda: [_grey(), _grey(9), _grey(90), _colour().convert("P")], id="a palette image last"),
        pytest.param(lambda: [_colour(), _colour(90)], id="all colour"),
    ],
)
def test_colour_rows_for_a_grey_model_are_refused_whichever_row_they_are(tmp_path, train):
    path = _saved(tmp_path, train())
    with pytest.raises(DataError) as info:
        load_dataset(f"hf:{path}", img_size=8, in_chans=1)
    message = str(info.value)
    assert "holds colour images but the model takes 1-channel (grey) input" in message and "\n" not in message


def test_grey_rows_saved_as_rgb_are_read_by_a_grey_model_and_each_row_is_judged_as_it_is_read(tmp_path):
    rows = [_grey(), _grey(90).convert("RGB"), _grey(30).convert("RGB"), _grey(9)]
    path = _saved(tmp_path, rows)
    data = load_dataset(f"hf:{path}", img_size=8, in_chans=1)
    x, _, _ = data.get_batch(torch.arange(4))
    assert x.shape == (4, 1, 8, 8)
    # a colour image of a mode the first check saw as grey in fact is refused when it is read, as in a folder
    table = data.table
    data.table = (
        table.cast_column("img", datasets.Image())
        .map(lambda r, i: {"img": _colour() if i == 2 else r["img"]}, with_indices=True)
        .cast_column("img", datasets.Image(decode=False))
    )
    with pytest.raises(DataError, match="row 2's 'img' holds colour images"):
        data.get_batch(torch.tensor([2]))


@pytest.mark.parametrize("empty", ["train", "test"])
def test_an_empty_split_is_one_line(tmp_path, empty):
    path = _saved(tmp_path, [] if empty == "train" else [_grey(), _grey(9)], [] if empty == "test" else None)
    with pytest.raises(DataError) as info:
        load_splits(f"hf:{path}", img_size=8, in_chans=1)
    assert f"hf:{path} ({empty}) is empty (no rows)" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("row", [0, 2])
def test_a_row_without_an_image_is_one_line_naming_the_row(tmp_path, row):
    images = [_grey(), _grey(9), _grey(90)]
    images[row] = None
    path = _saved(tmp_path, images)
    with pytest.raises(DataError) as info:
        load_dataset(f"hf:{path}", img_size=8, in_chans=1)
    assert f"row {row}'s 'img' holds no image (None); drop the rows without one" in str(info.value)


def test_an_unreadable_image_is_one_line_naming_the_row(tmp_path):
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    rows = {
        "img": [{"bytes": _png(_grey()), "path": None}, {"bytes": b"\x89PNG garbage", "path": None}],
        "label": [0, 1],
    }
    split = datasets.Dataset.from_dict(rows, features)
    datasets.DatasetDict(train=split, test=split).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(DataError) as info:
        load_dataset(f"hf:{tmp_path / 'ds'}", img_size=8, in_chans=1)
    assert "cannot read hf:" in str(info.value) and "row 1's 'img'" in str(info.value)


def _png(image) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_column_that_holds_no_images_is_one_line(tmp_path):
    path = _saved(tmp_path, [_grey(), _grey(9)])
    with pytest.raises(DataError, match="column 'label' holds ClassLabel values, not images"):
        load_dataset(f"hf:{path},image=label", img_size=8)


@pytest.mark.parametrize("pixels", [(10, 15), (20, 20)], ids=["past the limit", "past twice the limit"])
def test_an_image_past_pils_pixel_limit_is_one_line_without_pils_warning(tmp_path, monkeypatch, capsys, pixels):
    """PIL warns past MAX_IMAGE_PIXELS and refuses past twice it; here the limit is 100 pixels (the default's 89
    million would need a 12000 x 12000 image), so 150 pixels warn and 400 are refused: both one line, no warning."""
    import warnings

    from PIL import Image

    from tests.conftest import cli_error

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    big = Image.fromarray(np.zeros(pixels, np.uint8))
    path = _saved(tmp_path, [_grey().resize((8, 8)).crop((0, 0, 8, 8)).resize((8, 8)), big.resize(pixels[::-1])])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(DataError) as info:
            load_dataset(f"hf:{path}", img_size=8, in_chans=1)
    assert "row 1's 'img' has more pixels than PIL decodes safely (100)" in str(info.value)
    assert not [w for w in said if issubclass(w.category, Image.DecompressionBombWarning)]
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # datasets' bars of saving it
    size = ["--depth", "1", "--embed-dim", "16", "--num-heads", "2", "--img-size", "8", "--patch-size", "4"]
    err = cli_error(capsys, ["ancestry", *size, "--in-chans", "1", "--data", f"hf:{path}", "--out", "a.st"])
    assert "more pixels than PIL decodes safely" in err and not (tmp_path / "a.st").exists()


@pytest.mark.parametrize(
    ("train", "says"),
    [
        (lambda: [_grey(), _colour()], "holds colour images"),
        (lambda: [], "is empty (no rows)"),
        (lambda: [_grey(), None], "holds no image (None)"),
    ],
)
def test_the_cli_refuses_them_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, train, says):
    from tests.conftest import cli_error

    path = _saved(tmp_path, train())
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # datasets' bars of saving it
    size = ["--depth", "1", "--embed-dim", "16", "--num-heads", "2", "--img-size", "8", "--patch-size", "4"]
    err = cli_error(capsys, ["ancestry", *size, "--in-chans", "1", "--data", f"hf:{path}", "--out", "a.st"])
    assert says in err and not (tmp_path / "a.st").exists()


@pytest.mark.parametrize("server", ["silent", "no such host"])
def test_a_hub_dataset_with_no_network_is_one_line_in_seconds(tmp_path, monkeypatch, server):
    """HF_HUB_OFFLINE unset: the datasets cache first, without the network, then one lookup of at most 2 s (datasets'
    own took 24 s of retries); the 5 s bound is on that timeout, not a speed."""
    import time

    from tests.hub_fixtures import NO_SUCH_HOST, SilentServer, online_hub

    silent = SilentServer() if server == "silent" else None
    online_hub(monkeypatch, tmp_path / "hf-cache", silent.url if silent else NO_SUCH_HOST)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "ds-cache"))
    start = time.monotonic()
    with pytest.raises(DataError) as info:
        load_dataset("hf:learngene-tests/no-such-dataset")
    seconds = time.monotonic() - start
    message = str(info.value)
    assert seconds < 5.0, seconds
    assert "\n" not in message and "HF_HUB_OFFLINE=1" in message and "save_to_disk" in message, message
    print(f"hf: dataset, no network ({server}): {seconds:.2f} s")
    if silent is not None:
        silent.close()


@pytest.mark.parametrize("name", ["org/b..c", "org/" + "a" * 97, "a/b/c/d"])
def test_a_hub_dataset_name_outside_the_hubs_grammar_is_one_line(tmp_path, monkeypatch, name):
    offline_hub(monkeypatch, tmp_path / "hf-cache")
    with pytest.raises(DataError) as info:
        load_dataset(f"hf:{name}")
    assert "does not name a Hub repo" in str(info.value) and "hf:ORG/NAME" in str(info.value)
