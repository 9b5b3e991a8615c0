"""Plain values checked against a dataclass's field types, before anything uses them.

Settings reach the library from JSON (a gene's header, ``--opt KEY=VALUE``) and from Python callers,
so a string can arrive where an int belongs, ``null`` where a float does, or ``Infinity`` where a
finite number does. :func:`check_fields` refuses each with one line naming the field. A field's range
is declared with it (:func:`option`: its metadata) and read by :func:`out_of_range`; a range that
depends on several settings stays in its dataclass's ``__post_init__``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import math
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from .errors import LearngeneError
from .errors import setting as by_caller

# integers must fit torch's int64 (seeds, counts): Python's unbounded ints overflow later, far from the input
MAX_INT = 2**63 - 1


# ---- naming a setting to whoever gave it: the command line's flag, or the Python argument ----------------
def caller_name(name: str, flag: str | None) -> str:
    """How a message names setting ``name``: its ``flag`` on the command line (when it has one, e.g. ``--lr``),
    else the Python argument (``lr``)."""
    return by_caller(name, flag) if flag else name


def caller_fix(template: str, name: str, flag: str | None) -> str:
    """``template`` (what a message tells to do) with the setting named for whoever gave it: ``{}`` is the name
    alone (``--lr`` / ``lr``), ``{=V}`` an assignment (``--lr V`` / ``lr=V``), and ``{=C|P}`` one whose value
    differs (the flag's ``C``, Python's ``P``: ``--grad-clip 0`` / ``grad_clip=None``). ``flag`` None (a
    setting without one): the Python form on the command line too."""

    def assign(match: re.Match) -> str:
        cli, _, python = match.group(1).partition("|")
        in_python = f"{name}={python or cli}"
        return by_caller(in_python, f"{flag} {cli}") if flag else in_python

    return re.sub(r"\{=([^}]*)\}", assign, template).replace("{}", caller_name(name, flag))


def option_assignment(name: str, value: str) -> str:
    """A method option set to ``value`` as its giver writes it: ``--opt name=value`` on the command line, else
    the keyword argument ``name=value``."""
    return by_caller(f"{name}={value}", f"--opt {name}={value}")


def check_fields(obj: Any, what: str, fix: str, error: type[LearngeneError] = LearngeneError) -> None:
    """Raise :class:`LearngeneError` if a field of dataclass ``obj`` does not hold a value of its declared type.

    ``what`` names the owner in the message (e.g. ``"peg option"``), ``fix`` says what to do. Ints must be
    ints (not bools, floats or strings) within int64, floats finite numbers, bools bools; ``X | None``,
    ``Literal[...]`` and ``tuple[X, ...]`` are followed; other types are not checked.
    """
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        expected = _mismatch(value, hints.get(f.name, Any))
        if expected:
            raise error(f"{what} {f.name} must be {expected}, got {value!r}; {fix}")


# the steps of a method that read an option (its field metadata "phase"): expand and adapt refuse an option they
# do not read, so a descendant's header never records an option that changed nothing
CONDENSE, EXPAND, ADAPT = "condense", "expand", "adapt"
PHASES = (CONDENSE, EXPAND, ADAPT)
PHASE_WORDS = {CONDENSE: "condensing", EXPAND: "expanding", ADAPT: "adapting"}


def option(
    default: Any,
    *,
    phase: str | tuple[str, ...] | None = None,
    help: str = "",
    speed_only: bool = False,
    at_least: float | None = None,
    at_most: float | None = None,
    above: float | None = None,
    below: float | None = None,
    multiple_of: int | None = None,
    nonempty: bool = False,
    odd: bool = False,
) -> Any:
    """A dataclass field declared once: its range (``at_least`` / ``at_most`` inclusive, ``above`` / ``below``
    exclusive, a ``multiple_of`` an integer, an ``odd`` integer, a ``nonempty``
    list; :func:`out_of_range` checks them), the steps
    that read it (``phase``: ``condense``, ``expand``, ``adapt`` or a tuple of them; a method option must name
    one), a one-line ``help``, and ``speed_only`` when it changes how fast a result comes, not the result."""
    phases = (phase,) if isinstance(phase, str) else tuple(phase or ())
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise ValueError(f"unknown phase {unknown[0]!r}; use {', '.join(PHASES)}")
    limits = {
        "at_least": at_least,
        "at_most": at_most,
        "above": above,
        "below": below,
        "multiple_of": multiple_of,
        "nonempty": nonempty or None,
        "odd": odd or None,
    }
    meta: dict[str, Any] = {k: v for k, v in limits.items() if v is not None}
    if phases:
        meta["phase"] = phases
    if help:
        meta["help"] = help
    if speed_only:
        meta["speed_only"] = True
    return dataclasses.field(default=default, metadata=meta)


def limits_of(f: dataclasses.Field) -> dict[str, Any]:
    """The range a field declares (:func:`option`'s limits), {} for none."""
    return {k: v for k, v in f.metadata.items() if k in RANGE_KEYS}


RANGE_KEYS = ("at_least", "at_most", "above", "below", "multiple_of", "nonempty", "odd")


def out_of_range(value: Any, limits: dict[str, Any]) -> str | None:
    """None when ``value`` lies within ``limits`` (:func:`option`'s metadata; None values pass), else what it
    should have been (for the message)."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return "a non-empty list" if limits.get("nonempty") and not value else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    lo, hi, above, below, step = (limits.get(k) for k in ("at_least", "at_most", "above", "below", "multiple_of"))
    if (
        (lo is not None and value < lo)
        or (hi is not None and value > hi)
        or (above is not None and value <= above)
        or (below is not None and value >= below)
    ):
        if above is not None:
            if above == 0 and hi is None:
                return "positive"
            return f"above {above:g}" + (f" and at most {hi:g}" if hi is not None else "")
        if below is not None:
            return f"in [{lo:g}, {below:g})" if lo is not None else f"below {below:g}"
        if hi is not None:
            return f"in [{lo:g}, {hi:g}]" if lo is not None else f"at most {hi:g}"
        return "0 or more" if lo == 0 else f"at least {lo:g}"
    if step is not None and value % step:
        return f"a multiple of {step}"
    if limits.get("odd") and value % 2 != 1:
        return "an odd number"
    return None


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
    """None when ``value`` fits type ``tp``, else what it should have been (for the message)."""
    origin = typing.get_origin(tp)
    if tp is Any or isinstance(tp, typing.TypeVar):
        return None
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(tp)
        wanted = [_mismatch(value, arm) for arm in arms]
        return None if any(w is None for w in wanted) else " or ".join(w for w in wanted if w)
    if origin is Literal:
        choices = typing.get_args(tp)
        return None if value in choices else "one of " + ", ".join(repr(c) for c in choices)
    if tp is type(None):
        return None if value is None else "null"
    if tp is bool:
        return None if isinstance(value, bool) else "true or false"
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            return "an integer"
        return None if -MAX_INT <= value <= MAX_INT else "an integer below 2^63 in size"
    if tp is float:
        return None if finite(value) else "a finite number"
    if tp is str:
        return None if isinstance(value, str) else "a string"
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, tuple):
            return "a list"
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else None
        if item is not None:
            bad = next((w for w in (_mismatch(v, item) for v in value) if w), None)
            return f"a list whose every item is {bad}" if bad else None
        return None
    return None


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


def range_text(config_cls: type, name: str) -> str:
    """The range an option's values must lie in, in words ("" when any value of its type goes): the one its
    field declares (:func:`option`), else 0 or more for a number, as :func:`learngene.method.check_options` checks."""
    f = next(f for f in dataclasses.fields(config_cls) if f.name == name)
    tp = typing.get_type_hints(config_cls).get(name)
    limits = {k: v for k, v in f.metadata.items() if k in RANGE_KEYS}
    if not limits:
        numeric = tp in (int, float) or set(typing.get_args(tp)) - {type(None)} in ({int}, {float})
        return "≥ 0" if numeric else ""
    parts = []
    if "above" in limits:
        parts.append(f"> {limits['above']:g}")
    if "at_least" in limits:
        parts.append(f"≥ {limits['at_least']:g}")
    if "at_most" in limits:
        parts.append(f"≤ {limits['at_most']:g}")
    if "below" in limits:
        parts.append(f"< {limits['below']:g}")
    if "multiple_of" in limits:
        parts.append(f"multiple of {limits['multiple_of']}")
    if limits.get("nonempty"):
        parts.append("non-empty")
    if limits.get("odd"):
        parts.append("odd")
    return ", ".join(parts)
