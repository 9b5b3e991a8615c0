"""Ancestries by name (``hf-hub:ORG/NAME[@REVISION]``, ``timm:NAME[.TAG]``), read offline from a Hugging Face cache the
test fills in huggingface_hub's documented layout; with nothing cached, one line and exit 2."""

from __future__ import annotations

import json

import pytest
import torch

from learngene.ancestry import load_ancestry
from learngene.cli import main
from learngene.errors import LearngeneError
from learngene.gene import Learngene
from tests.conftest import cli_ok
from tests.hub_fixtures import (
    DINOV2_REPO,
    TIMM_REPO,
    TIMM_TAG,
    cache_repo,
    folder_files,
    offline_hub,
    timm_tag_weights,
    tiny_dinov2_folder,
    tiny_timm_folder,
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    return offline_hub(monkeypatch, tmp_path / "hf-cache")


def _timm_repo(tmp_path, cache, seed=0, ref="main", commit=None):
    folder = tmp_path / f"timm-src-{seed}"
    folder.mkdir()
    model = tiny_timm_folder(folder, seed=seed)
    return model, cache_repo(cache, TIMM_REPO, folder_files(folder), ref=ref, commit=commit)


def test_the_cache_is_one_huggingface_hub_reads(tmp_path, cache):
    from huggingface_hub import scan_cache_dir

    _, commit = _timm_repo(tmp_path, cache)
    info = scan_cache_dir(cache)
    assert not info.warnings
    (repo,) = info.repos
    assert repo.repo_id == TIMM_REPO and {r.commit_hash for r in repo.revisions} == {commit}


def test_hf_hub_timm_repo_loads_offline_with_its_config_and_source(tmp_path, cache):
    model, commit = _timm_repo(tmp_path, cache)
    ancestry = load_ancestry(f"hf-hub:{TIMM_REPO}")
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ancestry.model(x), model(x))  # the same weights, the same architecture
    assert ancestry.spec is not None and (ancestry.spec.depth, ancestry.spec.embed_dim) == (2, 32)
    assert ancestry.source == {"repo_id": TIMM_REPO, "revision": commit}
    assert ancestry.license == "apache-2.0"  # the repo's model card front matter
    assert ancestry.model.pretrained_cfg["std"] == pytest.approx((0.2, 0.25, 0.3))  # its pretrained_cfg


def test_a_revision_picks_that_commit(tmp_path, cache):
    old_model, old = _timm_repo(tmp_path, cache, seed=1, ref="v1", commit="a" * 40)
    new_model, new = _timm_repo(tmp_path, cache, seed=2)  # refs/main
    x = torch.randn(1, 3, 16, 16)
    for name, model, commit in ((TIMM_REPO, new_model, new), (f"{TIMM_REPO}@v1", old_model, old)):
        ancestry = load_ancestry(f"hf-hub:{name}")
        assert ancestry.source["revision"] == commit
        with torch.no_grad():
            torch.testing.assert_close(ancestry.model(x), model(x))


def test_hf_hub_transformers_dinov2_repo_loads_offline(tmp_path, cache):
    folder = tmp_path / "dino"
    folder.mkdir()
    hf = tiny_dinov2_folder(folder)
    commit = cache_repo(cache, DINOV2_REPO, folder_files(folder))
    ancestry = load_ancestry(f"hf-hub:{DINOV2_REPO}")
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(pixel_values=x).last_hidden_state
        got = ancestry.model.forward_features(x)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)  # float32 reorderings of the same math
    assert ancestry.source == {"repo_id": DINOV2_REPO, "revision": commit}
    assert ancestry.model.pretrained_cfg["mean"] == pytest.approx((0.485, 0.456, 0.406))  # preprocessor_config.json


def test_timm_tag_resolves_to_its_hub_repo(cache):
    import timm

    data, state = timm_tag_weights(seed=3)
    commit = cache_repo(cache, f"timm/{TIMM_TAG}", {"model.safetensors": data})
    ancestry = load_ancestry(f"timm:{TIMM_TAG}")
    assert ancestry.source == {"repo_id": f"timm/{TIMM_TAG}", "revision": commit, "timm": TIMM_TAG}
    for key, value in ancestry.model.state_dict().items():
        assert torch.equal(value, state[key]), key
    cfg = timm.models.get_pretrained_cfg(TIMM_TAG)
    assert (
        ancestry.model.pretrained_cfg["mean"] == cfg.mean and ancestry.model.pretrained_cfg["crop_pct"] == cfg.crop_pct
    )
    assert ancestry.license == cfg.license


