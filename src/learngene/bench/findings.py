"""What the seeds of one size show: its distinct starts, their paired and Holm-corrected decisions
(:mod:`.stats`), and a recommendation that says only what is resolved.

``learngene compare``'s tables and recommendation and ``bench``'s marks are both made from a :class:`Family`, so
the two never decide the same cells differently. Methods whose descendants start from the same weights for every
seed (e.g. front, pretrained and importance at the ancestry's own size) are one start: one row, one member of the
Holm family. Counting them apart would make every other decision stricter for comparisons that are one comparison.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .rows import Row, Start, same_starts
from .stats import MAX_SEEDS, POWER, Paired, Verdict, decide_pairs, holm, paired


@dataclass(frozen=True)
class Family:
    """The starts of one size and their decisions: each start against each reference start, each pair of
    reference starts once, one Holm family of ``m`` tested comparisons (:func:`learngene.bench.stats.decide`).

    Attributes:
        size: the size's name, e.g. ``L4-D64-H4``.
        starts: the distinct starts, in the rows' order.
        references: the names of the starts that hold a reference, in the references' order.
        verdicts: ``(start, reference start)`` → verdict, both ways between two reference starts.
        m: how many comparisons were tested (and corrected for).
        variant_refs: per variant the references ran too (``+kd``), the reference starts of that variant: a start
            of the variant is set against those, not the plain ones (like with like).
        plain: each variant start of such a variant → its own plain start, which it is also set against (in m).
    """

    size: str
    starts: list[Start]
    references: list[str]
    verdicts: dict[tuple[str, str], Verdict]
    m: int
    variant_refs: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    plain: dict[str, str] = dataclasses.field(default_factory=dict)

    def refs_of(self, name: str) -> list[str]:
        """The reference starts ``name`` is set against: those of its variant (``+kd`` rows against the ``+kd``
        references) where the references ran it, else the plain ones."""
        variant = _variant(self.named(name))
        return self.variant_refs.get(variant) or [r for r in self.references if not _variant(self.named(r))]

    def start(self, label: str) -> Start | None:
        """The start ``label`` belongs to (None: it finished no seed at this size)."""
        return next((s for s in self.starts if label in s.labels), None)

    def name_of(self, label: str) -> str | None:
        start = self.start(label)
        return start.name if start else None

    def named(self, name: str) -> Start:
        return next(s for s in self.starts if s.name == name)

    def mean(self, name: str) -> float:
        return statistics.fmean(self.named(name).results.values())

    def verdict(self, a: str, b: str) -> Verdict | None:
        """Start ``a`` against start ``b`` (either way round; None where they were not compared)."""
        if (a, b) in self.verdicts:
            return self.verdicts[a, b]
        if (b, a) not in self.verdicts:
            return None
        other = self.verdicts[b, a]
        diff = other.diff
        mirror = Paired(diff.n, -diff.mean, diff.sd, -diff.high, -diff.low, diff.p)
        return Verdict(mirror, {"+": "−", "−": "+"}.get(other.mark, other.mark), other.seeds)

    def resolved(self) -> list[tuple[str, str]]:
        """Every resolved difference once, as ``(better, worse)``."""
        out = []
        for (a, b), v in self.verdicts.items():
            pair = (a, b) if v.mark == "+" else (b, a) if v.mark == "−" else None
            if pair and pair not in out:
                out.append(pair)
        return out

    def unbeaten(self) -> list[str]:
        """The starts no other start is shown better than, best mean first."""
        worse = {loser for _, loser in self.resolved()}
        return sorted((s.name for s in self.starts if s.name not in worse), key=lambda n: -self.mean(n))


def _variant(start: Start) -> str:
    return start.rows[start.labels[0]][0].variant


def _held(starts: list[Start], labels: Sequence[str]) -> list[str]:
    """The starts holding one of ``labels``, in the labels' order."""
    order = {label: i for i, label in enumerate(labels)}
    held = [s for s in starts if any(label in order for label in s.labels)]
    return [s.name for s in sorted(held, key=lambda s: min(order.get(label, len(order)) for label in s.labels))]


