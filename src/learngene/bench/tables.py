"""The report's tables in Markdown: top-1 per method and size with compare's paired, corrected decisions as marks,
epochs to match scratch's long run, the genes' costs, the ancestries and the gains by upstream."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from .findings import Family, family
from .rows import Row, mean_curve, same_results, task_groups, task_labels, task_sizes


def _cell(accs: list[float]) -> str:
    mean = 100 * statistics.fmean(accs)
    return f"{mean:.1f} ± {100 * statistics.stdev(accs):.1f}" if len(accs) > 1 else f"{mean:.1f}"


# ---- what a row cost and its protocol, as compare's tables show them ("n/a": rows from before they were recorded) --
def count_text(value: int | None) -> str:
    """An image count: ``1,797``, or ``n/a``."""
    return "n/a" if value is None else f"{value:,}"


def gflop_text(value: float | None) -> str:
    """GFLOP to 3 significant digits below 1,000 (a tiny model's condensation is a few thousandths), else whole."""
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def labels_text(row: Row) -> str:
    """The labelled images per class a row fine-tuned on: K of a few-shot task; ``–`` where the fine-tuning took its
    images without regard to class (all of them, or ``train_images`` drawn from all)."""
    if row.labels_per_class is not None:
        return str(row.labels_per_class)
    return "n/a" if row.train_images is None else "–"


# ---- the marks: compare's decisions ----------------------------------------------------------------------
MARK_RULE = (
    "Marks compare a cell with a reference at the same size by `learngene compare`'s rule: the paired t-test on the "
    "per-seed differences (for a seed every method gets the same data order), decided with Holm–Bonferroni over the "
    "comparisons of a size (each method against each reference, each pair of references once; m under the table) "
    "at a family-wise error rate of 5 %: `+` better, `−` worse, `=` not resolved. Methods whose descendants compute "
    "the same function as fine-tuning begins, for every seed, count once. References: {references}."
)
NO_MARKS = "One seed: the cells carry no `+`/`−`/`=` marks (they need the spread over two or more seeds)."
REFERENCE_NAMES = {
    "S": "**S** scratch at the same budget",
    "X": "**X** {long}, scratch trained as many times the fine-tuning steps",
    "M": "**M** mimetic initialization (stores no weights)",
    "I": "**I** structured (impulse) initialization (stores no weights)",
}


def mark_rule(rows: list[Row], tasks: list[str], seeds: int) -> str:
    """The legend of the marks, defining only the references that appear in a table; none with one seed."""
    if seeds < 2:
        return NO_MARKS
    refs: dict[str, str] = {}
    for task in tasks:
        for letter, label in _references(rows, task).items():
            refs.setdefault(letter, label)
    if not refs:
        return "No reference (scratch, mimetic, structured) ran: the cells carry no marks."
    return MARK_RULE.format(
        references="; ".join(REFERENCE_NAMES[letter].format(long=label) for letter, label in refs.items())
    )


def _references(rows: list[Row], task: str) -> dict[str, str]:
    """Mark letter → label of the reference rows present in ``task``'s table."""
    labels = set(task_labels(rows, task))
    long = sorted(r.label for r in rows if r.task == task and r.method == "scratch" and r.budget > 1 and not r.variant)
    refs = {"S": "scratch", "X": long[0] if long else "", "M": "mimetic", "I": "structured"}
    return {letter: label for letter, label in refs.items() if label in labels}


def families(rows: list[Row], task: str) -> dict[str, Family]:
    """Size → the decisions of ``task``'s cells at that size against its references, as ``learngene compare``
    makes them (:func:`learngene.bench.findings.family`)."""
    groups, refs = task_groups(rows, task), list(_references(rows, task).values())
    labels = task_labels(rows, task)
    return {
        size: family({label: groups[label, size] for label in labels if (label, size) in groups}, refs, size)
        for size in task_sizes(rows, task)
    }


def marks(fam: Family, label: str, refs: dict[str, str]) -> str:
    """``S+ X− M=``: ``label``'s decision against each reference (none against its own start or untested)."""
    own, out = fam.name_of(label), []
    for letter, ref in refs.items():
        other = fam.name_of(ref)
        verdict = fam.verdict(own, other) if own and other and other != own else None
        if verdict is not None and verdict.mark != "?":
            out.append(letter + verdict.mark)
    return " ".join(out)


def family_note(fams: dict[str, Family]) -> str:
    """The line under a marked table: each size's m, and the methods counted once for sharing a start."""
    tested = {size: fam.m for size, fam in fams.items() if fam.m}
    if not tested:
        return ""
    shared = [
        f"{start.name} at {size}" + ("" if start.recorded else " (the same results, seed by seed: no start recorded)")
        for size, fam in fams.items()
        for start in fam.starts
        if len(start.labels) > 1
    ]
    return (
        "Holm over the m comparisons of each size: "
        + ", ".join(f"m = {m} at {size}" for size, m in tested.items())
        + "."
        + (f" One start, counted once: {'; '.join(shared)}." if shared else "")
    )


def format_table(rows: list[Row], task: str, mark: bool = False) -> str:
    """Markdown table: one line per method, top-1 (%) per size (mean ± std over seeds), then the gene's
    stored parameters and condensation cost. Sizes a method cannot make read n/a. With ``mark``, every
    cell also says whether it beats the references (see :data:`MARK_RULE`), and a line under the table gives each
    size's m."""
    groups = task_groups(rows, task)
    refs = _references(rows, task) if mark else {}
    fams = families(rows, task) if mark else {}
    sizes = task_sizes(rows, task)
    info: dict[str, Row] = {}
    for r in rows:
        if r.task == task:
            info.setdefault(r.label, r)
    header = ["method", *sizes, "stored params", "condense steps", "condense s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, r in info.items():
        cells = []
        for size in sizes:
            group = groups.get((label, size))
            cells.append(
                " ".join(filter(None, (_cell([g.acc for g in group]), marks(fams[size], label, refs) if mark else "")))
                if group
                else ("n/a" if any(x.label == label and x.size == size and x.task == task for x in rows) else "–")
            )
        lines.append(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {r.stored_params:,} | {r.condense_steps:,} | {r.condense_seconds:.1f} |"
        )
    note = family_note(fams) if refs else ""
    return "\n".join(lines + (["", note] if note else []))


def epochs_to_match(rows: list[Row], task: str, factor: int) -> str:
    """Markdown table: the first epoch at which scratch with ``factor``× the budget reaches each method's
    final accuracy (means over seeds), per size — the "fraction of the training" claim in numbers."""
    groups = task_groups(rows, task)
    sizes = task_sizes(rows, task)
    long_label = f"scratch ×{factor}"
    lines = ["| method | " + " | ".join(sizes) + " |", "|" + "---|" * (len(sizes) + 1)]
    for label in task_labels(rows, task):
        if label == long_label:
            continue
        cells = []
        for size in sizes:
            group, long = groups.get((label, size)), groups.get((long_label, size))
            if not group or not long:
                cells.append("n/a")
                continue
            target = statistics.fmean(g.acc for g in group)
            curve, _ = mean_curve(long)
            epochs = long[0].epochs
            hit = next((epochs[e] for e, acc in enumerate(curve) if acc >= target), None)
            cells.append(f"{hit} / {epochs[len(curve) - 1]}" if hit else f"> {epochs[len(curve) - 1]}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gene_table(rows: list[Row]) -> str:
    """Markdown table: every gene's storage and condensation cost, and its mean adapt time per size."""
    info: dict[tuple[str, str], Row] = {}
    adapt: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r.budget == 1 and not r.variant:
            info.setdefault((r.upstream, r.method), r)
            if r.adapt_seconds:
                adapt[r.upstream, r.method].append(r.adapt_seconds)
    several = len({up for up, _ in info}) > 1
    lines = [
        ("| upstream " if several else "")
        + "| method | stored params | condense steps | condense s | adapt s per size |",
        "|---" * (5 + several) + "|",
    ]
    for (up, method), r in info.items():
        a = f"{statistics.fmean(adapt[up, method]):.1f}" if adapt[up, method] else "–"
        lines.append(
            (f"| {up} " if several else "")
            + f"| {method} | {r.stored_params:,} | {r.condense_steps:,} | {r.condense_seconds:.1f} | {a} |"
        )
    return "\n".join(lines)


def plateau(curve: list[float] | None, window: int = 3, tolerance: float = 0.005) -> str:
    """Whether an evaluation curve has flattened: its last ``window`` points gained less than ``tolerance``
    (top-1, absolute) over the best point before them."""
    if not curve or len(curve) <= window:
        return "too short to tell"
    gain = max(curve[-window:]) - max(curve[:-window])
    return (
        f"plateau (last {window} epochs gained {100 * gain:+.1f} pt < {100 * tolerance:.1f})"
        if gain < tolerance
        else f"still rising (last {window} epochs gained {100 * gain:+.1f} pt)"
    )


def ancestry_table(meta: dict[str, Any]) -> str:
    lines = [
        "| upstream | classes | ancestry | epochs | top-1 (%) per epoch | converged? | aux-net condensation epochs |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, a in meta.get("ancestries", {}).items():
        curve = a.get("eval_curve") or []
        lines.append(
            f"| {name} | {', '.join(map(str, a.get('classes') or [])) or 'all'} | {a['spec']} | {a['epochs']} | "
            + " ".join(f"{100 * c:.1f}" for c in curve)
            + f" | {plateau(curve)} | {a.get('condense_epochs')} |"
        )
    return "\n".join(lines)


def gain_table(rows: list[Row], task: str, upstreams: list[str], reference: str) -> str:
    """Markdown: each method's mean top-1 minus ``reference``'s (points), per upstream, averaged over the sizes
    both have; how a method's gain moves with the ancestry's training and the condensation budget."""
    by_up = {u: task_groups([r for r in rows if r.upstream == u], task) for u in upstreams}
    labels = list(dict.fromkeys(r.label for r in rows if r.task == task and r.label != reference))
    lines = ["| method | " + " | ".join(upstreams) + " |", "|" + "---|" * (len(upstreams) + 1)]
    for label in labels:
        cells = []
        for u in upstreams:
            groups = by_up[u]
            diffs = [
                statistics.fmean(g.acc for g in groups[label, size])
                - statistics.fmean(g.acc for g in groups[ref, size])
                for (lab, size) in groups
                for ref in [reference]
                if lab == label and (ref, size) in groups
            ]
            cells.append(f"{100 * statistics.fmean(diffs):+.1f}" if diffs else "–")
        if any(c != "–" for c in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def identical_note(rows: list[Row], task: str) -> str:
    """One sentence naming the methods whose accuracies equal another's seed by seed (their plot marks
    coincide), or ``""``."""
    groups, labels = task_groups(rows, task), task_labels(rows, task)
    pairs = [
        f"{label} = {other} at {size}"
        for size in task_sizes(rows, task)
        for label, other in same_results(groups, labels, size).items()
    ]
    return (
        (
            "Identical results (the same accuracy at every evaluation, seed by seed; the plots draw the second "
            "larger and hollow and name it in the panel title): " + "; ".join(pairs) + "."
        )
        if pairs
        else ""
    )
