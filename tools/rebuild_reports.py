"""Rebuild the tables of ``learngene compare`` reports from their ``results.csv`` with today's report code.

    python tools/rebuild_reports.py docs/compare-heldout-classes-100shot [...]
    python tools/rebuild_reports.py --summary docs/compare-heldout-classes-100shot   # the results page's tables

The header of each ``report.md`` (command, date, machine, ancestry, data: facts of the run) and its plot links
are kept; the legend, the per-size tables and the recommendation lines are written again from the run's
``results.csv`` (accuracies as the file has them, 4 decimals), and a line under the header says so. The numbers
are the run's; only how they are summarized is today's.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

from learngene.bench.rows import read_csv
from learngene.bench.stats import decide
from learngene.formats.atomic import now_iso, write_text_atomic
from learngene.pipeline.compare import DEFAULT_REFERENCES, LEGEND, LONG_LABEL, TASK, _mean, _vs, compare_text

REBUILT = "- tables rebuilt from this folder's results.csv by tools/rebuild_reports.py"


def rebuild(folder: Path) -> None:
    old = (folder / "report.md").read_text().splitlines()
    if not old or old[0] != "# learngene compare":
        raise SystemExit(f"{folder}/report.md is not a learngene compare report")
    first = next(i for i, line in enumerate(old) if line.startswith("- "))
    end = next((i for i in range(first, len(old)) if not old[i].startswith("- ")), len(old))
    header = [line for line in old[:end] if not line.startswith(REBUILT)]
    plots = [line for line in old if line.startswith("![")]
    rows = read_csv(folder / "results.csv")
    labels = {r.label for r in rows}
    references = [LONG_LABEL if r == "scratch_x10" else r for r in DEFAULT_REFERENCES]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    parts = [
        *header,
        f"{REBUILT} at commit {commit or '?'} ({now_iso()}): the run's numbers, today's statistics",
        "",
        *LEGEND,
        compare_text(rows, [r for r in references if r in labels]),
        *(line for plot in plots for line in (plot, "")),
    ]
    write_text_atomic(folder / "report.md", "\n".join(parts))


def summary(folder: Path, contenders: int = 3) -> str:
    """Markdown for a results page: top-1 (mean ± std) of every method per size, then per size the strongest
    reference and the methods closest to it, with their paired difference and decision as the report gives them."""
    rows = [r for r in read_csv(folder / "results.csv") if r.task == TASK and r.ok]
    sizes = list(dict.fromkeys(r.size for r in rows))
    labels = list(dict.fromkeys(r.label for r in rows))
    accs = {(r.label, r.size, r.seed): r.acc for r in rows}
    lines = ["| method | " + " | ".join(sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for label in labels:
        cells = [[a for (lab, size, _), a in accs.items() if lab == label and size == s] for s in sizes]
        lines.append(f"| {label} | " + " | ".join(_mean(c) if c else "–" for c in cells) + " |")
    lines += ["", "| size | strongest reference | method | difference [95 % interval], decision (seeds to resolve) |"]
    lines.append("|---|---|---|---|")
    references = [LONG_LABEL if r == "scratch_x10" else r for r in DEFAULT_REFERENCES]
    for size in sizes:
        results = {
            label: {seed: a for (lab, s, seed), a in accs.items() if lab == label and s == size} for label in labels
        }
        refs = [r for r in references if results.get(r)]
        verdicts, _ = decide(results, refs)
        best = max(refs, key=lambda r: statistics.fmean(results[r].values()))
        others = sorted(
            (c for c in labels if c not in refs and verdicts[c, best].diff.testable),
            key=lambda c: -verdicts[c, best].diff.mean,
        )
        for label in others[:contenders]:
            lines.append(f"| {size} | {best} | {label} | {_vs(verdicts[label, best])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        for name in sys.argv[2:]:
            print(summary(Path(name)))
    else:
        for name in sys.argv[1:]:
            rebuild(Path(name))
            print(f"rebuilt {name}/report.md")