def family(groups: Mapping[str, list[Row]], references: Sequence[str], size: str = "") -> Family:
    """The family of one size from its finished rows by label (``references``: the labels that are references).

    Like with like: where the references also ran a variant (compare's ``+kd``: each start fine-tuned distilling the
    ancestry), a start of that variant is set against the references of that variant and against its own plain
    start, not against the plain references; all in the one Holm family of the size."""
    starts = same_starts({label: list(rows) for label, rows in groups.items() if rows})
    refs = _held(starts, references)
    variants = dict.fromkeys(_variant(s) for s in starts if _variant(s))
    by_variant = {v: _held(starts, [f"{r} {v}" for r in references]) for v in variants}
    by_variant = {v: names for v, names in by_variant.items() if names}
    names = {label: s.name for s in starts for label in s.labels}
    plain = {}
    for s in starts:
        v = _variant(s)
        if v in by_variant:
            own = names.get(s.labels[0].removesuffix(f" {v}"))
            if own is not None and own != s.name:
                plain[s.name] = own
    pairs = _pairs(starts, refs, by_variant, plain)
    verdicts, m = decide_pairs({s.name: s.results for s in starts}, pairs)
    everything = refs + [r for names_ in by_variant.values() for r in names_ if r not in refs]
    mirrored = {pair for pair in pairs if pair[1] in everything and pair[0] in everything}
    for a, b in sorted(mirrored):
        verdict = verdicts[a, b]
        diff = verdict.diff
        verdicts[b, a] = Verdict(
            Paired(diff.n, -diff.mean, diff.sd, -diff.high, -diff.low, diff.p),
            {"+": "−", "−": "+"}.get(verdict.mark, verdict.mark),
            verdict.seeds,
        )
    return Family(size, starts, everything, verdicts, m, by_variant, plain)


def _pairs(
    starts: list[Start], refs: list[str], by_variant: dict[str, list[str]], plain: dict[str, str]
) -> list[tuple[str, str]]:
    """What one size's family tests: each pair of references of one variant (plain, or ``+kd``) once, each other start
    against the references of its variant, each variant start against its own plain start."""
    pairs: list[tuple[str, str]] = []
    groups = [refs, *by_variant.values()]
    for group in groups:
        pairs += [(later, earlier) for i, earlier in enumerate(group) for later in group[i + 1 :]]
    held = {name for group in groups for name in group}
    for s in starts:
        if s.name in held:
            continue
        own = by_variant.get(_variant(s)) or [r for r in refs if not _variant_of(starts, r)]
        pairs += [(s.name, r) for r in own]
    pairs += [(name, own) for name, own in plain.items() if (name, own) not in pairs and (own, name) not in pairs]
    return pairs


def _variant_of(starts: list[Start], name: str) -> str:
    return next(_variant(s) for s in starts if s.name == name)


# ---- how numbers are written ------------------------------------------------------------------------------
def mean_sd(accs: Sequence[float]) -> str:
    """Top-1 in % over seeds, ``81.2 ± 0.4`` (one seed: ``81.2``)."""
    return (
        f"{100 * statistics.fmean(accs):.1f} ± {100 * statistics.stdev(accs):.1f}"
        if len(accs) > 1
        else f"{100 * accs[0]:.1f}"
    )


def points(value: float) -> str:
    """A difference of accuracies in top-1 points, signed: ``+3.4``, ``−0.5``, ``0.0``."""
    shown = f"{100 * value:+.1f}"
    return "0.0" if float(shown) == 0 else shown.replace("-", "−")


def vs_cell(verdict: Verdict) -> str:
    """A ``vs`` cell of compare's table: ``+3.4 [−4.8, +11.6] = (14 seeds)``."""
    diff = verdict.diff
    if verdict.mark == "?":
        return "?"
    cell = f"{points(diff.mean)} [{points(diff.low)}, {points(diff.high)}] {verdict.mark}"
    if verdict.mark == "=" and diff.mean != 0:
        cell += f" ({verdict.seeds} seeds)" if verdict.seeds is not None else f" (> {MAX_SEEDS:,} seeds)"
    return cell


