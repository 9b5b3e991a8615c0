"""The marks of ``benchmarks/condense_budget.py`` and ``benchmarks/transfer_why.py`` are compare's and bench's rule
(the paired t-test over seeds, Holm-corrected over a size's comparisons), checked against hand computations.

With 3 seeds the t distribution has 2 degrees of freedom, whose two-sided p-value is ``1 − |t|/√(t² + 2)``
(``tests/test_compare_stats.py`` derives it).
"""

import importlib.util
import math
from pathlib import Path

from learngene.bench.rows import Row

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _p(diffs: list[float]) -> float:
    """The two-sided paired t-test's p-value of 3 differences, by the closed form at 2 degrees of freedom."""
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    t = mean / (sd / math.sqrt(3))
    return 1 - abs(t) / math.sqrt(t * t + 2)


def test_transfer_why_fix_marks_by_holms_step_down():
    why = _script("transfer_why")
    results = {
        "mimetic": {0: 60.0, 1: 70.0, 2: 80.0},
        "pretrained": {0: 57.0, 1: 68.0, 2: 76.0},
        "pretrained +mimetic-if-untrained": {0: 67.0, 1: 78.5, 2: 85.5},
    }
    # three comparisons, m = 3; by hand: K (10, 10.5, 9.5) p = 0.00083 ≤ 0.05/3; M of the fixed row (7, 8.5, 5.5)
    # p = 0.0150 ≤ 0.05/2; M of pretrained (−3, −2, −4) p = 0.0351 ≤ 0.05/1: Holm resolves all three (Bonferroni,
    # 0.0167 for each, and the old unpaired rule would not resolve the last)
    assert _p([10, 10.5, 9.5]) < 0.05 / 3 and _p([7, 8.5, 5.5]) < 0.05 / 2 < _p([-3, -2, -4]) < 0.05
    lines = why.fix_table(results, ["pretrained"], "A L2")
    assert lines[1].split()[6] == "M−" and lines[2].split()[7:9] == ["M+", "K+"]
    assert lines[0].split()[6].startswith("[")  # mimetic: no mark against itself
    assert lines[-1] == "A L2 Holm over the m = 3 comparisons of this upstream and depth (5 % family-wise)"
    assert "pretrained +mimetic-if-untrained    77.0 ±  9.3 M+ K+" in lines[2]  # mean and sd of 67, 78.5, 85.5


def test_condense_budget_marks_every_cell_of_a_size_as_one_holm_family():
    budget = _script("condense_budget")
    usual = (0.61, 0.69, 0.81)
    values = {("mimetic", "c2", 5, 1): (0.60, 0.70, 0.80), ("scratch", "c2", 5, 10): (0.62, 0.69, 0.83)}
    values[("scratch", "c2", 5, 1)] = (0.50, 0.52, 0.51)
    for method in ("tleg", "wave", "share_init", "peg"):
        for upstream in ("c2", "c8"):
            values[method, upstream, 5, 1] = usual
    for method in ("peg", "wave"):
        values[method, "c2", 50, 1] = usual
    values["tleg", "c8", 5, 1] = (0.70, 0.805, 0.895)
    rows = []
    for (method, upstream, adapt, factor), accs in values.items():
        for seed, acc in enumerate(accs):
            row = Row(method=method, task="t", size="L2", depth=2, embed_dim=64, num_heads=4, seed=seed,
                      budget=factor, accs=[acc], upstream=upstream, start=f"{method}-{upstream}-{adapt}-{seed}")  # fmt: skip
            row.adapt = adapt
            rows.append(row)
    text = budget.summary(rows, [2, 8], [5, 50])
    # shown: tleg, wave, share_init at c2 and c8, peg and wave at 50 adapt steps, peg at 5 (wave at c2 and 5 steps is
    # one cell of both tables): 9 cells × 2 references + the references' pair = 19 comparisons
    assert "m = 19 at L2" in text
    # by hand: tleg c8 − mimetic (10, 10.5, 9.5) p = 0.00083 ≤ 0.05/19 (resolved); the next smallest, tleg c8 −
    # scratch ×10 (8, 11.5, 6.5), p = 0.0277 > 0.05/18: Holm stops, every other difference (p > 0.05) is `=`
    others = [_p([1, -1, 1]), _p([-1, 0, -2]), _p([2, -1, 3])]
    assert _p([10, 10.5, 9.5]) < 0.05 / 19 < 0.05 / 18 < _p([8, 11.5, 6.5]) < 0.05 < min(others)
    assert "| tleg | 70.3 ± 10.1 M= X= | 80.0 ± 9.8 M+ X= |" in text
    assert "| peg | 70.3 ± 10.1 M= X= | 70.3 ± 10.1 M= X= |" in text
    assert "- tleg at L2: vs mimetic: mean above from 2 epochs, shown better (`+`) from 8 epochs;" in text
