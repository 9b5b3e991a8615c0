"""The benchmark: every registered method side by side on identical budgets (``learngene bench``, ``demo``).

The names below load on first use (PEP 562): the CLI's parser reads :mod:`.profiles` without torch.
"""

from ..lazy_exports import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
