"""The layers a descendant keeps (``expand(..., layers=...)``, ``--layers``) and the check of a promised function
(``verify``, ``--verify``): issue 46 items 3 and 5.

The ancestry is random and tiny (depth 4, width 32, 2 heads, 16-px images of 4-px patches), every weight moved away
from timm's initialization so that a tensor taken from the wrong layer shows.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import torch

import learngene as lg
from learngene.errors import LearngeneError
from learngene.formats.model_file import load_model_file, save_model
from learngene.gene import Learngene
from learngene.method import Ancestry, CondenseInputs
from learngene.pipeline.requests import ExpandChoices
from learngene.registry import get_method, list_methods
from learngene.vit.spec import ViTSpec
from learngene.vit.transfer import block_state, spread_layers
from tests.bounds import U32, forward_steps, order_bound
from tests.conftest import cli_error, cli_ok, make_images

SPEC = ViTSpec(depth=4, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
PICKERS = ("pretrained", "weight_selection", "importance", "front", "grow")
# each rule at depth 3 of the ancestry's 4, and the layers it keeps
RULES = {"first": [0, 1, 2], "last": [1, 2, 3], "spread": [0, 2, 3], "0,1,3": [0, 1, 3]}
# another width each method reaches: the layers kept must compose with its width rule
OTHER_WIDTH = {
    "pretrained": {},  # copies whole blocks: the ancestry's width only
    "weight_selection": {"embed_dim": 16, "num_heads": 1},
    "importance": {"embed_dim": 16, "num_heads": 1},
    "front": {"embed_dim": 16, "num_heads": 1},
    "grow": {"embed_dim": 64, "num_heads": 4},
}


@pytest.fixture(scope="module")
def ancestry_file(tmp_path_factory):
    torch.manual_seed(0)
    model = SPEC.create_model().eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    path = tmp_path_factory.mktemp("layers") / "ancestry.safetensors"
    save_model(path, model, SPEC)
    return path


@pytest.fixture(scope="module")
def ancestry(ancestry_file) -> Ancestry:
    return lg.load_ancestry(ancestry_file)


@pytest.fixture(scope="module")
def genes(ancestry) -> dict[str, Learngene]:
    inputs = CondenseInputs(train=make_images(16))
    options = {"importance": {"num_images": 8, "batch_size": 8}}
    return {m: get_method(m)(**options.get(m, {})).condense(ancestry, inputs) for m in PICKERS}


def _blocks(model, layer: int) -> dict[str, torch.Tensor]:
    return block_state(model.state_dict(), layer)


def test_spread_keeps_evenly_spaced_layers_with_the_first_and_the_last():
    """round(i·(D−1)/(d−1)), halves up, checked in exact fractions for every d <= D <= 16; 12 -> 6 is DistilBERT's."""
    assert spread_layers(12, 6) == [0, 2, 4, 7, 9, 11]  # the teacher layers DistilBERT's student started from
    for n_src in range(1, 17):
        for n_dst in range(1, n_src + 1):
            kept = spread_layers(n_src, n_dst)
            exact = [Fraction(i * (n_src - 1), max(1, n_dst - 1)) for i in range(n_dst)]
            assert kept == [int(x + Fraction(1, 2)) for x in exact], (n_src, n_dst)
            assert all(b > a for a, b in zip(kept, kept[1:], strict=False)) and kept[0] == 0
            assert n_dst == 1 or kept[-1] == n_src - 1
            gaps = [b - a for a, b in zip(kept, kept[1:], strict=False)]
            assert not gaps or max(gaps) - min(gaps) <= 1  # evenly spaced: gaps differ by one at most


