"""One schema for every setting: each is declared with ``learngene.settings.field``, and its flag, help and checks
come from that declaration (tests derive their cases from it, so a new field is tested as it is declared)."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from learngene.cli import main
from learngene.cli.parser import build_parser
from learngene.comparison.choices import CompareChoices
from learngene.errors import LearngeneError, SpecError
from learngene.gene import Learngene
from learngene.registry import get_method, list_methods
from learngene.settings import declared, field
from learngene.training.config import TrainConfig
from learngene.validate import choices, refusal
from learngene.vit.spec import SIZE_FLAG_FIELDS, ViTFamily, ViTSpec

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)


def _declared_classes() -> list[type]:
    configs = {get_method(name).Config for name in list_methods()}
    return [TrainConfig, CompareChoices, ViTSpec, ViTFamily, Learngene, *sorted(configs, key=lambda c: c.__qualname__)]


@pytest.mark.parametrize("cls", _declared_classes(), ids=lambda c: c.__qualname__)
def test_every_setting_is_declared_with_the_one_helper(cls):
    undeclared = [f.name for f in dataclasses.fields(cls) if not declared(f)]
    assert undeclared == [], f"{cls.__qualname__}: declare {undeclared} with learngene.settings.field(...)"


def test_a_field_without_the_helper_is_not_counted_as_declared():
    @dataclasses.dataclass
    class Mixed:
        plain: int = 1
        made: int = field(1, at_least=0)

    assert [declared(f) for f in dataclasses.fields(Mixed)] == [False, True]


# ---- the spec's and the gene's fields: each value its declaration refuses is one line ----------------------------
def _outside(f: dataclasses.Field, tp: Any) -> list[Any]:
    """Values just outside ``f``'s declared range (the nearest refused integer or float on each bounded side)."""
    limits, step = f.metadata, 1 if tp is int else 0.5
    values = []
    if "at_least" in limits:
        values.append(tp(limits["at_least"] - step))
    if "above" in limits:
        values.append(tp(limits["above"]))
    if "at_most" in limits:
        values.append(tp(limits["at_most"] + step))
    return values


def _wrong_kind(tp: Any) -> Any:
    """A value of no arm of type ``tp``: a list fits none of them (no field is typed as a list)."""
    return [1]


def _cases(cls: type) -> list[Any]:
    hints = typing.get_type_hints(cls)
    cases = []
    for f in dataclasses.fields(cls):
        arms = [a for a in typing.get_args(hints[f.name]) if a is not type(None)] or [hints[f.name]]
        for value in _outside(f, arms[0]) + [_wrong_kind(hints[f.name])]:
            cases.append(pytest.param(cls, f.name, value, id=f"{cls.__name__}.{f.name}={value!r}"))
        for value in choices(hints[f.name])[:1]:
            cases.append(pytest.param(cls, f.name, value + "x", id=f"{cls.__name__}.{f.name}={value}x"))
    return cases


def _make(cls: type, name: str, value: Any) -> Any:
    if cls is ViTSpec:
        return SPEC.replace(**{name: value})
    if cls is ViTFamily:
        return ViTFamily(**{name: value})
    return Learngene(**{"method": "pretrained", "tensors": {}, name: value})


@pytest.mark.parametrize("cls, name, value", _cases(ViTSpec) + _cases(ViTFamily) + _cases(Learngene))
def test_a_value_its_declaration_refuses_is_one_line_from_python(cls, name, value):
    wanted = SpecError if cls in (ViTSpec, ViTFamily) else LearngeneError
    with pytest.raises(wanted) as raised:
        _make(cls, name, value)
    message = str(raised.value)
    assert name in message and "\n" not in message, message


def test_the_spec_words_its_sizes_as_before():
    """The words users (and scripts) know: a positive integer, a positive finite number, the largest buildable size;
    each size named in both callers' words."""
    with pytest.raises(SpecError, match=r"^depth \(--depth\) must be a positive integer, got 0; "):
        SPEC.replace(depth=0)
    with pytest.raises(SpecError, match=r"^embed_dim \(--embed-dim\) must be a positive integer, got '32'; "):
        SPEC.replace(embed_dim="32")
    with pytest.raises(
        SpecError,
        match=r"^mlp_ratio \(--mlp-ratio\) must be a positive finite number, got nan; use e.g. mlp_ratio=4.0 "
        r"\(--mlp-ratio 4.0\)$",
    ):
        SPEC.replace(mlp_ratio=float("nan"))
    with pytest.raises(
        SpecError, match=r"^depth=5000 \(--depth 5000\) is beyond the largest this library builds \(4,096\); choose a"
    ):
        SPEC.replace(depth=5000)
    with pytest.raises(SpecError, match="^init_values must be a positive finite number or null, got 0"):
        SPEC.replace(init_values=0)
    assert SPEC.replace(depth=4096).depth == 4096 and SPEC.replace(num_classes=0).num_classes == 0  # the edges


