"""``learngene compare``'s report: per size the table of starts with its recommendation line
(:func:`size_table`, :func:`recommend`), the refusals, the plots, and ``report.md`` with ``results.csv``
(:func:`write_compare_report`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..bench import findings
from ..bench.plots import (
    finish_figure,
    has_curves,
    line_style,
    missing_notes,
    plot_curves,
    plot_folder,
    style_per_method,
)
from ..bench.probe import RTOL
from ..bench.profiles import Profile
from ..bench.report import plural, run_lines, scratch_lines
from ..bench.rows import mean_curve, sizes_by_note, write_csv
from ..bench.stats import POWER, RULE
from ..bench.tables import count_text, gflop_text, labels_text
from ..formats.atomic import write_text_atomic
from ..registry import get_method
from .choices import KD, LONG, LONG_LABEL, TASK


# ---- the recommendation ---------------------------------------------------------------------------------
def recommend(size: str, groups: Mapping[str, list[Any]], references: Sequence[str]) -> str:
    """One line for ``size`` from its finished rows by label (references among them): ``use X`` only where X's wins
    over every reference are resolved, otherwise what is and is not resolved and the cheapest of the starts no other
    is shown better than (:func:`learngene.bench.findings.recommend`)."""
    return findings.recommend(findings.family(groups, references, size), references)


# ---- the report -------------------------------------------------------------------------------------------
def _by_label(rows: list[Any], size: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        if r.task == TASK and r.size == size and r.ok:
            out[r.label].append(r)
    return out


def _first_reaching(group: list[Any], target: float) -> int | None:
    """The first evaluated epoch at which the mean curve over seeds reaches ``target``."""
    curve, _ = mean_curve(group)
    return next((group[0].epochs[e] for e, acc in enumerate(curve) if acc >= target - 1e-12), None)


def _joined(values: list[str]) -> str:
    """One value, or each start's own where a row holds several methods: ``204,741 / 204,853``."""
    return values[0] if len(set(values)) == 1 else " / ".join(values)


