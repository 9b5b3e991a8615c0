"""``learngene ancestry``: train a ViT from scratch on a dataset and save it, the ancestry of learngenes."""

from __future__ import annotations

import argparse

from ..pipeline.requests import AncestryChoices
from .flags import add_choices, add_common, add_data_args, add_model_output, add_spec_args, add_train_args

HELP = "train an ancestry ViT on a dataset and save it"

DESCRIPTION = "Train a ViT from scratch on a dataset; it becomes the ancestry of learngenes."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_spec_args(p)
    add_data_args(p)
    add_train_args(p, "ancestry")
    add_common(p)
    add_model_output(p, "ancestry model")
    add_choices(p, AncestryChoices)


def run(args: argparse.Namespace) -> None:
    from ..formats.export import wants_folder
    from ..pipeline.training import train_ancestry
    from .options import check_outputs, save_model_and_say, sayer, size_from_args, training_from_args

    hub = wants_folder(args.out, args.format)
    check_outputs(args, [args.out], folder=hub)
    trained = train_ancestry(size=size_from_args(args), **training_from_args(args, AncestryChoices), say=sayer(args))
    save_model_and_say(args, trained, trained.summary, hub)
