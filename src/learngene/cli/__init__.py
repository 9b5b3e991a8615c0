"""The ``learngene`` command line (``learngene.cli:main``; also ``python -m learngene``).

One module per command (:data:`~learngene.cli.parser.COMMANDS`): ``ancestry``, ``condense``, ``expand``, ``adapt``,
``train``, ``inspect``, ``methods``, ``bench``, ``compare`` and ``demo``, each with its ``HELP`` and ``DESCRIPTION``,
``add_arguments(p)`` (its flags; it imports no torch, so ``--help`` answers at once) and ``run(args)`` (which imports
the library when the command runs). Beside them: :mod:`~learngene.cli.parser` (the top-level parser over the commands),
:mod:`~learngene.cli.dispatch` (``main``: parse, run, one-line errors, signals), :mod:`~learngene.cli.flags` (the flags
several commands share, made from their declarations), :mod:`~learngene.cli.options` (flags to specs, data, training
configs, checked outputs) and :mod:`~learngene.cli.describe` (what ``inspect`` prints).
"""

from .dispatch import main
from .parser import build_parser

__all__ = ["build_parser", "main"]
