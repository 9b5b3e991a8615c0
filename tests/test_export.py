"""``learngene export`` / ``lg.export`` (issue 53 item 2): a model file or hub folder to ONNX (checked by onnxruntime
against PyTorch), a plain timm state dict or a timm hub folder (pushed to the Hub with ``--push-to-hub``).

ONNX parity is tested for a plain ViT, a DINOv3 and a RoPE descendant (tiny: depth 2, width 16 to 32, 16-px images).
The bound is the library's own, :func:`learngene.formats.onnx_file.parity_bound`: 1e-4 of the outputs' scale (at least
1), argued in that module from fp32 rounding; measured differences are about 1e-7 at these sizes.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import timm
import torch
from safetensors.torch import load_file

import learngene as lg
from learngene.errors import LearngeneError
from learngene.formats import onnx_file, publish
from learngene.formats.model_file import read_model
from learngene.method import Ancestry
from learngene.vit.model_spec import spec_from_model
from tests.conftest import TINY, cli_error, cli_ok, saved_model
from tests.test_rope_families import moved_from_init

onnxruntime = pytest.importorskip(
    "onnxruntime", reason='the ONNX tests need the extra: pip install "learngene-vit[onnx]"'
)
pytest.importorskip("onnxscript")

FAMILY_SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=8)
FAMILIES = {"dinov3": "vit_small_patch16_dinov3", "rope": "vit_base_patch16_rope_224"}
# the plain model file's record: a descendant fine-tuned on digits (what `learngene train` writes)
TUNED = {
    "kind": "descendant",
    "method": "weight_selection",
    "gene": "ws.safetensors",
    "finetuned_on": "digits",
    "epochs": 3,
    "eval_acc": 0.75,
    "new_head": True,
    "label_space": {"dataset": "digits", "classes": ["zero", "one", "two", "three"]},
    "license": "Apache-2.0",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Model files: the plain ViT (``TINY``, fine-tuned origin), and a DINOv3 and a RoPE descendant expanded by
    weight_selection from a tiny random ancestry of their family (weights moved from timm's init, so that a dropped
    tensor shows), at a smaller width."""
    folder = tmp_path_factory.mktemp("models")
    files = {"plain": saved_model(folder / "plain.safetensors", TINY, origin=TUNED)}
    for family, name in FAMILIES.items():
        torch.manual_seed(0)
        ancestor = moved_from_init(timm.create_model(name, pretrained=False, num_classes=10, **FAMILY_SIZE))
        gene = lg.condense("weight_selection", Ancestry(ancestor, spec_from_model(ancestor))).gene
        files[family] = folder / f"{family}.safetensors"
        lg.expand(gene, {"depth": 2, "embed_dim": 16, "num_heads": 1}).save(files[family])
    return files


def onnx_outputs(path: Path, images: torch.Tensor) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {onnx_file.INPUT_NAME: images.numpy()})[0]


