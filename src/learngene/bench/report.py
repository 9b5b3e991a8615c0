"""Benchmark reports: ``results.csv`` (one line per descendant and epoch) and ``report.md`` tables."""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from pathlib import Path

from ..io import write_text_atomic
from .profiles import Profile
from .protocol import Row

CSV_FIELDS = ("method", "task", "depth", "seed", "params", "stored_params", "condense_seconds", "epoch", "acc")


def write_csv(rows: list[Row], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for r in rows:
        for epoch, acc in enumerate(r.accs, start=1):
            writer.writerow(dict(method=r.method, task=r.task, depth=r.depth, seed=r.seed, params=r.params,
                                 stored_params=r.stored_params, condense_seconds=r.condense_seconds, epoch=epoch,
                                 acc=f"{acc:.4f}"))
    write_text_atomic(path, buf.getvalue())


def _cell(accs: list[float]) -> str:
    mean = 100 * statistics.fmean(accs)
    return f"{mean:.1f} ± {100 * statistics.stdev(accs):.1f}" if len(accs) > 1 else f"{mean:.1f}"


def format_table(rows: list[Row], task: str) -> str:
    """Markdown table: one line per method, top-1 (%) per depth, stored parameters and condensation time."""
    rows = [r for r in rows if r.task == task]
    depths = sorted({r.depth for r in rows})
    accs: dict[tuple[str, int], list[float]] = defaultdict(list)
    info: dict[str, Row] = {}
    for r in rows:
        accs[r.method, r.depth].append(r.acc)
        info.setdefault(r.method, r)
    header = ["method", *(f"depth {d}" for d in depths), "stored params", "condense s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, r in info.items():
        cells = [_cell(accs[method, d]) if accs[method, d] else "–" for d in depths]
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {r.stored_params:,} | {r.condense_seconds:.1f} |")
    return "\n".join(lines)


def write_report(rows: list[Row], profile: Profile, out_dir: Path) -> None:
    write_csv(rows, out_dir / "results.csv")
    seeds = len(profile.seeds)
    parts = [f"# learngene benchmark: profile `{profile.name}`", "",
             f"Ancestry {profile.ancestry.short()} ({profile.ancestry.num_params:,} params). Every descendant: "
             f"{profile.finetune_epochs} epoch(s) on {profile.finetune_images or 'all'} images, top-1 (%) on "
             f"{profile.eval_images or 'all'} test images, {seeds} seed(s)" + (" (mean ± std)." if seeds > 1 else ".")]
    for task in sorted({r.task for r in rows}):
        parts += ["", f"## {task}", "", format_table(rows, task)]
    write_text_atomic(out_dir / "report.md", "\n".join(parts) + "\n")
