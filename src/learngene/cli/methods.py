"""``learngene methods``: every registered method with its options and papers."""

from __future__ import annotations

import argparse
import dataclasses
import typing

HELP = "list the registered methods and their options"

DESCRIPTION = "List every registered method with its options (for --method / --opt)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """No flags of its own."""


def run(args: argparse.Namespace) -> None:
    from ..method import citations
    from ..registry import get_method, list_methods
    from ..validate import choices

    for name in list_methods():
        cls = get_method(name)
        auto = getattr(cls.Config, "AUTO_OPTIONS", ())
        hints = typing.get_type_hints(cls.Config)

        def shown(f) -> str:
            allowed = choices(hints.get(f.name))
            return f"{f.name}={'auto' if f.name in auto else repr(f.default)}" + (
                " {" + ",".join(c if c else repr(c) for c in map(str, allowed)) + "}" if allowed else ""
            )

        options = ", ".join(shown(f) for f in dataclasses.fields(cls.Config)) or "-"
        print(f"{name:18s} {cls.summary}\n{'':18s} options: {options}")
        for paper in citations(cls):
            print(f"{'':18s} paper: {paper}")
