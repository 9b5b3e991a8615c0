"""The statistics of `learngene compare` against hand-computed cases: the paired t interval, Holm's step-down, the
seed advice, and the recommendation built on them (including where pairing and where Holm change the verdict).

Hand computations use two facts: the t distribution with 2 degrees of freedom has the CDF
``F(t) = 1/2 + t / (2·√(t² + 2))``, so a two-sided p-value at df = 2 is ``1 − |t|/√(t² + 2)`` and its quantile
is ``t = u·√2/√(1 − u²)`` with ``u = 2q − 1``; other quantiles are textbook table values.
"""

import math

import pytest

from learngene.bench.stats import decide, holm, paired, seeds_to_resolve
from learngene.bench.tables import compare as two_std_mark
from learngene.pipeline.compare import LONG_LABEL, recommend


def seeds(*accs: float) -> dict[int, float]:
    return dict(enumerate(accs))


def test_the_paired_interval_and_p_value_by_hand():
    # differences 3, 2, 4 points: d̄ = 3, s = 1, se = 1/√3 = 0.57735; t = 3√3 = 5.19615
    # p (df 2) = 1 − 5.19615/√(27 + 2) = 1 − 5.19615/5.38516 = 0.035099
    # t(0.975, 2) = 0.95·√2/√(1 − 0.9025) = 4.30265 → half-width 4.30265 × 0.57735 = 2.48414
    diff = paired(seeds(0.60, 0.70, 0.80), seeds(0.57, 0.68, 0.76))
    assert diff.n == 3
    assert diff.mean == pytest.approx(0.03, abs=1e-12) and diff.sd == pytest.approx(0.01, abs=1e-12)
    assert diff.p == pytest.approx(1 - 3 * math.sqrt(3) / math.sqrt(29), rel=1e-9)
    assert (diff.low, diff.high) == (pytest.approx(0.0051586, abs=1e-6), pytest.approx(0.0548414, abs=1e-6))


def test_only_the_seeds_both_have_are_paired():
    # seed 2 is missing on the right: differences over seeds 0 and 1 only, 0.1 and 0.3 → d̄ = 0.2, s = 0.14142
    diff = paired({0: 0.5, 1: 0.7, 2: 0.9}, {0: 0.4, 1: 0.4})
    assert diff.n == 2 and diff.mean == pytest.approx(0.2) and diff.sd == pytest.approx(math.sqrt(0.02))
    assert not paired({0: 0.5}, {1: 0.4}).testable  # no seed in common: nothing to test


def test_pairing_resolves_what_the_unpaired_rule_cannot():
    # the seeds move both methods together (60/70/80 against 57/68/76): the spread between seeds is 10 points,
    # the spread of the paired differences 1 point
    method, reference = seeds(0.60, 0.70, 0.80), seeds(0.57, 0.68, 0.76)
    # unpaired, the old rule: pooled std √((0.01 + 0.0091)/2) = 0.0977; 2 × 0.0977 = 0.195 > 0.03 → "="
    # (Welch's t is 0.03/√(0.01/3 + 0.0091/3) = 0.376: nowhere near resolved either)
    assert two_std_mark(list(method.values()), list(reference.values())) == "="
    # paired, alone in its family (m = 1): p = 0.0351 < 0.05 → "+"
    verdicts, m = decide({"scratch": reference, "tleg": method}, ["scratch"])
    assert m == 1 and verdicts["tleg", "scratch"].mark == "+"
    line = recommend("L4", {"scratch": reference, "tleg": method}, ["scratch"])
    assert line.startswith("L4: use tleg (70.0 ± 10.0): it beats scratch (paired over seeds, Holm-corrected over")


def test_holm_step_down_by_hand():
    # m = 3: sorted 0.01 ≤ 0.05/3 = 0.0167 yes; 0.03 ≤ 0.05/2 = 0.025 no: stop (0.04 is not even looked at)
    assert holm([0.01, 0.04, 0.03]) == [True, False, False]
    # 0.01 ≤ 0.0167, 0.02 ≤ 0.025, 0.04 ≤ 0.05: all three (Bonferroni, 0.0167 for each, would take only the first)
    assert holm([0.01, 0.02, 0.04]) == [True, True, True]
    assert holm([]) == []


