"""Options given as comma-separated integers (pool's depths and widths, lets' layer numbers, sws' stage counts)."""

from __future__ import annotations

from ..errors import LearngeneError


def int_list(text: str, malformed: str) -> list[int] | None:
    """The integers of ``text`` (``"3,3,4"``), None for ``""`` (the option's automatic value); ``malformed`` is the
    one-line error for text that is not comma-separated integers."""
    if not text:
        return None
    try:
        return [int(x) for x in str(text).split(",")]
    except ValueError:
        raise LearngeneError(malformed) from None