def test_the_methods_that_pick_layers_are_declared_and_the_help_names_them():
    assert {m for m in list_methods() if get_method(m).selects_layers} == set(PICKERS)
    help_text = next(f for f in ExpandChoices.__dataclass_fields__.values() if f.name == "layers").metadata["help"]
    for name in PICKERS:
        assert name in help_text


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("method", PICKERS)
def test_a_descendant_keeps_exactly_the_chosen_ancestry_layers(method, rule, genes, ancestry):
    """At the ancestry's width: the copiers give the chosen layers' tensors exactly; importance gives them permuted
    (heads and MLP neurons in its stored order: each tensor holds the same values, exactly, and the layer is its own
    full-depth descendant's); front is its own full-depth descendant's layer (below). At another width, each kept
    layer is the one the method's full-depth descendant of that width has at the chosen index, exactly."""
    gene, kept = genes[method], RULES[rule]
    original = {i: block_state(ancestry.model.state_dict(), i) for i in range(SPEC.depth)}
    for width in ({}, OTHER_WIDTH[method]) if OTHER_WIDTH[method] else ({},):
        desc = lg.expand(gene, {"depth": 3, **width}, layers=rule)
        assert desc.origin["layers"] == {"rule": "list" if "," in rule else rule, "kept": kept}
        assert desc.card["ancestry layers kept"].startswith(", ".join(map(str, kept)))
        full = lg.expand(gene, {"depth": 4, **width}).model  # every layer, in order
        for i, j in enumerate(kept):
            got, want = _blocks(desc.model, i), _blocks(full, j)
            assert got.keys() == want.keys()
            for name in got:
                if method == "front":
                    _one_rounding_apart(got[name], want[name], f"{method} {rule} layer {i} {name}")
                else:
                    assert torch.equal(got[name], want[name]), (method, rule, width, i, name)
                if width or method == "front":
                    continue
                if method == "importance":
                    assert torch.equal(got[name].flatten().sort().values, original[j][name].flatten().sort().values)
                else:
                    assert torch.equal(got[name], original[j][name]), (method, rule, i, name)


def _one_rounding_apart(got: torch.Tensor, want: torch.Tensor, msg: str) -> None:
    """front's kept layer against its full-depth descendant's: both are computed in float64 from the gene's same
    float32 coefficients, the kept one through one more inverse and forward DCT along depth (length <= 4, float64
    error under 2^-40 of the tensor's largest value); cast to float32, the two are equal or one float32 rounding
    apart (2^-23 of the value, twice the unit roundoff), plus that float64 error for values near zero."""
    bound = 2 * U32 * want.abs() + 2.0**-40 * float(want.abs().max())
    assert bool(((got - want).abs() <= bound).all()), msg


def test_pretrained_variant_and_layers_agree_or_are_refused(genes):
    gene = genes["pretrained"]
    by_variant = lg.expand(gene, {"depth": 2}, options={"variant": "last"}).model.state_dict()
    by_both = lg.expand(gene, {"depth": 2}, options={"variant": "last"}, layers="last").model.state_dict()
    by_layers = lg.expand(gene, {"depth": 2}, layers="last").model.state_dict()
    assert all(torch.equal(by_variant[k], by_both[k]) and torch.equal(by_variant[k], by_layers[k]) for k in by_variant)
    with pytest.raises(LearngeneError) as refused:
        lg.expand(gene, {"depth": 2}, options={"variant": "middle"}, layers="spread")
    assert str(refused.value) == (
        "pretrained's variant='middle' (--opt variant=middle) and layers='spread' (--layers spread) both pick the "
        "layers a descendant keeps, "
        "differently; give one of them"
    )


@pytest.mark.parametrize(
    "size, layers, options, words",
    [
        ({"depth": 3}, "0,1,4", {}, "layers (--layers) 0,1,4: the ancestry has 4 layers, 0..3; give indices among"),
        ({"depth": 3}, "0,2", {}, "keeps 2 layers, but the descendant has 3: give depth=2 (--depth 2) or 3 indices"),
        ({"depth": 3}, "2,1,3", {}, "give 0-based ancestry layers, each once, in increasing order"),
        ({"depth": 3}, (-1, 0, 1), {}, "give 0-based ancestry layers, each once, in increasing order"),
        ({"depth": 3}, "every", {}, "layers (--layers) must be first, last, spread or ancestry layer indices I,J,K"),
        ({"depth": 3}, [], {}, "ExpandChoices layers (--layers) must be a non-empty list"),
        ({"depth": 6}, "spread", {}, "so it needs at most 4 (asked depth (--depth) 6): ask a shallower descendant"),
    ],
)
def test_layers_that_cannot_be_kept_are_refused_in_one_line(size, layers, options, words, genes):
    with pytest.raises(LearngeneError) as refused:
        lg.expand(genes["weight_selection"], size, options=options, layers=layers)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_front_picks_layers_of_its_authors_rule_only(ancestry, genes):
    with pytest.raises(LearngeneError, match=r"select_n=2 \(--opt select_n=2\) keeps 2 depth frequencies") as refused:
        lg.expand(genes["front"], {"depth": 3}, options={"select_n": 2}, layers="spread")
    assert "\n" not in str(refused.value)
    orthonormal = get_method("front")(variant="orthonormal").condense(ancestry)
    with pytest.raises(LearngeneError, match="this gene is variant=orthonormal"):
        lg.expand(orthonormal, {"depth": 3}, layers="spread")


