"""``learngene --version``: the distribution's name and version, and a line on another distribution that installs
into the same ``learngene/`` folder.

The name ``learngene`` on PyPI is an unrelated 2023 project's ("some methods for learngene": subpackages
``auto_learngene``, ``heur_learngene`` and ``data_all`` of a namespace package ``learngene/``, no command); this
project's pre-releases were also installed under that name. Both install into ``site-packages/learngene/`` beside
this one: nothing breaks (the other project's files are not this project's, and a regular package is imported before
namespace portions), but ``pip list`` shows two, and ``pip install -U learngene`` acts on the other one, so the
version line says which it is and what to do (docs/install.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from .._version import DISTRIBUTION, __version__

# pyproject.toml's description: how this project's own dist-info under the old name is told from the other project's
SUMMARY = "Condense a pretrained Vision Transformer into a learngene and expand it into timm ViTs of any size."
OTHER_NAME = "learngene"


def other_distribution() -> str | None:
    """One line on a distribution named ``learngene`` installed here (the unrelated project, or this project's
    pre-release under that name), with what to do; None when there is none."""
    from importlib import metadata

    try:
        other = metadata.distribution(OTHER_NAME)
    except metadata.PackageNotFoundError:
        return None
    version, summary = other.version, str(other.metadata.json.get("summary", ""))
    if summary.strip() == SUMMARY:
        return (
            f"note: this project's pre-release {OTHER_NAME} {version} (its name before {DISTRIBUTION}) is installed "
            f"too; run pip uninstall {OTHER_NAME}, then reinstall {DISTRIBUTION} (the uninstall removes the "
            f"learngene command both declare)"
        )
    return (
        f"note: {OTHER_NAME} {version} ({summary.strip() or 'no summary'}), an unrelated project, is installed into the "
        f"same learngene/ folder; this one works beside it, and pip uninstall {OTHER_NAME} removes only that one"
    )


def version_lines() -> list[str]:
    """What ``learngene --version`` prints: ``learngene-vit VERSION``, then the note of :func:`other_distribution`."""
    note = other_distribution()
    return [f"{DISTRIBUTION} {__version__}", *([note] if note else [])]


class VersionAction(argparse.Action):
    """``--version``: prints :func:`version_lines` and exits 0 (argparse's own prints one text fixed when the parser
    is built, and the note needs a look at the installed distributions, made only when the flag is given)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        print("\n".join(version_lines()))  # on stdout, as argparse's own --version
        parser.exit(0)
