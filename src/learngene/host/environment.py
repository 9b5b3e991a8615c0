"""The environment variables learngene reads, each read here with its range.

A value that is not a number, or lies outside its range, is one line naming the variable and what to set it
to, raised where the variable is read, never a traceback from deep inside ``int()`` or torch. Imports no torch.
"""

from __future__ import annotations

import math
import os
import re

from ..errors import LearngeneError

# One number in plain ASCII, as C's atoi and OpenMP read them: Python's int() and float() also take other scripts'
# digits ('١'), underscores ('1_0') and, for float, 'nan' and 'infinity', which libgomp, MKL and torchrun do not
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
DECIMAL_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_env_number(text: str, kind: type = int) -> float | None:
    """``text`` (stripped) as one ``kind`` number written in plain ASCII digits; None where it is not one."""
    if not (WHOLE_NUMBER if kind is int else DECIMAL_NUMBER).fullmatch(text):
        return None
    return kind(text)


def env_number(
    name: str, default: float, kind: type = int, at_least: float | None = None, at_most: float | None = None
) -> float:
    """``$name`` read as ``kind`` (``int`` or ``float``, finite, in plain ASCII digits: :func:`parse_env_number`)
    within ``[at_least, at_most]``; ``default`` when it is unset or empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    what = "a whole number" if kind is int else "a number"
    value = parse_env_number(text, kind)
    if value is None:
        raise LearngeneError(f"{name}={text!r} is not {what}; set it to {what}{_range(at_least, at_most)} or unset it")
    if (
        not math.isfinite(value)
        or (at_least is not None and value < at_least)
        or (at_most is not None and value > at_most)
    ):
        raise LearngeneError(
            f"{name}={text!r} is out of range; set it to {what}{_range(at_least, at_most)} or unset it"
        )
    return value


def _range(at_least: float | None, at_most: float | None) -> str:
    if at_least is not None and at_most is not None:
        return f" from {at_least:g} to {at_most:g}"
    if at_least is not None:
        return f" of at least {at_least:g}"
    return f" of at most {at_most:g}" if at_most is not None else ""
