"""Hostile inputs drawn at random (hypothesis): forged gene headers and tensors, and numbers on the command line.

Whatever is drawn, the CLI either succeeds, and then what it wrote is sound (a descendant timm loads
strictly, every weight finite), or it refuses with exit code 2 and exactly one line on stderr, never a
traceback. Everything runs in-process through ``learngene.cli.main`` on tiny sizes, so it stays fast.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save_file

from learngene.cli import main
from learngene.formats.model_file import save_model
from learngene.method import Ancestry
from learngene.registry import list_methods
from learngene.vit.spec import ViTSpec
from tests.conftest import condense_tiny

SPEC = ViTSpec(depth=2, embed_dim=16, num_heads=2, img_size=8, patch_size=4, in_chans=1, num_classes=4)
FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# JSON values of every kind, including the ones that break naive code: huge ints, nan/inf, nesting
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, 1, -1, 2**31, 10**9])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def genes(tmp_path_factory) -> dict[str, Path]:
    """A small gene of every registered method that condenses on tiny inputs (data-driven ones for 1 step)."""
    root = tmp_path_factory.mktemp("fuzz")
    torch.manual_seed(0)
    model = SPEC.create_model().eval()
    save_model(root / "anc.safetensors", model, SPEC)
    ancestry = Ancestry(model, SPEC)
    out = {}
    for name in list_methods():
        try:
            gene = condense_tiny(name, ancestry, SPEC.img_size, SPEC.num_classes)
        except Exception:  # a method that cannot condense this tiny ancestry is covered by its own tests
            continue
        gene.save(root / f"{name}.safetensors")
        out[name] = root / f"{name}.safetensors"
    return out


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), framework="pt") as fh:
        return {k: fh.get_tensor(k) for k in fh.keys()}, dict(fh.metadata())


def _outcome(capsys, argv: list[str], out: Path | None = None) -> int:
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out, captured.err
    assert code in (0, 2), (code, captured.err)
    if code == 2:
        assert len(captured.err.strip().splitlines()) == 1, captured.err
        assert out is None or not out.exists(), "a refused command left its output"
    elif out is not None:
        from learngene.formats.model_file import load_model_file

        state, spec, _ = load_model_file(out)
        spec.create_model().load_state_dict(state, strict=True)
        assert all(torch.isfinite(v).all() for v in state.values()), "a descendant with non-finite weights was written"
    return code


@st.composite
def forged_genes(draw, names: list[str]):
    """A real gene with one part of its header or tensors forged."""
    method = draw(st.sampled_from(names))
    kind = draw(st.sampled_from(list(FORGERIES)))
    return method, kind, draw(st.data())


def _forge_header(tensors: dict, meta: dict, data) -> None:
    key = data.draw(st.sampled_from(["format", "format_version", "method", "config", "ancestry", "cost"]))
    if data.draw(st.booleans()):
        meta.pop(key, None)
    else:
        meta[key] = data.draw(st.text(max_size=20) | json_values.map(json.dumps))


def _forge_json(name: str, fallback: dict, values):
    """A forgery of one field of the header's JSON entry ``name`` (``fallback`` when it is empty)."""

    def forge(tensors: dict, meta: dict, data) -> None:
        entry = json.loads(meta[name]) or dict(fallback)
        field = data.draw(st.sampled_from(sorted(entry) or ["x"]))
        entry[field] = data.draw(values)
        meta[name] = json.dumps(entry)

    return forge


def _forge_drop(tensors: dict, meta: dict, data) -> None:
    del tensors[data.draw(st.sampled_from(sorted(tensors)))]


ODD_KEYS = [
    "blocks.x.attn.qkv.weight",
    "blocks.-1.norm1.weight",
    "blocks.99.mlp.fc1.bias",
    "",
    "head.weight",
    "θ_A.blocks.0",
]


def _forge_rename(tensors: dict, meta: dict, data) -> None:
    tensor = tensors.pop(data.draw(st.sampled_from(sorted(tensors))))
    tensors[data.draw(st.sampled_from(ODD_KEYS) | st.text(min_size=1, max_size=20))] = tensor


def _forge_reshape(tensors: dict, meta: dict, data) -> None:
    key = data.draw(st.sampled_from(sorted(tensors)))
    shape = list(tensors[key].shape) or [1]
    dim = data.draw(st.integers(0, len(shape) - 1))
    shape[dim] = data.draw(st.sampled_from([0, 1, shape[dim] + 1, 2 * shape[dim] + 3]))
    tensors[key] = torch.zeros(shape)


def _forge_nonfinite(tensors: dict, meta: dict, data) -> bool:
    """A NaN or infinity written into a floating tensor: True when one was (no gene may hold it)."""
    keys = sorted(tensors)
    key = data.draw(st.sampled_from([k for k in keys if tensors[k].is_floating_point()] or keys))
    if not (tensors[key].is_floating_point() and tensors[key].numel()):
        return False
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return True


def _forge_dtype(tensors: dict, meta: dict, data) -> None:
    key = data.draw(st.sampled_from(sorted(tensors)))
    tensors[key] = tensors[key].to(data.draw(st.sampled_from([torch.int64, torch.float16, torch.bool, torch.float64])))


