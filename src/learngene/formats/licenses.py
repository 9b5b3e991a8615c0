"""The licence of a model's weights: read from what an ancestry carries, or stated by the user, then passed on.

A learngene is made of its ancestry's weights, and so are the descendants expanded from it, so the
ancestry's licence travels with them: :func:`learngene.ancestry.load_ancestry` reads it, ``learngene
condense`` stores it in the gene's header, and ``learngene expand`` names it on the descendant's model
card (and in a model file's origin). ``--license ID`` states it where the ancestry carries none, or
overrides what it carries.

Where an ancestry carries a licence:

* a model folder (timm hub or transformers): the front matter of its ``README.md`` (``license:``, the
  Hugging Face hub's model-card field; ``license: other`` names its terms in ``license_name:``), else a
  ``license`` field of its ``config.json``, else of the config's ``pretrained_cfg`` (timm);
* a learngene model file: the licence recorded in its origin when it was written.

A bare checkpoint file carries none. timm's default ``pretrained_cfg`` of the architecture names the
licence of *its* published weights, which says nothing about the file given, so it is never used.
This module imports no torch: the command-line parser checks ``--license`` with it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import LearngeneError, named

# SPDX identifiers and expressions (``Apache-2.0``, ``MIT OR Apache-2.0``) and the hub's ids (``cc-by-nc-4.0``)
_LICENSE = re.compile(r"[A-Za-z0-9(][A-Za-z0-9.+\-() ]{0,99}")
README = "README.md"


def check_license(value: Any, source: str = named("license"), fix: str = "give") -> str:
    """``value`` as a licence identifier, or one line saying what to give (``fix``: the verb of that advice)."""
    if not isinstance(value, str) or not _LICENSE.fullmatch(value.strip()) or not _balanced_expression(value):
        raise LearngeneError(
            f"{source} {str(value)[:60]!r} is not a licence identifier; {fix} an SPDX identifier "
            f"such as Apache-2.0, MIT or CC-BY-NC-4.0 (letters, digits, '.', '-', '+')"
        )
    return value.strip()


_LICENSE_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+\-]*")


def _balanced_expression(text: str) -> bool:
    """An SPDX expression's shape: parentheses that close, and identifiers (or AND/OR/WITH) between them: so
    ``((((`` or ``(`` is no licence, while ``(MIT OR Apache-2.0)`` is."""
    depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return False
    tokens = text.replace("(", " ").replace(")", " ").split()
    return depth == 0 and bool(tokens) and all(_LICENSE_TOKEN.fullmatch(t) for t in tokens)


def folder_license(folder: str | Path, config: dict[str, Any] | None = None) -> str | None:
    """The licence a model folder records (README front matter, then ``config.json``), or None."""
    folder = Path(folder)
    from .weights import is_regular_file

    found = _front_matter_license(folder / README)
    if found is None and config is None and is_regular_file(folder / "config.json"):
        try:
            config = json.loads((folder / "config.json").read_text())
        except (ValueError, UnicodeDecodeError, OSError, RecursionError):
            config = None
    if found is None and isinstance(config, dict):
        cfg = config.get("pretrained_cfg")
        found = config.get("license") or (cfg.get("license") if isinstance(cfg, dict) else None)
    if found is None:
        return None
    return check_license(
        found,
        f"the licence recorded in {folder}",
        fix="correct its README.md front matter's `license:` (or config.json's) to",
    )


def _front_matter_license(readme: Path) -> str | None:
    """``license:`` of a model card's YAML front matter (``license_name:`` where it says ``other``)."""
    from .weights import is_regular_file  # here: the CLI's parser imports this module and must not load torch

    if not is_regular_file(readme):  # none, or a FIFO (whose read would block): no licence read from it
        return None
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    fields: dict[str, str] = {}
    key = None
    for line in lines[1:]:
        if line.strip() == "---":
            break
        match = re.fullmatch(r"([A-Za-z_]+):\s*(.*?)\s*", line)
        if match:
            key, value = match.groups()
            fields[key] = value.strip("'\"")
        elif key and not fields.get(key) and line.strip().startswith("- "):  # a list: its first item
            fields[key] = line.strip()[2:].strip().strip("'\"")
    found = fields.get("license") or None
    if found == "other" and fields.get("license_name"):
        found = fields["license_name"]
    return found