def test_methods_whose_math_fixes_the_layers_refuse_layers(ancestry_file, tmp_path, capsys):
    pickers = ", ".join(m for m in list_methods() if get_method(m).selects_layers)
    for name in list_methods():
        if get_method(name).selects_layers:
            continue
        with pytest.raises(LearngeneError) as refused:  # refused before the gene's tensors are read
            lg.expand(Learngene(method=name, tensors={}, ancestry=SPEC), SPEC.replace(depth=2), layers="first")
        assert str(refused.value) == (
            f"layers (--layers) picks which ancestry layers a descendant keeps, but a {name} descendant's layers are "
            f"fixed by its method; leave layers out, or condense with a method that picks them: {pickers}"
        )
    gene = tmp_path / "mimetic.safetensors"
    lg.condense("mimetic", ancestry_file).save(gene)
    err = cli_error(capsys, ["expand", gene, "--depth", "2", "--layers", "first", "-o", tmp_path / "d.safetensors"])
    assert "a mimetic descendant's layers are fixed by its method" in err
    assert not (tmp_path / "d.safetensors").exists()


def test_the_cli_records_the_layers_in_the_header_and_the_model_card(genes, tmp_path):
    gene = tmp_path / "ws.safetensors"
    genes["weight_selection"].save(gene)
    cli_ok("expand", gene, "--depth", "2", "--layers", "spread", "--quiet", "-o", tmp_path / "d.safetensors")
    _, spec, origin = load_model_file(tmp_path / "d.safetensors")
    assert spec.depth == 2 and origin["layers"] == {"rule": "spread", "kept": [0, 3]}
    cli_ok("expand", gene, "--depth", "2", "--layers", "1,2", "--quiet", "-o", f"{tmp_path}/hub/")
    card = (tmp_path / "hub" / "README.md").read_text()
    assert "ancestry layers kept" in card and "1, 2 of 0..3 (list)" in card


# ---- verify ---------------------------------------------------------------------------------------------
def test_a_same_size_copy_verifies_at_zero(genes, ancestry_file):
    said: list[str] = []
    for method in ("pretrained", "weight_selection"):
        desc = lg.expand(genes[method], verify=ancestry_file, say=said.append)
        assert desc.origin["verify"]["max_abs_diff"] == 0.0  # the same tensors, the same computation
        assert desc.origin["verify"]["max_abs_output"] > 0 and desc.origin["verify"]["ancestry"] == str(ancestry_file)
    assert said[-1].startswith(f"verified against {ancestry_file}: on a probe batch of 4 random images (seed 0)")
    # with the layers kept at the ancestry's depth: every one, the same copy
    assert lg.expand(genes["pretrained"], layers="0,1,2,3", verify=ancestry_file).origin["verify"]["max_abs_diff"] == 0


