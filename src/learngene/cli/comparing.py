"""``learngene compare``: which start wins for a user's ancestry, data and sizes (:mod:`learngene.pipeline.compare`)."""

from __future__ import annotations

import argparse

from ..ancestry import load_ancestry
from ..errors import LearngeneError
from ..formats.atomic import check_not_input
from ..pipeline.compare import compare_profile, compare_text, parse_classes, run_compare
from ..training.loop import resolve_device


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
    if args.kd is not None and not 0 < args.kd <= 1:
        raise LearngeneError(f"--kd λ must be in (0, 1], got {args.kd}; e.g. --kd 0.5")
    methods = None if args.methods in (None, "all") else [m.strip() for m in args.methods.split(",") if m.strip()]
    if not args.out.strip():
        raise LearngeneError("--out is empty; give the report folder, e.g. --out runs/compare")
    resolve_device(args.device)
    data_folder = args.data.partition(":")[2] if args.data.startswith("folder:") else None
    check_not_input(args.out, [args.ancestry, data_folder], folder_output=True)
    # the ancestry's size decides the descendants' family: read it now (on the meta device), so that bad input
    # fails before anything trains
    ancestry = load_ancestry(args.ancestry, args.timm_model, drop_head=args.drop_head)
    profile = compare_profile(
        ancestry.spec,
        args.ancestry,
        args.data,
        args.sizes.split(","),
        methods,
        seeds=args.seeds,
        epochs=args.epochs,
        max_steps=args.max_steps,
        few_shot=args.few_shot,
        train_images=args.train_images,
        eval_images=args.eval_images,
        references=args.references.split(","),
        kd_lambda=args.kd,
        condense_data=args.condense_data,
        condense_epochs=args.condense_epochs,
        adapt_steps=args.adapt_steps,
        batch_size=args.batch_size,
        lr=args.lr,
        timm_model=args.timm_model,
        condense_images=args.condense_images,
        classes=parse_classes(args.classes) if args.classes else None,
        condense_classes=parse_classes(args.condense_classes, "--condense-classes") if args.condense_classes else None,
        drop_head=args.drop_head,
    )
    del ancestry
    return profile
