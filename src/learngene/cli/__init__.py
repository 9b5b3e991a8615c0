"""The ``learngene`` command line (``learngene.cli:main``; also ``python -m learngene``).

One module per job: :mod:`~learngene.cli.parser` (every command, flag and help text; it imports no torch, so
``--help`` answers at once), :mod:`~learngene.cli.flags` (the flags several commands share, made from their
declarations), :mod:`~learngene.cli.dispatch` (``main``: parse, run, one-line errors, signals),
:mod:`~learngene.cli.options` (flags to specs, data, training configs, checked outputs), and the commands, each imported only when it runs: :mod:`~learngene.cli.making` (ancestry, condense, adapt,
train), :mod:`~learngene.cli.expanding` (expand), :mod:`~learngene.cli.info` (inspect, methods) and
:mod:`~learngene.cli.benching` (bench, demo).
"""

from .dispatch import main
from .parser import build_parser

__all__ = ["build_parser", "main"]
