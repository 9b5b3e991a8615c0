"""The statistics of `learngene compare` against hand-computed cases: the paired t interval, Holm's step-down, the
seed advice at 80 % power, the methods that are one start, and the recommendation built on them (including where
pairing, Holm and counting a shared start once change the verdict).

Hand computations use two facts: the t distribution with 2 degrees of freedom has the CDF
``F(t) = 1/2 + t / (2·√(t² + 2))``, so a two-sided p-value at df = 2 is ``1 − |t|/√(t² + 2)`` and its quantile
is ``t = u·√2/√(1 − u²)`` with ``u = 2q − 1``; other quantiles are textbook table values.
"""

import math
import statistics

import numpy as np
import pytest

from learngene.bench.rows import Row, read_csv, write_csv
from learngene.bench.stats import decide, holm, paired, power, seeds_to_resolve
from learngene.comparison.choices import LONG_LABEL
from learngene.comparison.report import recommend, size_table


def seeds(*accs: float) -> dict[int, float]:
    return dict(enumerate(accs))


def cells(label: str, accs, stored: int = 0, start: str | None = None) -> list[Row]:
    """``label``'s finished rows at size L4, one per seed (seed i: ``accs[i]``), each from a start of its own unless
    ``start`` names one it shares (seed i's start digest is then ``{start}-{i}``)."""
    method, _, budget = label.partition(" ×")
    values = accs.values() if isinstance(accs, dict) else accs
    return [
        Row(method=method, task="data", size="L4", depth=1, embed_dim=8, num_heads=1, seed=seed,
            budget=int(budget or 1), stored_params=stored, accs=[acc], start=f"{start or label}-{seed}")
        for seed, acc in enumerate(values)
    ]  # fmt: skip


def grid(results: dict[str, dict[int, float]], stored: dict[str, int] | None = None) -> dict[str, list[Row]]:
    """label → its rows, each label a start of its own (``stored``: the parameters a method stores, else 0)."""
    return {label: cells(label, accs, (stored or {}).get(label, 0)) for label, accs in results.items()}


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
    # unpaired, the means differ by 0.03 and the pooled std is √((0.01 + 0.0091)/2) = 0.0977 (the rule bench once
    # used asked for 2 of them, 0.195); Welch's t is 0.03/√(0.01/3 + 0.0091/3) = 0.376: nowhere near resolved
    unpaired = (statistics.variance(method.values()) + statistics.variance(reference.values())) / 2
    assert math.sqrt(unpaired) == pytest.approx(0.0977, abs=1e-4)
    welch = 0.03 / math.sqrt(statistics.variance(method.values()) / 3 + statistics.variance(reference.values()) / 3)
    assert welch == pytest.approx(0.376, abs=1e-3)
    # paired, alone in its family (m = 1): p = 0.0351 < 0.05 → "+"
    verdicts, m = decide({"scratch": reference, "tleg": method}, ["scratch"])
    assert m == 1 and verdicts["tleg", "scratch"].mark == "+"
    line = recommend("L4", grid({"scratch": reference, "tleg": method}), ["scratch"])
    assert line == (
        "L4: use tleg (70.0 ± 10.0): it beats scratch (paired over seeds, Holm-corrected over the 1 comparison of "
        "this size)"
    )


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
    # the advice at 80 % power, level 0.05/2, effect size d = 3/1: n = 3 has the critical value t(0.9875, 2) =
    # 0.975·√2/√(1 − 0.950625) = 6.2053 above the noncentrality 3·√3 = 5.196, and resolves about half the time
    # (0.499); n = 4 (t(0.9875, 3) = 4.177, noncentrality 3·√4 = 6) resolves 0.867 of the time → 4 seeds
    assert power(0.03, 0.01, 3, 2) == pytest.approx(0.499, abs=0.001)
    assert power(0.03, 0.01, 4, 2) == pytest.approx(0.867, abs=0.001)
    assert verdicts["tleg", "scratch"].seeds == 4
    line = recommend("L4", grid(results, {"tleg": 100, "wave": 200}), ["scratch"])
    assert line == (
        "L4: no start is shown better than the others: none of the 2 differences of this size is resolved (paired "
        "over seeds, Holm-corrected); the cheapest start is scratch, which stores nothing; the best mean is tleg's "
        "(70.0 ± 10.0): it leads scratch by +3.0 points [+0.5, +5.5] over 3 seeds, not resolved: about 4 seeds "
        "would resolve a difference of that size at that spread with 80 % power"
    )


