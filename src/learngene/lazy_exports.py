"""Public names of a package that load on first use (PEP 562): importing the package costs nothing until one is read,
so that ``import learngene.cli`` and ``learngene --help`` stay free of torch (``learngene.bench`` declares its names
so)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public names are ``exports`` (name -> the submodule, relative
    to ``package``, that defines it); a name is imported when first read, then kept in the package."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{exports[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
