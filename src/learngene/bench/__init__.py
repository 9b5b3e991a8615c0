"""The benchmark: every registered method side by side on identical budgets (``learngene bench``, ``demo``)."""

from .profiles import PROFILES, Profile, Task, get_profile
from .protocol import BenchRun, Row, run_profile

__all__ = ["PROFILES", "BenchRun", "Profile", "Row", "Task", "get_profile", "run_profile"]
