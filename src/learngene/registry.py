"""The method registry: names to :class:`~learngene.method.Method` classes.

A leaf, as timm's ``models/_registry.py``: it imports no method at import time. Methods register
themselves with ``@register_method`` when their module is imported; :func:`get_method` and
:func:`list_methods` import the built-in ones (:mod:`learngene.methods`) on first use, so the registry is
full wherever it is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import GeneFormatError

if TYPE_CHECKING:
    from .method import Method

_METHODS: dict[str, type[Method]] = {}


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method discoverable by its ``name`` (CLI, benchmark, gene expansion)."""
    if cls.name in _METHODS and _METHODS[cls.name] is not cls:
        raise ValueError(f"method {cls.name!r} is registered twice")
    _METHODS[cls.name] = cls
    return cls


def _load_builtin_methods() -> None:
    from . import methods  # noqa: F401  (importing the method modules registers them)


def get_method(name: str) -> type[Method]:
    """The method class registered as ``name``; one-line error for a name this version does not know."""
    if name not in _METHODS:
        _load_builtin_methods()
    try:
        return _METHODS[name]
    except KeyError:
        raise GeneFormatError(
            f"unknown method {name!r}; this version of learngene knows: {', '.join(list_methods())} "
            f"(a gene made by a newer version needs an upgrade of learngene)"
        ) from None


def list_methods() -> list[str]:
    """The names of every registered method, sorted (the built-in ones are imported first)."""
    _load_builtin_methods()
    return sorted(_METHODS)
