"""Rebuild the statistics of stored ``learngene compare`` and ``learngene bench`` reports from their ``results.csv``
with today's report code.

    python tools/rebuild_reports.py docs/compare-heldout-classes-100shot docs/bench-transfer [...]
    python tools/rebuild_reports.py --summary docs/compare-heldout-classes-100shot   # the results page's tables
    python tools/rebuild_reports.py --plots docs/compare-heldout-classes-100shot     # its plots drawn again too

The header of each ``report.md`` (command, date, machine, ancestry, data: facts of the run) and its plot links are
kept, and a line under the header says that the rest was rebuilt. A compare report's legend, per-size tables and
recommendation lines are written again; a bench report's marked top-1 tables (and their legend) are, its other
tables are kept. Accuracies are the file's (4 decimals); the numbers are the run's, only how they are summarized
is today's. A ``results.csv`` from before starts were recorded names no start: methods whose results are the
same at every evaluation, seed by seed, are then taken as one start, and the report says so. One from before the
condensation's images and GFLOP and the fine-tuning's images and labels per class were recorded leaves those cells
n/a.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from learngene.bench.findings import family, mean_sd, vs_cell
from learngene.bench.plots import plot_curves, plot_folder, plot_stored
from learngene.bench.rows import read_csv, task_groups
from learngene.bench.tables import format_table, mark_rule
from learngene.comparison.choices import DEFAULT_REFERENCES, LONG_LABEL, TASK
from learngene.comparison.report import LEGEND, compare_text, plot_report
from learngene.formats.atomic import now_iso, write_text_atomic

REBUILT = "- tables rebuilt from this folder's results.csv by tools/rebuild_reports.py"
MARK_LEGENDS = ("Marks compare a cell", "One seed: the cells carry no", "No reference (scratch, mimetic")


def _stamp() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return f"{REBUILT} at commit {commit or '?'} ({now_iso()}): the run's numbers, today's statistics"


def _header_end(old: list[str]) -> int:
    """The index after the header's ``- `` lines."""
    first = next(i for i, line in enumerate(old) if line.startswith("- "))
    return next((i for i in range(first, len(old)) if not old[i].startswith("- ")), len(old))


def rebuild(folder: Path, plots: bool = False) -> None:
    """Rebuild ``folder``'s report; ``plots``: draw its plots again too (today's colours, markers and notes)."""
    old = (folder / "report.md").read_text().splitlines()
    if old and old[0] == "# learngene compare":
        return rebuild_compare(folder, old, plots)
    if old and old[0].startswith("# learngene benchmark"):
        if plots:
            redraw_bench(folder)
        return rebuild_bench(folder, old)
    raise SystemExit(f"{folder}/report.md is neither a learngene compare nor a learngene bench report")


def rebuild_compare(folder: Path, old: list[str], redraw: bool = False) -> None:
    end = _header_end(old)
    header = [line for line in old[:end] if not line.startswith(REBUILT)]
    plots = [line for line in old if line.startswith("![")]
    rows = read_csv(folder / "results.csv")
    labels = {r.label for r in rows}
    references = [LONG_LABEL if r == "scratch_x10" else r for r in DEFAULT_REFERENCES]
    if redraw:
        data = re.search(r"^- data: (\S+?)(?:,| classes ([\d, ]+),)", "\n".join(header), re.M)
        name = (
            data.group(1) + (f" classes {data.group(2).replace(' ', '')}" if data and data.group(2) else "")
            if data
            else ""
        )
        shown = [r for r in references if r in labels]
        plots = [line for line in plot_report(rows, shown, plot_folder(folder), name) if line]
    parts = [
        *header,
        _stamp(),
        "",
        *LEGEND,
        compare_text(rows, [r for r in references if r in labels], detail=True),
        *(line for plot in plots for line in (plot, "")),
    ]
    write_text_atomic(folder / "report.md", "\n".join(parts))


