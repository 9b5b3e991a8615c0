"""``learngene adapt``: a learngene specialised to a size on a little data, then written as the plain timm descendant
(parse -> the pipeline's :func:`~learngene.pipeline.adapting.adapt` -> write -> say)."""

from __future__ import annotations

import argparse

from ..pipeline.requests import AdaptChoices
from .flags import add_choices, add_common, add_data_args, add_gene_and_size, add_model_output, add_train_args

HELP = "specialize a learngene to a size on a little data (WAVE scalers, PEG φ)"

DESCRIPTION = (
    "Train only the size-specific part of a learngene (WAVE's weight scalers, PEG's "
    "expansion map φ) on a little downstream data, then write the plain timm descendant."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_gene_and_size(p, "method option (repeatable)")
    add_data_args(p)
    add_train_args(p, "adapt")
    add_common(p)
    add_model_output(p, "adapted descendant model")
    p.add_argument("--gene-out", help="also save the adapted learngene here")
    add_choices(p, AdaptChoices)


def run(args: argparse.Namespace) -> None:
    from ..formats.export import wants_folder
    from ..pipeline.adapting import adapt
    from .options import check_outputs, save_model_and_say, sayer, size_from_args, training_from_args

    hub = wants_folder(args.out, args.format)
    check_outputs(args, [args.out, args.gene_out], [args.gene], folder=hub)
    if hub and args.gene_out:  # refused before the run, not after it
        from ..pipeline.results import check_gene_beside_folder

        check_gene_beside_folder(args.out, args.gene_out)
    adapted = adapt(
        args.gene,
        size=size_from_args(args),
        options=args.opt or [],
        say=sayer(args),
        **training_from_args(args, AdaptChoices),
    )
    save_model_and_say(args, adapted, adapted.descendant.summary, hub, gene_path=args.gene_out)