def size_table(rows: list[Any], size: str, references: Sequence[str], detail: bool = False) -> tuple[str, str]:
    """(markdown table with its family line, recommendation line) of one size: one row per distinct start.
    ``detail`` (the report's): also the images the condensation saw and the fine-tuning's images and labels per
    class (the terminal's table stays narrow)."""
    groups = _by_label(rows, size)
    fam = findings.family(groups, references, size)
    long = groups.get(LONG_LABEL)
    target = statistics.fmean(g.acc for g in long) if long else None
    long_epoch = _first_reaching(long, target) if long and target is not None else None
    header = [
        "method",
        "top-1 (%)",
        *(f"vs {r}" for r in fam.references),
        *([f"vs itself without {KD}"] if fam.plain else []),
        "stored params",
        "condense s",
        "condense steps",
        *(["condense images"] if detail else []),
        "condense GFLOP",
        "fine-tune epochs",
        *(["fine-tune images", "labels per class"] if detail else []),
        "fine-tune s",
        f"epoch reaching {LONG_LABEL}'s final",
        "speed-up vs scratch",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for start in fam.starts:
        group = start.rows[start.labels[0]]
        marks = [_cell(fam, start.name, r) for r in fam.references]
        if fam.plain:
            marks.append(_cell(fam, start.name, fam.plain[start.name]) if start.name in fam.plain else "")
        reach = _first_reaching(group, target) if target is not None else None
        reached = "–" if target is None else (str(reach) if reach else f"not reached in {group[0].epochs[-1]}")
        speed = f"{long_epoch / reach:.1f}×" if reach and long_epoch else "–"
        lines.append(
            "| "
            + " | ".join(
                [start.name, findings.mean_sd([g.acc for g in group]), *marks, *_cost_cells(start, detail)]
                + [reached, speed]
            )
            + " |"
        )
    seeds = sorted({g.seed for group in groups.values() for g in group})
    if fam.m:
        lines += [
            "",
            f"Paired over seeds {', '.join(map(str, seeds))}; Holm over the m = {fam.m} comparisons of this size; "
            f"`(N seeds)`: the seeds that would resolve the difference with {100 * POWER:.0f} % power at the level "
            f"0.05/{fam.m}.",
        ]
    lines += [_same_start_line(start) for start in fam.starts if len(start.labels) > 1]
    return "\n".join(lines), findings.recommend(fam, references)


def _cost_cells(start: Any, detail: bool) -> list[str]:
    """A row's cost and protocol cells of :func:`size_table`, each start's own where the row holds several."""
    firsts = [start.rows[label][0] for label in start.labels]
    cells = [
        _joined([f"{r.stored_params:,}" for r in firsts]),
        _joined([f"{r.condense_seconds:.1f}" for r in firsts]),
        _joined([f"{r.condense_steps:,}" for r in firsts]),
        *([_joined([count_text(r.condense_images) for r in firsts])] if detail else []),
        _joined([gflop_text(r.condense_gflop) for r in firsts]),
        _joined([str(r.epochs[-1]) for r in firsts]),
        *([count_text(firsts[0].train_images), labels_text(firsts[0])] if detail else []),
    ]
    seconds = [statistics.fmean(g.train_seconds for g in start.rows[label]) for label in start.labels]
    return [*cells, _joined([f"{s:.1f}" for s in seconds])]


def _cell(fam: Any, name: str, other: str) -> str:
    """A ``vs`` cell: the decision of ``name`` against ``other``; empty where the family does not set them against
    each other (a ``+kd`` row against a plain reference: like is compared with like)."""
    verdict = fam.verdicts.get((name, other)) if name != other else None
    return findings.vs_cell(verdict) if verdict is not None else ""


def _same_start_line(start: Any) -> str:
    """What one row of several methods means: ``front = pretrained: the same start ...``."""
    if start.by == "probe":
        why = (
            f"the same function as fine-tuning begins (for every seed their outputs on a probe batch agree within "
            f"{RTOL:g} of their size, which float rounding and a reordering of heads or neurons stay under)"
        )
    elif start.recorded:
        why = "the same start (their descendants' weights hash alike for every seed)"
    else:
        why = "the same results at every evaluation, seed by seed (this run recorded no start digests)"
    return (
        f"\n{start.name} at this size: {why}: one row (the numbers of {start.labels[0]}'s run), counted once in the "
        "correction."
    )


def refusals(rows: list[Any]) -> list[str]:
    """``method at sizes: reason`` for every method that could not make (or finish) a size."""
    return [f"{label} at {', '.join(sizes)}: {note}" for (label, note), sizes in sizes_by_note(rows).items()]


def compare_text(rows: list[Any], profile: Profile | Sequence[str], detail: bool = False) -> str:
    """What ``learngene compare`` prints: per size the table and its recommendation line, then the refusals.
    ``profile``: the run's profile, or the labels of its references; ``detail``: the report's wider tables
    (:func:`size_table`)."""
    references = profile.references if isinstance(profile, Profile) else tuple(profile)
    parts = []
    for size in dict.fromkeys(r.size for r in rows if r.task == TASK):
        table, line = size_table(rows, size, references, detail)
        if isinstance(profile, Profile):
            line += left_out_note(profile)
        parts += [f"## {size}", "", table, "", f"**Recommendation** {line}", ""]
    left = profile.left_out if isinstance(profile, Profile) else ()
    if left:
        parts += ["## Methods left out before condensing", ""] + [f"- {name}: {why}" for name, why in left] + [""]
    refused = refusals(rows)
    if refused:
        parts += ["## Methods that refused a size", ""] + [f"- {r}" for r in refused] + [""]
    return "\n".join(parts)


def recommendation_lines(rows: list[Any], profile: Profile) -> list[str]:
    """One recommendation line per size of the compare task's rows (``use METHOD`` only for resolved wins)."""
    return [
        size_table(rows, size, profile.references)[1] + left_out_note(profile)
        for size in dict.fromkeys(r.size for r in rows if r.task == TASK)
    ]


def left_out_note(profile: Profile) -> str:
    """What a recommendation adds for the methods left out before condensing: each named, with why."""
    if not profile.left_out:
        return ""
    return "; left out before condensing, as no size asked is one they can make: " + "; ".join(
        f"{name} ({why})" for name, why in profile.left_out
    )


def plot_ranked(
    rows: list[Any], references: Sequence[str], path: Path, data_name: str, left_out: Sequence[tuple[str, str]] = ()
) -> None:
    """Per size, every start ranked by its mean final top-1 (best at the top), drawn as its paired difference from
    the best reference start with the report's 95 % t interval (:mod:`learngene.bench.findings`), in the project's
    colour and marker of its method; the names are the axis's labels (no legend over the data), the methods the
    plot lacks are listed under it."""
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(r.size for r in rows if r.task == TASK))
    fams = [findings.family(_by_label(rows, size), references, size) for size in sizes]
    fams = [f for f in fams if f.references]
    if not fams:
        return
    tallest = max(len(f.starts) for f in fams)
    fig, axes = plt.subplots(1, len(fams), figsize=(5.2 * len(fams) + 1.5, 0.32 * tallest + 1.6), squeeze=False)
    for ax, fam in zip(axes[0], fams):
        _ranked_panel(ax, fam)
    title = f"{data_name}: each start against the best reference (paired over seeds, 95 % t interval)"
    finish_figure(fig, list(axes[0]), title, path, plot_notes(rows, left_out))


