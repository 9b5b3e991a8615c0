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
    kind = draw(st.sampled_from(["header", "config", "ancestry", "drop", "rename", "reshape", "nonfinite", "dtype"]))
    return method, kind, draw(st.data())


def _forge(tensors: dict, meta: dict, kind: str, data) -> None:
    keys = sorted(tensors)
    if kind == "header":
        key = data.draw(st.sampled_from(["format", "format_version", "method", "config", "ancestry", "cost"]))
        if data.draw(st.booleans()):
            meta.pop(key, None)
        else:
            meta[key] = data.draw(st.text(max_size=20) | json_values.map(json.dumps))
    elif kind == "config":
        config = json.loads(meta["config"])
        field = data.draw(st.sampled_from(sorted(config) or ["x"]))
        config[field] = data.draw(json_values)
        meta["config"] = json.dumps(config)
    elif kind == "ancestry":
        ancestry = json.loads(meta["ancestry"]) or SPEC.to_dict()
        field = data.draw(st.sampled_from(sorted(ancestry)))
        ancestry[field] = data.draw(json_values | st.sampled_from([10**9, 10**6, 0, -3, 1e308]))
        meta["ancestry"] = json.dumps(ancestry)
    elif kind == "drop" and keys:
        del tensors[data.draw(st.sampled_from(keys))]
    elif kind == "rename" and keys:
        tensor = tensors.pop(data.draw(st.sampled_from(keys)))
        tensors[
            data.draw(
                st.sampled_from(
                    [
                        "blocks.x.attn.qkv.weight",
                        "blocks.-1.norm1.weight",
                        "blocks.99.mlp.fc1.bias",
                        "",
                        "head.weight",
                        "θ_A.blocks.0",
                    ]
                )
                | st.text(min_size=1, max_size=20)
            )
        ] = tensor
    elif kind == "reshape" and keys:
        key = data.draw(st.sampled_from(keys))
        shape = list(tensors[key].shape) or [1]
        dim = data.draw(st.integers(0, len(shape) - 1))
        shape[dim] = data.draw(st.sampled_from([0, 1, shape[dim] + 1, 2 * shape[dim] + 3]))
        tensors[key] = torch.zeros(shape)
    elif kind == "nonfinite" and keys:
        key = data.draw(st.sampled_from([k for k in keys if tensors[k].is_floating_point()] or keys))
        if tensors[key].is_floating_point() and tensors[key].numel():
            tensors[key] = tensors[key].clone()
            tensors[key].view(-1)[0] = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    elif kind == "dtype" and keys:
        key = data.draw(st.sampled_from(keys))
        tensors[key] = tensors[key].to(
            data.draw(st.sampled_from([torch.int64, torch.float16, torch.bool, torch.float64]))
        )


def test_forged_genes_are_refused_in_one_line_or_expand_soundly(genes, capsys, tmp_path_factory):
    names = sorted(genes)

    @FUZZ
    @given(forged_genes(names))
    def run(case):
        method, kind, data = case
        tensors, meta = _read(genes[method])
        _forge(tensors, meta, kind, data)
        root = tmp_path_factory.mktemp("forged")
        path, out = root / "forged.safetensors", root / "out.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=meta)
        _outcome(capsys, ["inspect", str(path)])
        _outcome(capsys, ["expand", str(path), "--quiet", "-o", str(out)], out)

    run()


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
numbers = (
    st.integers(-(2**70), 2**70).map(str)
    | st.floats(allow_nan=True, allow_infinity=True).map(repr)
    | st.sampled_from(["0", "-1", "1e9", "1e400", "nan", "-inf", "5M", "2^70", "10**8", "", "0x10", " 3"])
    | st.text(max_size=6)
)


def test_numbers_on_the_expand_command_line(genes, capsys, tmp_path_factory):
    gene = genes["pretrained"]

    @FUZZ
    @given(st.lists(st.tuples(st.sampled_from(SPEC_FLAGS), numbers), min_size=1, max_size=3))
    def run(flags):
        out = tmp_path_factory.mktemp("num") / "out.safetensors"
        argv = ["expand", str(gene), "--quiet", "-o", str(out)]
        for flag, value in flags:
            argv += [f"{flag}={value}"]
        _outcome(capsys, argv, out)

    run()


def test_numbers_on_the_train_command_line(genes, capsys, tmp_path_factory):
    model = genes["pretrained"].parent / "anc.safetensors"

    @settings(FUZZ, max_examples=25)
    @given(st.lists(st.tuples(st.sampled_from(TRAIN_FLAGS), numbers), min_size=1, max_size=2))
    def run(flags):
        out = tmp_path_factory.mktemp("num") / "out.safetensors"
        argv = [
            "train",
            str(model),
            "--data",
            "digits",
            "--img-size",
            "8",
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
        for flag, value in flags:
            argv += [f"{flag}={value}"]
        _outcome(capsys, argv, out)

    run()
