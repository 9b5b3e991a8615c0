"""Paired statistics over seeds: which differences between methods the seeds resolve, and how many would.

The cells of a comparison are paired by seed: for one seed every method gets the same fresh head and the same
data order, so ``a[seed] - b[seed]`` removes what the seed does to both. Per size, each method is compared with
each reference by the paired t-test on those differences (Student 1908; the test of ML benchmark papers that
compare methods over seeds), and the comparisons of a size form one family corrected with Holm–Bonferroni.

Why t and not the bootstrap (as in rliable): with 2–5 seeds a percentile bootstrap interval resamples from at
most 5 values and is too narrow: its nominal 95 % covered the true mean in 50 %, 75 % and 84 % of trials with 2,
3 and 5 normal differences (``benchmarks/bootstrap_coverage.py``), and its tails cannot reach levels like
0.05/60 that a correction for many comparisons asks for. The t interval is exact when the paired differences
are normal; its price is width (with 3 seeds the 97.5 % quantile is 4.30 standard errors), which the seed
advice (:func:`seeds_to_resolve`) turns into a number of seeds.

The rule, stated in every compare report (:data:`RULE`):

- the interval: ``d̄ ± t(0.975, n−1) · s/√n`` over the n seeds both have (d̄ the mean paired difference, s its
  sample standard deviation);
- the decision: Holm–Bonferroni (Holm 1979) over the m comparisons of a size at α = 0.05: the p-values sorted
  ``p(1) ≤ … ≤ p(m)``, ``p(j)`` is resolved while ``p(i) ≤ α/(m − i + 1)`` holds for every ``i ≤ j``. The chance
  that even one resolved difference of a size is wrong (the family-wise error rate) is at most 5 %, whatever
  the dependence between the comparisons; a recommendation needs resolved wins over every reference, so it is
  wrong with at most that chance too;
- the seed advice: for an unresolved difference, the smallest n at which a new run of n seeds would resolve it with
  80 % power (:data:`POWER`) at the level α/m, if the mean d̄ and spread s of the differences are the true ones:
  the two-sided paired t-test's power at effect size ``d = d̄/s``, ``P(|T| > t(1 − α/(2m), n−1))`` with T
  noncentral t of n − 1 degrees of freedom and noncentrality ``d·√n`` (Cohen 1988, ch. 2; statsmodels'
  ``TTestPower`` computes the same). α/m is what Holm demands of the first difference it resolves, so the advice
  holds whatever the other comparisons do. (The n at which the interval would just exclude 0, the advice before,
  resolves a new run about half the time.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ALPHA = 0.05  # the family-wise error rate of the decisions of one size
LEVEL = 0.95  # the coverage of the intervals shown
MAX_SEEDS = 1_000  # the seed advice says "more than this" beyond it
POWER = 0.80  # the chance that a new run of the advised seeds resolves the difference

RULE = (
    "`vs` columns: the paired difference in top-1 points (method − reference, seed by seed: for a seed every method "
    "gets the same fresh head and data order), its mean over the seeds both have and its 95 % t interval "
    "`d̄ ± t(0.975, n−1)·s/√n` (with 2–5 seeds a bootstrap interval is too narrow; the t interval is exact for "
    "normal differences). The mark is the decision: `+` the method is better, `−` worse, `=` not resolved, `?` "
    "fewer than 2 seeds. Decisions: the paired t-test, Holm–Bonferroni over the m comparisons of a size (each "
    "method against each reference, each pair of references once; m is given under each table): at a size the "
    "chance that even one `+` or `−` is wrong (the family-wise error rate) is at most 5 %, and so is the chance "
    "that its recommendation is; an interval that excludes 0 can still be `=`. Methods whose descendants compute "
    "the same function as fine-tuning begins, for every seed (the same start: their outputs on a probe batch agree "
    "up to float rounding; runs from before probes: the same weights, or the same results) share one row and count "
    "once in m. `(N seeds)` after an `=`: "
    "the seeds a new run would need to resolve a difference of this mean and spread with 80 % power at the level "
    "0.05/m (the two-sided paired t-test's power by the noncentral t, effect size d̄/s), if the mean and spread "
    "stayed as observed."
)


@dataclass(frozen=True)
class Paired:
    """The paired difference ``a − b`` over the seeds both have.

    Attributes:
        n: how many seeds both have.
        mean: the mean difference d̄ (0 when ``n`` is 0).
        sd: the sample standard deviation s of the differences (0 when ``n`` < 2).
        low, high: the two-sided ``LEVEL`` t interval of the mean difference (``mean`` itself when ``n`` < 2).
        p: the two-sided p-value of the paired t-test of "no difference" (1 when ``n`` < 2).
    """

    n: int
    mean: float
    sd: float
    low: float
    high: float
    p: float

    @property
    def testable(self) -> bool:
        return self.n >= 2


def _t_quantile(q: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def _t_two_sided_p(t_value: float, df: int) -> float:
    from scipy.stats import t

    return float(2 * t.sf(abs(t_value), df))


def paired(a: Mapping[int, float], b: Mapping[int, float], level: float = LEVEL) -> Paired:
    """The paired t statistics of ``a − b`` over the seeds (keys) both have.

    Differences with no spread (``s = 0``) have a zero-width interval: resolved (p = 0) unless they are 0.
    """
    diffs = [a[seed] - b[seed] for seed in sorted(set(a) & set(b))]
    n = len(diffs)
    if n < 2:
        mean = diffs[0] if diffs else 0.0
        return Paired(n, mean, 0.0, mean, mean, 1.0)
    mean = math.fsum(diffs) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd == 0.0:
        return Paired(n, mean, 0.0, mean, mean, 1.0 if mean == 0.0 else 0.0)
    se = sd / math.sqrt(n)
    half = _t_quantile(1 - (1 - level) / 2, n - 1) * se
    return Paired(n, mean, sd, mean - half, mean + half, _t_two_sided_p(mean / se, n - 1))


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Which hypotheses Holm's step-down procedure rejects at family-wise error rate ``alpha``: the i-th smallest
    p-value (from 1) is compared with ``alpha / (m − i + 1)``, and the procedure stops at the first that exceeds it."""
    m = len(p_values)
    rejected = [False] * m
    for step, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        if p_values[index] > alpha / (m - step):
            break
        rejected[index] = True
    return rejected


