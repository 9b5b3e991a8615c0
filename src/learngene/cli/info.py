"""The commands that only read and print: ``inspect`` and ``methods``."""

from __future__ import annotations

import argparse
import dataclasses
import typing

from ..binding import bind_gene
from ..gene import Learngene
from ..method import citations
from ..registry import get_method, list_methods
from ..validate import choices
from .describe import describe_file
from .options import check_outputs


def cmd_inspect(args: argparse.Namespace) -> None:
    check_outputs(args, [args.plot], [args.path])
    print(describe_file(args.path, show_tensors=args.tensors))
    if args.plot:
        bound = bind_gene(Learngene.load(args.path), source=args.path)
        bound.method.plot(bound.gene, args.plot, overwrite=args.overwrite)
        print(f"wrote {args.plot}")


def cmd_methods(args: argparse.Namespace) -> None:
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
