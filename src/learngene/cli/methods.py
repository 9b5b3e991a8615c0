"""``learngene methods``: every registered method with its options and papers."""

from __future__ import annotations

import argparse
import dataclasses
import typing

HELP = "list the registered methods and their options"

DESCRIPTION = (
    "List every registered method with its options (for --method / --opt); with --for SIZE, the methods that can "
    "make that size from a gene or an ancestry, why each other cannot, and what stored runs measured in that regime."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--for",
        dest="for_size",
        metavar="SIZE",
        help="a descendant size, L<depth>-D<width>-H<heads> (e.g. L2-D32-H2): which methods can make it, which "
        "cannot and why, and which to try first",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--gene", help="with --for: this gene's method and the ancestry it records decide reach")
    source.add_argument("--ancestry", help="with --for: the ancestry whose size decides each method's reach")


def run(args: argparse.Namespace) -> None:
    if args.for_size is not None:
        from ..advice import methods_for

        print(methods_for(args.for_size, gene=args.gene, ancestry=args.ancestry).text)
        return
    if args.gene is not None or args.ancestry is not None:
        from ..errors import LearngeneError

        raise LearngeneError("--gene and --ancestry go with --for SIZE; add e.g. --for L2-D32-H2")
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
