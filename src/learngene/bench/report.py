"""Benchmark reports: ``results.csv`` (one line per descendant and epoch), ``report.md`` tables, PNG plots."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import platform
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..formats.atomic import now_iso, write_text_atomic
from .profiles import Profile, Task


@dataclass
class Row:
    """One descendant: a method at a size, on a task, with a seed and a budget (× the task's epochs)."""

    method: str
    task: str
    size: str
    depth: int
    embed_dim: int
    num_heads: int
    seed: int
    budget: int = 1
    params: int = 0
    stored_params: int = 0
    condense_seconds: float = 0.0
    condense_steps: int = 0
    adapt_seconds: float = 0.0
    train_seconds: float = 0.0
    accs: list[float] = field(default_factory=list)  # top-1 at every evaluation point
    note: str = ""  # why the cell is n/a
    upstream: str = ""  # which ancestry (profiles with several upstreams)
    variant: str = ""  # an ablation's change to how the descendant is made (e.g. "+mimetic")
    eval_epochs: list[int] = field(default_factory=list)  # the fine-tuning epoch of every entry of accs
    cell_seconds: float = 0.0  # wall time of the whole cell: expansion, fine-tuning, evaluation, saving

    @property
    def ok(self) -> bool:
        return bool(self.accs)

    @property
    def acc(self) -> float:
        return self.accs[-1]

    @property
    def label(self) -> str:
        """The method (and variant), or e.g. ``scratch ×10`` for a longer budget."""
        name = f"{self.method} {self.variant}" if self.variant else self.method
        return name if self.budget == 1 else f"{name} ×{self.budget}"

    @property
    def epochs(self) -> list[int]:
        """The fine-tuning epoch of every accuracy (rows from before eval points existed: every epoch)."""
        return self.eval_epochs or list(range(1, len(self.accs) + 1))


CSV_FIELDS = (
    "upstream",
    "method",
    "variant",
    "budget",
    "task",
    "size",
    "depth",
    "embed_dim",
    "num_heads",
    "seed",
    "params",
    "stored_params",
    "condense_seconds",
    "condense_steps",
    "adapt_seconds",
    "train_seconds",
    "epoch",
    "acc",
    "note",
)


def write_csv(rows: list[Row], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for r in rows:
        base = {k: v for k, v in dataclasses.asdict(r).items() if k in CSV_FIELDS}
        for epoch, acc in zip(r.epochs, r.accs):
            writer.writerow({**base, "epoch": epoch, "acc": f"{acc:.4f}"})
        if not r.ok:
            writer.writerow({**base, "epoch": "", "acc": ""})
    write_text_atomic(path, buf.getvalue())


_INTS = ("budget", "depth", "embed_dim", "num_heads", "seed", "params", "stored_params", "condense_steps")
_FLOATS = ("condense_seconds", "adapt_seconds", "train_seconds")


def read_csv(path: Path) -> list[Row]:
    """The rows a ``results.csv`` was written from (:func:`write_csv`), in its order: accuracies as written (4
    decimals), no ``cell_seconds`` (the file has none). How a report is rebuilt with today's tables."""
    rows: dict[tuple[str, ...], Row] = {}
    with open(path, newline="") as fh:
        for line in csv.DictReader(fh):
            key = tuple(line[k] for k in ("upstream", "method", "variant", "budget", "task", "size", "seed"))
            if key not in rows:
                values: dict[str, Any] = {k: line[k] for k in ("upstream", "method", "variant", "task", "size", "note")}
                values.update({k: int(line[k]) for k in _INTS}, **{k: float(line[k]) for k in _FLOATS})
                rows[key] = Row(**values)
            if line["acc"]:
                rows[key].accs.append(float(line["acc"]))
                rows[key].eval_epochs.append(int(line["epoch"]))
    return list(rows.values())


# ---- aggregation ---------------------------------------------------------------------------------------
def _groups(rows: list[Row], task: str) -> dict[tuple[str, str], list[Row]]:
    """Finished rows of ``task`` by (label, size), labels in first-seen order."""
    out: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.task == task and r.ok:
            out[r.label, r.size].append(r)
    return out


def _labels(rows: list[Row], task: str) -> list[str]:
    return list(dict.fromkeys(r.label for r in rows if r.task == task))


def _sizes(rows: list[Row], task: str) -> list[str]:
    return list(dict.fromkeys(r.size for r in rows if r.task == task))


def plural(count: int, word: str) -> str:
    """``1 epoch``, ``3 epochs``."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _cell(accs: list[float]) -> str:
    mean = 100 * statistics.fmean(accs)
    return f"{mean:.1f} ± {100 * statistics.stdev(accs):.1f}" if len(accs) > 1 else f"{mean:.1f}"


def mean_curve(group: list[Row]) -> tuple[list[float], list[float]]:
    """Mean and standard deviation (0 for one seed) of top-1 at every evaluation point, over seeds."""
    epochs = min(len(r.accs) for r in group)
    means = [statistics.fmean(r.accs[e] for r in group) for e in range(epochs)]
    stds = [statistics.stdev([r.accs[e] for r in group]) if len(group) > 1 else 0.0 for e in range(epochs)]
    return means, stds


def _over_seeds(groups: dict[tuple[str, str], list[Row]]) -> str:
    """What a plot's points are: one seed's result, or a mean ± std over several."""
    seeds = max((len(group) for group in groups.values()), default=1)
    return f"mean ± std over {seeds} seeds" if seeds > 1 else "1 seed"


def _same_results(groups: dict[tuple[str, str], list[Row]], labels: list[str], size: str) -> dict[str, str]:
    """``{label: earlier label}`` for methods whose results at ``size`` equal an earlier one's, seed by seed
    (e.g. weight_selection at the ancestry's own width is the ancestry), so their marks would hide each other."""
    seen: dict[tuple, str] = {}
    out = {}
    for label in labels:
        group = groups.get((label, size))
        if not group:
            continue
        key = tuple(sorted((g.seed, tuple(g.epochs), tuple(g.accs)) for g in group))
        if key in seen:
            out[label] = seen[key]
        else:
            seen[key] = label
    return out


def _named_together(label: str, same: dict[str, str]) -> str | None:
    """The legend entry of ``label`` in a panel: None when it equals an earlier method there (drawn once, as that
    one), else its name joined to every method with the same results, e.g. ``pretrained = weight_selection``."""
    if label in same:
        return None
    return " = ".join([label, *(other for other, first in same.items() if first == label)])


# ---- the 2-std marks ------------------------------------------------------------------------------------
MARK_RULE = (
    "Marks compare a cell with a reference at the same size: `+` the method's mean is higher by more "
    "than 2 × the pooled standard deviation over seeds, `−` lower by more than that, `=` neither "
    "(pooled std = √((s₁² + s₂²)/2), each s the sample std over the seeds). References: {references}."
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


def compare(accs: list[float], reference: list[float]) -> str:
    """``+``/``−``/``=``: ``accs`` beats, loses to, or ties ``reference`` by the 2-pooled-std rule; ``?`` for
    fewer than two seeds on either side."""
    if len(accs) < 2 or len(reference) < 2:
        return "?"
    pooled = math.sqrt((statistics.variance(accs) + statistics.variance(reference)) / 2)
    diff = statistics.fmean(accs) - statistics.fmean(reference)
    return "+" if diff > 2 * pooled else "−" if -diff > 2 * pooled else "="


def _references(rows: list[Row], task: str) -> dict[str, str]:
    """Mark letter → label of the reference rows present in ``task``'s table."""
    labels = set(_labels(rows, task))
    long = sorted(r.label for r in rows if r.task == task and r.method == "scratch" and r.budget > 1 and not r.variant)
    refs = {"S": "scratch", "X": long[0] if long else "", "M": "mimetic", "I": "structured"}
    return {letter: label for letter, label in refs.items() if label in labels}


def marks(groups: dict[tuple[str, str], list[Row]], label: str, size: str, refs: dict[str, str]) -> str:
    own = [g.acc for g in groups.get((label, size), [])]
    out = []
    for letter, ref in refs.items():
        other = [g.acc for g in groups.get((ref, size), [])]
        if ref != label and own and other and (mark := compare(own, other)) != "?":
            out.append(letter + mark)
    return " ".join(out)


def format_table(rows: list[Row], task: str, mark: bool = False) -> str:
    """Markdown table: one line per method, top-1 (%) per size (mean ± std over seeds), then the gene's
    stored parameters and condensation cost. Sizes a method cannot make read n/a. With ``mark``, every
    cell also says whether it beats the references (see :data:`MARK_RULE`)."""
    groups = _groups(rows, task)
    refs = _references(rows, task) if mark else {}
    sizes = _sizes(rows, task)
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
                " ".join(filter(None, (_cell([g.acc for g in group]), marks(groups, label, size, refs))))
                if group
                else ("n/a" if any(x.label == label and x.size == size and x.task == task for x in rows) else "–")
            )
        lines.append(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {r.stored_params:,} | {r.condense_steps:,} | {r.condense_seconds:.1f} |"
        )
    return "\n".join(lines)


def epochs_to_match(rows: list[Row], task: str, factor: int) -> str:
    """Markdown table: the first epoch at which scratch with ``factor``× the budget reaches each method's
    final accuracy (means over seeds), per size — the "fraction of the training" claim in numbers."""
    groups = _groups(rows, task)
    sizes = _sizes(rows, task)
    long_label = f"scratch ×{factor}"
    lines = ["| method | " + " | ".join(sizes) + " |", "|" + "---|" * (len(sizes) + 1)]
    for label in _labels(rows, task):
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


# ---- plots ----------------------------------------------------------------------------------------------
MARKERS = "osD^vP*Xh<>p"


def style_per_method(labels: list[str]) -> dict[str, dict[str, Any]]:
    """A colour and marker per registered method, the same in every plot (its place in the registry picks them:
    20 colours, tab10 then tab20's light shades, times 12 markers: no two of the first 60 methods share both);
    ``×N`` runs and variants (``tleg +mimetic``) keep their method's colour (their line style differs)."""
    import matplotlib

    from ..registry import list_methods

    tab10, tab20 = matplotlib.colormaps["tab10"], matplotlib.colormaps["tab20"]
    palette = [tab10(i) for i in range(10)] + [tab20(2 * i + 1) for i in range(10)]
    order = list(list_methods())
    order += sorted({_method_of(label) for label in labels} - set(order))  # e.g. compare's "+kd" rows' methods
    styles = {}
    for label in labels:
        i = order.index(_method_of(label))
        styles[label] = {"color": palette[i % len(palette)], "marker": MARKERS[i % len(MARKERS)]}
    return styles


def line_style(label: str) -> str:
    """Dashed for a ×N budget, dotted for a variant, solid for the method itself."""
    return "--" if " ×" in label else ":" if " " in label else "-"


def _method_of(label: str) -> str:
    """``scratch ×10`` -> scratch, ``tleg +mimetic`` -> tleg."""
    return label.split(" ×")[0].split(" ")[0]


def _subplots(n: int):
    import matplotlib.pyplot as plt

    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols + 2.2, 3.8 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def finish_figure(fig, axes, title: str, path: Path) -> None:
    """One legend for all panels, right of them, one entry per method; then save. A panel draws methods with the
    same results once, labelled ``a = b``: in the legend ``b`` has its own entry if another panel draws it, else
    ``b (= a at PANEL)`` beside a's marker."""
    import matplotlib.pyplot as plt

    own: dict[str, Any] = {}
    hidden: dict[str, dict[str, tuple[Any, list[str]]]] = {}  # name -> {the method drawn instead: (handle, panels)}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            first, *others = label.split(" = ")
            own.setdefault(first, handle)
            for other in others:
                hidden.setdefault(other, {}).setdefault(first, (handle, []))[1].append(ax.get_title())
    entries = dict(own)
    for name, instead in hidden.items():
        if name not in own:  # drawn in no panel of its own: say where it is which method's marker
            where = "; ".join(
                f"= {first}" + (f" at {', '.join(filter(None, panels))}" if len(axes) > 1 else "")
                for first, (_, panels) in instead.items()
            )
            entries[f"{name} ({where})"] = next(iter(instead.values()))[0]
    fig.suptitle(title)
    fig.tight_layout()
    # outside the panels, however long the labels: the saved image grows
    fig.legend(
        list(entries.values()), list(entries), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def has_curves(rows: list[Row], task: str) -> bool:
    """Whether some run of ``task`` was evaluated at more than one point (else a learning-curve plot is a column
    of markers, and is left out)."""
    return any(len(r.accs) > 1 for r in rows if r.task == task)


def plot_curves(rows: list[Row], task: str, path: Path, data_name: str | None = None) -> None:
    """Top-1 after every fine-tuning epoch, one panel per size, one line per method (TLEG Fig. 4's shape);
    the title names ``data_name`` (default: the task)."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    groups = _groups(rows, task)
    sizes, labels = _sizes(rows, task), _labels(rows, task)
    styles = style_per_method(labels)
    fig, axes = _subplots(len(sizes))
    longest = max((g.epochs[-1] for group in groups.values() for g in group), default=1)
    shortest = min((g.epochs[-1] for group in groups.values() for g in group), default=1)
    log_x = longest >= 4 * shortest  # a long scratch run would squash the others' few epochs
    for ax, size in zip(axes, sizes):
        same = _same_results(groups, labels, size)
        for label in labels:
            group, named = groups.get((label, size)), _named_together(label, same)
            if not group or named is None:
                continue
            mean, std = mean_curve(group)
            x = group[0].epochs[: len(mean)]
            y, s = [100 * m for m in mean], [100 * v for v in std]
            ax.plot(x, y, line_style(label), ms=4, label=named, **styles[label])
            ax.fill_between(
                x,
                [a - b for a, b in zip(y, s)],
                [a + b for a, b in zip(y, s)],
                color=styles[label]["color"],
                alpha=0.12,
                lw=0,
            )
        if log_x:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(FixedLocator([t for t in (1, 2, 3, 5, 10, 20, 30, 50, 100) if t <= longest]))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(ScalarFormatter())
        else:
            ax.xaxis.set_major_locator(FixedLocator(list(range(1, longest + 1))))
        ax.set_title(size, fontsize=9)
        ax.set_xlabel("fine-tuning epoch" + (" (log scale)" if log_x else ""))
        ax.set_ylabel("top-1 accuracy (%)")
        ax.grid(alpha=0.3)
    finish_figure(fig, axes, f"{data_name or task}: test accuracy vs fine-tuning epochs ({_over_seeds(groups)})", path)


def plot_stored(rows: list[Row], task: str, path: Path) -> None:
    """Final top-1 against the parameters each method's gene stores, one panel per size."""
    groups = _groups(rows, task)
    sizes, labels = _sizes(rows, task), [label for label in _labels(rows, task) if " ×" not in label]
    styles = style_per_method(labels)
    fig, axes = _subplots(len(sizes))
    most = max((r.stored_params for r in rows), default=1)
    # the log part starts at the decade of the smallest gene that stores anything; 0 (scratch, mimetic) sits left
    stored = [r.stored_params for r in rows if r.stored_params > 0]
    linthresh = 10 ** math.floor(math.log10(min(stored))) if stored else 100
    for ax, size in zip(axes, sizes):
        same = _same_results(groups, labels, size)
        for label in labels:
            group, named = groups.get((label, size)), _named_together(label, same)
            if not group or named is None:
                continue
            accs = [100 * g.acc for g in group]
            ax.errorbar(
                [group[0].stored_params],
                [statistics.fmean(accs)],
                yerr=[statistics.stdev(accs)] if len(accs) > 1 else None,
                capsize=3,
                ms=7,
                ls="none",
                mfc="none",
                mew=1.5,
                label=named,
                **styles[label],
            )
        ax.set_xscale("symlog", linthresh=linthresh, linscale=0.5)
        ax.set_xlim(-0.2 * linthresh, 3 * max(most, linthresh))
        ax.set_title(size, fontsize=9)
        ax.set_xlabel("parameters stored in the learngene")
        ax.set_ylabel("final top-1 accuracy (%)")
        ax.grid(alpha=0.3)
    finish_figure(fig, axes, f"{task}: final test accuracy vs learngene size ({_over_seeds(groups)})", path)


# ---- the report ----------------------------------------------------------------------------------------
def _task_line(task: Task, seeds: int) -> str:
    data = (
        f"{task.shots} labelled images per class"
        if task.shots
        else f"{task.train_images:,} training images"
        if task.train_images
        else "the whole training split"
    )
    evals = (
        "after the last epoch"
        if not task.eval_every
        else "after every epoch"
        if task.eval_every == 1
        else f"every {task.eval_every} epochs and after the last"
    )
    return (
        f"Fine-tuned {plural(task.epochs, 'epoch')} on {data} of {task.data}"
        + (" (only the classes the upstream never saw)" if task.other_classes else "")
        + (f", batch {task.batch_size}" if task.batch_size else "")
        + (", each method with the same fresh classifier" if task.new_head else "")
        + f"; top-1 (%) on {f'{task.eval_images:,}' if task.eval_images else 'all'} test images, evaluated "
        + evals
        + "; "
        + (f"mean ± std over {seeds} seeds." if seeds > 1 else "one seed.")
    )


def machine() -> str:
    import torch

    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"CPU ({plural(torch.get_num_threads(), 'thread')})"
    )
    return (
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, {device}, "
        f"torch {torch.__version__}, python {platform.python_version()}"
    )


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
    by_up = {u: _groups([r for r in rows if r.upstream == u], task) for u in upstreams}
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
    groups, labels = _groups(rows, task), _labels(rows, task)
    pairs = [
        f"{label} = {other} at {size}"
        for size in _sizes(rows, task)
        for label, other in _same_results(groups, labels, size).items()
    ]
    return (
        (
            "Identical results (the same accuracy at every evaluation, seed by seed; the plots draw the second "
            "larger and hollow and name it in the panel title): " + "; ".join(pairs) + "."
        )
        if pairs
        else ""
    )


def _task_sections(
    rows: list[Row], profile: Profile, out_dir: Path, plot_dir: Path, plots: bool, suffix: str = "", level: str = "##"
) -> list[str]:
    parts: list[str] = []
    for task in profile.tasks:
        if not any(r.task == task.name for r in rows):
            continue
        parts += [
            "",
            f"{level} {task.name}{suffix}",
            "",
            _task_line(task, len(profile.seeds)),
            "",
            format_table(rows, task.name, mark=True),
        ]
        if note := identical_note(rows, task.name):
            parts += ["", note]
        if task.scratch_factor > 1 and any(r.task == task.name and r.budget > 1 and r.ok for r in rows):
            parts += [
                "",
                f"Epochs scratch ×{task.scratch_factor} needs to reach each method's final accuracy "
                f"(of {task.epochs * task.scratch_factor}; it is evaluated at the epochs shown):",
                "",
                epochs_to_match(rows, task.name, task.scratch_factor),
            ]
        if plots:
            tag = f"{task.name}{('-' + suffix.strip(' ()').replace(' ', '_')) if suffix else ''}"
            curves, stored = plot_dir / f"curves-{tag}.png", plot_dir / f"stored-{tag}.png"
            plot_stored(rows, task.name, stored)
            images = [f"![accuracy vs stored parameters]({stored.relative_to(out_dir)})"]
            if has_curves(rows, task.name):  # one evaluation point per run is no curve: that plot is left out
                plot_curves(rows, task.name, curves)
                images.insert(0, f"![accuracy vs epochs]({curves.relative_to(out_dir)})")
            parts += ["", " ".join(images)]
    return parts


def write_report(
    rows: list[Row], profile: Profile, out_dir: Path, meta: dict[str, Any] | None = None, plots: bool = True
) -> None:
    """``results.csv``, ``report.md`` and (unless ``plots=False``) ``plots/*.png`` in ``out_dir``."""
    meta = meta or {}
    write_csv(rows, out_dir / "results.csv")
    plot_dir = out_dir / "plots"
    if plots:
        import matplotlib

        matplotlib.use("Agg")
        plot_dir.mkdir(parents=True, exist_ok=True)
    anc = meta.get("ancestry", {})
    parts = [
        f"# learngene benchmark: profile `{profile.name}`",
        "",
        f"- command: `{meta.get('command', f'learngene bench --profile {profile.name}')}`",
        f"- date: {now_iso()}; machine: {machine()}",
        f"- wall time of this command: {meta.get('wall_seconds', 0) / 60:.1f} min (stages found in the cache "
        f"are not rerun); planned work of the whole run: {meta.get('plan_gflop', 0):,.0f} GFLOP (3× forward "
        f"FLOPs per training image, 1× per evaluated one)"
        + ("" if meta.get("complete", True) else " — **partial run** (time limit): rerun the command to finish"),
        f"- methods: {', '.join(meta.get('methods', sorted({r.method for r in rows})))}",
    ]
    if anc and not profile.upstreams:
        acc = anc.get("eval_acc")
        parts.append(
            f"- ancestry {anc['spec']} ({anc['params']:,} params), {plural(anc['epochs'], 'epoch')} on "
            f"{anc['images']:,} Fashion-MNIST images: top-1 "
            + (f"{100 * acc:.1f}%" if acc is not None else "?")
            + " on 1,000 test images"
        )
    parts += ["", mark_rule(rows, [t.name for t in profile.tasks], len(profile.seeds))]
    if profile.upstreams:
        parts += [
            "",
            "## Ancestries",
            "",
            "Each upstream trains its own ancestry on the Fashion-MNIST classes listed "
            f"({profile.upstream_images_per_class or 'all'} training images per class; top-1 on up to 1,000 "
            "test images of those classes after every epoch) and condenses every gene from it; the transfer "
            "tasks fine-tune on the other classes. Converged? applies the rule: the best of the last 3 epochs "
            "is less than 0.5 points above the best before them (the cosine schedule also flattens the end).",
            "",
            ancestry_table(meta),
        ]
    parts += [
        "",
        "## Learngenes",
        "",
        "Condensation runs once per method; adaptable methods then adapt once per "
        "size and seed on the same upstream images.",
        "",
        gene_table(rows),
    ]
    upstreams = list(dict.fromkeys(r.upstream for r in rows))
    if profile.upstreams:
        for up in profile.upstreams:
            if up.name in upstreams:
                mine = [r for r in rows if r.upstream == up.name]
                parts += ["", f"## Upstream {up.name}"]
                parts += _task_sections(mine, profile, out_dir, plot_dir, plots, suffix=f" ({up.name})", level="###")
        for task in profile.tasks:
            if len(upstreams) > 1 and any(r.task == task.name for r in rows):
                parts += [
                    "",
                    f"## {task.name}: gain by upstream",
                    "",
                    "Mean top-1 difference (points) to the reference, averaged over the sizes both made; "
                    "the upstreams differ in class split, ancestry training and condensation epochs (see "
                    "Ancestries).",
                ]
                for reference in ("scratch", "mimetic"):
                    parts += ["", f"Against {reference}:", "", gain_table(rows, task.name, upstreams, reference)]
    else:
        parts += _task_sections(rows, profile, out_dir, plot_dir, plots)
    sizes_by_note: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in rows:
        if r.note and r.size not in sizes_by_note[r.label, r.note]:
            sizes_by_note[r.label, r.note].append(r.size)
    if sizes_by_note:
        parts += ["", "## n/a cells", ""] + [
            f"- {method} at {', '.join(sizes)}: {note}" for (method, note), sizes in sorted(sizes_by_note.items())
        ]
    write_text_atomic(out_dir / "report.md", "\n".join(parts) + "\n")