def test_holm_turns_two_lone_wins_into_unresolved_ones_and_says_how_many_seeds_would_do():
    # two methods, each 3, 2, 4 points above scratch: alone each has p = 0.0351 < 0.05 (the case above)
    reference = seeds(0.57, 0.68, 0.76)
    results = {"scratch": reference, "tleg": seeds(0.60, 0.70, 0.80), "wave": seeds(0.60, 0.70, 0.80)}
    verdicts, m = decide(results, ["scratch"])
    # Holm over m = 2: the smaller p must be ≤ 0.05/2 = 0.025; 0.0351 is not, so neither is resolved
    assert m == 2 and verdicts["tleg", "scratch"].mark == "=" and verdicts["wave", "scratch"].mark == "="
    # the advice: the smallest n with t(1 − 0.05/4, n−1)·s/√n < d̄ (s = 1, d̄ = 3 points): n = 3 has
    # t(0.9875, 2) = 0.975·√2/√(1 − 0.950625) = 6.2053 > 3√3 = 5.196; n = 4 has t(0.9875, 3) < t(0.99, 3) = 4.541
    # < 3·√4 = 6 → 4 seeds
    assert verdicts["tleg", "scratch"].seeds == 4
    line = recommend("L4", results, ["scratch"])
    assert line == (
        "L4: no method beats scratch here (67.0 ± 9.5): train from scratch; tleg leads scratch by +3.0 points "
        "[+0.5, +5.5] over 3 seeds, not resolved: about 4 seeds would resolve a difference of that size at that spread"
    )


def test_seed_advice_on_a_lead_of_three_and_a_half_points():
    # paired differences 2.7, 0.5, 7.0 points: d̄ = 3.4, s = √(((−0.7)² + (−2.9)² + 3.6²)/2) = √10.93 = 3.3061
    diff = paired(seeds(0.627, 0.605, 0.680), seeds(0.600, 0.600, 0.610))
    assert diff.mean == pytest.approx(0.034) and diff.sd == pytest.approx(math.sqrt(10.93) / 100)
    # one comparison: n = 6 gives t(0.975, 5)·s/√6 = 2.5706 × 3.3061/2.4495 = 3.470 > 3.4;
    # n = 7 gives t(0.975, 6)·s/√7 = 2.4469 × 3.3061/2.6458 = 3.058 < 3.4 → 7 seeds
    assert seeds_to_resolve(diff.mean, diff.sd, comparisons=1) == 7
    assert seeds_to_resolve(0.0, 0.01, comparisons=1) is None  # no difference: no number of seeds resolves it
    assert seeds_to_resolve(1e-6, 0.5, comparisons=1) is None  # beyond the thousand seeds the advice looks at


REFS = ("scratch", LONG_LABEL, "mimetic")
BASE = {"scratch": seeds(0.50, 0.52, 0.51), LONG_LABEL: seeds(0.70, 0.71, 0.69), "mimetic": seeds(0.60, 0.62, 0.61)}


def test_the_method_that_beats_every_reference_is_recommended():
    # tleg − (scratch, scratch ×10, mimetic): 30/29/28, 10/10/10, 20/19/18 points: t ≥ 33 at df 2, p ≤ 0.00092,
    # below 0.05/9 (Holm's strictest level with 9 comparisons: 3 pairs of references, 2 methods × 3)
    line = recommend("L4", {**BASE, "tleg": seeds(0.80, 0.81, 0.79), "wave": seeds(0.65, 0.66, 0.64)}, REFS)
    assert line == (
        "L4: use tleg (80.0 ± 1.0): it beats scratch, scratch ×10, mimetic (paired over seeds, Holm-corrected "
        "over the 9 comparisons of this size)"
    )


def test_nothing_wins_names_the_reference_no_method_beats():
    line = recommend("L4", {**BASE, "tleg": seeds(0.72, 0.60, 0.80), "wave": seeds(0.55, 0.56, 0.57)}, REFS)
    assert line.startswith(
        "L4: no method beats scratch ×10 here (70.0 ± 1.0): training from scratch 10× longer is the better start; "
        "tleg leads scratch ×10 by +0.7 points"
    )
    mimetic_best = {**BASE, "mimetic": seeds(0.75, 0.76, 0.74), "tleg": seeds(0.73, 0.74, 0.72)}
    assert (
        recommend("L2", mimetic_best, REFS)
        == "L2: no method beats mimetic here (75.0 ± 1.0): use mimetic (it stores nothing)"
    )


def test_two_winners_whose_difference_is_not_resolved_are_a_tie():
    line = recommend("L4", {**BASE, "tleg": seeds(0.80, 0.82, 0.81), "wave": seeds(0.81, 0.80, 0.79)}, REFS)
    assert line.startswith("L4: use tleg or wave (a tie: each beats")
    apart = recommend("L4", {**BASE, "tleg": seeds(0.90, 0.91, 0.89), "wave": seeds(0.80, 0.81, 0.79)}, REFS)
    assert apart.startswith("L4: use tleg (90.0 ± 1.0)")


def test_one_seed_or_no_common_seed_gives_no_recommendation():
    one = {label: {0: accs[0]} for label, accs in {**BASE, "tleg": {0: 0.9}}.items()}
    assert "one seed: no recommendation" in recommend("L4", one, REFS)
    apart = {**BASE, "tleg": {5: 0.9, 6: 0.91}}  # seeds the references never ran: nothing to pair
    assert "one seed: no recommendation" in recommend("L4", apart, REFS)