def unresolved(label: str, ref: str, verdict: Verdict) -> str:
    """The seed advice for one unresolved difference, e.g. ``front leads mimetic by +3.4 points [−4.8, +11.6]
    over 3 seeds, not resolved: about 14 seeds would resolve a difference of that size at that spread with 80 %
    power``."""
    diff = verdict.diff
    seeds = f"about {verdict.seeds} seeds" if verdict.seeds is not None else f"more than {MAX_SEEDS:,} seeds"
    return (
        f"{label} {'leads' if diff.mean > 0 else 'trails'} {ref} by {points(diff.mean)} points "
        f"[{points(diff.low)}, {points(diff.high)}] over {diff.n} seed{'' if diff.n == 1 else 's'}, not resolved: "
        f"{seeds} would resolve a difference of that size at that spread with {100 * POWER:.0f} % power"
    )


def _listed(names: Sequence[str], most: int = 0) -> str:
    """``a``, ``a and b``, ``a, b and c``; beyond ``most`` names (0: no limit) ``a, b, c and 4 more``."""
    if most and len(names) > most:
        return f"{', '.join(names[:most])} and {len(names) - most} more"
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


# ---- the recommendation ---------------------------------------------------------------------------------
def recommend(fam: Family, references: Sequence[str]) -> str:
    """One line for the size: what its seeds show, and nothing more.

    ``use X`` only where X's wins over every reference are resolved (paired t-test, Holm-corrected over the
    size's comparisons); two such starts whose difference is not resolved are both named, with the cheaper. A
    reference that beats every other start is advised the same way. Otherwise the line says that no start is shown
    better than the others, how many differences are resolved, which starts none of them shows worse than, the
    cheapest of those (fewest stored parameters, then the shorter fine-tuning, then fine-tuning without
    distillation, then the fewer condensation steps) and how many seeds would resolve the best mean's closest
    difference. ``references``: the reference labels asked.
    """
    size, refs = fam.size, fam.references
    candidates = [s.name for s in fam.starts if s.name not in refs]
    if not refs:
        return f"{size}: no recommendation: no reference ({', '.join(references)}) finished at this size"
    if not candidates:
        return f"{size}: no recommendation: no method other than the references finished at this size"
    if any(verdict.diff.n < 2 for verdict in fam.verdicts.values()):
        return f"{size}: one seed: no recommendation (the paired test needs seeds=2 (--seeds 2) or more)"
    rule = f"paired over seeds, Holm-corrected over the {fam.m} comparison{'' if fam.m == 1 else 's'} of this size"
    winners = [c for c in candidates if all(fam.verdicts[c, r].mark == "+" for r in fam.refs_of(c))]
    if winners:
        return _use(fam, sorted(winners, key=lambda c: -fam.mean(c)), rule)
    for ref in sorted(refs, key=lambda r: -fam.mean(r)):
        start = fam.named(ref)
        if all(getattr(fam.verdict(ref, s.name), "mark", "") == "+" for s in fam.starts if s is not start):
            first = start.rows[start.labels[0]][0]
            return (
                f"{size}: {_advice(start)} ({mean_sd(list(start.results.values()))}{_chosen(start)[1]}): it beats "
                f"every other start ({rule})" + ("; it stores nothing" if not first.stored_params else "")
            )
    return _nothing_shown(fam)


def _advice(start: Start) -> str:
    """What using a start is called: ``train from scratch``, ``train from scratch 10× as long``, ``use mimetic``."""
    first = start.rows[start.labels[0]][0]
    if first.method == "scratch" and not first.variant:
        return "train from scratch" + (f" {first.budget}× as long" if first.budget > 1 else "")
    return f"use {_chosen(start)[0]}"


def _chosen(start: Start) -> tuple[str, str]:
    """The label to use of a start (its cheapest) and ``; the same start as front and importance`` for the others."""
    label = min(start.labels, key=lambda la: _cost(start.rows[la][0]))
    others = [la for la in start.labels if la != label]
    return label, f"; the same start as {_listed(others)}" if others else ""