def rebuild_bench(folder: Path, old: list[str]) -> None:
    """The marks' legend and every marked top-1 table of a bench report, from its ``results.csv``; the rest is
    kept as written. A table is the first after its task's heading (``## task``, or ``### task (upstream)`` under
    ``## Upstream upstream``) whose header ends in stored params, condense steps and condense s."""
    rows = read_csv(folder / "results.csv")
    tasks = list(dict.fromkeys(r.task for r in rows))
    end = _header_end(old)
    header = [line for line in old[:end] if not line.startswith(REBUILT)]
    legend = mark_rule(rows, tasks, len({r.seed for r in rows}))
    out = [*header, _stamp()]
    where, i = None, end
    while i < len(old):
        line = old[i]
        if line.startswith(MARK_LEGENDS):
            out.append(legend)
            i += 1
            continue
        heading = re.fullmatch(r"#{2,3} (.+?)(?: \((.+)\))?", line)
        if heading and heading.group(1) in tasks:
            where = (heading.group(1), heading.group(2) or "")
        if where and line.startswith("| method |") and line.endswith("| stored params | condense steps | condense s |"):
            task, up = where
            table_end = next((j for j in range(i, len(old)) if not old[j].startswith("|")), len(old))
            if table_end + 1 < len(old) and old[table_end + 1].startswith("Holm over the m comparisons"):
                table_end += 2  # the line a rebuilt table already has
            table = format_table([r for r in rows if r.upstream == up], task, mark=True).splitlines()
            out += _with_numbers_of(old[i:table_end], table)
            where, i = None, table_end
            continue
        out.append(line)
        i += 1
    write_text_atomic(folder / "report.md", "\n".join(out) + "\n")


def redraw_bench(folder: Path) -> None:
    """Draw a bench report's plots again from its ``results.csv``: each of its task's (and upstream's) that the
    folder already holds, under the name the report links."""
    rows = read_csv(folder / "results.csv")
    plot_dir = plot_folder(folder)
    for task in dict.fromkeys(r.task for r in rows):
        for up in dict.fromkeys(r.upstream for r in rows if r.task == task):
            tag = task + (f"-{up.replace(' ', '_')}" if up else "")
            these = [r for r in rows if r.upstream == up]
            if (plot_dir / f"stored-{tag}.png").exists():
                plot_stored(these, task, plot_dir / f"stored-{tag}.png")
            if (plot_dir / f"curves-{tag}.png").exists():
                plot_curves(these, task, plot_dir / f"curves-{tag}.png")


def _with_numbers_of(old: list[str], table: list[str]) -> list[str]:
    """The rebuilt ``table`` with the top-1 of ``old`` (the report's own, from unrounded accuracies; ``results.csv``
    keeps 4 decimals, which can move a standard deviation's last digit) and the rebuilt marks."""
    cell = re.compile(r"(\d+\.\d(?: ± \d+\.\d)?)((?: [SXMI][+−=])*)")
    written = {line.split(" | ")[0]: line.strip(" |").split(" | ") for line in old if line.startswith("| ")}
    out = []
    for line in table:
        cells = line.strip(" |").split(" | ")
        before = written.get(line.split(" | ")[0])
        if line.startswith("| ") and before and len(before) == len(cells):
            kept = [
                f"{was.group(1)}{now.group(2)}" if (now := cell.fullmatch(c)) and (was := cell.fullmatch(b)) else c
                for c, b in zip(cells, before)
            ]
            line = "| " + " | ".join(kept) + " |"
        out.append(line)
    return out


def summary(folder: Path, contenders: int = 3) -> str:
    """Markdown for a results page: top-1 (mean ± std) of every method per size, then per size the strongest
    reference and the starts closest to it, with their paired difference and decision as the report gives them."""
    rows = [r for r in read_csv(folder / "results.csv") if r.task == TASK and r.ok]
    sizes = list(dict.fromkeys(r.size for r in rows))
    labels = list(dict.fromkeys(r.label for r in rows))
    groups = task_groups(rows, TASK)
    lines = ["| method | " + " | ".join(sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for label in labels:
        cells = [[g.acc for g in groups.get((label, size), [])] for size in sizes]
        lines.append(f"| {label} | " + " | ".join(mean_sd(c) if c else "–" for c in cells) + " |")
    lines += [
        "",
        "| size | strongest reference | method | difference [95 % interval], decision (seeds to resolve at 80 % power) |",
        "|---|---|---|---|",
    ]
    references = [LONG_LABEL if r == "scratch_x10" else r for r in DEFAULT_REFERENCES]
    for size in sizes:
        fam = family({label: groups[label, size] for label in labels if (label, size) in groups}, references, size)
        best = max(fam.references, key=fam.mean)
        others = sorted(
            (s.name for s in fam.starts if s.name not in fam.references and fam.verdicts[s.name, best].diff.testable),
            key=lambda name: -fam.verdicts[name, best].diff.mean,
        )
        for name in others[:contenders]:
            lines.append(f"| {size} | {best} | {name} | {vs_cell(fam.verdicts[name, best])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        for name in sys.argv[2:]:
            print(summary(Path(name)))
    else:
        redraw = "--plots" in sys.argv[1:]
        for name in (a for a in sys.argv[1:] if a != "--plots"):
            rebuild(Path(name), redraw)
            print(f"rebuilt {name}/report.md" + (" and its plots" if redraw else ""))
