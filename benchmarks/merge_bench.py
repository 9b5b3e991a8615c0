"""One report from several runs of the same benchmark profile (e.g. a method's cells added in a later run).

Reads each run's ``results.csv``, keeps the first row of every cell (upstream, method, variant, budget, task,
size, seed, epoch), and writes ``report.md``, ``results.csv`` and plots into ``--out`` with the profile's marks.

    PYTHONPATH=src python benchmarks/merge_bench.py --profile transfer --out runs/merged runs/bench-a runs/bench-b \
        runs/bench-c:front=front-orthonormal
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from learngene.bench import get_profile
from learngene.bench.report import write_report
from learngene.bench.rows import Row, row_from_dict

INTS = ("depth", "embed_dim", "num_heads", "seed", "budget", "params", "stored_params", "condense_steps")
FLOATS = ("condense_seconds", "adapt_seconds", "train_seconds")
CELL = ("upstream", "method", "variant", "budget", "task", "size", "seed")


def read_rows(run: Path) -> list[Row]:
    """The rows of a run's ``results.csv`` (one line per cell and evaluated epoch) as :class:`Row` objects."""
    cells: dict[tuple, dict] = {}
    with open(run / "results.csv", newline="") as fh:
        for values in csv.DictReader(fh):
            cell = cells.setdefault(tuple(values[k] for k in CELL), {**values, "accs": [], "eval_epochs": []})
            if values["acc"] != "":
                cell["accs"].append(float(values["acc"]))
                cell["eval_epochs"].append(int(values["epoch"]))
    rows = []
    for values in cells.values():
        typed = {**values, **{k: int(values[k]) for k in INTS}, **{k: float(values[k]) for k in FLOATS}}
        rows.append(row_from_dict(typed))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="transfer")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "runs",
        nargs="+",
        help="out folders of the runs, the first one's cells win; DIR:OLD=NEW "
        "shows that run's method OLD as NEW (e.g. another option of it)",
    )
    args = parser.parse_args()
    rows, seen, methods = [], set(), []
    for run in args.runs:
        folder, _, rename = run.partition(":")
        old, _, new = rename.partition("=")
        for row in read_rows(Path(folder)):
            if rename and row.method == old:
                row.method = new
            key = (row.upstream, row.method, row.variant, row.budget, row.task, row.size, row.seed)
            if key not in seen:
                seen.add(key)
                rows.append(row)
                methods.append(row.method) if row.method not in methods else None
    profile = get_profile(args.profile)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_report(
        rows,
        profile.replace(methods=tuple(methods)),
        out,
        meta={"command": "benchmarks/merge_bench.py " + " ".join(args.runs)},
    )


if __name__ == "__main__":
    main()
