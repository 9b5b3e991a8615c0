"""``learngene demo``: the main job end to end on Fashion-MNIST (:func:`learngene.bench.demo.run_demo`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..bench.descriptions import QUICK_DEMO_TIME
from .flags import FASHION_MNIST_DIR, add_common, add_data_dir

HELP = "the main job end to end on Fashion-MNIST, on a CPU (the report states its wall time)"

DESCRIPTION = (
    "Train a small ancestry on Fashion-MNIST, condense it with every registered "
    "method, expand to several depths, fine-tune each briefly and print a table of "
    "method x size -> accuracy and stored parameters."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        "--out-dir",
        dest="out",
        default="runs/demo",
        help="where models, genes and the table go; --out-dir is the same flag (default: %(default)s)",
    )
    add_data_dir(p, FASHION_MNIST_DIR)
    p.add_argument(
        "--quick", action="store_true", help=f"a much smaller run, to check the pipeline ({QUICK_DEMO_TIME})"
    )
    add_common(p)


def run(args: argparse.Namespace) -> None:
    from ..bench.demo import run_demo

    run_demo(
        out_dir=Path(args.out),
        data_dir=args.data_dir,
        device=args.device,
        seed=args.seed,
        progress=not args.quiet,
        quick=args.quick,
    )
