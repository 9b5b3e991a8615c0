"""The benchmark: every registered method side by side on identical budgets (``learngene bench``, ``demo``).

The names below load on first use (PEP 562): the CLI's parser reads :mod:`.profiles` without torch.
"""

import importlib

_EXPORTS = {
    "PROFILES": "profiles",
    "Profile": "profiles",
    "Task": "profiles",
    "get_profile": "profiles",
    "BenchRun": "protocol",
    "Row": "rows",
    "run_profile": "protocol",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