def test_a_gene_names_the_tensor_that_is_none():
    with pytest.raises(LearngeneError, match=r"^Learngene tensors\['b'\] is not a torch tensor: got list"):
        Learngene("pretrained", tensors={"a": torch.zeros(1), "b": [0.0]})
    with pytest.raises(LearngeneError, match=r"^Learngene tensors key 3 is not a string"):
        Learngene("pretrained", tensors={3: torch.zeros(1)})


def test_the_checker_finds_types_before_ranges():
    """A wrong type anywhere is named before a value out of range (the type decides which range applies)."""
    cfg = TrainConfig()
    cfg.lr, cfg.seed = -1.0, "0"  # set after the check, as a caller could
    bad = refusal(cfg)
    assert bad is not None and (bad.name, bad.of_type, bad.wanted) == ("seed", True, "an integer")
    cfg.seed = 0
    bad = refusal(cfg)
    assert bad is not None and (bad.name, bad.of_type, bad.wanted) == ("lr", False, "positive")


# ---- the size flags: made from the spec's declarations ----------------------------------------------------------
SIZE_TYPES = {**typing.get_type_hints(ViTFamily), **typing.get_type_hints(ViTSpec)}


def _size_flags(command: str) -> dict[str, Any]:
    """The flags of ``command``'s size group, by flag, as argparse holds them."""
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    group = next(g for g in sub._action_groups if g.title == "model size (a ViT spec)")
    return {a.option_strings[0]: a for a in group._group_actions if a.dest != "preset"}


@pytest.mark.parametrize("command", ["ancestry", "expand", "adapt"])
def test_the_size_flags_are_the_declared_ones(command):
    flags = _size_flags(command)
    assert list(flags) == [f.metadata["flag"] for f in SIZE_FLAG_FIELDS]
    for f in SIZE_FLAG_FIELDS:
        assert flags[f.metadata["flag"]].help == f.metadata["help"] and flags[f.metadata["flag"]].default is None


@pytest.mark.parametrize(
    "field_name, value",
    [pytest.param(f.name, v, id=f"{f.name}={v}") for f in SIZE_FLAG_FIELDS for v in _outside(f, SIZE_TYPES[f.name])]
    + [pytest.param(f.name, "x", id=f"{f.name}=x") for f in SIZE_FLAG_FIELDS],
)
def test_a_size_flag_its_declaration_refuses_is_one_line_before_anything_is_read(capsys, tmp_path, field_name, value):
    flag = next(f.metadata["flag"] for f in SIZE_FLAG_FIELDS if f.name == field_name)
    code = main(["expand", str(tmp_path / "absent.safetensors"), flag, str(value), "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and flag in err, err
    assert "absent" not in err  # refused before the gene is looked for
    assert not list(tmp_path.iterdir())


def _gene_file(path, ancestry: dict[str, Any]) -> str:
    header = {
        "format": "learngene",
        "format_version": "2",
        "method": "pretrained",
        "config": "{}",
        "layout": "null",
        "ancestry": json.dumps(ancestry),
        "cost": "{}",
        "label_space": "null",
    }
    save_file({"w": torch.zeros(2)}, str(path), metadata=header)
    return str(path)


@pytest.mark.parametrize(
    "name, value",
    [pytest.param(f.name, v, id=f"{f.name}={v}") for f in SIZE_FLAG_FIELDS for v in _outside(f, SIZE_TYPES[f.name])]
    + [("depth", 2.5), ("class_token", "yes"), ("init_values", -1.0), ("arch", "")],
)
def test_a_gene_header_whose_spec_a_declaration_refuses_is_one_line(capsys, tmp_path, name, value):
    gene = _gene_file(tmp_path / "g.safetensors", {**SPEC.to_dict(), name: value})
    code = main(["inspect", gene])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and name in err and "create it again" in err, err
