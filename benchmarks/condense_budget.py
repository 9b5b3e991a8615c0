"""Is the aux-net methods' loss a budget question? Condensation and adaptation budgets against mimetic and scratch ×10.

The `transfer` bench profile's setting (split A: the ancestry sees Fashion-MNIST classes 0-4, descendants are
fine-tuned on 20 labels of each of classes 5-9 for 20 steps, 5 seeds, sizes L2-D64-H4 and L4-D64-H4) with its
converged ancestry (30 epochs), run through the bench engine with:

- TLEG, WAVE and Share-Init condensed for each of ``--condense-epochs`` (default 2, 8, 32) aux-net epochs;
- PEG and WAVE adapted for each of ``--adapt-steps`` (default 5, 50, 300) steps per size and seed;

each against mimetic (stores nothing) and scratch trained ×10 as long, by the bench's 2-pooled-std rule.
Every stage is cached in ``--out`` (the same cache layout as ``learngene bench``): a rerun only adds what is missing.

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 10 python benchmarks/condense_budget.py --out runs/condense-budget
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from learngene.bench import get_profile
from learngene.bench.profiles import SPLIT_A, Upstream
from learngene.bench.protocol import run_profile
from learngene.bench.rows import Row
from learngene.bench.tables import compare
from learngene.formats.atomic import write_text_atomic

AUX_NETS = ("tleg", "wave", "share_init")
ADAPTABLE = ("peg", "wave")
REFERENCES = ("scratch", "mimetic")


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
    """Markdown: per method, budget and size, mean ± std and the marks against mimetic (M) and scratch ×10 (X)."""

    def accs(method: str, upstream: str, size: str, adapt: int, budget: int = 1) -> list[float]:
        return [
            r.acc
            for r in rows
            if r.ok
            and r.method == method
            and r.upstream == upstream
            and r.size == size
            and r.budget == budget
            and getattr(r, "adapt", adapt) == adapt
        ]

    sizes = list(dict.fromkeys(r.size for r in rows))
    lines = []
    for what, methods, budgets in (
        ("condensation epochs", AUX_NETS, [(f"c{e}", adapt_steps[0]) for e in condense_epochs]),
        ("adapt steps", ADAPTABLE, [(f"c{condense_epochs[0]}", a) for a in adapt_steps]),
    ):
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
                mim = accs("mimetic", budgets[0][0], s, adapt_steps[0])
                x10 = accs("scratch", budgets[0][0], s, adapt_steps[0], budget=10)
                first_m = first_x = above_m = above_x = None
                for up, a in budgets:
                    own = accs(m, up, s, a)
                    if not own:
                        cells.append("n/a")
                        continue
                    mark_m, mark_x = compare(own, mim), compare(own, x10)
                    cells.append(
                        f"{100 * statistics.fmean(own):.1f} ± {100 * statistics.stdev(own):.1f} M{mark_m} X{mark_x}"
                        if len(own) > 1
                        else f"{100 * own[0]:.1f}"
                    )
                    label = up[1:] if what.startswith("cond") else str(a)
                    if above_m is None and mim and statistics.fmean(own) > statistics.fmean(mim):
                        above_m = label
                    if above_x is None and x10 and statistics.fmean(own) > statistics.fmean(x10):
                        above_x = label
                    if first_m is None and mark_m == "+":
                        first_m = label
                    if first_x is None and mark_x == "+":
                        first_x = label
                last = budgets[-1][0][1:] if what.startswith("cond") else str(budgets[-1][1])
                unit = "epochs" if what.startswith("cond") else "steps"

                def when(first: str | None) -> str:
                    return f"from {first} {unit}" if first else f"does not cross within {last} {unit}"

                crossings.append(
                    f"- {m} at {s}: vs mimetic: mean above {when(above_m)}, 2 std above {when(first_m)}; "
                    f"vs scratch ×10: mean above {when(above_x)}, 2 std above {when(first_x)}"
                )
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        refs = [
            f"{ref}: "
            + ", ".join(
                f"{100 * statistics.fmean(v):.1f} ± {100 * statistics.stdev(v):.1f} @ {s}"
                for s in sizes
                if len(v := accs(ref, budgets[0][0], s, adapt_steps[0], b)) > 1
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
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/condense-budget")
    parser.add_argument("--condense-epochs", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--adapt-steps", type=int, nargs="+", default=[5, 50, 300])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ancestry-epochs", type=int, default=30)
    parser.add_argument("--sizes", nargs="+", default=["2,64,4", "4,64,4"], help="DEPTH,WIDTH,HEADS each")
    args = parser.parse_args()
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
            r.adapt = steps  # type: ignore[attr-defined]
            rows.append(r)
        write_text_atomic(out / "budget-rows.json", json.dumps([{**r.__dict__} for r in rows]))
    text = summary(rows, args.condense_epochs, args.adapt_steps)
    wall = time.perf_counter() - tic
    text = f"wall time {wall / 60:.1f} min\n" + text
    write_text_atomic(out / "budget.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