@pytest.mark.parametrize(
    ("name", "says"),
    [
        (f"hf-hub:{TIMM_REPO}", f"hf download {TIMM_REPO} config.json"),
        (f"hf-hub:{TIMM_REPO}@v2", "--revision v2"),
        (f"timm:{TIMM_TAG}", f"hf download timm/{TIMM_TAG} config.json model.safetensors"),
        ("hf-hub:not a repo", "hf-hub:ORG/NAME"),
        ("timm:deit_tiny_patch16_224.nope", "deit_tiny_patch16_224.fb_in1k"),
        ("timm:no_such_model", "timm has no model"),
        (DINOV2_REPO, f"write hf-hub:{DINOV2_REPO}"),  # a repo id without its prefix, as from_pretrained takes it
    ],
)
def test_nothing_cached_or_a_bad_name_is_one_line(cache, name, says):
    with pytest.raises(LearngeneError) as info:
        load_ancestry(name)
    message = str(info.value)
    assert "\n" not in message and says in message
    if "download" in says:
        assert str(cache) in message and "HF_HUB_OFFLINE=1" in message


def test_cli_condense_from_the_hub_records_repo_and_revision(tmp_path, cache, monkeypatch, capsys):
    _, commit = _timm_repo(tmp_path, cache)
    monkeypatch.chdir(tmp_path)
    ancestry = f"hf-hub:{TIMM_REPO}"
    cli_ok("condense", "--method", "weight_selection", "--ancestry", ancestry, "--out", "g.safetensors", "--quiet")
    gene = Learngene.load("g.safetensors")
    assert gene.ancestry_source == {"repo_id": TIMM_REPO, "revision": commit} and gene.license == "apache-2.0"
    assert main(["inspect", "g.safetensors"]) == 0
    assert f"`{TIMM_REPO}` at revision `{commit}`" in capsys.readouterr().out
    assert main(["expand", "g.safetensors", "--depth", "1", "--out", "d/", "--quiet"]) == 0
    card = (tmp_path / "d" / "README.md").read_text()
    assert f"Hugging Face Hub repo `{TIMM_REPO}` at revision `{commit}`" in card
    assert main(["expand", "g.safetensors", "--depth", "1", "--out", "d.safetensors", "--quiet"]) == 0
    from learngene.formats.weights import read_safetensors

    origin = json.loads(read_safetensors("d.safetensors", lazy=True)[1]["origin"])
    assert origin["ancestry_source"] == {"repo_id": TIMM_REPO, "revision": commit}


def test_cli_with_nothing_cached_exits_2_in_one_line(tmp_path, cache, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(
        ["condense", "--method", "weight_selection", "--ancestry", f"hf-hub:{DINOV2_REPO}", "--out", "g.safetensors"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"hf download {DINOV2_REPO}" in err
    assert not (tmp_path / "g.safetensors").exists()


def test_train_with_a_hub_teacher(tmp_path, cache, monkeypatch, fake_fashion):
    _timm_repo(tmp_path, cache)
    monkeypatch.chdir(tmp_path)
    tiny = ["--depth", "1", "--embed-dim", "32", "--num-heads", "2", "--img-size", "16", "--patch-size", "4"]
    common = ["--data-dir", str(fake_fashion), "--train-images", "32", "--eval-images", "16", "--batch-size", "16"]
    common += ["--epochs", "1", "--quiet"]
    assert main(["ancestry", *tiny, "--in-chans", "3", "--out", "s.safetensors", *common]) == 0
    assert main(["train", "s.safetensors", "--teacher", f"hf-hub:{TIMM_REPO}", "--out", "t.safetensors", *common]) == 0
    assert (tmp_path / "t.safetensors").exists()


def test_compare_from_the_hub_on_a_saved_dataset_logs_every_training_stage(tmp_path, cache, monkeypatch):
    """The three together: a Hub ancestry, an hf: dataset, and --log tensorboard on compare (every stage's curves
    under OUT/logs, kept after the stages' run folders are removed)."""
    pytest.importorskip("datasets", reason="the datasets extra is not installed")
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tests.hub_fixtures import tensorboard_scalars, tiny_image_dataset

    _timm_repo(tmp_path, cache)
    tiny_image_dataset(tmp_path / "ds", size=16)
    monkeypatch.chdir(tmp_path)
    argv = ["compare", "--ancestry", f"hf-hub:{TIMM_REPO}", "--data", "hf:ds", "--sizes", "L1-D32-H2"]
    argv += ["--methods", "pretrained", "--references", "scratch", "--seeds", "1", "--epochs", "1", "--batch-size", "8"]
    assert main([*argv, "--log", "tensorboard", "--out", "cmp", "--no-plots", "--quiet"]) == 0
    event_dirs = sorted(p.parent for p in (tmp_path / "cmp" / "logs").rglob("events.out.tfevents.*"))
    assert len(event_dirs) == 2  # one fine-tuning cell per method: pretrained and scratch
    for folder in event_dirs:
        assert [step for step, _ in tensorboard_scalars(folder)["train/loss"]] == [1, 2, 3]  # 24 images, batch 8
    assert not list((tmp_path / "cmp").rglob("*.run"))
    assert f"- ancestry: hf-hub:{TIMM_REPO} (L2-D32-H2" in (tmp_path / "cmp" / "report.md").read_text()