def test_importance_and_grow_verify_within_the_rounding_of_the_sums_they_reorder(genes, ancestry, ancestry_file):
    """importance permutes channels, heads and neurons; HyperCloning at 2x splits every sum over the ancestry's terms
    into a sum over twice as many, each of half the weight (exact: a division by 2); identity layers add exact zeros.
    Either way the descendant computes each of the ancestry's sums in another order, so the two forward passes lie
    within tests/bounds.py's order_bound: forward_steps(depth) reductions in a row, each of at most `widest` terms
    (the MLP's 4 x width inputs of fc2, the widest sum), relative to max(1, the largest output) (LayerNorm's unit scale
    inside)."""
    probe = torch.randn((4, 1, 16, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        magnitude = max(1.0, float(ancestry.model(probe).abs().max()))
    cases = [
        ("importance", None, 128, 4),
        ("grow", {"embed_dim": 64, "num_heads": 4}, 256, 4),
        ("grow", {"embed_dim": 64, "num_heads": 4, "depth": 6}, 256, 6),
    ]
    for method, size, widest, depth in cases:
        options = {"depth": "identity"} if size and size.get("depth") else None
        found = lg.expand(genes[method], size, options=options, verify=ancestry_file).origin["verify"]
        assert found["max_abs_diff"] <= order_bound(widest, magnitude, forward_steps(depth)), (method, size, found)


def test_a_broken_descendant_is_reported_with_its_difference(genes, ancestry, ancestry_file, monkeypatch):
    """The check can fail: a pretrained expansion that moves one channel of the last MLP's bias by 0.5 (one channel:
    the final LayerNorm would take a shift of them all away) is reported with the difference its outputs really
    have, far above any rounding."""
    cls = get_method("pretrained")
    expand = cls.expand

    def broken(self, gene, spec):
        out = expand(self, gene, spec)
        moved = out["blocks.3.mlp.fc2.bias"].clone()
        moved[0] += 0.5
        return {**out, "blocks.3.mlp.fc2.bias": moved}

    monkeypatch.setattr(cls, "expand", broken)
    desc = lg.expand(genes["pretrained"], verify=ancestry_file)
    probe = torch.randn((4, 1, 16, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        really = float((desc.model.eval()(probe) - ancestry.model(probe)).abs().max())
    assert desc.origin["verify"]["max_abs_diff"] == really > 1e-2


@pytest.mark.parametrize(
    "method, size, options, words",
    [
        ("front", None, None, "front promises no descendant the ancestry's function, so there is nothing to verify"),
        ("pretrained", {"depth": 3}, None, "pretrained promises the ancestry's function only at the ancestry's own"),
        ("grow", {"embed_dim": 64, "num_heads": 4}, {"width": "net2net"}, "grow promises the ancestry's function only"),
        ("grow", {"embed_dim": 64, "num_heads": 4, "depth": 6}, None, "and L6-D64-H4 here is not that"),
    ],
)
def test_verify_is_refused_in_one_line_where_nothing_is_promised(method, size, options, words, genes, ancestry_file):
    with pytest.raises(LearngeneError) as refused:
        lg.expand(genes[method], size, options=options, verify=ancestry_file)
    assert words in str(refused.value) and str(refused.value).endswith("; leave verify (--verify) out")
    assert "\n" not in str(refused.value)


def test_verify_refuses_another_ancestry_and_the_cli_says_and_records_it(genes, ancestry_file, tmp_path, capsys):
    other = tmp_path / "other.safetensors"
    torch.manual_seed(0)
    save_model(other, SPEC.replace(depth=3).create_model(), SPEC.replace(depth=3))
    with pytest.raises(LearngeneError, match=r"has depth 3, the one the gene was condensed from 4: give that ancestry"):
        lg.expand(genes["pretrained"], verify=other)
    gene = tmp_path / "pretrained.safetensors"
    genes["pretrained"].save(gene)
    out = tmp_path / "d.safetensors"
    cli_ok("expand", gene, "--verify", ancestry_file, "-o", out)
    said = capsys.readouterr().out
    assert f"verified against {ancestry_file}" in said and "differ by at most 0 " in said
    assert load_model_file(out)[2]["verify"]["max_abs_diff"] == 0.0
    err = cli_error(
        capsys, ["expand", gene, "--depth", "2", "--verify", ancestry_file, "-o", tmp_path / "e.safetensors"]
    )
    assert err.endswith("leave verify (--verify) out") and not (tmp_path / "e.safetensors").exists()
    assert json.dumps(load_model_file(out)[2]["verify"])  # JSON in the header
