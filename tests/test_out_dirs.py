"""``--out DIR/`` means a timm hub folder for every command that writes a model (``ancestry``, ``train``, ``adapt``,
``expand``) and for the Python results' ``save("DIR/")``: the folder loads with ``timm.create_model("local-dir:DIR",
pretrained=True)`` into the very model the command writes as a file (logits equal bit for bit: the same seed on the
CPU gives the same weights), and its card names what the model is and the facts its file records (issue 53)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import learngene.pipeline as lp
from learngene.cli import main
from learngene.errors import LearngeneError
from learngene.formats.model_file import read_model
from tests.conftest import cli_error, cli_ok

# the cheapest runs: one step of 8 of 16 digits, evaluated on 8, at 16 px (as tests/test_pipeline.py)
DATA = ["--data", "digits", "--train-images", "16"]
TRAIN = ["--max-steps", "1", "--batch-size", "8", "--eval-images", "8", "--quiet"]
SIZE = ["--depth", "1", "--embed-dim", "32", "--num-heads", "2", "--patch-size", "4", "--img-size", "16"]
SIZE_FIELDS = {"depth": 1, "embed_dim": 32, "num_heads": 2, "patch_size": 4, "img_size": 16}
SETTINGS = {"max_steps": 1, "batch_size": 8, "eval_images": 8, "progress": False}
NOT_TRAINED = "it has not been trained after expansion"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """An ancestry (MIT), a WAVE gene condensed from it (WAVE adapts) and a descendant of that gene, as files."""
    work = tmp_path_factory.mktemp("out-dirs")
    files = {name: work / f"{name}.safetensors" for name in ("ancestry", "gene", "descendant")}
    cli_ok("ancestry", *SIZE, *DATA, *TRAIN, "--license", "MIT", "-o", files["ancestry"])
    cli_ok("condense", "--method", "wave", "--ancestry", files["ancestry"], *DATA, *TRAIN, "-o", files["gene"])
    cli_ok("expand", files["gene"], "--quiet", "-o", files["descendant"])
    return files


def _probe() -> torch.Tensor:
    return torch.randn(4, 1, 16, 16, generator=torch.Generator().manual_seed(0))


def _same_logits(folder: Path, model: torch.nn.Module) -> None:
    """The folder, read by timm alone, computes exactly what ``model`` does."""
    import timm

    loaded = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    with torch.no_grad():
        assert torch.equal(loaded(_probe()), model.eval()(_probe()))


def _facts(card: str) -> dict[str, str]:
    """The card's ``- **key**: value`` lines."""
    return dict(line[4:].split("**: ", 1) for line in card.splitlines() if line.startswith("- **"))


# each command, its arguments but --out, the kind its card names, and what its card says of its training
COMMANDS = {
    "ancestry": (["ancestry", *SIZE, *DATA, *TRAIN, "--license", "MIT"], "ancestry"),
    "train": (["train", "DESCENDANT", *DATA, *TRAIN], "fine-tuned descendant"),
    "train an ancestry": (["train", "ANCESTRY", *DATA, *TRAIN, "--new-head"], "fine-tuned ancestry"),
    "adapt": (["adapt", "GENE", "--depth", "1", *DATA, *TRAIN], "adapted descendant"),
    "expand": (["expand", "GENE", "--depth", "1", "--quiet"], "descendant"),
}


