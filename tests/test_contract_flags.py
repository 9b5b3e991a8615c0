"""The flag generator checked once (issue 55 item 1): every field that a use case's request declares a flag for
(:func:`learngene.settings.field`) is a flag of each command that takes that request, made by
:func:`learngene.cli.flags.add_declared` with the field's default, and a value the declaration refuses is refused by
the flag and by the Python call in the same line (:func:`learngene.pipeline.requests.refused_line`).

The refused values are derived from each field's declaration: one step outside its declared range (below
``at_least``, above ``at_most``), an empty text for a ``nonempty`` text; so a new field is covered without a new test.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

import pytest

from learngene.cli.parser import COMMANDS
from learngene.errors import LearngeneError
from learngene.pipeline.requests import (
    AdaptChoices,
    AncestryChoices,
    AncestryRequest,
    CondenseChoices,
    DataRequest,
    ExpandChoices,
    TrainChoices,
)
from learngene.settings import flagged
from learngene.validate import limits_of

# each request whose flags are generated, and the commands that take it
TAKEN_BY: dict[type, tuple[str, ...]] = {
    DataRequest: ("condense", "adapt", "train", "ancestry"),
    AncestryRequest: ("condense",),
    ExpandChoices: ("expand",),
    CondenseChoices: ("condense",),
    AdaptChoices: ("adapt",),
    TrainChoices: ("train",),
    AncestryChoices: ("ancestry",),
}


class Refused(Exception):
    """What argparse would print after ``error:`` (raised instead of exiting)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:  # type: ignore[override]
        raise Refused(message)


def _parser(command: str) -> Parser:
    p = Parser(prog=f"learngene {command}")
    COMMANDS[command].add_arguments(p)
    return p


def _flags(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in p._actions for option in action.option_strings}


def _cases() -> list[tuple[type, str, str]]:
    return [(cls, command, f.name) for cls, commands in TAKEN_BY.items() for command in commands for f in flagged(cls)]


def _outside(f: dataclasses.Field, tp: Any) -> list[Any]:
    """Values just outside ``f``'s declaration: a step below its least, above its most, an empty text."""
    limits = limits_of(f)
    out: list[Any] = []
    if limits.get("at_least") is not None:
        out.append(int(limits["at_least"]) - 1)
    if limits.get("at_most") is not None:
        out.append(int(limits["at_most"]) + 1)
    if limits.get("nonempty") and str in (tp, *typing.get_args(tp)):
        out.append("")
    return out


@pytest.mark.parametrize("cls, command, name", _cases(), ids=lambda v: getattr(v, "__name__", v))
def test_every_flagged_field_is_a_flag_with_its_default(cls, command, name):
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    action = _flags(_parser(command)).get(f.metadata["flag"])
    assert action is not None, f"{command} has no {f.metadata['flag']} for {cls.__name__}.{name}"
    assert action.default == (None if f.default is dataclasses.MISSING else f.default)
    assert action.help


REFUSED = [
    (cls, name, value)
    for cls in TAKEN_BY
    for f in flagged(cls)
    for name in [f.name]
    for value in _outside(f, typing.get_type_hints(cls)[f.name])
]


def test_the_refusal_table_covers_every_kind_of_bound():
    """Each kind of declared bound a request's flag has (least, most, non-empty) is tried at least once."""
    assert {type(v) for _, _, v in REFUSED} == {int, str}
    assert len(REFUSED) >= 10


@pytest.mark.parametrize("cls, name, value", REFUSED, ids=lambda v: getattr(v, "__name__", repr(v)))
def test_the_flag_and_the_python_call_refuse_a_value_in_the_same_line(cls, name, value):
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    required = {"path": "a"} if cls is AncestryRequest else {}  # the one field without a default
    with pytest.raises(LearngeneError) as python:
        cls(**{**required, name: value})
    line = str(python.value)
    command = TAKEN_BY[cls][0]
    positional = {"expand": ["gene.safetensors"], "adapt": ["gene.safetensors"], "train": ["model.safetensors"]}
    argv = [*positional.get(command, []), f"{f.metadata['flag']}={value}", "--out", "x.safetensors"]
    if command == "condense":
        argv += ["--method", "pretrained", "--ancestry", "a.safetensors"]
    with pytest.raises(Refused) as cli:
        _parser(command).parse_args(argv)
    assert str(cli.value) == f"argument {f.metadata['flag']}: {line}"


# REFUSED follows the declarations, so a bound loosened there (few_shot from 1 to 0) would still pass the test above:
# these pin the bounds that tests/test_bad_inputs*.py's CLI cases tried one by one before the contract took them over
PINNED = [
    (DataRequest, "few_shot", 0),
    (DataRequest, "few_shot", 10**10 + 1),
    (DataRequest, "train_images", 0),
    (DataRequest, "train_images", 10**10 + 1),
    (DataRequest, "workers", 1025),
    (ExpandChoices, "seed", -1),
]


@pytest.mark.parametrize("cls, name, value", PINNED, ids=lambda v: getattr(v, "__name__", repr(v)))
def test_the_bounds_once_tried_by_the_cli_table_are_still_declared(cls, name, value):
    assert (cls, name, value) in REFUSED, (
        f"{cls.__name__}.{name}'s declared bound changed: {value} is no longer refused"
    )
