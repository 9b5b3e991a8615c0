"""A griffe extension for the API reference (``mkdocs.yml``): the docstrings' Sphinx roles as Markdown code.

The docstrings name other objects the reST way (``:func:`~learngene.pipeline.condense```, ``:class:`TrainConfig```),
which mkdocstrings would show as raw text. Each role becomes inline code of the name as Sphinx shows it (the last
part after ``~``); ``tests/test_docs.py`` checks the conversion without mkdocs.
"""

from __future__ import annotations

import re
from typing import Any

try:
    from griffe import Extension
except ImportError:  # only the docs extra brings griffe: the test imports convert alone
    Extension = object  # type: ignore[assignment,misc]

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const|type):`(~?)([^`]+)`")


def convert(text: str) -> str:
    """``text`` with every Sphinx role as Markdown inline code: ``:func:`~a.b.c``` -> ```c```, ``:mod:`a.b``` ->
    ```a.b```."""
    return ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)


class SphinxRoles(Extension):  # type: ignore[misc,valid-type]
    """Rewrites each object's docstring as it is loaded (griffe calls ``on_instance`` for every object)."""

    def on_instance(self, *args: Any, **kwargs: Any) -> None:
        obj = kwargs.get("obj", args[1] if len(args) > 1 else None)
        if obj is not None and obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