def torch_outputs(model_file: Path, images: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return read_model(model_file).model.eval()(images).numpy()


def recorded(path: Path) -> dict:
    """The export's record in the ONNX file's metadata_props, as onnxruntime reads it."""
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return json.loads(session.get_modelmeta().custom_metadata_map[onnx_file.METADATA_KEY])


@pytest.mark.parametrize("family", ["plain", "dinov3", "rope"])
def test_onnx_matches_pytorch_through_onnxruntime(models, tmp_path, family):
    out = tmp_path / f"{family}.onnx"
    exported = lg.export(models[family], out)
    spec = read_model(models[family]).spec
    record = recorded(out)
    assert record == exported.record
    assert record["opset"] == onnx_file.DEFAULT_OPSET and record["batch"] == "fixed 1"
    assert record["input_shape"] == [1, spec.in_chans, spec.img_size, spec.img_size]
    assert 0 <= record["max_abs_diff"] <= record["bound"] == onnx_file.parity_bound(record["output_scale"])
    assert record["torch"] == torch.__version__ and record["onnxruntime"] == onnxruntime.__version__
    # a probe of its own, not the export's: the file holds what PyTorch computes
    images = torch.randn((1, spec.in_chans, spec.img_size, spec.img_size), generator=torch.Generator().manual_seed(7))
    expected = torch_outputs(models[family], images)
    got = onnx_outputs(out, images)
    assert got.shape == expected.shape == (1, spec.num_classes)
    assert np.abs(got - expected).max() <= onnx_file.parity_bound(float(np.abs(expected).max()))


def _families():
    from tests.test_families import FAMILIES, MORE

    return {f: n for f, (n, _) in FAMILIES.items()} | {f: n for f, n in MORE.items() if f != "dinov2_giant"}


@pytest.mark.slow  # 17 exports of about 10 s each
@pytest.mark.parametrize("family", sorted(_families()))
def test_every_family_the_project_builds_exports_within_the_bound(tmp_path, family):
    """Every family of tests/test_families.py (DINOv2 ViT-g aside, for its size: its family is DINOv2's with a SwiGLU
    MLP, which AIMv2 covers), at depth 2 and width 32, from a model file: the check passes."""
    from learngene.formats.model_file import save_model
    from tests.test_families import FAMILIES, timm_ancestry

    name = _families()[family]
    model = moved_from_init(timm_ancestry(name, FAMILIES.get(family, (name, 10))[1]))
    save_model(tmp_path / "model.safetensors", model, spec_from_model(model))
    record = lg.export(tmp_path / "model.safetensors", tmp_path / "model.onnx").record
    assert record["max_abs_diff"] <= record["bound"]


def test_a_dynamic_batch_runs_at_any_batch_size_and_the_opset_is_the_one_asked(models, tmp_path, capsys):
    import onnx

    out = tmp_path / "dynamic.onnx"
    # at this process's thread count, which the Python call below computes with (the record holds a measured number)
    threads = str(torch.get_num_threads())
    cli_ok("export", models["plain"], "--out", out, "--dynamic-batch", "--opset", "20", "--threads", threads)
    said = capsys.readouterr().out
    record = recorded(out)
    assert record["batch"] == "dynamic" and record["probe_batches"] == [1, 3] and record["opset"] == 20
    assert f"{record['max_abs_diff']:.3g}" in said and "onnxruntime matches PyTorch to within" in said
    assert {o.version for o in onnx.load(out).opset_import if o.domain in ("", "ai.onnx")} == {20}
    for batch in (2, 5):  # neither is a probe batch of the export
        images = torch.randn((batch, 1, 16, 16), generator=torch.Generator().manual_seed(batch))
        expected = torch_outputs(models["plain"], images)
        got = onnx_outputs(out, images)
        assert got.shape == (batch, TINY.num_classes)
        assert np.abs(got - expected).max() <= onnx_file.parity_bound(float(np.abs(expected).max()))
    # the Python call writes the command's file, byte for byte
    lg.export(models["plain"], tmp_path / "python.onnx", dynamic_batch=True, opset=20)
    assert (tmp_path / "python.onnx").read_bytes() == out.read_bytes()


def test_a_fixed_batch_graph_takes_that_batch_only(models, tmp_path):
    out = tmp_path / "fixed.onnx"
    lg.export(models["plain"], out, batch_size=2)
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == [2, 1, 16, 16]


def test_a_difference_above_the_bound_is_refused_in_one_line_and_nothing_is_written(
    models, tmp_path, capsys, monkeypatch
):
    # every difference, even none, lies above a negative bound: the refusal path, as a faulty export would take it
    monkeypatch.setattr(onnx_file, "parity_bound", lambda scale: -1.0)
    out = tmp_path / "refused.onnx"
    err = cli_error(capsys, ["export", models["plain"], "--out", out])
    assert "differ from PyTorch's by up to" in err and "nothing was written" in err
    assert list(tmp_path.iterdir()) == []  # no output, no temporary file


def test_export_leaves_the_callers_model_as_it_was(tmp_path):
    torch.manual_seed(0)
    model = TINY.create_model().train()
    result = lg.pipeline.ModelOutput(model, TINY, {"kind": "descendant"}, None)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    lg.export(result, tmp_path / "m.onnx")
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_a_timm_state_dict_loads_into_timm_with_identical_logits(models, tmp_path, suffix):
    out = tmp_path / f"state{suffix}"
    exported = lg.export(models["dinov3"], out)
    assert exported.format == "timm"
    state = load_file(out) if suffix == ".safetensors" else torch.load(out, weights_only=True)
    model = timm.create_model(exported.record["arch"], pretrained=False, **exported.record["model_args"])
    model.load_state_dict(state, strict=True)
    images = torch.randn((2, 3, 16, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model.eval()(images), read_model(models["dinov3"]).model.eval()(images))


def test_a_hub_folder_loads_in_timm_with_identical_logits_and_its_card_tells_what_it_is(models, tmp_path):
    out = tmp_path / "hub"
    exported = lg.export(models["plain"], f"{out}/")
    assert exported.format == "hub" and exported.path == out
    model = timm.create_model(f"local-dir:{out}", pretrained=True)
    images = torch.randn((2, 1, 16, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model.eval()(images), read_model(models["plain"]).model.eval()(images))
    card = (out / "README.md").read_text()
    facts = card_facts(card)
    assert facts["kind"] == "fine-tuned descendant" and facts["method"] == "weight_selection"
    assert facts["learngene"] == "`ws.safetensors`" and "license: apache-2.0" in card
    assert "digits" in facts["fine-tuned"] and "0.7500" in facts["fine-tuned"]  # what, and its accuracy
    assert facts["classifier head"].startswith("fresh for digits")
    # a hub folder exported again keeps its card's facts
    again = tmp_path / "again"
    lg.export(out, again, format="hub")
    assert card_facts((again / "README.md").read_text()) == facts
    for folder in (out, again):  # the head's classes, named in config.json (timm's label_names)
        assert json.loads((folder / "config.json").read_text())["label_names"] == TUNED["label_space"]["classes"]


def card_facts(card: str) -> dict[str, str]:
    """A model card's ``- **key**: value`` lines."""
    return dict(line[4:].split("**: ", 1) for line in card.splitlines() if line.startswith("- **"))


def test_a_descendant_exported_to_a_hub_folder_is_the_folder_its_save_writes(tmp_path):
    torch.manual_seed(0)
    gene = lg.condense("weight_selection", Ancestry(TINY.create_model(), TINY)).gene
    descendant = lg.expand(gene, {"depth": 1})
    descendant.save(f"{tmp_path}/saved/")
    lg.export(descendant, f"{tmp_path}/exported/")
    for name in ("config.json", "model.safetensors", "README.md"):
        assert (tmp_path / "saved" / name).read_bytes() == (tmp_path / "exported" / name).read_bytes(), name


# ---- refusals: one line, exit 2, nothing written ---------------------------------------------------------------------
def test_a_missing_model_file_exits_2(tmp_path, capsys):
    err = cli_error(capsys, ["export", tmp_path / "absent.safetensors", "--out", tmp_path / "m.onnx"])
    assert "absent.safetensors" in err
    assert not (tmp_path / "m.onnx").exists()


def test_onnx_export_without_the_extra_names_it(models, tmp_path, capsys, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else find_spec(name)
    )
    err = cli_error(capsys, ["export", models["plain"], "--out", tmp_path / "m.onnx"])
    assert 'pip install "learngene-vit[onnx]"' in err and "onnxruntime" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--out", "m.txt"], "does not tell the format"),
        (["--out", "m.onnx", "--opset", "3"], "outside"),
        (["--out", "m.onnx", "--push-to-hub", "org/name"], "uploads a hub folder"),
        (["--out", "m.npz", "--format", "timm"], "has none of these suffixes"),
    ],
)
def test_bad_requests_exit_2_in_one_line(models, tmp_path, capsys, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    err = cli_error(capsys, ["export", models["plain"], *argv])
    assert says in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_gene_is_no_model_to_export(tmp_path, capsys, models):
    torch.manual_seed(0)
    ancestor = TINY.create_model()
    lg.condense("weight_selection", Ancestry(ancestor, TINY)).save(tmp_path / "gene.safetensors")
    err = cli_error(capsys, ["export", tmp_path / "gene.safetensors", "--out", tmp_path / "m.onnx"])
    assert "is a learngene, not a model" in err and "learngene expand" in err


# ---- --push-to-hub ---------------------------------------------------------------------------------------------------
def test_push_is_refused_offline_before_anything_is_written(models, tmp_path, capsys, monkeypatch):
    from tests.hub_fixtures import offline_hub

    offline_hub(monkeypatch, tmp_path / "hf-cache")
    err = cli_error(capsys, ["export", models["plain"], "--out", f"{tmp_path / 'hub'}/", "--push-to-hub", "org/name"])
    assert "HF_HUB_OFFLINE=1" in err and "hf upload org/name" in err
    assert not (tmp_path / "hub").exists()


def test_push_is_refused_when_the_endpoint_does_not_answer(models, tmp_path, monkeypatch):
    from tests.hub_fixtures import NO_SUCH_HOST, online_hub

    online_hub(monkeypatch, tmp_path / "hf-cache", NO_SUCH_HOST)
    with pytest.raises(LearngeneError, match="did not answer") as info:
        lg.export(models["plain"], tmp_path / "hub", "hub", push_to_hub="org/name")
    assert NO_SUCH_HOST in str(info.value) and not (tmp_path / "hub").exists()


def test_push_uploads_the_folder_written(models, tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    from tests.hub_fixtures import online_hub

    online_hub(monkeypatch, tmp_path / "hf-cache", "https://hub.example")
    monkeypatch.setattr(publish, "hub_answers", lambda *args: True)
    calls = []

    class Commit:
        commit_url = "https://hub.example/org/name/commit/abc"

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        calls.append(("upload_folder", kwargs["repo_id"], kwargs))
        assert {p.name for p in Path(kwargs["folder_path"]).iterdir()} == {
            "config.json",
            "model.safetensors",
            "README.md",
        }
        return Commit()

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    exported = lg.export(models["plain"], tmp_path / "hub", "hub", push_to_hub="org/name")
    assert [(c[0], c[1]) for c in calls] == [("create_repo", "org/name"), ("upload_folder", "org/name")]
    assert calls[0][2]["exist_ok"] is True and calls[0][2]["repo_type"] == "model"
    assert Path(calls[1][2]["folder_path"]) == tmp_path / "hub" and calls[1][2]["repo_type"] == "model"
    assert exported.url == Commit.commit_url and "pushed to org/name" in exported.summary


def test_a_refused_upload_is_one_line_and_keeps_the_folder(models, tmp_path, monkeypatch):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    from tests.hub_fixtures import online_hub

    online_hub(monkeypatch, tmp_path / "hf-cache", "https://hub.example")
    monkeypatch.setattr(publish, "hub_answers", lambda *args: True)

    def create_repo(self, repo_id, **kwargs):
        # the error reads only the response's headers and request; the HTTP client behind it differs between
        # huggingface_hub releases (httpx, then httpx2), so a stand-in response serves them all
        response = SimpleNamespace(status_code=401, headers={}, request=None)
        raise HfHubHTTPError("401 Client Error: Unauthorized\nmore lines", response=response)

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    with pytest.raises(LearngeneError) as info:
        lg.export(models["plain"], tmp_path / "hub", "hub", push_to_hub="org/name")
    message = str(info.value)
    assert "\n" not in message and "401" in message and "HF_TOKEN" in message
    assert (tmp_path / "hub" / "model.safetensors").is_file()