def power(mean: float, sd: float, n: Any, comparisons: int, alpha: float = ALPHA) -> Any:
    """The chance that the two-sided paired t-test of n seeds at level ``alpha/comparisons`` resolves differences of
    true mean ``mean`` and standard deviation ``sd`` (> 0): ``P(|T| > t(1 − level/2, n − 1))`` with T noncentral t of
    n − 1 degrees of freedom and noncentrality ``(mean/sd)·√n``. ``n`` may be an array (then so is the result)."""
    import numpy as np
    from scipy.stats import nct, t

    n = np.asarray(n)
    level = alpha / max(comparisons, 1)
    critical = t.ppf(1 - level / 2, n - 1)
    shift = abs(mean) / sd * np.sqrt(n)
    # P(T < −c) as P(T' > c) with T' of noncentrality −shift: scipy's lower tail returns NaN where it underflows
    return nct.sf(critical, n - 1, shift) + nct.sf(critical, n - 1, -shift)


def seeds_to_resolve(
    mean: float, sd: float, comparisons: int, alpha: float = ALPHA, wanted: float = POWER
) -> int | None:
    """The seeds a new run needs to resolve a mean difference ``mean`` of spread ``sd`` among ``comparisons``
    comparisons with probability ``wanted``: the smallest n ≥ 2 whose :func:`power` at the level
    ``alpha/comparisons`` reaches it; None for no difference (0) or beyond :data:`MAX_SEEDS`."""
    if mean == 0.0:
        return None
    if sd == 0.0:  # differences without spread: any two seeds resolve them
        return 2
    import numpy as np

    n = np.arange(2, MAX_SEEDS + 1)
    enough = np.nonzero(power(mean, sd, n, comparisons, alpha) >= wanted)[0]
    return int(n[enough[0]]) if enough.size else None


@dataclass(frozen=True)
class Verdict:
    """One comparison of a family: the paired difference, its decision (``+``, ``−``, ``=``, ``?``) and, for an
    unresolved one, about how many seeds would resolve it (None: never, or more than :data:`MAX_SEEDS`)."""

    diff: Paired
    mark: str
    seeds: int | None = None


def decide_pairs(
    results: Mapping[str, Mapping[int, float]], pairs: Sequence[tuple[str, str]], alpha: float = ALPHA
) -> tuple[dict[tuple[str, str], Verdict], int]:
    """Each ``(label, other)`` of ``pairs`` (labels of ``results``: label → seed → accuracy), decided as one Holm
    family; returns ``({(label, other): verdict}, m)`` with m the number of comparisons tested.

    A pair with fewer than 2 seeds in common gets ``?`` and is not counted in m. :func:`decide` makes the pairs of
    compare and bench; a benchmark that sets other pairs against each other (a method with and without an option)
    decides them here, by the same rule.
    """
    diffs = {pair: paired(results[pair[0]], results[pair[1]]) for pair in pairs}
    tested = [pair for pair in pairs if diffs[pair].testable]
    resolved = dict(zip(tested, holm([diffs[pair].p for pair in tested], alpha)))
    m = len(tested)
    verdicts: dict[tuple[str, str], Verdict] = {}
    for pair, diff in diffs.items():
        if not diff.testable:
            verdicts[pair] = Verdict(diff, "?")
        elif resolved[pair]:
            verdicts[pair] = Verdict(diff, "+" if diff.mean > 0 else "−")
        else:
            verdicts[pair] = Verdict(diff, "=", seeds_to_resolve(diff.mean, diff.sd, m, alpha))
    return verdicts, m


def decide(
    results: Mapping[str, Mapping[int, float]], references: Sequence[str], alpha: float = ALPHA
) -> tuple[dict[tuple[str, str], Verdict], int]:
    """Every label of ``results`` (label → seed → accuracy) against every reference among them, decided as one
    Holm family (:func:`decide_pairs`); returns ``({(label, reference): verdict}, m)`` with m the number of
    comparisons tested.

    A pair of references is one comparison (``(r1, r2)`` and ``(r2, r1)`` mirror each other); a label with fewer
    than 2 seeds in common with a reference gets ``?`` and is not counted in m.
    """
    refs = [r for r in references if r in results]
    pairs: list[tuple[str, str]] = []
    for ref in refs:
        for label in results:
            if label != ref and not (label in refs and refs.index(label) < refs.index(ref)):
                pairs.append((label, ref))
    decided, m = decide_pairs(results, pairs, alpha)
    verdicts: dict[tuple[str, str], Verdict] = {}
    for (label, ref), verdict in decided.items():
        verdicts[label, ref] = verdict
        if label in refs:  # the mirror: the other reference's row against this one
            diff = verdict.diff
            mirror = Paired(diff.n, -diff.mean, diff.sd, -diff.high, -diff.low, diff.p)
            mark = {"+": "−", "−": "+"}.get(verdict.mark, verdict.mark)
            verdicts[ref, label] = Verdict(mirror, mark, verdict.seeds)
    return verdicts, m
