"""``learngene train``: fine-tune a model file (e.g. a descendant) on a dataset (parse -> the pipeline's
:func:`~learngene.pipeline.training.train` -> write -> say)."""

from __future__ import annotations

import argparse

from ..pipeline.requests import TrainChoices
from .flags import add_choices, add_common, add_data_args, add_distill_args, add_model_output, add_train_args

HELP = "fine-tune a model file (e.g. a descendant) on a dataset"

DESCRIPTION = (
    "Fine-tune a learngene model file (or a stitched descendant, written by `learngene expand "
    "--stitch`, which stays one); a new classifier head is made when the data's label space differs."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model file written by `learngene expand` (--stitch too), `ancestry` or `train`")
    add_data_args(p)
    add_train_args(p, "train")
    add_choices(p, TrainChoices)
    p.add_argument("--teacher-timm-model", help="timm architecture of a plain --teacher checkpoint")
    add_distill_args(p, lam=None)
    add_common(p)
    add_model_output(p, "fine-tuned model")
    p.set_defaults(img_size=None, in_chans=None)


def run(args: argparse.Namespace) -> None:
    from ..formats.export import wants_folder
    from ..pipeline.training import train
    from .options import check_outputs, save_model_and_say, sayer, training_from_args

    hub = wants_folder(args.out, args.format)
    check_outputs(args, [args.out], [args.model, args.teacher], folder=hub)
    trained = train(args.model, **training_from_args(args, TrainChoices), say=sayer(args))
    save_model_and_say(args, trained, trained.summary, hub)