def test_methods_with_the_same_start_are_one_row_counted_once():
    # the same two methods, now starting from the same weights for every seed (one run, twice): one start, so one
    # comparison, m = 1, and p = 0.0351 ≤ 0.05 resolves it; counted twice (above) it was not resolved
    groups = {
        "scratch": cells("scratch", (0.57, 0.68, 0.76)),
        "tleg": cells("tleg", (0.60, 0.70, 0.80), stored=200, start="same"),
        "wave": cells("wave", (0.60, 0.70, 0.80), stored=100, start="same"),
    }
    # the label to use is the start's cheapest: wave stores 100 parameters, tleg 200
    assert recommend("L4", groups, ["scratch"]) == (
        "L4: use wave (70.0 ± 10.0; the same start as tleg): it beats scratch (paired over seeds, Holm-corrected "
        "over the 1 comparison of this size)"
    )
    table, _ = size_table([row for group in groups.values() for row in group], "L4", ["scratch"])
    assert "\n| tleg = wave | 70.0 ± 10.0 | +3.0 [+0.5, +5.5] + | 200 / 100 | " in table
    assert "| tleg |" not in table and "| wave |" not in table and "m = 1 comparisons" in table
    assert "tleg = wave at this size: the same start (their descendants' weights hash alike for every seed)" in table
    groups["wave"][2].start = "other-2"  # a start that differs at one seed is another start
    assert recommend("L4", groups, ["scratch"]).startswith(
        "L4: no start is shown better than the others: none of the 2"
    )


def test_results_csv_names_the_start_each_method_shares(tmp_path):
    rows = [
        *cells("scratch", (0.5, 0.6)),
        *cells("front", (0.7, 0.8), start="ancestry"),
        *cells("pretrained", (0.7, 0.8), start="ancestry"),
        *cells("importance", (0.7, 0.8), start="ancestry"),
    ]
    write_csv(rows, tmp_path / "results.csv")
    header, *lines = [line.split(",") for line in (tmp_path / "results.csv").read_text().splitlines()]
    written = {(line[1], line[header.index("start")], line[header.index("group")]) for line in lines}
    shared = {(m, f"ancestry-{s}", "front = pretrained = importance") for m in ("front", "pretrained", "importance")
              for s in (0, 1)}  # fmt: skip
    assert written == {("scratch", "scratch-0", "scratch"), ("scratch", "scratch-1", "scratch"), *shared}
    assert [r.start for r in read_csv(tmp_path / "results.csv")] == [r.start for r in rows]


def test_runs_that_recorded_no_start_share_one_when_their_results_are_the_same_seed_by_seed():
    groups = {
        "scratch": cells("scratch", (0.50, 0.52, 0.51)),
        "pretrained": cells("pretrained", (0.70, 0.72, 0.71), stored=300),
        "weight_selection": cells("weight_selection", (0.70, 0.72, 0.71), stored=300),
        "grow": cells("grow", (0.70, 0.72, 0.70), stored=300),  # one seed differs: a start of its own
    }
    rows = [row for group in groups.values() for row in group]
    for row in rows:
        row.start = ""  # a results.csv from before starts were recorded
    table, _ = size_table(rows, "L4", ["scratch"])
    assert "\n| pretrained = weight_selection | 71.0 ± 1.0 |" in table and "\n| grow | " in table
    assert "the same results at every evaluation, seed by seed (this run recorded no start digests)" in table
    assert "m = 2 comparisons" in table