def _ranked_panel(ax: Any, fam: Any) -> None:
    """One size of :func:`plot_ranked`."""
    best = max(fam.references, key=fam.mean)
    ranked = sorted(fam.starts, key=lambda s: fam.mean(s.name))
    styles = style_per_method([s.labels[0] for s in ranked])
    for y, start in enumerate(ranked):
        style = styles[start.labels[0]]
        if start.name == best:
            ax.plot([0], [y], ls="none", ms=7, **style)
            continue
        verdict = fam.verdict(start.name, best)
        if verdict is None or not verdict.diff.testable:
            continue
        d = verdict.diff
        ax.errorbar(
            [100 * d.mean],
            [y],
            xerr=[[100 * (d.mean - d.low)], [100 * (d.high - d.mean)]],
            capsize=3,
            ms=6,
            ls="none",
            **style,
        )
        # the report's decision beside the interval: an interval that excludes 0 can still be "=" after Holm
        ax.annotate(verdict.mark, (100 * d.high, y), xytext=(4, -3), textcoords="offset points", fontsize=8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(
        range(len(ranked)),
        [f"{s.name}  {100 * fam.mean(s.name):.1f}" + (" (best reference)" if s.name == best else "") for s in ranked],
        fontsize=7,
    )
    ax.set_xlabel(f"top-1 points minus {best}'s, seed by seed (+ − =: the report's decision)")
    ax.set_title(f"{fam.size} (Holm over m = {fam.m})", fontsize=9)
    ax.grid(alpha=0.3, axis="x")


def plot_notes(rows: list[Any], left_out: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The lines under a compare plot: the methods left out before condensing and those n/a at a size, with why."""
    return missing_notes(rows, TASK, left_out)


def plot_by_size(rows: list[Any], path: Path, data_name: str, left_out: Sequence[tuple[str, str]] = ()) -> None:
    """Final top-1 (mean ± std over seeds) against the descendant size, one line per method, in the colours and
    markers of the learning curves; the methods it lacks listed under it."""
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(r.size for r in rows if r.task == TASK))
    labels = list(dict.fromkeys(r.label for r in rows if r.task == TASK and r.ok))
    styles = style_per_method(labels)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(sizes) + 3), 4.2))
    for i, label in enumerate(labels):
        xs, ys, es = [], [], []
        for k, size in enumerate(sizes):
            accs = [100 * g.acc for g in _by_label(rows, size).get(label, [])]
            if accs:
                xs.append(k + 0.03 * (i - len(labels) / 2))
                ys.append(statistics.fmean(accs))
                es.append(statistics.stdev(accs) if len(accs) > 1 else 0.0)
        ax.errorbar(xs, ys, yerr=es, capsize=3, ls=line_style(label), label=label, **styles[label])
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set_xlabel("descendant size")
    ax.set_ylabel("final top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    finish_figure(fig, [ax], f"{data_name}: accuracy by size (mean ± std over seeds)", path, plot_notes(rows, left_out))


def _labels_note(profile: Profile) -> str:
    """Which condensations also learn from the condensation data's labels (a cross-entropy term, λ < 1): with the
    user's data, they see more labelled images of the task than the fine-tuning budget gives the others."""
    labelled = [
        m
        for m in profile.methods or ()
        if get_method(m).needs_data and profile.condense_lambda.get(m, get_method(m).distill_lambda) < 1
    ]
    return (
        f". {', '.join(labelled)}'s condensation loss has a cross-entropy term (λ < 1): it also learns from "
        f"those images' labels"
        if labelled
        else ""
    )


LEGEND = (
    RULE,
    "",
    f"`epoch reaching {LONG_LABEL}'s final`: the first evaluated fine-tuning epoch at which the method's mean curve "
    f"reaches the mean final accuracy of scratch trained ×{LONG}; the speed-up is the epoch at which {LONG_LABEL} "
    "itself first reaches it (evaluated at every multiple of the others' budget) divided by the method's.",
    "",
)  # what the report says under its header, before the tables


def write_compare_report(
    rows: list[Any], profile: Profile, out_dir: Path, meta: dict[str, Any] | None = None, plots: bool = True
) -> None:
    """``results.csv``, ``report.md`` and (unless ``plots=False``) ``plots/by-size.png`` and ``plots/curves.png``."""
    meta = meta or {}
    write_csv(rows, out_dir / "results.csv")
    parts = [
        "# learngene compare",
        "",
        *_setup_lines(profile, meta),
        "",
        *LEGEND,
        compare_text(rows, profile, detail=True),
    ]
    if plots:
        parts += plot_report(rows, profile, plot_folder(out_dir))
    write_text_atomic(out_dir / "report.md", "\n".join(parts))


def _setup_lines(profile: Profile, meta: dict[str, Any]) -> list[str]:
    """The report's header: the run, the ancestry, the data and fine-tuning budget, the condensation and the
    distillation of the ``+kd`` rows."""
    task = profile.tasks[0]
    budget = plural(task.max_steps, "step") if task.max_steps else plural(task.epochs, "epoch")
    data = (
        f"{task.shots} images per class"
        if task.shots
        else f"{task.train_images} images"
        if task.train_images
        else "every training image"
    )
    anc = meta.get("ancestry", {})
    return [
        *run_lines(meta, "learngene compare"),
        f"- ancestry: {anc.get('file', profile.ancestry_file)} ({profile.ancestry.short()}, "
        f"{profile.ancestry.num_params:,} params); "
        + (
            f"its own top-1: {100 * anc['eval_acc']:.1f}% on the test images of "
            f"{anc.get('eval_data') or 'its training data'} (recorded in the file)"
            if anc.get("eval_acc") is not None
            else "its own accuracy: not recorded in the file (a checkpoint or hub folder records none)"
        ),
        f"- data: {task.data}"
        + (f" classes {', '.join(map(str, task.classes))}" if task.classes else "")
        + f", fine-tuned on {data} for {budget} (batch {task.batch_size or profile.train.batch_size}, "
        f"AdamW lr {profile.train.lr:g}, warmup + cosine), a fresh head for every method, top-1 on "
        f"{task.eval_images or 'every'} test image(s); seeds {', '.join(map(str, profile.seeds))}",
        f"- condensation: {plural(profile.condense_epochs, 'epoch')} of aux-net distillation on {profile.upstream_data}"
        + (
            f" classes {', '.join(map(str, profile.upstreams[0].classes))}"
            if profile.upstreams and profile.upstreams[0].classes
            else ""
        )
        + (f" ({profile.condense_images:,} images)" if profile.condense_images else " (every training image)")
        + f"; adaptation: {profile.adapt_steps} steps"
        + _labels_note(profile),
        *scratch_lines(profile.methods or (), profile.ancestry.family.model_class),
        *([_kd_line(profile, meta)] if profile.variants else []),
    ]


def _kd_line(profile: Profile, meta: dict[str, Any]) -> str:
    """Which distillation the ``+kd`` rows ran (logits or features, λ, τ) and what they are set against."""
    ran = meta.get("distillation", {}).get(TASK) or (
        "logit distillation where the ancestry's head was trained on the data's classes, else feature distillation "
        "on the pooled embedding (no `+kd` cell ran in the process that wrote this report to say which)"
    )
    return (
        f"- distillation while fine-tuning (`{KD}` rows): {ran}; λ = {profile.variants[0].distill_lambda:g}, "
        f"τ = {profile.train.distill_tau:g}. Like with like: each `{KD}` row is set against the `{KD}` references and "
        f"against itself without `{KD}`, in the size's one Holm family"
    )


def plot_report(rows: list[Any], profile: Profile | Sequence[str], plot_dir: Path, data_name: str = "") -> list[str]:
    """Draw the starts ranked against the best reference, accuracy by size and (where a run was evaluated more than
    once) the learning curves into ``plot_dir``; the report's lines that show them. ``profile``: the run's, or the
    labels of its references (a stored report redrawn, ``data_name`` then names its data)."""
    if not any(r.ok for r in rows):
        return []
    if isinstance(profile, Profile):
        task, references, left = profile.tasks[0], profile.references, profile.left_out
        data_name = task.data + (f" classes {','.join(map(str, task.classes))}" if task.classes else "")
    else:
        references, left = tuple(profile), ()
    plot_ranked(rows, references, plot_dir / "ranked.png", data_name, left)
    plot_by_size(rows, plot_dir / "by-size.png", data_name, left)
    parts = ["![starts ranked against the best reference](plots/ranked.png)", ""]
    parts += ["![accuracy by size](plots/by-size.png)", ""]
    if has_curves(rows, TASK):  # one evaluation point per run is no curve: that plot is left out
        plot_curves(rows, TASK, plot_dir / "curves.png", data_name, left)
        parts += ["![learning curves per size](plots/curves.png)", ""]
    return parts
