"""Parsed flags turned into what the library takes: method options, specs, data, training configs, checked
output paths."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..data import default_workers, few_shot, fraction, load_splits
from ..errors import LearngeneError
from ..formats.atomic import check_outputs as check_output_files
from ..formats.atomic import quote
from ..run_dirs import lock_run_dir
from ..training import distributed as dist
from ..training.config import TrainConfig, from_flags
from ..training.loop import CHECKPOINT
from ..validate import parse_assignment
from ..vit.spec import SIZE_FLAG_FIELDS, ViTSpec, get_preset


def parse_options(config_cls: type, items: list[str]) -> dict[str, Any]:
    """``["key=value", ...]`` from the CLI, each value read for its field's type
    (:func:`~learngene.validate.parse_assignment`); ``auto`` gives an automatic option (``Config.AUTO_OPTIONS``)
    its default."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    types = typing.get_type_hints(config_cls)
    usage = "option {item} is not KEY=VALUE with a known KEY; use one of: " + (", ".join(fields) or "none")
    out: dict[str, Any] = {}
    for item in items:
        key, value = parse_assignment(item, types, usage)
        auto = key in getattr(config_cls, "AUTO_OPTIONS", ())
        if value == "auto" and auto:  # as `learngene methods` shows it
            value = fields[key].default
        elif auto and value == 0 and not isinstance(value, bool):
            # 0 stands for "automatic" inside the config; given by hand it reads as "none", which it is not
            raise LearngeneError(
                f"option {key}=0 would silently mean 'automatic'; give {key}=auto for that, or a positive value"
            )
        out[key] = value
    return out


SPEC_FIELDS = tuple(f.name for f in SIZE_FLAG_FIELDS)  # the size flags' fields (learngene.cli.parser.add_spec_args)


def spec_from_args(args: argparse.Namespace, base=None, data=None) -> ViTSpec:
    """``base`` spec (or preset), overridden by data-derived sizes, overridden by explicit flags."""
    if getattr(args, "preset", None):
        base = get_preset(args.preset)
    values = (base or ViTSpec()).to_dict()
    if data is not None:
        values.update(img_size=data.img_size, in_chans=data.in_chans, num_classes=data.num_classes)
    explicit = {f: getattr(args, f) for f in SPEC_FIELDS if getattr(args, f, None) is not None}
    values.update(explicit)
    if values.get("global_pool") == "avg" and "global_pool" in explicit:
        values["class_token"] = False
    return ViTSpec.from_dict(values)


def load_data_from_args(
    args: argparse.Namespace,
    img_size: int | None = None,
    in_chans: int | None = None,
    preprocessing: dict[str, Any] | None = None,
):
    """(train, test) data as the flags ask, resized/converted to the given model input; image folders are read
    with ``preprocessing`` (the model's, :func:`learngene.data.preprocessing_cfg`) when given."""

    img_size = getattr(args, "img_size", None) or img_size
    in_chans = getattr(args, "in_chans", None) or in_chans
    workers = args.workers if args.workers is not None else default_workers()

    def load() -> tuple:
        return load_splits(args.data, img_size, args.data_dir, in_chans, preprocessing, args.aug, workers)

    # under torchrun rank 0 loads first, so a one-time cache (Fashion-MNIST ungzipped) is written once
    # and a bad --data stops every rank with rank 0's message
    loaded = dist.on_main(load)  # None on the other ranks, which then read what rank 0 cached
    train, test = loaded if loaded is not None else load()
    if args.few_shot is not None:
        if args.few_shot < 1:
            raise LearngeneError(f"--few-shot must be at least 1 image per class, got {args.few_shot}; pass K >= 1")
        train = few_shot(train, args.few_shot, seed=args.seed)
    if args.train_images is not None:
        if args.train_images < 1:
            raise LearngeneError(f"--train-images must be positive, got {args.train_images}; pass N >= 1")
        train = fraction(train, min(1.0, args.train_images / len(train)), seed=args.seed)
    return train, test


def train_config_from_args(args: argparse.Namespace, desc: str) -> TrainConfig:
    """The run's TrainConfig; also refuses a --run-dir whose checkpoint a run without --resume would overwrite."""
    if args.resume and not args.run_dir:
        raise LearngeneError("--resume continues from RUN_DIR/checkpoint.pt; pass --run-dir too")
    if args.run_dir:
        if Path(args.run_dir).exists() and not Path(args.run_dir).is_dir():
            raise LearngeneError(f"--run-dir {quote(args.run_dir)} is a file, not a directory; give a directory path")
        if not args.resume and (Path(args.run_dir) / CHECKPOINT).exists():
            raise LearngeneError(
                f"{quote(args.run_dir)} holds the checkpoint of an earlier run; pass --resume to "
                f"continue it, or give another --run-dir (or delete it) to start over"
            )
    cfg = from_flags(
        vars(args),
        mixup=getattr(args, "aug", "none") == "deit",
        progress=not args.quiet,
        desc=desc,
    )
    if cfg.log and not args.run_dir:  # checked before any data load: the loggers write into the run directory
        raise LearngeneError(f"--log {cfg.log[0]} writes into the run directory, next to log.jsonl; pass --run-dir too")
    if args.run_dir and dist.is_main():  # one run per run directory; the other ranks share rank 0's
        lock_run_dir(args.run_dir)
    return cfg


def check_outputs(args: argparse.Namespace, outputs: Sequence[str | None], inputs: Sequence[str | None] = ()) -> None:
    """:func:`learngene.formats.atomic.check_outputs` with the command's ``--overwrite``.

    The outputs are then written by :func:`learngene.formats.atomic.atomic_path`, which creates them exclusively, so a
    file that appears in the meantime is not replaced either.
    """
    check_output_files(outputs, inputs, getattr(args, "overwrite", False))


def say(args: argparse.Namespace, text: str, banner: bool = False) -> None:
    """Print a result line (rank 0 only). A ``banner`` (what is about to run) is left out under --quiet, so
    that a quiet run prints its results, or its one-line error, and nothing else."""
    if not dist.is_main() or (banner and getattr(args, "quiet", False)):
        return
    print(text, file=sys.stderr if getattr(args, "quiet", False) else sys.stdout)
