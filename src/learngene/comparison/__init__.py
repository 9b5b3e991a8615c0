"""``learngene compare``: which start wins for an ancestry, data and sizes, in its own layer above the benchmark.

The layers run one way: :mod:`learngene.comparison` builds a profile for the benchmark (:mod:`learngene.bench`),
whose stages call the use cases (:mod:`learngene.pipeline`); nothing below imports what is above it
(``tests/test_architecture.py`` checks the arrows).

- :mod:`.choices`: :class:`CompareChoices`, what a comparison compares besides its training settings
- :mod:`.profile`: the bench profile of one comparison and the run that computes it
- :mod:`.report`: the per-size tables, recommendation lines, plots and ``report.md``
- :mod:`.launching`: where the cells run (:class:`Launcher`: in process, local workers, Slurm) and what a worker runs
- :mod:`.launches`: a submitted array of workers, and the wait that shows its progress and reports
- :mod:`.comparing`: :func:`compare` in one call, returning a :class:`Comparison`

The names below load on first use (PEP 562): the CLI's parser reads :mod:`.launching` without torch.
"""

from ..lazy_exports import lazy_exports

_EXPORTS = {
    "compare": "comparing",
    "Comparison": "comparing",
    "CompareChoices": "choices",
    "Launcher": "launching",
    "compare_profile": "profile",
    "start_compare": "profile",
    "run_compare": "profile",
    "write_compare_report": "report",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
