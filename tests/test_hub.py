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
from tests.conftest import cli_error, cli_ok
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


# ---- names and cache pointers: checked before huggingface_hub sees them (issue 47) -------------------------------
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("hf-hub:org/b..c", "no '--' or '..'"),
        ("hf-hub:org--x/name", "no '--' or '..'"),
        ("hf-hub:org/name.git", "do not end in '.git'"),
        ("hf-hub:org/" + "a" * 97, "97 characters, more than the Hub's 96"),
        ("hf-hub:" + "o" * 97 + "/name", "97 characters, more than the Hub's 96"),
        ("hf-hub:org/-name", "starting and ending with a letter"),
        ("hf-hub:org/caf\u00e9", "ASCII letters"),
        ("hf-hub:a/b/c", "ORG/NAME"),
        ("hf-hub:org/name@../../x", "is not a branch, tag or commit name"),
        ("hf-hub:org/name@v1\nx", "is not a branch, tag or commit name"),
        ("hf-hub:org/name@" + "v" * 256, "at most 255 characters"),
    ],
)
def test_a_name_outside_the_hubs_grammar_is_one_line_before_huggingface_hub_sees_it(
    cache, tmp_path, capsys, monkeypatch, name, says
):
    import huggingface_hub

    def never(*args, **kwargs):
        raise AssertionError("huggingface_hub was asked")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", never)
    with pytest.raises(LearngeneError) as info:
        load_ancestry(name)
    assert says in str(info.value) and "\n" not in str(info.value), str(info.value)
    monkeypatch.chdir(tmp_path)
    err = cli_error(capsys, ["condense", "--method", "weight_selection", "--ancestry", name, "--out", "g.st"])
    assert "does not name a Hub repo" in err or "is not a branch, tag or commit name" in err
    assert not (tmp_path / "g.st").exists()


@pytest.mark.parametrize("pointer", ["../../../x", "not a commit", "a" * 39, "A" * 40, "", "\u0661" * 40])
@pytest.mark.parametrize("ref", ["main", "v1"])
def test_a_cache_pointer_that_is_no_commit_hash_is_one_line(tmp_path, cache, capsys, monkeypatch, pointer, ref):
    """A ``refs/REF`` file that holds anything but a commit hash would name a folder outside the cache."""
    _timm_repo(tmp_path, cache, ref=ref)
    (cache / f"models--{TIMM_REPO.replace('/', '--')}" / "refs" / ref).write_text(pointer)
    name = f"hf-hub:{TIMM_REPO}" + ("" if ref == "main" else f"@{ref}")
    with pytest.raises(LearngeneError, match="not a commit hash"):
        load_ancestry(name)
    monkeypatch.chdir(tmp_path)
    err = cli_error(capsys, ["condense", "--method", "weight_selection", "--ancestry", name, "--out", "g.safetensors"])
    assert "refs" in err and "delete" in err
    assert not (tmp_path / "g.safetensors").exists()


def _hub_config(tmp_path, cache, change) -> None:
    """The tiny timm repo with its config.json changed by ``change``, in the cache as TIMM_REPO."""
    folder = tmp_path / "timm-src-changed"
    folder.mkdir()
    tiny_timm_folder(folder)
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    cache_repo(cache, TIMM_REPO, folder_files(folder))


