"""``learngene bench``: every method side by side on identical budgets (:class:`learngene.bench.BenchRun`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..bench.descriptions import profiles_help
from ..bench.stats import MAX_SEEDS
from ..errors import LearngeneError
from .flags import FASHION_MNIST_DIR, add_data_dir, add_setting, add_stage_runner, add_time_limit, bounded, integer

if TYPE_CHECKING:
    from ..bench import BenchRun
    from ..bench.smoke import FolderSmoke


HELP = "every method side by side on identical budgets: tables, CSV and plots"

DESCRIPTION = (
    "Train an ancestry on Fashion-MNIST, condense it with every registered method, "
    "fine-tune descendants of several sizes on Fashion-MNIST, digits and a few-shot "
    "task with identical budgets and seeds, and write report.md, results.csv and "
    "plots. Every stage is cached: rerunning continues an interrupted run."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="quick", metavar="NAME", help="a benchmark profile: " + profiles_help())
    add_setting(p, "max_steps", "bench", help="gpu-smoke: optimizer steps of each training stage (default: 20)")
    p.add_argument("--out", help="report folder (default: runs/bench-PROFILE)")
    p.add_argument("--methods", nargs="+", metavar="METHOD", help="only these registered methods (default: all)")
    p.add_argument(
        "--seeds",
        type=bounded("seeds", integer, {"at_least": 1, "at_most": MAX_SEEDS}),
        metavar="N",
        help="seeds 0..N-1 instead of the profile's",
    )
    add_time_limit(p)
    add_data_dir(p, FASHION_MNIST_DIR)
    add_stage_runner(p, "bench")


def run(args: argparse.Namespace) -> None:
    from ..bench import BenchRun, get_profile
    from ..bench.smoke import FolderSmoke

    profile = get_profile(args.profile)
    if isinstance(profile, FolderSmoke):
        return _bench_smoke(args, profile)
    profile, limit = _profile_from_args(args, profile)
    out = Path(args.out or f"runs/bench-{profile.name}")
    bench = BenchRun(
        profile,
        out,
        data_dir=args.data_dir,
        device=args.device,
        progress=not args.quiet,
        time_limit=limit,
        command=args.command_line,
    )
    bench.run()
    print(_finished(bench, out))


def _finished(bench: BenchRun, out: Path) -> str:
    if bench.meta.get("complete"):
        return f"learngene bench: report in {out}/report.md ({bench.meta['wall_seconds'] / 60:.1f} min)"
    return (
        f"learngene bench: time limit reached, partial report in {out}/report.md; "
        f"run the same command again to continue where it stopped"
    )


def _bench_smoke(args: argparse.Namespace, profile: FolderSmoke) -> None:
    from ..bench.smoke import run_smoke

    record = run_smoke(
        profile,
        Path(args.out or f"runs/bench-{args.profile}"),
        args.run_command,  # the CLI's own main: the smoke run drives its commands, in this process
        args.device,
        args.max_steps,
        progress=not args.quiet,
    )
    for stage in record["stages"]:
        print(f"learngene bench {args.profile}: {stage['stage']:9s} {stage['seconds']:8.1f} s on {record['device']}")


def _profile_from_args(args: argparse.Namespace, profile) -> tuple[Any, float | None]:
    """``profile`` with the methods and seeds the flags ask for, and the time limit in seconds (None: none)."""
    from ..registry import list_methods

    if args.methods:
        unknown = [m for m in args.methods if m not in list_methods()]
        if unknown:
            raise LearngeneError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(list_methods())}")
        twice = next((m for i, m in enumerate(args.methods) if m in args.methods[:i]), None)
        if twice is not None:  # the one rule for repeats (learngene.validate.refuse_repeat)
            raise LearngeneError(f"--methods names {twice} twice; give each once")
        profile = profile.replace(methods=tuple(args.methods))
    if args.seeds is not None:  # in its range: the flag's parser checked it
        profile = profile.replace(seeds=tuple(range(args.seeds)))
    if args.time_limit is not None and not args.time_limit > 0:
        raise LearngeneError(f"--time-limit must be a positive number of minutes, got {args.time_limit}")
    return profile, args.time_limit * 60 if args.time_limit is not None else None