def test_the_seed_advice_at_80_percent_power_by_hand():
    # one comparison at α = 0.05, effect size d = d̄/s = 0.5: by the normal approximation the paired t-test needs
    # n ≈ ((z(0.975) + z(0.80))/d)² + z(0.975)²/2 = ((1.95996 + 0.84162)/0.5)² + 1.95996²/2 = 31.40 + 1.92 = 33.3,
    # so 34; Cohen's tables (1988, one sample or paired, two-sided α = 0.05, power 0.80, d = 0.5) and G*Power give
    # 34 as well, with power 0.8078 at 34 and 0.7954 at 33
    assert seeds_to_resolve(0.5, 1.0, comparisons=1) == 34
    assert power(0.5, 1.0, 34, 1) == pytest.approx(0.8078, abs=1e-4)
    assert power(0.5, 1.0, 33, 1) == pytest.approx(0.7954, abs=1e-4)
    # the power from its definition, computed here without the noncentral t: T = (Z + δ)/√(V/ν), Z standard normal,
    # V chi-squared of ν = n − 1 degrees of freedom, δ = d·√n, so P(|T| > c) = ∫ [Φ(δ − c√(v/ν)) + Φ(−δ − c√(v/ν))]
    # f_ν(v) dv; quad integrates it to about 1e-10
    from scipy import integrate
    from scipy.stats import chi2, norm, t

    # (4.46, 6, 50): a lower tail far below 1e-16, where scipy's noncentral t CDF gives NaN
    for d, n, m in ((0.5, 34, 1), (1.028, 10, 1), (3.0, 4, 2), (0.3, 150, 62), (4.46, 6, 50), (4.46, 9, 50)):
        nu, c, delta = n - 1, float(t.ppf(1 - 0.05 / (2 * m), n - 1)), d * math.sqrt(n)

        def density(v, nu=nu, c=c, delta=delta):
            x = c * math.sqrt(v / nu)
            return (norm.cdf(delta - x) + norm.cdf(-delta - x)) * chi2.pdf(v, nu)

        by_definition = integrate.quad(density, 0, np.inf, epsabs=1e-12, limit=200)[0]
        assert power(d, 1.0, n, m) == pytest.approx(by_definition, abs=1e-7), (d, n, m)
    # a lead of 3.4 points at a spread of 3.3061 (d = 1.028): the interval would just exclude 0 at 7 seeds (the
    # advice before), which a new run of 7 resolves about half the time; 80 % takes 10
    diff = paired(seeds(0.627, 0.605, 0.680), seeds(0.600, 0.600, 0.610))
    assert diff.mean == pytest.approx(0.034) and diff.sd == pytest.approx(math.sqrt(10.93) / 100)
    assert 0.4 < power(diff.mean, diff.sd, 7, 1) < 0.8 <= power(diff.mean, diff.sd, 10, 1)
    assert seeds_to_resolve(diff.mean, diff.sd, comparisons=1) == 10
    # over every n the advice looks at and effect sizes from 1e-4 to 1e3, the power is a probability that grows with n
    for d in np.geomspace(1e-4, 1e3, 29):
        curve = power(d, 1.0, np.arange(2, 1001), 62)
        assert np.all((curve >= 0) & (curve <= 1 + 1e-12)) and np.all(np.diff(curve) >= -1e-12), d
    assert seeds_to_resolve(0.0, 0.01, comparisons=1) is None  # no difference: no number of seeds resolves it
    assert seeds_to_resolve(1e-6, 0.5, comparisons=1) is None  # beyond the thousand seeds the advice looks at


def test_the_advised_seeds_resolve_a_simulated_difference_80_percent_of_the_time():
    # a difference of 2 points at a spread of 3 among m = 6 comparisons: the advised n, then 20,000 simulated runs of
    # n normal paired differences, each tested at 0.05/6. The share resolved is a binomial proportion around the
    # power p with standard error √(p(1 − p)/20,000) ≤ 0.0036; 4 of them bound its distance from p (a normal tail
    # of 6e-5: about one generator seed in 16,000 would miss)
    mean, sd, m, trials = 0.02, 0.03, 6, 20_000
    n = seeds_to_resolve(mean, sd, comparisons=m)
    assert n is not None and power(mean, sd, n - 1, m) < 0.8 <= power(mean, sd, n, m)
    from scipy.stats import t

    diffs = np.random.default_rng(0).normal(mean, sd, size=(trials, n))
    t_values = diffs.mean(axis=1) / (diffs.std(axis=1, ddof=1) / math.sqrt(n))
    resolved = float(np.mean(np.abs(t_values) > t.ppf(1 - 0.05 / (2 * m), n - 1)))
    expected = float(power(mean, sd, n, m))
    assert abs(resolved - expected) <= 4 * math.sqrt(expected * (1 - expected) / trials), (n, resolved, expected)


REFS = ("scratch", LONG_LABEL, "mimetic")
BASE = {"scratch": seeds(0.50, 0.52, 0.51), LONG_LABEL: seeds(0.70, 0.71, 0.69), "mimetic": seeds(0.60, 0.62, 0.61)}
STORED = {"tleg": 104_773, "wave": 105_357, "front": 204_853}


def test_the_method_that_beats_every_reference_is_recommended():
    # tleg − (scratch, scratch ×10, mimetic): 30/29/28, 10/10/10, 20/19/18 points: t ≥ 33 at df 2, p ≤ 0.00092,
    # below 0.05/9 (Holm's strictest level with 9 comparisons: 3 pairs of references, 2 methods × 3)
    line = recommend("L4", grid({**BASE, "tleg": seeds(0.80, 0.81, 0.79), "wave": seeds(0.65, 0.66, 0.64)}), REFS)
    assert line == (
        "L4: use tleg (80.0 ± 1.0): it beats scratch, scratch ×10 and mimetic (paired over seeds, Holm-corrected "
        "over the 9 comparisons of this size)"
    )