HUGE = dict(depth=64, embed_dim=65536, num_heads=1)  # within a spec's ranges; 64 x 12 x 65536^2 x 4 bytes = 13 TiB


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            lambda c: c["model_args"].update(num_classes=10**9),
            "num_classes must be a whole number from 0 to 10,000,000",
        ),
        (lambda c: c.update(num_classes=10**9) or c["model_args"].pop("num_classes"), "num_classes must be a whole"),
        (lambda c: c["model_args"].update(img_size=10**6), "img_size must be a whole number from 1 to 16,384"),
        (lambda c: c["model_args"].update(depth=10**6), "depth must be a whole number from 1 to 4,096"),
        (lambda c: c["model_args"].update(embed_dim=10**7), "embed_dim must be a whole number from 1 to 65,536"),
        (lambda c: c["model_args"].update(mlp_ratio=1e9), "mlp_ratio must be a number above 0 to 64"),
        (lambda c: c["model_args"].update(HUGE), "GiB free"),
    ],
)
@pytest.mark.parametrize("where", ["hub", "folder"])
def test_every_size_a_config_declares_goes_through_the_sizes_and_memory_checks(
    tmp_path, cache, capsys, monkeypatch, change, says, where
):
    """A Hub repo's config as a local folder's: the ranges of a spec's sizes, then the memory its parameters take,
    refused in one line before anything is allocated (num_classes 10^9 was a 128 GB allocation)."""
    from learngene.host.memory import available_memory
    from learngene.vit.spec import ViTSpec

    huge = ViTSpec(img_size=16, patch_size=4, in_chans=3, num_classes=4, **HUGE)
    if "GiB" in says and (available_memory() or 0) >= 4 * huge.num_params:
        pytest.skip("this machine has the 13 TiB free")
    _hub_config(tmp_path, cache, change)
    snapshot = next((cache / f"models--{TIMM_REPO.replace('/', '--')}" / "snapshots").iterdir())
    name = f"hf-hub:{TIMM_REPO}" if where == "hub" else str(snapshot)
    with pytest.raises(LearngeneError) as info:
        load_ancestry(name)
    assert says in str(info.value) and "\n" not in str(info.value), str(info.value)
    monkeypatch.chdir(tmp_path)
    err = cli_error(capsys, ["condense", "--method", "weight_selection", "--ancestry", name, "--out", "g.safetensors"])
    assert says in err and not (tmp_path / "g.safetensors").exists()


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("input_size", [3, -16, -16], "input_size [3, -16, -16], not [channels, height, width]"),
        ("input_size", [0, 16, 16], "not [channels, height, width] of positive whole numbers"),
        ("input_size", [3, 16.5, 16], "positive whole numbers"),
        ("input_size", [3, 16], "positive whole numbers"),
        ("mean", [0.5, "x", 0.5], "mean [0.5, 'x', 0.5], not a list of finite numbers"),
        ("mean", [], "not a list of finite numbers"),
        ("std", [0.2, 0.0, 0.2], "std [0.2, 0.0, 0.2], not a list of finite numbers above 0"),
        ("std", [0.2, -1, 0.2], "above 0"),
        ("crop_pct", 0, "crop_pct 0, not a number in (0, 1]"),
        ("crop_pct", 1.5, "not a number in (0, 1]"),
        ("crop_pct", True, "not a number in (0, 1]"),
        ("interpolation", "cubicle", "interpolation 'cubicle', not one of nearest, bilinear, bicubic"),
        ("interpolation", 3, "not one of nearest"),
        ("crop_mode", "diagonal", "crop_mode 'diagonal', not one of center, squash, border"),
    ],
)
def test_a_hub_configs_preprocessing_is_range_checked(tmp_path, cache, capsys, monkeypatch, key, value, says):
    _hub_config(tmp_path, cache, lambda c: c["pretrained_cfg"].update({key: value}))
    with pytest.raises(LearngeneError) as info:
        load_ancestry(f"hf-hub:{TIMM_REPO}")
    assert says in str(info.value) and "config.json declares preprocessing" in str(info.value), str(info.value)
    monkeypatch.chdir(tmp_path)
    err = cli_error(
        capsys, ["condense", "--method", "weight_selection", "--ancestry", f"hf-hub:{TIMM_REPO}", "--out", "g.st"]
    )
    assert says in err and not (tmp_path / "g.st").exists()


def test_preprocessing_read_from_a_file_is_held_to_the_same_ranges():
    from learngene.formats.preprocessing import check_preprocessing

    good = dict(input_size=(3, 16, 16), interpolation="bicubic", mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.9)
    assert check_preprocessing({**good, "crop_mode": "center"})["crop_pct"] == 0.9
    for change in ({"input_size": (3, -16, -16)}, {"std": (0.5, 0.0, 0.5)}, {"interpolation": "x"}, {"crop_pct": 2}):
        with pytest.raises(LearngeneError, match="^preprocessing has .*; give values in those ranges$"):
            check_preprocessing({**good, "crop_mode": "center", **change}, img_size=16)  # an override hides none


# ---- no network, HF_HUB_OFFLINE unset: seconds, not minutes (issue 47) --------------------------------------------
# Each bound is on a timeout learngene sets, not a speed: one lookup of at most HUB_LOOKUP_SECONDS (2 s), no retries,
# plus reading a tiny cache; 5 s leaves 3 s for a loaded machine. huggingface_hub's own retries took 24 s and more.
LOOKUP_BOUND_SECONDS = 5.0


