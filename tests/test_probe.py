"""One start, one row: descendants that compute the same function are one start (:mod:`learngene.bench.probe`)."""

from __future__ import annotations

import re

import pytest
import torch

from learngene.bench.probe import RTOL, fingerprint, same_function
from learngene.bench.rows import Row, same_starts
from learngene.vit.spec import ViTSpec
from tests.conftest import cli_ok, saved_model

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)


def _model(seed: int = 0):
    torch.manual_seed(seed)
    return SPEC.create_model()


def _print(model) -> str:
    return fingerprint(model, SPEC.img_size, SPEC.in_chans)


def test_a_reordering_of_mlp_neurons_is_the_same_function_and_another_draw_is_not():
    """Permuting fc1's rows with fc2's columns (what importance does to neurons) leaves the function, not the weights."""
    model, permuted = _model(), _model()
    perm = torch.randperm(SPEC.mlp_hidden, generator=torch.Generator().manual_seed(1))
    mlp = permuted.blocks[0].mlp
    with torch.no_grad():
        mlp.fc1.weight.copy_(mlp.fc1.weight[perm])
        mlp.fc1.bias.copy_(mlp.fc1.bias[perm])
        mlp.fc2.weight.copy_(mlp.fc2.weight[:, perm])
    assert not torch.equal(model.blocks[0].mlp.fc1.weight, mlp.fc1.weight)
    assert same_function(_print(model), _print(permuted))
    assert not same_function(_print(model), _print(_model(seed=1)))


def test_rounding_of_the_weights_is_the_same_function_and_a_small_change_is_not():
    """Weights moved by 1.2e-7 (front against pretrained: float rounding) match; one weight moved by 1e-2 does not,
    though its outputs move far less than the tolerance bounds rounding by (the projections see direction)."""
    model, rounded, changed = _model(), _model(), _model()
    with torch.no_grad():
        for p in rounded.parameters():
            p.add_(1.2e-7 * torch.sign(torch.randn(p.shape, generator=torch.Generator().manual_seed(2))))
        changed.blocks[1].attn.proj.weight[0, 0] += 1e-2
    assert same_function(_print(model), _print(rounded))
    assert not same_function(_print(model), _print(changed))


def test_the_rule_is_the_stated_tolerance():
    base = _print(_model())
    norm, values = base.removeprefix("probe:").split(":")
    first, *rest = (float(v) for v in values.split())
    moved = lambda by: f"probe:{norm}:" + " ".join(f"{v:.9g}" for v in [first + by, *rest])  # noqa: E731
    assert same_function(base, moved(0.9 * RTOL * float(norm)))
    assert not same_function(base, moved(1.1 * RTOL * float(norm)))
    assert not same_function(base, "") and not same_function("", "")


def _row(method: str, seed: int, probe: str, start: str = "w", accs=(0.5,)) -> Row:
    return Row(method, "data", "L2-D32-H2", 2, 32, 2, seed, accs=list(accs), start=start, probe=probe)


def test_starts_whose_weights_differ_but_compute_alike_are_one_start():
    same = [_print(_model(s)) for s in (0, 1)]
    groups = {
        "front": [_row("front", s, same[s], start=f"a{s}") for s in (0, 1)],
        "pretrained": [_row("pretrained", s, same[s], start=f"b{s}", accs=(0.6,)) for s in (0, 1)],
        "mimetic": [_row("mimetic", s, _print(_model(5 + s))) for s in (0, 1)],
    }
    starts = same_starts(groups)
    assert [s.name for s in starts] == ["front = pretrained", "mimetic"] and starts[0].by == "probe"
    old = {k: [Row(**{**r.__dict__, "probe": ""}) for r in v] for k, v in groups.items()}
    assert [s.by for s in same_starts(old)] == ["digest"] * 3  # rows from before probes: their digests differ


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("probe") / "anc.safetensors", SPEC, seed=7)  # no scratch seed


def test_a_fresh_compare_counts_front_pretrained_and_importance_at_the_ancestrys_size_once(ancestry, tmp_path, capsys):
    """The issue's done-when: at the ancestry's own size the three make one function (copies; importance reorders
    heads and neurons), so one row and one member of the Holm family: m = 1 start × 4 reference starts + the 4
    references' 6 pairs = 10 (counted apart: 3 × 4 + 6 = 18)."""
    out = tmp_path / "cmp"
    flags = ["--methods", "front,pretrained,importance", "--seeds", "2", "--epochs", "1", "--train-images", "60"]
    run = ["compare", "--ancestry", ancestry, "--data", "digits", "--sizes", "L2-D32-H2", *flags]
    cli_ok(*run, "--eval-images", "60", "--out", out, "--quiet")
    text = capsys.readouterr().out
    assert "| front = pretrained = importance | " in text
    assert re.search(r"Holm over the m = 10 comparisons", text)
    assert "front = pretrained = importance at this size: the same function as fine-tuning begins" in text
