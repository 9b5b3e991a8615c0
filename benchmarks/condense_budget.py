"""Is the aux-net methods' loss a budget question? Condensation and adaptation budgets against mimetic and scratch ×10.

The `transfer` bench profile's setting (split A: the ancestry sees Fashion-MNIST classes 0-4, descendants are
fine-tuned on 20 labels of each of classes 5-9 for 20 steps, 5 seeds, sizes L2-D64-H4 and L4-D64-H4) with its
converged ancestry (30 epochs), run through the bench engine with:

- TLEG, WAVE and Share-Init condensed for each of ``--condense-epochs`` (default 2, 8, 32) aux-net epochs;
- PEG and WAVE adapted for each of ``--adapt-steps`` (default 5, 50, 300) steps per size and seed;

each against mimetic (stores nothing) and scratch trained ×10 as long, by compare's and bench's rule: the paired
t-test over the seeds, Holm-corrected over every comparison of a size (each cell of both tables against both
references, and the references against each other once). Every stage is cached in ``--out`` (the same cache layout
as ``learngene bench``): a rerun only adds what is missing. It writes every cell's per-seed results to
``budget-rows.json`` beside ``budget.md``; ``--from-rows`` writes the summary again from such a file, without training.

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 10 python benchmarks/condense_budget.py --out runs/condense-budget
    PYTHONPATH=src python benchmarks/condense_budget.py --from-rows runs/condense-budget/budget-rows.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from learngene.bench import get_profile
from learngene.bench.findings import family
from learngene.bench.profiles import SPLIT_A, Upstream
from learngene.bench.protocol import run_profile
from learngene.bench.rows import Row, row_from_dict
from learngene.bench.tables import family_note, marks
from learngene.formats.atomic import write_text_atomic

AUX_NETS = ("tleg", "wave", "share_init")
ADAPTABLE = ("peg", "wave")
REFERENCES = ("scratch", "mimetic")
MARKED_AGAINST = {"M": "mimetic", "X": "scratch ×10"}


def budget_profile(
    condense_epochs: list[int],
    adapt_steps: int,
    seeds: int,
    sizes: list[tuple[int, int, int]],
    ancestry_epochs: int,
    methods: tuple[str, ...],
):
    base = get_profile("transfer")
    upstreams = tuple(
        Upstream(
            f"c{e}",
            SPLIT_A,
            ancestry_epochs=ancestry_epochs,
            condense_epochs=e,
            converged=ancestry_epochs >= 30,
            methods=(*REFERENCES, *methods),
        )
        for e in condense_epochs
    )
    return base.replace(
        name=f"condense-budget-a{adapt_steps}",
        upstreams=upstreams,
        variants=(),
        adapt_steps=adapt_steps,
        seeds=tuple(range(seeds)),
        sizes=tuple(sizes),
        methods=(*REFERENCES, *sorted(set(AUX_NETS) | set(ADAPTABLE))),
    )


def summary(rows: list[Row], condense_epochs: list[int], adapt_steps: list[int]) -> str:
    """Markdown: per method, budget and size, mean ± std and the marks against mimetic (M) and scratch ×10 (X), as
    ``learngene compare`` and ``bench`` decide them (:func:`learngene.bench.findings.family`): every cell shown at a
    size is one member of that size's Holm family."""

    def cell(method: str, upstream: str, size: str, adapt: int, budget: int = 1) -> list[Row]:
        return [
            r
            for r in rows
            if r.ok
            and r.method == method
            and r.upstream == upstream
            and r.size == size
            and r.budget == budget
            and getattr(r, "adapt", adapt) == adapt
        ]

    def accs(group: list[Row]) -> list[float]:
        return [r.acc for r in sorted(group, key=lambda r: r.seed)]

    sizes = list(dict.fromkeys(r.size for r in rows))
    tables = (
        ("condensation epochs", AUX_NETS, [(f"c{e}", adapt_steps[0]) for e in condense_epochs]),
        ("adapt steps", ADAPTABLE, [(f"c{condense_epochs[0]}", a) for a in adapt_steps]),
    )
    first = f"c{condense_epochs[0]}"
    groups: dict[str, dict[str, list[Row]]] = {}
    for s in sizes:
        groups[s] = {
            "mimetic": cell("mimetic", first, s, adapt_steps[0]),
            "scratch ×10": cell("scratch", first, s, adapt_steps[0], budget=10),
        }
        for _, methods, budgets in tables:
            for m in methods:
                for up, a in budgets:
                    groups[s].setdefault(f"{m} {up} a{a}", cell(m, up, s, a))
    fams = {s: family(groups[s], list(MARKED_AGAINST.values()), s) for s in sizes}
    lines = []
    for what, methods, budgets in tables:
        lines += [
            "",
            f"#### {what}",
            "",
            "| method | "
            + " | ".join(f"{b[0][1:] if what.startswith('cond') else b[1]} @ {s}" for s in sizes for b in budgets)
            + " |",
            "|---" * (1 + len(sizes) * len(budgets)) + "|",
        ]
        crossings = []
        for m in methods:
            cells = []
            for s in sizes:
                mim, x10 = accs(groups[s]["mimetic"]), accs(groups[s]["scratch ×10"])
                first_m = first_x = above_m = above_x = None
                for up, a in budgets:
                    label = f"{m} {up} a{a}"
                    own = accs(groups[s][label])
                    if not own:
                        cells.append("n/a")
                        continue
                    marked = marks(fams[s], label, MARKED_AGAINST).split()
                    cells.append(
                        " ".join([f"{100 * statistics.fmean(own):.1f} ± {100 * statistics.stdev(own):.1f}", *marked])
                        if len(own) > 1
                        else f"{100 * own[0]:.1f}"
                    )
                    budget = up[1:] if what.startswith("cond") else str(a)
                    if above_m is None and mim and statistics.fmean(own) > statistics.fmean(mim):
                        above_m = budget
                    if above_x is None and x10 and statistics.fmean(own) > statistics.fmean(x10):
                        above_x = budget
                    if first_m is None and "M+" in marked:
                        first_m = budget
                    if first_x is None and "X+" in marked:
                        first_x = budget
                last = budgets[-1][0][1:] if what.startswith("cond") else str(budgets[-1][1])
                unit = "epochs" if what.startswith("cond") else "steps"

                def when(first: str | None) -> str:
                    return f"from {first} {unit}" if first else f"does not cross within {last} {unit}"

                crossings.append(
                    f"- {m} at {s}: vs mimetic: mean above {when(above_m)}, shown better (`+`) {when(first_m)}; "
                    f"vs scratch ×10: mean above {when(above_x)}, shown better (`+`) {when(first_x)}"
                )
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        refs = [
            f"{ref}: "
            + ", ".join(
                f"{100 * statistics.fmean(v):.1f} ± {100 * statistics.stdev(v):.1f} @ {s}"
                for s in sizes
                if len(v := accs(cell(ref, first, s, adapt_steps[0], b))) > 1
            )
            for ref, b in (("mimetic", 1), ("scratch", 10), ("scratch", 1))
        ]
        lines += [
            "",
            "References ("
            + "; ".join(r.replace("scratch: ", "scratch ×10: ", 1) if i == 1 else r for i, r in enumerate(refs))
            + ")",
            "",
        ] + crossings
    lines += [
        "",
        "Marks: the paired t-test over the seeds (a seed gives every cell the same fresh head and data order), "
        "Holm-corrected over every comparison of a size (each cell of both tables against mimetic and scratch ×10, "
        "and the two references against each other) at a family-wise error rate of 5 %: `+` better, `−` worse, "
        "`=` not resolved. " + family_note(fams),
    ]
    return "\n".join(lines)


