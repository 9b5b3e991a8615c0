"""The bench report's plots and text say what their points are (issue 14: honest plots)."""

from __future__ import annotations

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

    def finish(fig, axes, title, path):
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
        lambda fig, axes, title, path: seen.update(
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
    monkeypatch.setattr(plots, "finish_figure", lambda fig, axes, title, path: seen.update(xlim=axes[0].get_xlim()))
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