def test_an_unresolved_leader_is_not_recommended():
    # the case: mimetic has the best mean, but front is not shown worse (front − mimetic: −1, −4, +2 points,
    # p = 0.62), nor is scratch ×10 (mimetic − scratch ×10: 10, 7, 13 points, p = 0.029 > 0.05/9). Resolved, each p
    # within its Holm level: scratch below scratch ×10 (p = 0.0009), mimetic (0.0028) and tleg (0.0033), and tleg
    # below mimetic (0.0028). Of mimetic, front and scratch ×10, mimetic stores nothing at the plain budget
    results = {
        **BASE,
        "mimetic": seeds(0.80, 0.78, 0.82),
        "front": seeds(0.79, 0.74, 0.84),
        "tleg": seeds(0.60, 0.61, 0.62),
    }
    line = recommend("L4", grid(results, STORED), REFS)
    advice = seeds_to_resolve(0.01, paired(results["mimetic"], results["front"]).sd, comparisons=9)
    assert line == (
        "L4: no start is shown better than the others: 4 of the 9 differences of this size are resolved (the `+` "
        "and `−` above; paired over seeds, Holm-corrected), none of them a loss for mimetic, front and scratch ×10; "
        "the cheapest of these is mimetic, which stores nothing; the best mean is mimetic's (80.0 ± 2.0): it leads "
        f"front by +1.0 points [−6.5, +8.5] over 3 seeds, not resolved: about {advice} seeds would resolve a "
        "difference of that size at that spread with 80 % power"
    )
    assert " use " not in line  # never a bare "use" for a leader whose lead is not resolved
    # a lead over scratch ×10 that is not resolved (tleg − scratch ×10: +2, −11, +11 points): no winner either
    results = {**BASE, "tleg": seeds(0.72, 0.60, 0.80), "wave": seeds(0.55, 0.56, 0.57)}
    line = recommend("L4", grid(results, STORED), REFS)
    assert line.startswith("L4: no start is shown better than the others: ") and " use " not in line
    assert (
        "none of them a loss for tleg and scratch ×10; the cheapest of these is scratch ×10, which stores nothing "
        "and fine-tunes 10× as long; the best mean is tleg's (70.7 ± 10.1): it leads scratch ×10 by +0.7 points"
    ) in line


def test_a_reference_that_beats_every_other_start_is_advised():
    # mimetic − tleg: 2, 2, 2 points (no spread: resolved); − scratch ×10: 5, 5, 5; − scratch: 25, 24, 23 (p = 0.0011)
    mimetic_best = {**BASE, "mimetic": seeds(0.75, 0.76, 0.74), "tleg": seeds(0.73, 0.74, 0.72)}
    assert recommend("L2", grid(mimetic_best, STORED), REFS) == (
        "L2: use mimetic (75.0 ± 1.0): it beats every other start (paired over seeds, Holm-corrected over the 6 "
        "comparisons of this size); it stores nothing"
    )


def test_two_winners_whose_difference_is_not_resolved_are_a_tie_with_the_cheaper_named():
    results = {**BASE, "tleg": seeds(0.80, 0.82, 0.81), "wave": seeds(0.81, 0.80, 0.79)}
    assert recommend("L4", grid(results, STORED), REFS) == (
        "L4: use tleg (81.0 ± 1.0) or wave (80.0 ± 1.0): each beats scratch, scratch ×10 and mimetic (paired over "
        "seeds, Holm-corrected over the 9 comparisons of this size), and the difference between them is not "
        "resolved; the cheapest of them is tleg, which stores 104,773 parameters"
    )
    apart = recommend("L4", grid({**BASE, "tleg": seeds(0.90, 0.91, 0.89), "wave": seeds(0.80, 0.81, 0.79)}), REFS)
    assert apart.startswith("L4: use tleg (90.0 ± 1.0): it beats")


def test_one_seed_or_no_common_seed_gives_no_recommendation():
    one = {label: {0: accs[0]} for label, accs in {**BASE, "tleg": {0: 0.9}}.items()}
    assert "one seed: no recommendation" in recommend("L4", grid(one), REFS)
    apart = {**grid(BASE), "tleg": cells("tleg", (0.9, 0.91))}
    for row in apart["tleg"]:
        row.seed += 5  # seeds the references never ran: nothing to pair
    assert "one seed: no recommendation" in recommend("L4", apart, REFS)
