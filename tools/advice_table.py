"""Write ``src/learngene/evidence.json``, the measured results ``learngene methods --for`` draws its "try first" lines
from, out of the ``learngene compare`` reports stored in ``docs/`` (``report.md`` and ``results.csv`` of each).

    python tools/advice_table.py            # write it again
    python tools/advice_table.py --check    # exit 1 when the shipped file is not what the stored reports give

Each row is one size of one stored run: its regime against the run's ancestry (shallower / same depth / deeper,
narrower / same width / wider, few or many labels), the run's folder and command, and its starts (methods whose
descendants start alike share one, as in the report) ranked by mean final top-1, each with the paired,
Holm-corrected decision against the run's best reference at that size (:mod:`learngene.bench.findings`, the
report's own rule). Only plain rows are ranked: ``+kd`` rows and scratch ×10 (ten times the fine-tuning) take part
in the decisions but are not advice. Nothing in the file is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from learngene.advice import EVIDENCE, labels_regime, regime
from learngene.bench.findings import family
from learngene.bench.rows import Row, read_csv
from learngene.comparison.choices import DEFAULT_REFERENCES, LONG_LABEL, TASK
from learngene.formats.atomic import write_text_atomic

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "learngene" / EVIDENCE


def runs(docs: Path) -> list[Path]:
    """The folders of ``docs`` that hold a ``learngene compare`` report and its ``results.csv``, by name."""
    return [
        folder
        for folder in sorted(p for p in docs.iterdir() if p.is_dir())
        if (folder / "results.csv").is_file()
        and (folder / "report.md").is_file()
        and (folder / "report.md").read_text(encoding="utf-8").startswith("# learngene compare")
    ]


def _header(report: str) -> tuple[str, str, tuple[int, int], int | None]:
    """(the command, the ancestry's size and (depth, width), images per class or None) from a report's header."""
    command = re.search(r"^- command: `(.*)`$", report, re.M)
    size = re.search(r"^- ancestry: .*\((L(\d+)-D(\d+)-H\d+), [\d,]+ params\)", report, re.M)
    if command is None or size is None:
        raise SystemExit("a compare report without its command or ancestry line")
    shots = re.search(r"--few-shot[ =](\d+)", command.group(1))
    shown, depth, width = size.group(1), int(size.group(2)), int(size.group(3))
    return command.group(1), shown, (depth, width), int(shots.group(1)) if shots else None


def condensed_on(command: str) -> str:
    """Which images the run's condensations read: with ``--classes`` and neither ``--condense-classes`` nor
    ``--condense-data``, compare condenses on the compared classes, so a method trained on data has seen many more
    labelled images of the task than the fine-tuning gives the others."""
    if "--condense-classes" in command or "--condense-data" in command:
        return "other images than the task's"
    return "the task's own images" if "--classes" in command else "the task's data"


def rows_of(folder: Path, root: Path = ROOT) -> list[dict]:
    """One evidence row per size of the run in ``folder``."""
    command, shown, ancestry, shots = _header((folder / "report.md").read_text(encoding="utf-8"))
    by_size: dict[str, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in read_csv(folder / "results.csv"):
        if r.task == TASK and r.ok:
            by_size[r.size][r.label].append(r)
    references = [LONG_LABEL if r == "scratch_x10" else r for r in DEFAULT_REFERENCES]
    out = []
    for size, groups in by_size.items():
        fam = family(groups, references, size)
        plain = [
            s for s in fam.starts if any(not s.rows[la][0].variant and s.rows[la][0].budget == 1 for la in s.labels)
        ]
        refs = [s for s in plain if s.name in fam.references]
        if not refs:
            continue
        best = max(refs, key=lambda s: fam.mean(s.name))
        first = next(iter(groups.values()))[0]
        depth, width = regime(ancestry, (first.depth, first.embed_dim))
        starts = []
        for s in sorted(plain, key=lambda s: -fam.mean(s.name)):
            verdict = fam.verdict(s.name, best.name) if s is not best else None
            starts.append(
                {
                    "methods": [la for la in s.labels if not s.rows[la][0].variant and s.rows[la][0].budget == 1],
                    "top1": round(100 * fam.mean(s.name), 1),
                    "sd": round(100 * statistics.stdev(s.results.values()), 1) if len(s.results) > 1 else 0.0,
                    "vs_best_reference": verdict.mark if verdict is not None else "",
                }
            )
        out.append(
            {
                "source": folder.relative_to(root).as_posix(),
                "command": command,
                "ancestry": shown,
                "condensed_on": condensed_on(command),
                "size": size,
                "depth": depth,
                "width": width,
                "labels": labels_regime(shots),
                "images_per_class": shots,
                "seeds": len({r.seed for rows in groups.values() for r in rows}),
                "m": fam.m,
                "best_reference": best.name,
                "best_reference_top1": round(100 * fam.mean(best.name), 1),
                "starts": starts,
            }
        )
    return out


def table(docs: Path, root: Path = ROOT) -> str:
    """The file's text: every stored compare run's rows, by folder and size."""
    rows = [row for folder in runs(docs) for row in rows_of(folder, root)]
    about = "written by tools/advice_table.py from the compare reports stored in docs/; do not edit by hand"
    return json.dumps({"about": about, "rows": rows}, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the shipped file is stale")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the stored reports are")
    parser.add_argument("--out", type=Path, default=OUT, help="the file written")
    args = parser.parse_args(argv)
    text = table(args.docs, args.docs.resolve().parent)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is not what the stored reports give: run python tools/advice_table.py", file=sys.stderr)
            return 1
        return 0
    write_text_atomic(args.out, text)
    print(f"wrote {args.out}: {len(json.loads(text)['rows'])} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
