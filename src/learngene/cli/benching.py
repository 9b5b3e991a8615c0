"""``learngene bench`` and ``learngene demo``: every method side by side, and the main job end to end."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..bench import BenchRun, get_profile
from ..bench.demo import run_demo
from ..bench.smoke import FolderSmoke, run_smoke
from ..errors import LearngeneError
from ..registry import list_methods


def cmd_bench(args: argparse.Namespace) -> None:
    profile = get_profile(args.profile)
    if isinstance(profile, FolderSmoke):
        return _bench_smoke(args, profile)
    profile, limit = _profile_from_args(args, profile)
    out = Path(args.out or f"runs/bench-{profile.name}")
    run = BenchRun(
        profile,
        out,
        data_dir=args.data_dir,
        device=args.device,
        progress=not args.quiet,
        time_limit=limit,
        command=args.command_line,
    )
    run.run()
    print(_finished(run, out))


def _finished(run: BenchRun, out: Path) -> str:
    if run.meta.get("complete"):
        return f"learngene bench: report in {out}/report.md ({run.meta['wall_seconds'] / 60:.1f} min)"
    return (
        f"learngene bench: time limit reached, partial report in {out}/report.md; "
        f"run the same command again to continue where it stopped"
    )


def _bench_smoke(args: argparse.Namespace, profile: FolderSmoke) -> None:
    from .dispatch import main  # the smoke run drives the CLI's own commands, in this process

    record = run_smoke(
        profile,
        Path(args.out or f"runs/bench-{args.profile}"),
        main,
        args.device,
        args.max_steps,
        progress=not args.quiet,
    )
    for stage in record["stages"]:
        print(f"learngene bench {args.profile}: {stage['stage']:9s} {stage['seconds']:8.1f} s on {record['device']}")


def _profile_from_args(args: argparse.Namespace, profile) -> tuple[Any, float | None]:
    """``profile`` with the methods and seeds the flags ask for, and the time limit in seconds (None: none)."""
    if args.methods:
        unknown = [m for m in args.methods if m not in list_methods()]
        if unknown:
            raise LearngeneError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(list_methods())}")
        profile = profile.replace(methods=tuple(dict.fromkeys(args.methods)))
    if args.seeds is not None:
        if args.seeds < 1:
            raise LearngeneError(f"--seeds must be at least 1, got {args.seeds}")
        profile = profile.replace(seeds=tuple(range(args.seeds)))
    if args.time_limit is not None and not args.time_limit > 0:
        raise LearngeneError(f"--time-limit must be a positive number of minutes, got {args.time_limit}")
    return profile, args.time_limit * 60 if args.time_limit is not None else None


def cmd_demo(args: argparse.Namespace) -> None:
    run_demo(
        out_dir=Path(args.out),
        data_dir=args.data_dir,
        device=args.device,
        seed=args.seed,
        progress=not args.quiet,
        quick=args.quick,
    )
