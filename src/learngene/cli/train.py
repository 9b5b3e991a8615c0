"""``learngene train``: fine-tune a model file (e.g. a descendant) on a dataset (parse -> the pipeline's
:func:`~learngene.pipeline.training.train` -> write -> say)."""

from __future__ import annotations

import argparse

from .flags import add_common, add_data_args, add_distill_args, add_license, add_model_output, add_train_args

HELP = "fine-tune a model file (e.g. a descendant) on a dataset"

DESCRIPTION = (
    "Fine-tune a learngene model file (or a stitched descendant, written by `learngene expand "
    "--stitch`, which stays one); a new classifier head is made when the data's label space differs."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model file written by `learngene expand` (--stitch too), `ancestry` or `train`")
    p.add_argument(
        "--new-head",
        action="store_true",
        help="always start from a fresh classifier head (default: fresh only when the data's classes "
        "differ from those the model's head was trained on)",
    )
    add_data_args(p)
    add_train_args(p, "train")
    p.add_argument(
        "--teacher",
        metavar="ANCESTRY",
        help="distil from this model while training (what --ancestry accepts): on its logits when its head "
        "was trained on the data's classes, else on its pooled embedding (cosine, through a learned "
        "projection when the widths differ; the projection is not saved)",
    )
    p.add_argument("--teacher-timm-model", help="timm architecture of a plain --teacher checkpoint")
    add_distill_args(p, lam=None)
    add_common(p)
    add_model_output(p, "fine-tuned model")
    add_license(p, "fine-tuned model file")
    p.set_defaults(img_size=None, in_chans=None)


def run(args: argparse.Namespace) -> None:
    from ..pipeline.training import train
    from .options import check_outputs, out_is_folder, save_model_and_say, sayer, teacher_from_args, training_from_args

    hub = out_is_folder(args)
    check_outputs(args, [args.out], [args.model, args.teacher], folder=hub)
    trained = train(
        args.model,
        teacher=teacher_from_args(args),
        new_head=args.new_head,
        **training_from_args(args),
        say=sayer(args),
    )
    save_model_and_say(args, trained, trained.summary, hub)
