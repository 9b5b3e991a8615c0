"""The report's PNG plots: top-1 against fine-tuning epochs and against the parameters a gene stores, a colour and
marker per method."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
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
    finish_figure(fig, axes, f"{data_name or task}: test accuracy vs fine-tuning epochs ({_over_seeds(groups)})", path)


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
