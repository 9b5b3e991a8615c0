"""Plain values checked against a dataclass's field types, before anything uses them.

Settings reach the library from JSON (a gene's header, ``--opt KEY=VALUE``) and from Python callers,
so a string can arrive where an int belongs, ``null`` where a float does, or ``Infinity`` where a
finite number does. :func:`check_fields` refuses each with one line naming the field. A field's range
is declared with it (:func:`option`: its metadata) and read by :func:`out_of_range`; a range that
depends on several settings stays in its dataclass's ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal

from .errors import LearngeneError

# integers must fit torch's int64 (seeds, counts): Python's unbounded ints overflow later, far from the input
MAX_INT = 2**63 - 1


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


def option(
    default: Any,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    above: float | None = None,
    multiple_of: int | None = None,
    nonempty: bool = False,
    odd: bool = False,
) -> Any:
    """A dataclass field whose values must lie in a range: ``at_least`` / ``at_most`` (inclusive), ``above``
    (exclusive), a ``multiple_of`` an integer, an ``odd`` integer, a ``nonempty`` list; :func:`out_of_range` checks
    them."""
    limits = {
        "at_least": at_least,
        "at_most": at_most,
        "above": above,
        "multiple_of": multiple_of,
        "nonempty": nonempty or None,
        "odd": odd or None,
    }
    return dataclasses.field(default=default, metadata={k: v for k, v in limits.items() if v is not None})


RANGE_KEYS = ("at_least", "at_most", "above", "multiple_of", "nonempty", "odd")


def out_of_range(value: Any, limits: dict[str, Any]) -> str | None:
    """None when ``value`` lies within ``limits`` (:func:`option`'s metadata; None values pass), else what it
    should have been (for the message)."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return "a non-empty list" if limits.get("nonempty") and not value else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    lo, hi, above, step = (limits.get(k) for k in ("at_least", "at_most", "above", "multiple_of"))
    if (lo is not None and value < lo) or (hi is not None and value > hi) or (above is not None and value <= above):
        if above is not None:
            return f"above {above:g}" + (f" and at most {hi:g}" if hi is not None else "")
        if hi is not None:
            return f"between {lo:g} and {hi:g}" if lo is not None else f"at most {hi:g}"
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
