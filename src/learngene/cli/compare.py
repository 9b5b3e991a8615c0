"""``learngene compare``: which start wins for a user's ancestry, data and sizes (:mod:`learngene.comparison`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from ..bench.stats import MAX_SEEDS, POWER
from ..comparison.launching import Launcher
from ..errors import LearngeneError
from ..training.config import LOGGING, MAX_EPOCHS, MAX_STEPS
from .flags import (
    LazyText,
    add_ancestry_args,
    add_data_dir,
    add_declared,
    add_setting,
    add_settings,
    add_stage_runner,
    add_time_limit,
    bounded,
    data_count,
    data_help,
    integer,
    real,
)

HELP = (
    "which start wins for my ancestry, data and sizes: every method against "
    "scratch, scratch ×10 and mimetic, one recommendation per size"
)

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
    _add_contenders(p)
    _add_fine_tuning(p)
    _add_classes_and_condensing(p)
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


def _add_contenders(p: argparse.ArgumentParser) -> None:
    """What ``compare`` sets against each other: the methods, the references they must beat, over how many seeds."""
    p.add_argument("--methods", metavar="LIST", default="all", help="comma-separated methods, or all (default: all)")
    p.add_argument(
        "--references",
        metavar="LIST",
        default="scratch,scratch_x10,mimetic,structured",
        help="what a recommendation must beat (paired over seeds, Holm-corrected); scratch_x10 = scratch "
        "fine-tuned 10× as long; scratch_fix_init = scratch's draws with timm's fix_init; "
        "structured only where registered (default: %(default)s)",
    )
    # the ranges CompareChoices declares (learngene.comparison.choices, which the torch-free parser cannot import)
    p.add_argument(
        "--seeds",
        type=bounded("seeds", integer, {"at_least": 1, "at_most": MAX_SEEDS}),
        default=3,
        help="seeds 0..N-1 per method and size (default: %(default)s)",
    )


def _add_fine_tuning(p: argparse.ArgumentParser) -> None:
    """``compare``'s fine-tuning budget, data subset, test subset and distillation."""
    g = p.add_mutually_exclusive_group()
    add_setting(g, "epochs", "compare", help="fine-tuning epochs of every method (default: %(default)s)")
    add_setting(g, "max_steps", "compare", metavar="S", help="fine-tune S optimizer steps instead of --epochs")
    p.add_argument(
        "--few-shot", type=data_count("few_shot"), metavar="K", help="fine-tune on K labelled images per class"
    )
    p.add_argument(
        "--train-images",
        type=data_count("train_images"),
        metavar="N",
        help="fine-tune on a fixed random subset of N images",
    )
    add_setting(p, "eval_images", "compare", help="test on a fixed random subset of N test images")
    p.add_argument(
        "--kd",
        type=real,
        nargs="?",
        const=0.5,
        metavar="λ",
        help="also fine-tune every method distilling the ancestry (rows '+kd'): logits when its head knows "
        "the data's classes, else pooled features; λ (default when given: 0.5)",
    )


def _add_classes_and_condensing(p: argparse.ArgumentParser) -> None:
    """The classes ``compare`` keeps, and what the methods that need data condense and adapt on."""
    p.add_argument(
        "--condense-data", metavar="D", help="data the methods that need data condense and adapt on (default: --data)"
    )
    p.add_argument(
        "--classes",
        metavar="LIST",
        help="only these classes of --data, by index, e.g. 5,6,7,8,9 (also for condensing, unless --condense-data)",
    )
    p.add_argument(
        "--condense-classes",
        metavar="LIST",
        help="only these classes of the condensing data, e.g. the ancestry's own 0,1,2,3,4, so that no "
        "method learns from the labels of the classes it is compared on (default: --classes)",
    )
    p.add_argument(
        "--condense-images",
        type=data_count("train_images"),
        metavar="N",
        help="condense and adapt on a fixed random subset of N images (default: all)",
    )
    p.add_argument(
        "--condense-epochs",
        type=bounded("condense epochs", integer, {"at_least": 1, "at_most": MAX_EPOCHS}),
        default=2,
        help="aux-net epochs of tleg, wave, share_init (default: %(default)s)",
    )
    p.add_argument(
        "--adapt-steps",
        type=bounded("adapt steps", integer, {"at_least": 1, "at_most": MAX_STEPS}),
        default=50,
        help="steps of wave's and peg's adaptation per size and seed (default: %(default)s)",
    )


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
    choices (:class:`~learngene.comparison.choices.CompareChoices`' fields) by name."""
    methods = None if args.methods in (None, "all") else tuple(m.strip() for m in args.methods.split(",") if m.strip())
    return {
        "methods": methods,
        "seeds": args.seeds,
        "classes": _classes(args.classes, "--classes"),
        "references": tuple(args.references.split(",")),
        "kd_lambda": args.kd,
        "condense_data": args.condense_data,
        "condense_classes": _classes(args.condense_classes, "--condense-classes"),
        "condense_epochs": args.condense_epochs,
        "condense_images": args.condense_images,
        "adapt_steps": args.adapt_steps,
    }


def _classes(text: str | None, flag: str) -> tuple[int, ...] | None:
    """A class-list flag's indices (None: not given, every class; a list that names none is refused by
    :func:`~learngene.comparison.profile.compare_profile`)."""
    from ..comparison.choices import parse_classes

    return tuple(parse_classes(text, flag)) if text is not None else None
