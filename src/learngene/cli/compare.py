"""``learngene compare``: which start wins for a user's ancestry, data and sizes (:mod:`learngene.comparison`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from ..bench.stats import POWER
from ..comparison.choices import CompareChoices
from ..comparison.launching import Launcher
from ..errors import LearngeneError
from ..training.config import LOGGING
from .flags import (
    LazyText,
    add_ancestry_args,
    add_data_dir,
    add_declared,
    add_setting,
    add_settings,
    add_stage_runner,
    add_time_limit,
    data_help,
)

HELP = (
    "which start wins for my ancestry, data and sizes: every method against "
    "scratch, scratch ×10 and mimetic, one recommendation per size"
)

# CompareChoices' fields that compare also reads from its ancestry's and its data's requests: the command line gives
# them there (the ancestry's flags are every command's, add_ancestry_args)
ANCESTRY_FIELDS = ("timm_model", "drop_head")
DATA_FIELDS = ("few_shot", "train_images")

DESCRIPTION = (
    "Condense the ancestry with every method once, make every size, fine-tune every "
    "method × size × seed on --data with the same budget and a fresh head, and print "
    "per size mean ± std, the paired difference to each reference with its 95 % interval and a "
    "Holm-corrected decision, costs, the epoch each method reaches scratch ×10's final accuracy, and "
    "one recommendation line that says 'use' only for resolved wins; for each difference not resolved, the "
    f"seeds a new run would need to resolve it with {100 * POWER:.0f} % power at the level 0.05/m (m: the "
    "comparisons of its size), if its mean and spread stayed as observed. Writes "
    "report.md, results.csv and plots to --out; cached and resumable like bench. Several compare "
    "processes on one --out (or torchrun ranks, or SLURM array tasks) share the work."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_compared_on(p)
    # what compare sets against each other, on which images and classes, and what it condenses on: one flag per
    # field of CompareChoices, as declared there (the ancestry's own, --timm-model and --drop-head, came above)
    add_declared(p, CompareChoices, skip=ANCESTRY_FIELDS)
    _add_fine_tuning(p)
    _add_compare_run(p)


def _add_compared_on(p: argparse.ArgumentParser) -> None:
    """``compare``'s inputs: the ancestry, the data and the descendant sizes."""
    add_ancestry_args(p)
    p.add_argument(
        "--data",
        required=True,
        help=LazyText(
            "a registered data source", lambda: data_help() + ": fine-tuned and tested on (its train and test splits)"
        ),
    )
    add_data_dir(p)
    p.add_argument(
        "--sizes",
        required=True,
        metavar="LIST",
        help="descendant sizes, e.g. L4-D192-H3,L12-D384-H6 (the rest of the spec follows the ancestry)",
    )


def _add_fine_tuning(p: argparse.ArgumentParser) -> None:
    """``compare``'s fine-tuning budget and test subset (training settings, :class:`TrainConfig`'s)."""
    g = p.add_mutually_exclusive_group()
    add_setting(g, "epochs", "compare", help="fine-tuning epochs of every method (default: %(default)s)")
    add_setting(g, "max_steps", "compare", metavar="S", help="fine-tune S optimizer steps instead of --epochs")
    add_setting(p, "eval_images", "compare", help="test on a fixed random subset of N test images")


def _add_compare_run(p: argparse.ArgumentParser) -> None:
    """How ``compare`` runs: the shared training settings, time, report folder, plots, logs and device."""
    add_setting(p, "batch_size", "compare", help="every training stage (default: %(default)s)")
    add_setting(p, "lr", "compare")
    add_time_limit(p)
    p.add_argument(
        "--out",
        required=True,
        help="report folder (also the cache a rerun continues from); every compare with the same flags on it "
        "takes a share of the cells",
    )
    p.add_argument("--no-plots", action="store_true", help="no PNG plots")
    add_settings(
        p,
        LOGGING,
        log={
            "help": "also log every training stage's curves to TensorBoard or Weights & Biases, under OUT/logs/ "
            "(repeatable)"
        },
    )
    device = "auto, cpu, cuda or cuda:N; under torchrun auto is each rank's own GPU (default: %(default)s)"
    add_stage_runner(p, "compare", device)
    _add_launcher(p)


def _add_launcher(p: argparse.ArgumentParser) -> None:
    """Where the cells run: this process, or workers submitted through submitit (:class:`Launcher`)."""
    g = p.add_argument_group(
        "launcher", "run the cells in workers that share --out: local processes, or one Slurm job array"
    )
    add_declared(g, Launcher)  # type: ignore[arg-type]
    g.add_argument(
        "--slurm-arg", action="append", default=[], metavar="KEY=VALUE", help="a further sbatch option (repeatable)"
    )
    g.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the Slurm array is submitted (its job id is printed); the same command later shows its "
        "progress, or the results once done",
    )


def run(args: argparse.Namespace) -> None:
    """``learngene compare`` is :func:`learngene.compare` with the flags' arguments."""
    from ..comparison.comparing import compare
    from ..formats.atomic import printable
    from ..pipeline.requests import AncestryRequest, DataRequest
    from .options import settings_from_args

    if not args.out.strip():  # a Python caller's out=None is a temporary folder; the command line needs a report
        raise LearngeneError("--out is empty; give the report folder, e.g. --out runs/compare")
    launcher = launcher_from_args(args)
    launched = launcher.kind != "inprocess"
    comparison = compare(
        AncestryRequest(args.ancestry, args.timm_model, args.drop_head),
        DataRequest(args.data, data_dir=args.data_dir, few_shot=args.few_shot, train_images=args.train_images),
        args.sizes.split(","),
        train_cfg=settings_from_args(args),
        out=args.out,
        time_limit=args.time_limit,
        plots=not args.no_plots,
        command=args.command_line,
        launcher=launcher,
        say=_stderr if launched and not args.quiet else _said_before_running,
        **choices_from_args(args),
    )
    if comparison.meta.get("complete", True):
        print(comparison.text)
        print(f"learngene compare: report in {printable(f'{args.out}/report.md')}")


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def launcher_from_args(args: argparse.Namespace) -> Launcher:
    """The :class:`Launcher` the flags give (each field's flag; ``--slurm-arg``, ``--threads``, ``--no-wait``)."""
    given = {
        f.name: getattr(args, f.metadata["flag"].lstrip("-").replace("-", "_"))
        for f in dataclasses.fields(Launcher)
        if f.metadata.get("flag")
    }
    return Launcher(**given, slurm_args=tuple(args.slurm_arg), threads=args.threads, wait=not args.no_wait)


def _said_before_running(line: str) -> None:
    """What :func:`learngene.compare` says, printed as it says it but for where the report is (printed last)."""
    if "report in" not in line:
        print(line, flush=True)


def choices_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """What the flags compare besides the ancestry, the data and the training settings: :func:`learngene.compare`'s
    choices (:class:`~learngene.comparison.choices.CompareChoices`' fields) by name, each read from its flag (the
    ancestry's and the fine-tuning images' travel in their requests)."""
    return {
        f.name: getattr(args, f.metadata["flag"].lstrip("-").replace("-", "_"))
        for f in dataclasses.fields(CompareChoices)
        if f.metadata.get("flag") and f.name not in (*ANCESTRY_FIELDS, *DATA_FIELDS)
    }
