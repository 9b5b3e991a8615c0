"""The bench report's plots and text say what their points are (issue 14: honest plots)."""

from __future__ import annotations

import math

import pytest

from learngene.bench import Row, plots, tables
from learngene.bench.rows import read_csv, write_csv


def _row(method, size, seed, accs):
    return Row(
        method=method, task="t", size=size, depth=1, embed_dim=8, num_heads=1, seed=seed, stored_params=10, accs=accs
    )


def _titles(monkeypatch, plot, rows, tmp_path):
    """The figure title and panel titles ``plot`` draws."""
    seen = {}

    def finish(fig, axes, title, path, notes=()):
        seen["title"], seen["panels"] = title, [ax.get_title() for ax in axes]
        seen["legends"] = [ax.get_legend_handles_labels()[1] for ax in axes]
        seen["xlim"] = [ax.get_xlim() for ax in axes]
        import matplotlib.pyplot as plt

        plt.close(fig)

    monkeypatch.setattr(plots, "finish_figure", finish)
    plot(rows, "t", tmp_path / "p.png")
    return seen["title"], seen["panels"]


@pytest.mark.parametrize("plot", [plots.plot_curves, plots.plot_stored])
def test_one_seed_is_not_called_a_mean_over_seeds(plot, monkeypatch, tmp_path):
    rows = [_row("a", "S", 0, [0.5, 0.6]), _row("b", "S", 0, [0.4, 0.5])]
    title, _ = _titles(monkeypatch, plot, rows, tmp_path)
    assert "1 seed" in title and "mean" not in title
    rows += [_row("a", "S", 1, [0.5, 0.7]), _row("b", "S", 1, [0.4, 0.6])]
    title, _ = _titles(monkeypatch, plot, rows, tmp_path)
    assert "mean ± std over 2 seeds" in title


@pytest.mark.parametrize("plot", [plots.plot_curves, plots.plot_stored])
def test_identical_methods_are_named_not_hidden(plot, monkeypatch, tmp_path):
    # at the ancestry's width weight_selection copies the ancestry: the same accuracies as pretrained
    rows = [
        _row("pretrained", "S", 0, [0.5, 0.6]),
        _row("weight_selection", "S", 0, [0.5, 0.6]),
        _row("pretrained", "T", 0, [0.3, 0.4]),
        _row("weight_selection", "T", 0, [0.3, 0.45]),
    ]
    seen = {}
    monkeypatch.setattr(
        plots,
        "finish_figure",
        lambda fig, axes, title, path, notes=(): seen.update(
            legends=[ax.get_legend_handles_labels()[1] for ax in axes], panels=[ax.get_title() for ax in axes]
        ),
    )
    plot(rows, "t", tmp_path / "p.png")
    assert seen["panels"] == ["S", "T"]
    # named together in the legend where their results are the same, apart where they differ
    assert seen["legends"] == [["pretrained = weight_selection"], ["pretrained", "weight_selection"]]
    note = tables.identical_note(rows, "t")
    assert "weight_selection = pretrained at S" in note and " at T" not in note


def test_different_seeds_with_equal_accuracies_are_not_identical():
    rows = [_row("a", "S", 0, [0.5]), _row("b", "S", 1, [0.5])]
    assert tables.identical_note(rows, "t") == ""


def test_the_log_axis_of_stored_parameters_starts_near_the_data(monkeypatch, tmp_path):
    rows = [
        Row(method=m, task="t", size="S", depth=1, embed_dim=8, num_heads=1, seed=0, stored_params=n, accs=[0.5])
        for m, n in (("scratch", 0), ("a", 52_000), ("b", 310_000))
    ]
    seen = {}
    monkeypatch.setattr(
        plots, "finish_figure", lambda fig, axes, title, path, notes=(): seen.update(xlim=axes[0].get_xlim())
    )
    plots.plot_stored(rows, "t", tmp_path / "p.png")
    low, high = seen["xlim"]
    assert -2_000 <= low < 0 and 310_000 < high <= 1_000_000  # 0 at the left, then the decades of the genes: 1e4..


def test_results_csv_reads_back_into_the_rows_it_was_written_from(tmp_path):
    rows = [
        _row("tleg", "L2", 0, [0.25, 0.5]),
        Row(method="scratch", task="t", size="L2", depth=1, embed_dim=8, num_heads=1, seed=1, budget=10,
            variant="+kd", upstream="A", accs=[0.125], eval_epochs=[10], train_seconds=1.5),
        Row(method="pretrained", task="t", size="L1", depth=1, embed_dim=4, num_heads=1, seed=0, note="no, too narrow"),
    ]  # fmt: skip
    write_csv(rows, tmp_path / "results.csv")
    back = read_csv(tmp_path / "results.csv")
    assert [(r.label, r.upstream, r.size, r.seed, r.accs, r.epochs, r.note, r.train_seconds) for r in back] == [
        (r.label, r.upstream, r.size, r.seed, r.accs, r.epochs, r.note, r.train_seconds) for r in rows
    ]


