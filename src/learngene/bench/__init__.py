"""The benchmark: every registered method side by side on identical budgets (``learngene bench``, ``demo``)."""

from .profiles import PROFILES, Profile, get_profile
from .protocol import Row, run_profile

__all__ = ["PROFILES", "Profile", "Row", "get_profile", "run_profile"]
