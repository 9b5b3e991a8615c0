"""The ``learngene`` argument parser: the top-level command, and a subcommand for each module in ``COMMANDS``, made
from that module's ``HELP``, ``DESCRIPTION`` and optional ``EPILOG``, with the flags its ``add_arguments`` adds (the
flags several commands share are made in :mod:`learngene.cli.flags`).

It imports no torch (nor anything that does), so ``learngene --help``, ``learngene SUB --help`` and argument
errors answer in a fraction of a second; ``benchmarks/cli_startup.py`` measures it and
``tests/test_cli.py`` checks it. A command's ``run`` imports the library only when the command runs
(:mod:`learngene.cli.dispatch`).
"""

from __future__ import annotations

import argparse
from typing import Any

from . import adapt, ancestry, bench, compare, condense, demo, expand, inspect, methods, train
from .version import VersionAction

EXIT_USAGE = 2

# the commands in the order `learngene --help` lists them, each by its module's name
COMMANDS = {
    module.__name__.rpartition(".")[2]: module
    for module in (ancestry, condense, expand, adapt, train, inspect, methods, bench, compare, demo)
}


class _StoreOnce(argparse._StoreAction):
    """A flag that takes one value (``--seed 1``, ``--stitch SPEC``): given twice it is refused, where argparse would
    keep the last value without a word (``--seed 1 --seed 2`` ran seed 2). Flags meant to repeat say so
    (``action="append"``: ``--opt``, ``--log``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given: set[str] = parser.__dict__.setdefault("_given_once", set())
        if self.dest in given:  # the one rule for repeats (learngene.validate.refuse_repeat), both values named
            first = getattr(namespace, self.dest, None)
            raise argparse.ArgumentError(
                self, f"given twice (first as {first!r}, then as {values!r}); give it once, with the value you mean"
            )
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2), like every other learngene error, and single-value flags given at
    most once (:class:`_StoreOnce`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)  # every add_argument without an action, and action="store"
        self.register("action", "store", _StoreOnce)

    def parse_known_args(self, args=None, namespace=None):
        self.__dict__["_given_once"] = set()  # each parse counts afresh (a parser may parse more than once)
        return super().parse_known_args(None if args is None else self._negative_values(list(args)), namespace)

    def _negative_values(self, args: list[str]) -> list[str]:
        """``--layers -1,0,1`` as ``--layers=-1,0,1``: argparse takes a value that starts with a minus for a flag
        unless it is one plain number, and said "expected one argument"; joined, the flag's own check words the
        refusal. Only a value of a minus and a digit is joined, so a flag that lacks its value is still told so."""
        out: list[str] = []
        for arg in args:
            action = self._option_string_actions.get(out[-1]) if out else None
            takes_one = action is not None and action.nargs is None and bool(action.option_strings)
            if takes_one and out[-1].startswith("--") and arg[:1] == "-" and arg[1:2].isdigit():
                out[-1] = f"{out[-1]}={arg}"
            else:
                out.append(arg)
        return out

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="learngene",
        description="Condense a pretrained ViT into a learngene and expand it into "
        "timm ViTs of any depth, width and head count.",
    )
    parser.add_argument("--version", action=VersionAction, help="print the distribution's name and version, and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    for name, command in COMMANDS.items():
        command.add_arguments(
            subparsers.add_parser(
                name, help=command.HELP, description=command.DESCRIPTION, epilog=getattr(command, "EPILOG", None)
            )
        )
    return parser