def _argv(name: str, made: dict[str, Path]) -> list[str]:
    inputs = {"DESCENDANT": made["descendant"], "ANCESTRY": made["ancestry"], "GENE": made["gene"]}
    return [str(inputs.get(a, a)) for a in COMMANDS[name][0]]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_model_writing_command_writes_a_hub_folder_for_a_folder_out(name, made, tmp_path, capsys):
    argv, kind = _argv(name, made), COMMANDS[name][1]
    folder, file = tmp_path / "out", tmp_path / "out.safetensors"
    assert main([*argv, "-o", f"{folder}/"]) == 0
    assert f"wrote {folder}/ (timm hub folder)" in capsys.readouterr().err  # --quiet: results on stderr
    assert main([*argv, "-o", str(file)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    written = read_model(file)
    _same_logits(folder, written.model)
    card = (folder / "README.md").read_text()
    facts, origin = _facts(card), written.origin
    assert facts["kind"] == kind
    accuracy = f"test accuracy {origin.get('eval_acc', origin.get('adapt_acc')) or 0:.4f}"  # a descendant: none
    if name == "ancestry":
        assert facts["trained on"].startswith("digits-train-16 (digits [0, 1, 2, 3")
        assert facts["training"].startswith("1 epoch, 1 optimizer step, ") and facts["training"].endswith(" s")
        assert facts["test accuracy"].startswith(accuracy.split()[-1]) and facts["learngene"] == "none"
        assert facts["licence"].startswith("MIT") and "license: mit" in card
    elif kind.startswith("fine-tuned"):
        assert facts["fine-tuned"].startswith("on digits-train-16: 1 epoch, 1 optimizer step, ")
        assert accuracy in facts["fine-tuned"] and "has not been trained" not in card
        assert "then fine-tuned (on digits-train-16" in card
        assert facts["method"] == "wave" if kind.endswith("descendant") else facts["method"].startswith("none")
        assert facts["classifier head"].startswith("fresh" if "--new-head" in argv else "the model's own, kept")
    elif kind == "adapted descendant":
        assert facts["adapted"].startswith("on digits-train-16: 1 optimizer step, ") and accuracy in facts["adapted"]
        assert facts["method"] == "wave" and NOT_TRAINED in card  # the gene was adapted, not the model trained
    else:
        assert facts["method"] == "wave" and NOT_TRAINED in card and "fine-tuned" not in card
    config = json.loads((folder / "config.json").read_text())
    assert config["pretrained_cfg"]["input_size"] == [1, 16, 16] and config["num_classes"] == written.spec.num_classes
    space = origin.get("label_space")  # what the head means: its classes are timm's label_names
    assert config.get("label_names") == (space["classes"] if space else None)


def test_the_python_results_save_a_hub_folder_for_a_folder_path(made, tmp_path):
    """``save("DIR/")`` of each use case's result writes the folder of the model it holds, its card naming its kind;
    ``format="hub"`` does the same for a path without a slash."""
    data = lp.DataRequest("digits", train_images=16)
    results = {
        "ancestry": lp.train_ancestry(data, SIZE_FIELDS, train_cfg=SETTINGS),
        "fine-tuned descendant": lp.train(str(made["descendant"]), data, train_cfg=SETTINGS),
        "adapted descendant": lp.adapt(str(made["gene"]), data, {"depth": 1}, train_cfg=SETTINGS),
        "descendant": lp.expand(str(made["gene"]), {"depth": 1}),
    }
    for kind, result in results.items():
        folder = tmp_path / kind.replace(" ", "-")
        if kind == "descendant":
            result.save(folder, format="hub")
        else:
            result.save(f"{folder}/")
        model = result.descendant.model if isinstance(result, lp.Adapted) else result.model
        _same_logits(folder, model)
        assert _facts((folder / "README.md").read_text())["kind"] == kind


def test_a_folder_out_that_cannot_be_a_folder_is_one_line(made, tmp_path, capsys):
    """A file where the folder goes, a gene asked inside the adapted descendant's folder: one line, exit 2, nothing
    written."""
    taken = tmp_path / "taken"
    taken.write_text("x")
    err = cli_error(capsys, ["train", made["descendant"], *DATA, *TRAIN, "-o", f"{taken}/"])
    assert "exists and is not a folder" in err and taken.read_text() == "x"
    out = tmp_path / "adapted"
    argv = ["adapt", made["gene"], "--depth", "1", *DATA, *TRAIN, "-o", f"{out}/", "--gene-out", out / "g.safetensors"]
    assert "inside the hub folder" in cli_error(capsys, argv) and not out.exists()
    with pytest.raises(LearngeneError, match="format must be 'file', 'hub' or None"):
        lp.expand(str(made["gene"]), {"depth": 1}).save(tmp_path / "x", format="onnx")


@pytest.mark.parametrize(
    ("origin", "kind", "says", "never"),
    [
        (  # adapted, then fine-tuned: both runs named, in order
            {"kind": "descendant", "method": "wave", "adapted_on": "a", "adapt_steps": 3, "finetuned_on": "b"},
            "fine-tuned adapted descendant",
            ["specialized to this size (on a: 3 optimizer steps; test accuracy not recorded), then fine-tuned (on b:"],
            ["has not been trained"],
        ),
        (  # a gene without a head: the card says the head is untrained
            {"kind": "descendant", "method": "wave", "gene": "/x/g.safetensors", "provided_keys": 18},
            "descendant",
            [NOT_TRAINED, "**classifier head**: not the gene's: fresh", "**learngene**: `g.safetensors`", "18 of 20"],
            ["fine-tuned"],
        ),
        (  # an ancestry whose file records no accuracy nor length
            {"kind": "ancestry", "data": "digits"},
            "ancestry",
            ["**test accuracy**: not recorded", "**training**: length not recorded", "on digits: an ancestry"],
            ["has not been trained", "fine-tuned"],
        ),
        (
            {},
            "model",
            ["its file records neither where it comes from nor any training", "**learngene**: not recorded"],
            ["expanded from a learngene", "made in Python"],
        ),
    ],
    ids=["adapted then fine-tuned", "untrained head", "ancestry without records", "no origin"],
)
def test_the_card_says_what_the_file_records_and_nothing_else(origin, kind, says, never):
    from learngene.formats.cards import card_from_origin
    from learngene.formats.export import model_card
    from learngene.vit.spec import ViTSpec

    spec = ViTSpec(depth=1, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    config = {"architecture": spec.arch, "pretrained_cfg": {}}
    card = model_card(config, spec, card_from_origin(origin, spec))
    assert _facts(card)["kind"] == kind
    assert all(fact in card for fact in says), card
    assert not any(fact in card for fact in never), card
