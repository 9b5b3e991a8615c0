"""Whether an environment holds exactly the versions ``constraints.txt`` pins: what ``make check-latest`` asks before it
runs the suite again with the newest versions the bounds allow.

Usage::

    VENV/bin/python tools/pinned_versions.py [constraints.txt]

Run by the environment's own Python, it reads every installed distribution (``importlib.metadata``) but
``learngene-vit`` itself and the venv's own tools (pip, setuptools, wheel: ``pip freeze`` leaves them out) and
prints one line for each whose version is not the pinned one (``name: pinned X, installed Y``; ``not pinned`` for
one the file does not name). Exit 0: all are the pinned versions, so ``make test``
(pinned) already ran the suite on them; 1: some differ, and the suite must run on them; 2: the file cannot be read.
Names compare as PEP 503 normalizes them (``Jinja2`` is ``jinja2``, ``typing_extensions`` is
``typing-extensions``).
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

OURS = "learngene-vit"
# what `pip freeze` leaves out, so `make lock` never pins them: the tools every venv is made with
VENV_TOOLS = {"pip", "setuptools", "wheel", "distribute"}


def normalized(name: str) -> str:
    """PEP 503's form of a distribution name: lower case, each run of ``-``, ``_``, ``.`` one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """The ``name==version`` lines of a constraints file, by normalized name (comments and other lines skipped)."""
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)\s*(?:[;#].*)?", line)
        if match:
            found[normalized(match.group(1))] = match.group(2)
    return found


def differences(pinned: dict[str, str], installed: dict[str, str]) -> list[str]:
    """A line for each installed distribution (not ours) whose version is not its pin, sorted by name."""
    lines = []
    for name, version in sorted(installed.items()):
        if name == OURS or name in VENV_TOOLS:
            continue
        if name not in pinned:
            lines.append(f"{name}: not pinned, installed {version}")
        elif pinned[name] != version:
            lines.append(f"{name}: pinned {pinned[name]}, installed {version}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "constraints.txt")
    try:
        pinned = pins(path.read_text())
    except OSError as exc:
        print(f"pinned_versions: cannot read {path}: {exc.strerror}; give the constraints file", file=sys.stderr)
        return 2
    installed = {normalized(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    lines = differences(pinned, installed)
    print("\n".join(lines) if lines else f"every installed distribution is at its pin in {path}")
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