def _shown(start: Start) -> str:
    """``pretrained (82.9 ± 0.6; the same start as front)``: the start's label to use, its top-1, its other labels."""
    label, same = _chosen(start)
    return f"{label} ({mean_sd(list(start.results.values()))}{same})"


def _cost(row: Row) -> tuple[int, int, bool, int]:
    """What a start costs, in the order compared: stored parameters, the fine-tuning's budget and whether it changes
    (``+kd`` distills the whole ancestry), condensation steps."""
    return (row.stored_params, row.budget, bool(row.variant), row.condense_steps)


def _cheapest(fam: Family, names: Sequence[str], among: str) -> str:
    """``the cheapest of these is mimetic, which stores nothing`` (several equally cheap: each named)."""
    costs = {label: _cost(start.rows[label][0]) for start in map(fam.named, names) for label in start.labels}
    low = min(costs.values())
    labels = [label for label, cost in costs.items() if cost == low]
    many = len(labels) > 1
    stores = ("store" if many else "stores") + (f" {low[0]:,} parameters" if low[0] else " nothing")
    stores += " each" if low[0] and many else ""
    stores += f" and fine-tune{'' if many else 's'} {low[1]}× as long" if low[1] > 1 else ""
    named = []
    for label in labels:
        same = [other for other in fam.named(fam.name_of(label) or label).labels if other != label]
        named.append(f"{label} (the same start as {_listed(same)})" if same else label)
    among = f"{among}s" if among == "start" and many else among
    return f"the cheapest {among} {'are' if many else 'is'} {_listed(named)}, which {stores}"


def _use(fam: Family, winners: list[str], rule: str) -> str:
    """The line for starts that beat every reference (best mean first): use the best, or any of those it does not
    beat resolvedly (Holm over the best against each other winner), naming the cheapest."""
    size = fam.size
    results = {s.name: s.results for s in fam.starts}
    best, others = winners[0], winners[1:]
    apart = holm([paired(results[best], results[w]).p for w in others])
    tied = [w for w, resolved in zip(others, apart) if not (resolved and paired(results[best], results[w]).mean > 0)]
    beats = f"{_listed(fam.refs_of(best))} ({rule})"
    if not tied:
        return f"{size}: use {_shown(fam.named(best))}: it beats {beats}"
    return (
        f"{size}: use {' or '.join(_shown(fam.named(w)) for w in [best, *tied])}: each beats {beats}, and "
        f"{'the difference between them is' if len(tied) == 1 else 'their differences are'} not resolved; "
        f"{_cheapest(fam, [best, *tied], 'of them')}"
    )


def _nothing_shown(fam: Family) -> str:
    """The line where no start is shown better than every other: what is resolved, the starts nothing is shown
    better than, the cheapest of them, and the seeds that would resolve the best mean's closest difference."""
    size, resolved = fam.size, fam.resolved()
    top = fam.unbeaten() or [max((s.name for s in fam.starts), key=fam.mean)]  # none: seeds that differ by method
    differences = f"{fam.m} difference{'' if fam.m == 1 else 's'}"
    if not resolved:
        line = (
            f"{size}: no start is shown better than the others: none of the {differences} of this size is "
            f"resolved (paired over seeds, Holm-corrected); {_cheapest(fam, top, 'start')}"
        )
    else:
        which = "; ".join(f"{a} beats {b}" for a, b in resolved) if len(resolved) <= 3 else "the `+` and `−` above"
        line = (
            f"{size}: no start is shown better than the others: {len(resolved)} of the {differences} of this "
            f"size {'is' if len(resolved) == 1 else 'are'} resolved ({which}; paired over seeds, Holm-corrected), "
            f"none of them a loss for {_listed(top, most=5)}; {_cheapest(fam, top, 'of these')}"
        )
    best = top[0]
    closest = next(
        (
            (other, verdict)
            for other in sorted((s.name for s in fam.starts if s.name != best), key=lambda n: -fam.mean(n))
            if (verdict := fam.verdict(best, other)) is not None and verdict.mark == "="
        ),
        None,
    )
    if closest:
        line += f"; the best mean is {best}'s ({mean_sd(list(fam.named(best).results.values()))}): "
        line += unresolved("it", closest[0], closest[1])
    return line