def _paired_p_by_hand(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """The paired t-test's two-sided p-value of 3 seeds: t has 2 degrees of freedom, whose two-sided p-value is
    ``1 − |t|/√(t² + 2)`` (tests/test_compare_stats.py); differences without spread: 0."""
    diffs = [x - y for x, y in zip(a, b)]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    if sd < 1e-12:
        return 0.0
    t = mean / (sd / math.sqrt(3))
    return 1 - abs(t) / math.sqrt(t * t + 2)


def _holm_by_hand(p_values: list[float], m: int) -> list[float]:
    """The p-values Holm's step-down resolves: sorted, while the i-th (from 0) is at most 0.05/(m − i)."""
    ordered = sorted(p_values)
    assert len(ordered) == m
    passed = next((i for i, p in enumerate(ordered) if p > 0.05 / (m - i)), m)
    return ordered[:passed]


def test_bench_marks_and_compare_decide_the_same_cells_alike():
    # one size, three seeds: scratch, scratch ×10, mimetic and structured, and four methods, two of which start
    # alike (pretrained = weight_selection: one start, counted once by both)
    from learngene.comparison.report import size_table

    accs = {
        ("scratch", 1): (0.50, 0.52, 0.51),
        ("scratch", 10): (0.70, 0.71, 0.69),
        ("mimetic", 1): (0.60, 0.66, 0.61),
        ("structured", 1): (0.64, 0.65, 0.66),
        ("tleg", 1): (0.80, 0.81, 0.795),
        ("wave", 1): (0.66, 0.60, 0.70),
        ("pretrained", 1): (0.71, 0.73, 0.72),
        ("weight_selection", 1): (0.71, 0.73, 0.72),
    }
    rows = [
        Row(method=method, task="data", size="S", depth=1, embed_dim=8, num_heads=1, seed=seed, budget=budget,
            accs=[acc], start=f"{'ancestry' if method in ('pretrained', 'weight_selection') else method}-{budget}-{seed}")
        for (method, budget), values in accs.items()
        for seed, acc in enumerate(values)
    ]  # fmt: skip
    bench = tables.format_table(rows, "data", mark=True)
    table, _ = size_table(rows, "S", ["scratch", "scratch ×10", "mimetic", "structured"])
    letters = {"S": "scratch", "X": "scratch ×10", "M": "mimetic", "I": "structured"}
    header = [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]
    compared = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| "):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for column, cell in zip(header, cells):
            if column.startswith("vs ") and cell:
                for label in cells[0].split(" = "):
                    compared[label, column[3:]] = cell.split("] ")[1][0]  # "+3.0 [+0.5, +5.5] = (4 seeds)" → "="
    marked = {}
    for line in bench.splitlines()[2:]:
        if not line.startswith("| "):
            break
        label, cell = [c.strip() for c in line.strip("|").split("|")][:2]
        for mark in cell.split()[3:]:  # "71.0 ± 1.0 S+ X= M+ I+"
            marked[label, letters[mark[0]]] = mark[1]
    assert marked == compared and len(marked) == 4 * 3 + 4 * 4  # each reference against 3 others, 4 methods × 4
    assert "+" in marked.values() and "=" in marked.values() and "−" in marked.values()
    m = int(table.split("m = ")[1].split()[0])
    # and both are the paired rule, by hand
    by_label = {("scratch ×10" if budget > 1 else method): values for (method, budget), values in accs.items()}
    one_start = {"weight_selection": "pretrained"}
    family = {frozenset((one_start.get(a, a), b)): _paired_p_by_hand(by_label[a], by_label[b]) for a, b in marked}
    resolved = _holm_by_hand(list(family.values()), m)
    for (label, ref), mark in marked.items():
        p = family[frozenset((one_start.get(label, label), ref))]
        better = sum(by_label[label]) > sum(by_label[ref])
        assert mark == ("=" if p not in resolved else "+" if better else "−"), (label, ref, p)
    assert max(resolved) > 0.05 / m  # a difference Holm resolves and Bonferroni would not (tleg vs structured)
    # 6 pairs of references and 3 starts × 4 references: pretrained and weight_selection count once
    assert f"m = {m} at S" in bench and m == 6 + 3 * 4
    assert "pretrained = weight_selection at S" in bench
