"""``learngene condense``: an ancestry condensed into a learngene file by one method (parse -> the pipeline's
:func:`~learngene.pipeline.condensing.condense` -> write -> say)."""

from __future__ import annotations

import argparse

from ..pipeline.requests import CondenseChoices
from .flags import (
    add_ancestry_args,
    add_choices,
    add_common,
    add_data_args,
    add_distill_args,
    add_method_options,
    add_output,
    add_size_flag,
    add_train_args,
)

HELP = "condense an ancestry into a learngene file"

DESCRIPTION = (
    "Build a learngene from an ancestry with one method. Methods that train an aux "
    "net distil from the ancestry on --data."
)

EPILOG = "`learngene methods` lists every method with its options"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", required=True, help="a registered method (`learngene methods` lists them)")
    add_method_options(p)
    add_data_args(p)
    add_train_args(p, "condense")
    add_distill_args(p, lam=None, help_lambda="λ (default: the method's paper's: 1 = pure KL, 0.5 = KL + CE)")
    add_common(p)
    add_output(p, "learngene")
    add_choices(p, CondenseChoices)
    _add_ancestry(p)


def _add_ancestry(p: argparse.ArgumentParser) -> None:
    """The ancestry's flags, with the sizes of a plain timm checkpoint's model, which its file does not record, and
    its other timm arguments (with ``--timm-model``)."""
    g = p.add_argument_group("timm checkpoint sizes (with --timm-model)")
    add_ancestry_args(p, timm_args=g)
    add_size_flag(g, "num_classes", "classifier outputs of the checkpoint")
    add_size_flag(g, "img_size", "input resolution of the checkpoint (data are resized to it)")
    add_size_flag(
        g, "in_chans", "input channels of the checkpoint (grey data are repeated to 3; colour data for 1 are refused)"
    )


def run(args: argparse.Namespace) -> None:
    from ..pipeline.condensing import condense
    from .options import ancestry_from_args, check_outputs, save_and_say, say, sayer, training_from_args

    check_outputs(args, [args.out], [args.ancestry])
    condensed = condense(
        args.method,
        ancestry_from_args(args),
        options=args.opt or [],
        say=sayer(args),
        **training_from_args(args, CondenseChoices),
    )
    save_and_say(args, condensed, condensed.summary)
    if condensed.note:
        say(args, condensed.note)