@pytest.fixture(params=["silent", "no such host"])
def unreachable(request, tmp_path, monkeypatch):
    """A Hub that swallows requests (a firewall that drops them), or whose name does not resolve; never the real one."""
    from tests.hub_fixtures import NO_SUCH_HOST, SilentServer, online_hub

    server = SilentServer() if request.param == "silent" else None
    online_hub(monkeypatch, tmp_path / "hf-cache", server.url if server else NO_SUCH_HOST)
    yield server
    if server is not None:
        server.close()


def _timed(call):
    import time

    import timm  # noqa: F401  imported before the clock starts: the bound is on the lookup, not on imports

    start = time.monotonic()
    with pytest.raises(LearngeneError) as info:
        call()
    return time.monotonic() - start, str(info.value)


@pytest.mark.parametrize("name", [f"hf-hub:{TIMM_REPO}", f"hf-hub:{TIMM_REPO}@v2", f"timm:{TIMM_TAG}"])
def test_no_network_and_nothing_cached_is_one_line_in_seconds(unreachable, caplog, capfd, name):
    from learngene.formats.hub import HUB_LOOKUP_SECONDS

    seconds, message = _timed(lambda: load_ancestry(name))
    assert seconds < LOOKUP_BOUND_SECONDS, seconds
    assert "\n" not in message and "HF_HUB_OFFLINE=1" in message and "`hf download " in message, message
    assert f"did not answer within {HUB_LOOKUP_SECONDS:g} s" in message
    assert not [r for r in caplog.records if r.name.startswith("huggingface_hub")]  # no retry lines
    assert capfd.readouterr().err == ""
    print(f"no network ({'silent' if unreachable else 'no such host'}), {name}: {seconds:.2f} s")


def test_the_cli_without_network_exits_2_in_one_line_and_writes_nothing(unreachable, tmp_path, capsys, monkeypatch):
    import time

    import timm  # noqa: F401  imported before the clock starts

    monkeypatch.chdir(tmp_path)
    argv = ["condense", "--method", "weight_selection", "--ancestry", f"hf-hub:{DINOV2_REPO}", "--out", "g.st"]
    start = time.monotonic()
    err = cli_error(capsys, argv)
    seconds = time.monotonic() - start
    assert seconds < LOOKUP_BOUND_SECONDS and "HF_HUB_OFFLINE=1" in err and f"hf download {DINOV2_REPO}" in err
    assert not (tmp_path / "g.st").exists()


@pytest.mark.parametrize("kind", ["hf-hub", "hf-hub@commit", "timm"])
def test_a_cached_model_loads_without_asking_the_network(unreachable, tmp_path, kind):
    """As local_files_only: nothing is looked up (the silent server is never contacted), so no timeout is waited
    for. Timed: resolving the name to cached files, the part that would wait on the network (58 s of retries
    before); building the model from them is reading a local folder, as for any folder."""
    import time

    from learngene.formats.hub import fetch_model

    cache = tmp_path / "hf-cache"
    if kind == "timm":
        cache_repo(cache, f"timm/{TIMM_TAG}", {"model.safetensors": timm_tag_weights()[0]})
        name = f"timm:{TIMM_TAG}"
    else:
        _, commit = _timm_repo(tmp_path, cache)
        name = f"hf-hub:{TIMM_REPO}" + (f"@{commit}" if kind == "hf-hub@commit" else "")
    import timm  # noqa: F401  imported before the clock starts

    start = time.monotonic()
    found = fetch_model(name)
    seconds = time.monotonic() - start
    assert seconds < LOOKUP_BOUND_SECONDS, seconds
    assert load_ancestry(name).source == found.source
    assert unreachable is None or not unreachable.contacted()
    print(f"cached {kind}, no network: resolved in {seconds:.3f} s")


def test_a_cached_repo_lacking_its_optional_files_does_not_look_them_up(unreachable, tmp_path):
    """A cached config.json without README.md or preprocessor_config.json: the repo is read as the cache has it."""
    folder = tmp_path / "dino"
    folder.mkdir()
    tiny_dinov2_folder(folder)
    (folder / "preprocessor_config.json").unlink()
    cache_repo(tmp_path / "hf-cache", DINOV2_REPO, folder_files(folder))
    assert load_ancestry(f"hf-hub:{DINOV2_REPO}").license is None
    assert unreachable is None or not unreachable.contacted()
