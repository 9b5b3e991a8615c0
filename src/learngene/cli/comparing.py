"""``learngene compare``: which start wins for a user's ancestry, data and sizes (:mod:`learngene.pipeline.compare`)."""

from __future__ import annotations

import argparse

from ..ancestry import load_ancestry
from ..errors import LearngeneError
from ..formats.atomic import check_not_input
from ..pipeline.compare import CompareChoices, compare_profile, compare_text, parse_classes, run_compare
from ..training.loop import resolve_device
from .options import settings_from_args as settings


def cmd_compare(args: argparse.Namespace) -> None:
    profile = profile_from_args(args)
    rows = run_compare(
        profile,
        args.out,
        data_dir=args.data_dir,
        device=args.device,
        progress=not args.quiet,
        time_limit=args.time_limit * 60 if args.time_limit is not None else None,
        command=args.command_line,
        plots=not args.no_plots,
        log=tuple(args.log or ()),
    )
    print(compare_text(rows, profile))
    print(f"learngene compare: report in {args.out}/report.md")


def profile_from_args(args: argparse.Namespace):
    """The comparison the flags ask for (:func:`learngene.pipeline.compare.compare_profile`), its flags checked and its
    ancestry's size read first (on the meta device), so that bad input fails before anything trains."""
    if args.time_limit is not None and not args.time_limit > 0:
        raise LearngeneError(f"--time-limit must be a positive number of minutes, got {args.time_limit}")
    choices = choices_from_args(args)
    if not args.out.strip():
        raise LearngeneError("--out is empty; give the report folder, e.g. --out runs/compare")
    resolve_device(args.device)
    data_folder = args.data.partition(":")[2] if args.data.startswith("folder:") else None
    check_not_input(args.out, [args.ancestry, data_folder], folder_output=True)
    # the ancestry's size decides the descendants' family: read it now (on the meta device), so that bad input
    # fails before anything trains
    ancestry = load_ancestry(args.ancestry, args.timm_model, drop_head=args.drop_head)
    profile = compare_profile(ancestry.spec, args.ancestry, args.data, args.sizes.split(","), settings(args), choices)
    del ancestry
    return profile


def choices_from_args(args: argparse.Namespace) -> CompareChoices:
    """What the flags compare, besides the training settings (:class:`~learngene.pipeline.compare.CompareChoices`)."""
    methods = None if args.methods in (None, "all") else tuple(m.strip() for m in args.methods.split(",") if m.strip())
    return CompareChoices(
        methods=methods,
        seeds=args.seeds,
        few_shot=args.few_shot,
        train_images=args.train_images,
        classes=_classes(args.classes, "--classes"),
        references=tuple(args.references.split(",")),
        kd_lambda=args.kd,
        condense_data=args.condense_data,
        condense_classes=_classes(args.condense_classes, "--condense-classes"),
        condense_epochs=args.condense_epochs,
        condense_images=args.condense_images,
        adapt_steps=args.adapt_steps,
        timm_model=args.timm_model,
        drop_head=args.drop_head,
    )


def _classes(text: str | None, flag: str) -> tuple[int, ...] | None:
    """A class-list flag's indices (None: not given, every class; a list that names none is refused by
    :func:`~learngene.pipeline.compare.compare_profile`)."""
    return tuple(parse_classes(text, flag)) if text is not None else None