# each kind of forgery: it changes the header's entries or the tensors in place, and says True when the result is
# certainly no valid gene
FORGERIES = {
    "header": _forge_header,
    "config": _forge_json("config", {}, json_values),
    "ancestry": _forge_json("ancestry", SPEC.to_dict(), json_values | st.sampled_from([10**9, 10**6, 0, -3, 1e308])),
    "drop": _forge_drop,
    "rename": _forge_rename,
    "reshape": _forge_reshape,
    "nonfinite": _forge_nonfinite,
    "dtype": _forge_dtype,
}
TENSOR_FORGERIES = ("drop", "rename", "reshape", "nonfinite", "dtype")  # of a gene with tensors only


def test_forged_genes_are_refused_in_one_line_or_expand_soundly(genes, capsys, tmp_path_factory):
    """Each forged gene is refused in one line or expands soundly (:func:`_outcome`); one that holds a NaN or an
    infinity is refused by both commands. The draws (derandomized: the same ones on every run) reach both ends."""
    names = sorted(genes)
    codes: set[int] = set()
    nonfinite: list[tuple[int, int]] = []

    @FUZZ
    @given(forged_genes(names))
    def run(case):
        method, kind, data = case
        tensors, meta = _read(genes[method])
        invalid = FORGERIES[kind](tensors, meta, data) if tensors or kind not in TENSOR_FORGERIES else False
        root = tmp_path_factory.mktemp("forged")
        path, out = root / "forged.safetensors", root / "out.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=meta)
        shown = _outcome(capsys, ["inspect", str(path)])
        made = _outcome(capsys, ["expand", str(path), "--quiet", "-o", str(out)], out)
        codes.update((shown, made))
        if invalid:
            nonfinite.append((shown, made))

    run()
    assert nonfinite and set(nonfinite) == {(2, 2)}, nonfinite  # every NaN forgery drawn was refused by both
    assert codes == {0, 2}, codes  # some forgeries were refused, and some expanded (their outputs checked)


SPEC_FLAGS = [
    "--depth",
    "--embed-dim",
    "--num-heads",
    "--mlp-ratio",
    "--img-size",
    "--patch-size",
    "--in-chans",
    "--num-classes",
    "--seed",
    "--max-params",
    "--max-flops",
]
TRAIN_FLAGS = [
    "--epochs",
    "--max-steps",
    "--batch-size",
    "--lr",
    "--weight-decay",
    "--warmup-epochs",
    "--grad-clip",
    "--label-smoothing",
    "--checkpoint-every",
    "--seed",
    "--train-images",
    "--few-shot",
]


def _no_number(text: str) -> bool:
    """Text that no numeric flag may take: empty, or a number that is not finite (``nan``, ``-inf``, ``1e400``)."""
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return not text.strip()


numbers = (
    st.integers(-(2**70), 2**70).map(str)
    | st.floats(allow_nan=True, allow_infinity=True).map(repr)
    | st.sampled_from(["0", "-1", "1e9", "1e400", "nan", "-inf", "5M", "2^70", "10**8", "", "0x10", " 3"])
    | st.text(max_size=6)
)


def _numbers_outcomes(capsys, argv: list[str], out, flags: list[tuple[str, str]], outcomes: list) -> None:
    """Run ``argv`` with ``flags`` (checked by :func:`_outcome`); note its exit code and whether a value was no number."""
    code = _outcome(capsys, [*argv, *(f"{flag}={value}" for flag, value in flags)], out)
    outcomes.append((code, any(_no_number(value) for _, value in flags)))


def _check_numbers_outcomes(outcomes: list[tuple[int, bool]]) -> None:
    """Every command given an empty or non-finite value was refused; the draws (derandomized: the same on every run)
    held such a value, and reached a command that ran (its output checked by :func:`_outcome`)."""
    assert any(bad for _, bad in outcomes) and all(code == 2 for code, bad in outcomes if bad), outcomes
    assert any(code == 0 for code, _ in outcomes), outcomes


def test_numbers_on_the_expand_command_line(genes, capsys, tmp_path_factory):
    gene = genes["pretrained"]
    outcomes: list[tuple[int, bool]] = []

    @FUZZ
    @given(st.lists(st.tuples(st.sampled_from(SPEC_FLAGS), numbers), min_size=1, max_size=3))
    def run(flags):
        out = tmp_path_factory.mktemp("num") / "out.safetensors"
        _numbers_outcomes(capsys, ["expand", str(gene), "--quiet", "-o", str(out)], out, flags, outcomes)

    run()
    _check_numbers_outcomes(outcomes)


def test_numbers_on_the_train_command_line(genes, capsys, tmp_path_factory):
    model = genes["pretrained"].parent / "anc.safetensors"
    outcomes: list[tuple[int, bool]] = []

    @settings(FUZZ, max_examples=25)
    @given(st.lists(st.tuples(st.sampled_from(TRAIN_FLAGS), numbers), min_size=1, max_size=2))
    def run(flags):
        out = tmp_path_factory.mktemp("num") / "out.safetensors"
        argv = [
            "train",
            str(model),
            "--data",
            "digits",
            "--train-images",
            "16",
            "--max-steps",
            "1",
            "--batch-size",
            "8",
            "--quiet",
            "-o",
            str(out),
        ]
        _numbers_outcomes(capsys, argv, out, flags, outcomes)

    run()
    _check_numbers_outcomes(outcomes)
