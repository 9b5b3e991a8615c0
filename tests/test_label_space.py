"""Label spaces: data name their classes, files record them, and `train` reuses a head only on the same classes."""

import json

import pytest
from safetensors import safe_open

from learngene.cli import main
from learngene.data import class_subset, digits
from learngene.formats.labels import choose_head
from learngene.formats.model_file import load_model_file
from learngene.gene import Learngene
from tests.conftest import TINY_ARGS, cli_ok

DIGITS = {"dataset": "digits", "classes": [str(d) for d in range(10)]}


def test_head_is_reused_only_on_the_same_named_classes():
    other = {"dataset": "fashion_mnist", "classes": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]}
    assert not choose_head(DIGITS, 10, DIGITS, 10).fresh
    assert choose_head(DIGITS, 10, other, 10).fresh  # same count, other classes
    assert "trained on digits" in choose_head(DIGITS, 10, other, 10).why
    assert choose_head(DIGITS, 10, DIGITS, 10, force_new=True).fresh
    assert choose_head(DIGITS, 10, {"dataset": "digits", "classes": DIGITS["classes"][:5]}, 5).fresh
    assert not choose_head(None, 10, DIGITS, 10).fresh  # an untrained or old head: counts decide
    reordered = {"dataset": "digits", "classes": DIGITS["classes"][::-1]}
    assert choose_head(DIGITS, 10, reordered, 10).fresh  # the same names in another label order


def test_datasets_name_their_classes_and_subsets_keep_the_names():
    data = digits("test", img_size=8)
    assert data.label_space == DIGITS
    sub = class_subset(data, [7, 2])
    assert sub.label_space == {"dataset": "digits", "classes": ["7", "2"]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("labels")
    anc, gene = d / "anc.safetensors", d / "gene.safetensors"
    data = ["--data", "digits", "--train-images", "100", "--epochs", "1", "--quiet"]
    cli_ok("ancestry", *TINY_ARGS, *data, "--out", anc)
    cli_ok("condense", "--method", "pretrained", "--ancestry", anc, "--quiet", "--out", gene)
    cli_ok("expand", gene, "--depth", "1", "--quiet", "--out", d / "desc.safetensors")
    return d


def test_model_and_gene_files_record_the_label_space(files):
    assert load_model_file(files / "anc.safetensors")[2]["label_space"] == DIGITS
    assert Learngene.load(files / "gene.safetensors").label_space == DIGITS
    assert load_model_file(files / "desc.safetensors")[2]["label_space"] == DIGITS  # the gene gave the head
    with safe_open(str(files / "gene.safetensors"), framework="pt") as fh:
        assert json.loads(fh.metadata()["label_space"]) == DIGITS


def _train(files, name, *extra, data=("--data", "digits")):
    out = files / f"{name}.safetensors"
    args = [
        "train",
        str(files / "desc.safetensors"),
        *data,
        "--train-images",
        "40",
        "--epochs",
        "1",
        "--eval-images",
        "20",
        "--out",
        str(out),
        *extra,
    ]
    assert main(args) == 0
    return load_model_file(out)


def test_train_reuses_the_head_on_the_same_classes_and_says_so(files, capsys):
    _, _, origin = _train(files, "same")
    assert "reusing the model's head" in capsys.readouterr().out
    assert origin["new_head"] is False and origin["label_space"] == DIGITS


def test_train_makes_a_fresh_head_for_other_classes_of_the_same_count(files, capsys, fake_fashion, monkeypatch):
    monkeypatch.setenv("LEARNGENE_DATA", str(fake_fashion))
    before = load_model_file(files / "desc.safetensors")[0]["head.weight"]
    state, spec, origin = _train(files, "other", "--seed", "1", data=("--data", "fashion_mnist"))
    said = capsys.readouterr().out
    assert "new 10-way head" in said and "trained on digits" in said
    assert origin["new_head"] is True and origin["label_space"]["dataset"] == "fashion_mnist"
    # one epoch of 40 images moves the head a little; a fresh head is another draw altogether
    assert (state["head.weight"] - before).abs().mean() > 0.5 * before.abs().mean()


def test_new_head_flag_forces_a_fresh_head(files, capsys):
    _, _, origin = _train(files, "forced", "--new-head")
    assert "new 10-way head (new_head=True, --new-head)" in capsys.readouterr().out and origin["new_head"] is True
