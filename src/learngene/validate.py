"""Plain values checked against a dataclass's field types, before anything uses them.

Settings reach the library from JSON (a gene's header, ``--opt KEY=VALUE``) and from Python callers,
so a string can arrive where an int belongs, ``null`` where a float does, or ``Infinity`` where a
finite number does. Every setting is declared once (:func:`learngene.settings.field`: its type and, in its
metadata, its range); :func:`refusal`, the one checker, finds the first value its declaration refuses, and the
dataclass's ``__post_init__`` words the one-line message. A check across several settings stays there too.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import math
import operator
import os
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from .errors import LearngeneError, named
from .settings import ADAPT as ADAPT  # the phases, imported from here by methods
from .settings import CONDENSE as CONDENSE
from .settings import EXPAND as EXPAND
from .settings import PHASE_WORDS as PHASE_WORDS
from .settings import PHASES as PHASES

# integers must fit torch's int64 (seeds, counts): Python's unbounded ints overflow later, far from the input
MAX_INT = 2**63 - 1


# ---- the one checker: a dataclass's values against their declarations (learngene.settings.field) -----------
class Refusal(NamedTuple):
    """A value its declaration refuses: the ``field``, its ``name`` (``tensors['w']`` for an item of a dict), the
    ``value``, what it should have been (``wanted``: the words of the failed check, e.g. ``an integer``, ``at least
    1``; ``expected``: the type and range in one phrase, e.g. ``a positive integer``) and whether its type (else its
    range) is wrong."""

    field: dataclasses.Field
    name: str
    value: Any
    wanted: str
    expected: str
    of_type: bool

    @property
    def named(self) -> str:
        """The value's name in a message, for both callers: the field's flag beside it where it has one
        (``lr (--lr)``), an item of a dict by its key (``tensors['w']``)."""
        flag = self.field.metadata.get("flag") if self.name == self.field.name else None
        return named(self.name, flag or "")


def refusal(obj: Any, default_limits: dict[str, Any] | None = None) -> Refusal | None:
    """The first value of dataclass ``obj`` that its declaration refuses, or None when every field holds a value of its
    type and range. Types first, every field (``X | None``, ``Literal[...]``, ``tuple[X, ...]``, ``dict[K, V]``
    and classes followed; ints within int64, floats finite, bools no numbers), then ranges (:func:`out_of_range`;
    ``default_limits`` for a field that declares none). Each owner words the message (``__post_init__``)."""
    hints, fields = _hints(type(obj)), dataclasses.fields(obj)
    values = [(f, hints.get(f.name, Any), getattr(obj, f.name)) for f in fields]
    for f, tp, value in values:
        bad = _type_refusal(f, tp, value)
        if bad:
            return bad
    for f, tp, value in values:
        bad = _range_refusal(f, tp, value, limits_of(f) or default_limits or {})
        if bad:
            return bad
    return None


def refusal_of(f: dataclasses.Field, tp: Any, value: Any) -> Refusal | None:
    """:func:`refusal` of one value for field ``f`` of type ``tp`` (e.g. a flag's, before the dataclass is made)."""
    return _type_refusal(f, tp, value) or _range_refusal(f, tp, value, limits_of(f))


def _type_refusal(f: dataclasses.Field, tp: Any, value: Any) -> Refusal | None:
    wanted = _mismatch(value, tp)
    if not wanted:
        return None
    name, value, wanted, tp = _bad_item(f.name, value, tp) or (f.name, value, wanted, tp)
    return Refusal(f, name, value, wanted, expectation(tp, limits_of(f)), of_type=True)


def _range_refusal(f: dataclasses.Field, tp: Any, value: Any, limits: dict[str, Any]) -> Refusal | None:
    wanted = out_of_range(value, limits)
    return Refusal(f, f.name, value, wanted, expectation(tp, limits), of_type=False) if wanted else None


_HINTS: dict[type, dict[str, Any]] = {}  # a class's resolved annotations, read once: specs are made by the thousand


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _bad_item(name: str, value: Any, tp: Any) -> tuple[str, Any, str, Any] | None:
    """The first item of dict ``value`` that type ``dict[K, V]`` refuses, as (``name[key]``, item, wanted, V)."""
    if not isinstance(value, dict) or typing.get_origin(tp) is not dict or len(typing.get_args(tp)) != 2:
        return None
    key_type, item_type = typing.get_args(tp)
    for key, item in value.items():
        wanted = _mismatch(key, key_type)
        if wanted:
            return f"{name} key {key!r}", key, wanted, key_type
        wanted = _mismatch(item, item_type)
        if wanted:
            return f"{name}[{key!r}]", item, wanted, item_type
    return None


def expectation(tp: Any, limits: dict[str, Any]) -> str:
    """What a value of type ``tp`` within ``limits`` must be, in one phrase: ``a positive integer``, ``a non-negative
    integer``, ``a positive finite number or null``; a type without such a bound in its type's words."""
    arms = [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]
    optional = _is_union(tp) and len(arms) < len(typing.get_args(tp))
    noun = {int: "integer", float: "finite number"}.get(arms[0]) if len(arms) == 1 else None
    if noun is None:
        words = _mismatch(_NO_VALUE, tp) or "any value"
        return "a non-empty " + words[2:] if limits.get("nonempty") and words.startswith("a ") else words
    lowest, above = limits.get("at_least"), limits.get("above")
    sign = "positive" if above == 0 or (noun == "integer" and lowest == 1) else "non-negative" if lowest == 0 else ""
    words = f"a {sign} {noun}" if sign else ("an integer" if noun == "integer" else "a finite number")
    return words + (" or null" if optional else "")


_NO_VALUE = object()  # of no type: what _mismatch says it should have been is the type's words


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def limits_of(f: dataclasses.Field) -> dict[str, Any]:
    """The range a field declares (:func:`~learngene.settings.field`'s limits), {} for none."""
    return {k: v for k, v in f.metadata.items() if k in RANGE_KEYS}


RANGE_KEYS = ("at_least", "at_most", "above", "below", "multiple_of", "nonempty", "odd")


def out_of_range(value: Any, limits: dict[str, Any]) -> str | None:
    """None when ``value`` lies within ``limits`` (a field's, :func:`limits_of`; None and non-numbers pass), else what
    it should have been (for the message)."""
    if isinstance(value, (tuple, str)):
        empty = limits.get("nonempty") and not value
        return ("a non-empty list" if isinstance(value, tuple) else "a non-empty name") if empty else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if any(limits.get(key) is not None and beyond(value, limits[key]) for key, beyond in _BEYOND.items()):
        return range_words(limits)
    step = limits.get("multiple_of")
    if step is not None and value % step:
        return f"a multiple of {step}"
    if limits.get("odd") and value % 2 != 1:
        return "an odd number"
    return None


# each bound of a range, and the test a value that breaks it fails (nan breaks none: finiteness is the type's check)
_BEYOND = {"at_least": operator.lt, "at_most": operator.gt, "above": operator.le, "below": operator.ge}


def range_words(limits: dict[str, Any]) -> str:
    """The numbers ``limits``' bounds allow, in words: ``positive``, ``above 0 and at most 1``, ``in [0, 1)``."""
    lo, hi, above, below = (None if limits.get(k) is None else _number(limits[k]) for k in _BEYOND)
    if above is not None:
        if above == "0" and hi is None:
            return "positive"
        return f"above {above}" + (f" and at most {hi}" if hi is not None else "")
    if below is not None:
        return f"in [{lo}, {below})" if lo is not None else f"below {below}"
    if hi is not None:
        return f"in [{lo}, {hi}]" if lo is not None else f"at most {hi}"
    return "0 or more" if lo == "0" else f"at least {lo}"


def _number(x: float) -> str:
    """A bound as it can be typed back: a whole number in plain digits (``1000000``, not ``1e+06``), else ``0.001``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def choices(tp: Any) -> tuple[Any, ...]:
    """The values a ``Literal[...]`` type (or a list of them, or one of them or None) allows; () for other types."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return typing.get_args(tp)
    if origin in (tuple, typing.Union, types.UnionType):
        return tuple(c for arg in typing.get_args(tp) if arg is not Ellipsis for c in choices(arg))
    return ()


def finite(value: Any) -> bool:
    """A real, finite number (bools excluded)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _mismatch(value: Any, tp: Any) -> str | None:
    """None when ``value`` fits type ``tp``, else what it should have been (for the message): the check of ``tp``'s
    kind (:data:`_KINDS`, by its origin for ``X | Y``, ``Literal[...]``, ``tuple[X, ...]``, ``dict[K, V]``), else an
    instance of a class (a ViTSpec, a torch tensor); any value fits ``Any`` and a type variable."""
    if tp is Any or isinstance(tp, typing.TypeVar):
        return None
    origin = typing.get_origin(tp)
    kind = _KINDS.get(origin if origin is not None else tp)
    if kind is not None:
        return kind(value, tp)
    if origin is None and isinstance(tp, type):
        return None if isinstance(value, tp) else _class_words(tp)
    return None


def _union(value: Any, tp: Any) -> str | None:
    wanted = [_mismatch(value, arm) for arm in typing.get_args(tp)]
    return None if None in wanted else " or ".join(w for w in wanted if w)


def _literal(value: Any, tp: Any) -> str | None:
    allowed = typing.get_args(tp)
    return None if value in allowed else "one of " + ", ".join(repr(c) for c in allowed)


def _integer(value: Any, tp: Any) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return "an integer"
    return None if -MAX_INT <= value <= MAX_INT else "an integer below 2^63 in size"


def _list(value: Any, tp: Any) -> str | None:
    """A tuple (JSON's list); ``tuple[X, ...]``: each item an X."""
    if not isinstance(value, tuple):
        return "a list"
    args = typing.get_args(tp)
    if len(args) != 2 or args[1] is not Ellipsis:
        return None
    bad = next((w for w in (_mismatch(v, args[0]) for v in value) if w), None)
    return f"a list whose every item is {bad}" if bad else None


def _mapping(value: Any, tp: Any) -> str | None:
    """A dict; ``dict[K, V]`` (V not ``Any``): each key a K and value a V, else any JSON object."""
    key, item = typing.get_args(tp) if len(typing.get_args(tp)) == 2 else (Any, Any)
    json = item is Any or item is object
    words = "a JSON object" if json else f"a dict whose every value is {_mismatch(_NO_VALUE, item)}"
    if not isinstance(value, dict):
        return words
    wrong = not json and any(_mismatch(k, key) or _mismatch(v, item) for k, v in value.items())
    return words if wrong else None


def _python_list(value: Any, tp: Any) -> str | None:
    """A Python list (a result's rows, a history); ``list[X]``: each item an X."""
    if not isinstance(value, list):
        return "a Python list"
    args = typing.get_args(tp)
    bad = next((w for w in (_mismatch(v, args[0]) for v in value) if w), None) if args else None
    return f"a Python list whose every item is {bad}" if bad else None


# the check of each kind of type, by the type (int, str, ...) or its origin (X | Y, Literal[...], tuple[X, ...])
_KINDS: dict[Any, Callable[[Any, Any], str | None]] = {
    typing.Union: _union,
    types.UnionType: _union,
    Literal: _literal,
    tuple: _list,
    list: _python_list,
    dict: _mapping,
    type(None): lambda value, tp: None if value is None else "null",
    bool: lambda value, tp: None if isinstance(value, bool) else "true or false",
    int: _integer,
    float: lambda value, tp: None if finite(value) else "a finite number",
    str: lambda value, tp: None if isinstance(value, str) else "a string",
}


def _class_words(cls: type) -> str:
    """``a ViTSpec`` for a class of learngene, ``a torch tensor`` for one of another package, ``a path`` for
    ``os.PathLike``."""
    if cls is os.PathLike:
        return "a path"
    package = cls.__module__.split(".")[0]
    name = cls.__name__ if package == "learngene" else f"{package} {cls.__name__.lower()}"
    return ("an " if name[0].lower() in "aeiou" else "a ") + name


# ---- what a settings dataclass declares, for listings and generated docs ------------------------------------
@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """One field of a settings dataclass as declared: what ``learngene methods`` and generated docs show."""

    name: str
    type: str  # e.g. "int", "float | None", "list of msa, mlp, ln"
    default: Any
    choices: tuple[Any, ...]
    limits: dict[str, Any]  # at_least / at_most / above / below / multiple_of / nonempty
    phase: tuple[str, ...]  # the steps that read it (method options)
    help: str
    auto: bool = False  # the default means "chosen automatically" (``--opt KEY=auto``)
    speed_only: bool = False


def describe_options(config_cls: type) -> list[OptionInfo]:
    """Every field of dataclass ``config_cls`` with its type, default, choices, range, phase and help."""
    hints = typing.get_type_hints(config_cls)
    auto = getattr(config_cls, "AUTO_OPTIONS", ())
    return [
        OptionInfo(
            name=f.name,
            type=type_name(hints.get(f.name, Any)),
            default=f.default,
            choices=choices(hints.get(f.name)),
            limits=limits_of(f),
            phase=tuple(f.metadata.get("phase", ())),
            help=f.metadata.get("help", ""),
            auto=f.name in auto,
            speed_only=bool(f.metadata.get("speed_only")),
        )
        for f in dataclasses.fields(config_cls)
    ]


def type_name(tp: Any) -> str:
    """A type as a user reads it: ``int``, ``float | None``, ``one of a, b``, ``list of a, b``."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in typing.get_args(tp))
    if origin is tuple:
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return "list of " + (", ".join(map(str, choices(args[0]))) or type_name(args[0]) if args else "values")
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


# ---- KEY=VALUE text: the one parser (--opt, --timm-arg) ---------------------------------------------------
def parse_assignment(item: str, types: Mapping[str, Any] | None, usage: str) -> tuple[str, Any]:
    """``"key=value"`` as ``(key, value)``: the key with ``-`` read as ``_``, the value by :func:`value_from_text`
    for the type ``types`` gives the key. ``types=None`` takes any key; a key it lacks, or text without ``=``,
    is refused with ``usage`` (``{item}`` in it names the text)."""
    key, sep, raw = item.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key or (types is not None and key not in types):
        raise LearngeneError(usage.format(item=repr(item)))
    return key, value_from_text(raw, types.get(key, Any) if types is not None else Any)


def parse_options(config_cls: type, items: list[str]) -> dict[str, Any]:
    """``["key=value", ...]`` (``--opt``), each value read for its field's type of dataclass ``config_cls``
    (:func:`parse_assignment`); ``auto`` gives an automatic option (``Config.AUTO_OPTIONS``) its default."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    types = typing.get_type_hints(config_cls)
    usage = "option {item} is not KEY=VALUE with a known KEY; use one of: " + (", ".join(fields) or "none")
    out: dict[str, Any] = {}
    for item in items:
        key, value = parse_assignment(item, types, usage)
        refuse_repeat(out, key, value, "option", "--opt")
        auto = key in getattr(config_cls, "AUTO_OPTIONS", ())
        if value == "auto" and auto:  # as `learngene methods` shows it
            value = fields[key].default
        elif auto and value == 0 and not isinstance(value, bool):
            # 0 stands for "automatic" inside the config; given by hand it reads as "none", which it is not
            raise LearngeneError(
                f"option {key}=0 would silently mean 'automatic'; give {key}=auto for that, or a positive value"
            )
        out[key] = value
    return out


def refuse_repeat(given: Mapping[str, Any], key: str, value: Any, what: str, flag: str) -> None:
    """The one rule for a setting given twice, everywhere (a flag, an option of ``options`` or ``--opt``, a timm
    argument, an item of a list): refused in one line naming both values, whether they differ or not, where a last
    value winning or an item counted twice would change the run without a word. ``given``: the settings so far."""
    if key in given:
        raise LearngeneError(
            f"{what} {key} is given twice ({key}={given[key]!r}, then {key}={value!r}); give it once ({flag} "
            f"{key}=VALUE), with the value you mean"
        )


def value_from_text(raw: str, tp: Any = Any) -> Any:
    """Text as a value of type ``tp``: kept as text for a ``str``, else read as JSON, else kept as text; a list
    becomes a tuple (see :func:`coerce`)."""
    if tp is str:  # e.g. layers=3 for a layer list written as text
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return coerce(value, tp)


def coerce(value: Any, tp: Any = Any) -> Any:
    """JSON's and text's shapes of a value made the dataclass's: a list is a tuple, and text for a list type
    (``modules=msa,mlp``) the tuple of its comma-separated items."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, str) and typing.get_origin(tp) is tuple:
        return tuple(part.strip() for part in value.split(","))
    return value


def as_text(value: Any) -> str:
    """A value as ``--opt KEY=VALUE`` would give it back (the inverse of :func:`value_from_text`)."""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return value if isinstance(value, str) else json.dumps(value)


def option_help(config_cls: type) -> dict[str, str]:
    """Each field of a settings dataclass and its help text ("" when it has none).

    Read, in order, from the field's ``help`` metadata, the ``Attributes:`` section of the docstring of the
    class or of a base class that declares the field (Google style; ``a, b: text`` documents both), or the
    comment on the field's own line(s). The docs' options tables and ``tests/test_docs.py`` read it.
    """
    out: dict[str, str] = {}
    for f in dataclasses.fields(config_cls):
        text = f.metadata.get("help", "")
        for base in config_cls.__mro__:
            if text:
                break
            if f.name in inspect.get_annotations(base):
                text = _docstring_attributes(base).get(f.name) or _field_comments(base).get(f.name, "")
        out[f.name] = text
    return out


def _docstring_attributes(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style class docstring, as name -> text."""
    lines = inspect.cleandoc(cls.__dict__.get("__doc__") or "").splitlines()
    out: dict[str, str] = {}
    names: list[str] = []
    inside = False
    for line in lines:
        if line.strip() == "Attributes:":
            inside = True
            continue
        if not inside:
            continue
        if line and not line.startswith(" "):
            break  # the next section
        entry = re.match(r"^ {4}([\w, ]+):\s*(.*)$", line)
        if entry:
            names = [n.strip() for n in entry.group(1).split(",")]
            for n in names:
                out[n] = entry.group(2).strip()
        elif line.strip() and names:
            for n in names:
                out[n] += " " + line.strip()
    return out


def _field_comments(cls: type) -> dict[str, str]:
    """The ``# comment`` on each annotated field's lines of a class's source ({} when the source is unavailable)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    body = ast.parse(source).body[0]
    out: dict[str, str] = {}
    for node in getattr(body, "body", []):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            end = node.end_lineno or node.lineno
            found = [comments[n] for n in range(node.lineno, end + 1) if n in comments]
            if found:
                out[node.target.id] = " ".join(found)
    return out


# each bound as an option's listing writes it (range_text), in the listing's order
_BOUND_SIGNS = {"above": ">", "at_least": "≥", "at_most": "≤", "below": "<"}


def range_text(config_cls: type, name: str) -> str:
    """The range an option's values must lie in, in words ("" when any value of its type goes): the one its
    field declares (:func:`~learngene.settings.field`), else 0 or more for a number, as :func:`learngene.method.check_options` checks."""
    f = next(f for f in dataclasses.fields(config_cls) if f.name == name)
    tp = typing.get_type_hints(config_cls).get(name)
    limits = limits_of(f)
    if not limits:
        numeric = tp in (int, float) or set(typing.get_args(tp)) - {type(None)} in ({int}, {float})
        return "≥ 0" if numeric else ""
    parts = [f"{sign} {limits[key]:g}" for key, sign in _BOUND_SIGNS.items() if key in limits]
    if "multiple_of" in limits:
        parts.append(f"multiple of {limits['multiple_of']}")
    if limits.get("nonempty"):
        parts.append("non-empty")
    if limits.get("odd"):
        parts.append("odd")
    return ", ".join(parts)
