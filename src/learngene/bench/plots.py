"""The report's PNG plots: top-1 against fine-tuning epochs and against the parameters a gene stores, a colour and
marker per method."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .rows import Row, mean_curve, same_results, task_groups, task_labels, task_sizes


def _over_seeds(groups: dict[tuple[str, str], list[Row]]) -> str:
    """What a plot's points are: one seed's result, or a mean ± std over several."""
    seeds = max((len(group) for group in groups.values()), default=1)
    return f"mean ± std over {seeds} seeds" if seeds > 1 else "1 seed"


def _named_together(label: str, same: dict[str, str]) -> str | None:
    """The legend entry of ``label`` in a panel: None when it equals an earlier method there (drawn once, as that
    one), else its name joined to every method with the same results, e.g. ``pretrained = weight_selection``."""
    if label in same:
        return None
    return " = ".join([label, *(other for other, first in same.items() if first == label)])


def _drawn(
    groups: dict[tuple[str, str], list[Row]], labels: list[str], size: str
) -> Iterator[tuple[str, list[Row], str]]:
    """What the panel of ``size`` draws, each method once: ``(label, its rows, its legend entry)``; a method whose
    results equal an earlier one's is named in that one's entry instead (:func:`_named_together`)."""
    same = same_results(groups, labels, size)
    for label in labels:
        group, named = groups.get((label, size)), _named_together(label, same)
        if group and named is not None:
            yield label, group, named


def plot_folder(out_dir: Path) -> Path:
    """``out_dir/plots``, made, for plots drawn off-screen (matplotlib's Agg: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    folder = out_dir / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ---- one colour and marker per method, the same in every plot ----------------------------------------------------
# The references are black and greys (what the others are read against); every other method of the project has a
# colour of Kelly's 22 colours of maximum contrast (1965) and a marker of its own, so that two methods never share
# both, and no two share a colour. A method this table does not know (a plugin's) gets a colour and marker of
# EXTRA, by its place among the unknown methods of the plot.
REFERENCE_STYLES: dict[str, tuple[str, str]] = {
    "scratch": ("#000000", "o"),
    "scratch ×10": ("#555555", "s"),
    "mimetic": ("#7f7f7f", "^"),
    "structured": ("#b0b0b0", "D"),
    "scratch_fix_init": ("#333333", "v"),  # scratch's second random start: near black, its own marker
}
METHOD_STYLES: dict[str, tuple[str, str]] = {
    "tleg": ("#0067A5", "o"),  # strong blue
    "wave": ("#F38400", "s"),  # vivid orange
    "share_init": ("#008856", "D"),  # medium green
    "sws": ("#BE0032", "^"),  # vivid red
    "lets": ("#875692", "v"),  # strong purple
    "pool": ("#882D17", "P"),  # strong reddish brown
    "tal": ("#E68FAC", "X"),  # strong purplish pink
    "pith": ("#A1CAF1", "*"),  # very light blue
    "front": ("#8DB600", "h"),  # vivid yellowish green
    "pretrained": ("#604E97", "<"),  # strong violet
    "weight_selection": ("#F6A600", ">"),  # vivid orange yellow
    "importance": ("#00A6A6", "p"),  # teal (Kelly's dark olive green reads as a grey)
    "grow": ("#E25822", "d"),  # vivid reddish orange
    "peg": ("#B3446C", "H"),  # strong purplish red
    "cluster": ("#C2B280", "8"),  # grayish yellow
    "auto_lg": ("#654522", "o"),  # deep yellowish brown
    "heru_lg": ("#DCD300", "s"),  # vivid greenish yellow
}
EXTRA_COLOURS = ("#F99379", "#F3C300", "#1f77b4", "#17becf", "#9467bd", "#2ca02c")
EXTRA_MARKERS = "oD^vsP*Xh"


def style_of(label: str, unknown: list[str] | None = None) -> dict[str, Any]:
    """The colour and marker of ``label`` (a method, ``scratch ×10``, or a variant or ×N run of a method, which
    keeps its method's: its line style differs, :func:`line_style`). ``unknown``: the methods of the plot that the
    table does not know, in the plot's order (their place picks their style)."""
    method = label if label in REFERENCE_STYLES else _method_of(label)
    if method in REFERENCE_STYLES:
        colour, marker = REFERENCE_STYLES[method]
    elif method in METHOD_STYLES:
        colour, marker = METHOD_STYLES[method]
    else:
        i = (unknown or [method]).index(method) if method in (unknown or []) else 0
        colour, marker = EXTRA_COLOURS[i % len(EXTRA_COLOURS)], EXTRA_MARKERS[i % len(EXTRA_MARKERS)]
    hollow = " +" in label  # a variant (+kd, +mimetic): its method's marker, not filled
    return {"color": colour, "marker": marker, **({"mfc": "white"} if hollow else {})}


def style_per_method(labels: list[str]) -> dict[str, dict[str, Any]]:
    """:func:`style_of` every label of a plot: the same method has the same colour and marker in every plot."""
    known = set(REFERENCE_STYLES) | set(METHOD_STYLES)
    unknown = list(dict.fromkeys(m for m in map(_method_of, labels) if m not in known and m not in REFERENCE_STYLES))
    return {label: style_of(label, unknown) for label in labels}


def line_style(label: str) -> str:
    """Dashed for a ×N budget (scratch ×10 too), dotted for a variant, solid for the method itself."""
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


def finish_figure(fig, axes, title: str, path: Path, notes: Sequence[str] = ()) -> None:
    """One legend for all panels, right of them, one entry per method; then save. A panel draws methods with the
    same results once, labelled ``a = b``: in the legend ``b`` has its own entry if another panel draws it, else
    ``b (= a at PANEL)`` beside a's marker. ``notes``: lines written under the panels (the methods a plot lacks,
    and why)."""
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
    if entries:
        fig.legend(
            list(entries.values()),
            list(entries),
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            fontsize=8,
            frameon=False,
        )
    write_notes(fig, notes)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write_notes(fig, notes: Sequence[str], width: int = 110) -> None:
    """``notes`` under the figure's panels, each wrapped at ``width`` characters (the saved image grows to hold
    them)."""
    import textwrap

    if notes:
        text = "\n".join(line for note in notes for line in textwrap.wrap(note, width, subsequent_indent="    "))
        fig.text(0.01, 0.0, text, ha="left", va="top", fontsize=7)


def missing_notes(rows: list[Row], task: str, left_out: Sequence[tuple[str, str]] = ()) -> list[str]:
    """One line per method a plot of ``task`` lacks at some size: left out before condensing, refused or failed
    (``method at SIZES: why``, the reason cut to its first sentence)."""
    lines = [f"left out: {name}: {_short(why)}" for name, why in left_out]
    by_note: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.task == task and r.note and r.size not in by_note.setdefault((r.label, r.note), []):
            by_note[r.label, r.note].append(r.size)
    lines += [f"n/a: {label} at {', '.join(sizes)}: {_short(note)}" for (label, note), sizes in by_note.items()]
    return lines


def _short(text: str, most: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"


def has_curves(rows: list[Row], task: str) -> bool:
    """Whether some run of ``task`` was evaluated at more than one point (else a learning-curve plot is a column
    of markers, and is left out)."""
    return any(len(r.accs) > 1 for r in rows if r.task == task)


def plot_curves(
    rows: list[Row], task: str, path: Path, data_name: str | None = None, left_out: Sequence[tuple[str, str]] = ()
) -> None:
    """Top-1 after every fine-tuning epoch, one panel per size, one line per method (TLEG Fig. 4's shape);
    the title names ``data_name`` (default: the task); under the panels, the methods it lacks and why."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    groups = task_groups(rows, task)
    sizes, labels = task_sizes(rows, task), task_labels(rows, task)
    styles = style_per_method(labels)
    fig, axes = _subplots(len(sizes))
    longest = max((g.epochs[-1] for group in groups.values() for g in group), default=1)
    shortest = min((g.epochs[-1] for group in groups.values() for g in group), default=1)
    log_x = longest >= 4 * shortest  # a long scratch run would squash the others' few epochs
    for ax, size in zip(axes, sizes):
        for label, group, named in _drawn(groups, labels, size):
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
    title = f"{data_name or task}: test accuracy vs fine-tuning epochs ({_over_seeds(groups)})"
    finish_figure(fig, axes, title, path, missing_notes(rows, task, left_out))


def plot_stored(rows: list[Row], task: str, path: Path) -> None:
    """Final top-1 against the parameters each method's gene stores, one panel per size."""
    groups = task_groups(rows, task)
    sizes, labels = task_sizes(rows, task), [label for label in task_labels(rows, task) if " ×" not in label]
    styles = style_per_method(labels)
    fig, axes = _subplots(len(sizes))
    most = max((r.stored_params for r in rows), default=1)
    # the log part starts at the decade of the smallest gene that stores anything; 0 (scratch, mimetic) sits left
    stored = [r.stored_params for r in rows if r.stored_params > 0]
    linthresh = 10 ** math.floor(math.log10(min(stored))) if stored else 100
    for ax, size in zip(axes, sizes):
        for label, group, named in _drawn(groups, labels, size):
            accs = [100 * g.acc for g in group]
            ax.errorbar(
                [group[0].stored_params],
                [statistics.fmean(accs)],
                yerr=[statistics.stdev(accs)] if len(accs) > 1 else None,
                capsize=3,
                ms=7,
                ls="none",
                mew=1.5,
                label=named,
                **{**styles[label], "mfc": "none"},
            )
        ax.set_xscale("symlog", linthresh=linthresh, linscale=0.5)
        ax.set_xlim(-0.2 * linthresh, 3 * max(most, linthresh))
        ax.set_title(size, fontsize=9)
        ax.set_xlabel("parameters stored in the learngene")
        ax.set_ylabel("final top-1 accuracy (%)")
        ax.grid(alpha=0.3)
    title = f"{task}: final test accuracy vs learngene size ({_over_seeds(groups)})"
    finish_figure(fig, axes, title, path, missing_notes(rows, task))
