"""Bad files found by the hostile round of issue 37, each a one-line error (exit 2 from the CLI) that writes nothing:
image folders a grey model cannot read, class names that would split a line, pool genes whose header does not match
their tensors, and a refused resume that must leave its run folder as it found it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file

from learngene.cli import main
from learngene.data import load_dataset
from learngene.errors import DataError
from learngene.formats.model_file import save_model
from learngene.method import Ancestry, CondenseInputs
from learngene.registry import get_method
from learngene.training.loop import TrainConfig
from tests.conftest import TINY, make_images


def _folder(root, images_per_class: dict[str, list[Image.Image]]):
    for cls, images in images_per_class.items():
        (root / cls).mkdir(parents=True)
        for i, image in enumerate(images):
            image.save(root / cls / f"{i}.png")
    return root


def _grey(value: int) -> Image.Image:
    return Image.fromarray(np.full((12, 12), value, dtype=np.uint8), "L")


def _colour() -> Image.Image:
    pixels = np.zeros((12, 12, 3), dtype=np.uint8)
    pixels[..., 0] = 200  # red
    return Image.fromarray(pixels, "RGB")


def _error_line(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("streamed", [False, True])
def test_a_folder_mixing_grey_and_colour_images_is_refused_for_a_grey_model(tmp_path, streamed):
    # grey files first: the first image of every mode is judged, not only the folder's first image
    root = _folder(tmp_path / "mixed", {"a": [_grey(10), _grey(20)], "b": [_grey(30), _colour()]})
    with pytest.raises(DataError, match="holds colour images but the model takes 1-channel"):
        load_dataset(f"folder:{root}", in_chans=1, img_size=8, workers=0)
    grey = _folder(tmp_path / "grey", {"a": [_grey(10)], "b": [_grey(30), _grey(40).convert("RGB")]})
    assert load_dataset(f"folder:{grey}", in_chans=1, img_size=8, workers=0).in_chans == 1  # grey saved as RGB


def test_a_colour_image_behind_a_grey_one_of_its_mode_is_refused_when_read(tmp_path):
    """The listing judges the first image of each mode; any other colour image is refused as it is decoded."""
    root = _folder(tmp_path / "late", {"a": [_grey(10), _grey(50).convert("RGB")], "b": [_grey(30), _colour()]})
    data = load_dataset(f"folder:{root}", in_chans=1, img_size=8, workers=0)
    with pytest.raises(DataError, match=r"image .*1\.png holds colour images"):
        data.get_batch(torch.arange(len(data)))


def test_a_class_folder_whose_name_holds_a_line_break_is_refused(tmp_path, capsys):
    root = _folder(tmp_path / "nl", {"cat\ndog": [_grey(10)], "bird": [_grey(20)]})
    with pytest.raises(DataError, match=r"class folder 'cat\\ndog' holds a line break"):
        load_dataset(f"folder:{root}", in_chans=1, img_size=8)
    out = tmp_path / "a.safetensors"
    size = ["--depth", "1", "--embed-dim", "8", "--num-heads", "1", "--img-size", "8", "--patch-size", "4"]
    err = _error_line(capsys, ["ancestry", "--data", f"folder:{root}", "--in-chans", "1", *size, "-o", str(out)])
    assert "holds a line break" in err and not out.exists()


@pytest.fixture(scope="module")
def pool_gene(tmp_path_factory):
    torch.manual_seed(0)
    inputs = CondenseInputs(train=make_images(16), train_cfg=TrainConfig(max_steps=1, batch_size=8, progress=False))
    gene = get_method("pool")(design="authors").condense(Ancestry(TINY.create_model().eval(), TINY), inputs)
    path = tmp_path_factory.mktemp("pool") / "pool.safetensors"
    gene.save(path)
    return path


def _forged(src, dst, drop: str = "", **config):
    with safe_open(src, "pt") as f:
        meta, tensors = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    meta["config"] = json.dumps({**json.loads(meta["config"]), **config})
    save_file({k: v for k, v in tensors.items() if not (drop and k.startswith(drop))}, dst, metadata=meta)
    return dst


@pytest.mark.parametrize(
    "drop, config, message",
    [
        ("stitch", {}, "this pool gene lacks stitch0_2.0.weight: its header does not match its tensors"),
        ("", {"widths": "8,16,64"}, r"holds stitch.weight of shape \(32, 8\) where its header's options"),
        ("", {"instance_depth": 2}, "lacks instance2.blocks.1.norm1.weight: its header does not match"),
    ],
)
def test_a_stitched_descendant_of_a_forged_pool_gene_is_one_line(pool_gene, tmp_path, capsys, drop, config, message):
    from learngene.errors import GeneFormatError
    from learngene.gene import Learngene
    from learngene.methods.pool import stitched_descendant

    forged = _forged(pool_gene, tmp_path / "forged.safetensors", drop, **config)
    with pytest.raises(GeneFormatError, match=message):
        stitched_descendant(Learngene.load(forged), 0, 2, 0, 0)
    out = tmp_path / "s.safetensors"
    assert message.split(":")[0].replace("\\", "") in _error_line(
        capsys, ["expand", str(forged), "--stitch", "0:0-2:0", "-o", str(out)]
    )
    assert not out.exists()


def test_a_refused_resume_leaves_the_run_folder_as_it_was(tmp_path, capsys):
    anc = tmp_path / "anc.safetensors"
    save_model(anc, TINY.create_model(), TINY)
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"garbage")
    argv = ["train", str(anc), "--data", "digits", "--train-images", "16", "--epochs", "1", "--run-dir", str(run)]
    err = _error_line(capsys, [*argv, "--resume", "-o", str(tmp_path / "t.safetensors")])
    assert "checkpoint" in err and "unreadable" in err
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pt"]  # no .lock, no log left behind


# ---- an output in folders that do not exist yet: made, as timm's and transformers' savers make them (issue 47) --------
@pytest.fixture
def gene_file(tmp_path):
    model = tmp_path / "inputs" / "anc.safetensors"
    model.parent.mkdir()
    torch.manual_seed(0)
    save_model(model, TINY.create_model(), TINY)
    gene = tmp_path / "inputs" / "gene.safetensors"
    assert main(["condense", "--method", "pretrained", "--ancestry", str(model), "-o", str(gene), "--quiet"]) == 0
    return gene


@pytest.mark.parametrize("out", ["new/d.safetensors", "new/deeper/still/d.safetensors", "new/hub/"])
def test_an_output_in_missing_folders_makes_them(gene_file, tmp_path, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    assert main(["expand", str(gene_file), "-o", out, "--quiet"]) == 0
    written = tmp_path / out
    assert (written / "model.safetensors").is_file() if out.endswith("/") else written.is_file()


def test_a_refused_command_makes_no_folder(gene_file, tmp_path, monkeypatch, capsys):
    """The folders are made when the output is written: a command refused before that leaves none behind."""
    monkeypatch.chdir(tmp_path)
    err = _error_line(capsys, ["expand", str(gene_file), "--opt", "no_such_option=1", "-o", "new/deep/d.safetensors"])
    assert "no_such_option" in err and not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ("{gene}/sub/d.safetensors", "is not a directory"),  # through the input file: no folder can be made there
        ("{gene}", "never replaces"),
        ("{inputs}/", "never replaces"),  # a hub folder holding the input
    ],
)
def test_an_output_still_never_writes_into_an_input(gene_file, tmp_path, capsys, out, says):
    target = out.format(gene=gene_file, inputs=gene_file.parent)
    err = _error_line(capsys, ["expand", str(gene_file), "-o", target, "--overwrite"])
    assert says in err
    assert sorted(p.name for p in gene_file.parent.iterdir()) == ["anc.safetensors", "gene.safetensors"]


def test_an_output_under_a_folder_it_cannot_write_is_one_line(gene_file, tmp_path, capsys):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes into any folder")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        err = _error_line(capsys, ["expand", str(gene_file), "-o", str(locked / "new" / "d.safetensors")])
    finally:
        locked.chmod(0o700)
    assert "is not writable" in err and not (locked / "new").exists()