def read_rows(path: Path) -> list[Row]:
    """The rows a run wrote to ``budget-rows.json``, each with its ``adapt`` steps."""
    rows = []
    for values in json.loads(path.read_text()):
        row = row_from_dict(values)
        row.adapt = values["adapt"]
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/condense-budget")
    parser.add_argument("--condense-epochs", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--adapt-steps", type=int, nargs="+", default=[5, 50, 300])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ancestry-epochs", type=int, default=30)
    parser.add_argument("--sizes", nargs="+", default=["2,64,4", "4,64,4"], help="DEPTH,WIDTH,HEADS each")
    parser.add_argument(
        "--from-rows",
        type=Path,
        default=None,
        metavar="BUDGET_ROWS_JSON",
        help="print the summary of the rows a run stored (its budget-rows.json) instead of running",
    )
    args = parser.parse_args()
    if args.from_rows:
        print(summary(read_rows(args.from_rows), args.condense_epochs, args.adapt_steps))
        return
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes]
    out = Path(args.out)
    tic = time.perf_counter()
    rows: list[Row] = []
    for i, steps in enumerate(args.adapt_steps):
        # the first adapt budget runs every method at every condensation budget; the others only the adaptable
        # methods at the first condensation budget (references come from the cache)
        condense = args.condense_epochs if i == 0 else args.condense_epochs[:1]
        methods = tuple(sorted(set(AUX_NETS) | set(ADAPTABLE))) if i == 0 else ADAPTABLE
        profile = budget_profile(condense, steps, args.seeds, sizes, args.ancestry_epochs, methods)
        print(f"adapt steps {steps}: condensation epochs {condense}, methods {methods}", flush=True)
        for r in run_profile(profile, out, command=f"benchmarks/condense_budget.py (adapt {steps})"):
            r.adapt = steps
            rows.append(r)
        write_text_atomic(out / "budget-rows.json", json.dumps([{**r.__dict__} for r in rows]))
    text = summary(rows, args.condense_epochs, args.adapt_steps)
    wall = time.perf_counter() - tic
    text = f"wall time {wall / 60:.1f} min\n" + text
    write_text_atomic(out / "budget.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
