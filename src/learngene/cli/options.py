"""Parsed flags turned into the arguments of the pipeline's use cases (:mod:`learngene.pipeline`): sizes, data,
training settings, checked output paths, and the lines a command says."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import LearngeneError
from ..formats.atomic import check_not_input, printable
from ..formats.atomic import check_outputs as check_output_files
from ..formats.export import check_output_folder
from ..pipeline.inputs import Say
from ..pipeline.requests import AncestryRequest, DataRequest, timm_arguments
from ..settings import flagged
from ..training import distributed as dist
from ..training.config import TrainConfig
from ..vit.spec import SIZE_FLAG_FIELDS

SPEC_FIELDS = tuple(f.name for f in SIZE_FLAG_FIELDS)  # the size flags' fields (learngene.cli.flags.add_spec_args)


def size_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The size flags given (``--preset`` under ``preset``, each ViTSpec field by name): the pipeline's ``size``."""
    given = {f: getattr(args, f, None) for f in ("preset", *SPEC_FIELDS)}
    return {k: v for k, v in given.items() if v is not None}


def data_from_args(args: argparse.Namespace) -> DataRequest:
    """The data flags as a :class:`~learngene.pipeline.inputs.DataRequest` (``--img-size`` / ``--in-chans``, the size
    flags, resize the data too)."""
    sizes: dict[str, Any] = {name: getattr(args, name, None) for name in ("img_size", "in_chans")}
    return DataRequest(**declared_from_args(args, DataRequest), **sizes)


def declared_from_args(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of dataclass ``cls`` that the flags made by :func:`learngene.cli.flags.add_declared` give, by name
    (each read where argparse put its flag)."""
    dests = {f.name: f.metadata["flag"].lstrip("-").replace("-", "_") for f in flagged(cls)}
    return {name: getattr(args, dest) for name, dest in dests.items() if hasattr(args, dest)}


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The training settings the flags give, by name (None: not given, the use case's default), with ``--quiet``'s
    progress bars."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if hasattr(args, f.name)}
    return {**given, "progress": not args.quiet}


def training_from_args(args: argparse.Namespace, choices: type) -> dict[str, Any]:
    """The flags of the commands that train as their use case's keyword arguments: the data, the training settings
    and the fields of its ``choices`` (a :class:`~learngene.pipeline.requests.Choices` class) by name."""
    return {"data": data_from_args(args), "train_cfg": settings_from_args(args), **choices_from_args(args, choices)}


def ancestry_from_args(args: argparse.Namespace) -> AncestryRequest:
    """The ancestry flags as an :class:`~learngene.pipeline.requests.AncestryRequest`: with ``--timm-model``, the
    checkpoint's sizes the flags give and its ``--timm-arg`` texts are ``timm.create_model`` arguments."""
    texts = timm_arguments(list(args.timm_arg or []))
    sizes = {n: getattr(args, n) for n in ("num_classes", "img_size", "in_chans") if getattr(args, n) is not None}
    kwargs = {**sizes, **texts} if args.timm_model else texts
    return AncestryRequest(args.ancestry, args.timm_model, args.drop_head, kwargs)


def teacher_from_args(args: argparse.Namespace) -> AncestryRequest | None:
    """``--teacher`` (with ``--teacher-timm-model``) as an :class:`~learngene.pipeline.requests.AncestryRequest`."""
    if args.teacher_timm_model and not args.teacher:
        raise LearngeneError(
            "--teacher-timm-model names the architecture of a --teacher checkpoint; pass --teacher too"
        )
    return AncestryRequest(args.teacher, args.teacher_timm_model) if args.teacher else None


def choices_from_args(args: argparse.Namespace, choices: type) -> dict[str, Any]:
    """The fields of ``choices`` (a :class:`~learngene.pipeline.requests.Choices` class) the flags give, by name (each
    field's flag, :func:`learngene.cli.flags.add_declared`); ``--teacher`` with ``--teacher-timm-model``."""
    given = declared_from_args(args, choices)
    if hasattr(args, "teacher_timm_model"):
        given["teacher"] = teacher_from_args(args)
    return given


def check_outputs(
    args: argparse.Namespace,
    outputs: Sequence[str | None],
    inputs: Sequence[str | None] = (),
    folder: bool = False,
) -> None:
    """:func:`learngene.formats.atomic.check_outputs` with the command's ``--overwrite``; ``folder``: the first output
    is a timm hub folder (:func:`learngene.formats.export.check_output_folder`), the others files.

    The outputs are then written by :func:`learngene.formats.atomic.atomic_path`, which creates them exclusively, so a
    file that appears in the meantime is not replaced either.
    """
    overwrite = getattr(args, "overwrite", False)
    if folder:
        folder_path = str(outputs[0])
        check_not_input(folder_path, inputs, folder_output=True)
        check_output_folder(folder_path, overwrite)
        outputs = outputs[1:]  # the files written beside it (adapt's --gene-out)
    check_output_files(outputs, inputs, overwrite)


def say(args: argparse.Namespace, text: str, banner: bool = False) -> None:
    """Print a result line (rank 0 only). A ``banner`` (what is about to run) is left out under --quiet, so
    that a quiet run prints its results, or its one-line error, and nothing else."""
    if not dist.is_main() or (banner and getattr(args, "quiet", False)):
        return
    print(text, file=sys.stderr if getattr(args, "quiet", False) else sys.stdout)


def save_and_say(args: argparse.Namespace, result: Any, summary: str, kind: str = "", **save: Any) -> None:
    """Save the use case's ``result`` to ``--out`` (rank 0 only; ``--overwrite``; ``save``: the rest of its ``save``
    arguments), then say what was written: ``kind`` of output, if it is not a file, and ``summary``."""
    dist.on_main(lambda: result.save(args.out, overwrite=args.overwrite, **save))
    say(args, f"wrote {printable(args.out)}{kind}: {summary}")


def save_model_and_say(args: argparse.Namespace, result: Any, summary: str, hub: bool, **save: Any) -> None:
    """:func:`save_and_say` for a model: to a timm hub folder (``hub``: :func:`learngene.formats.export.wants_folder`,
    the rule the results' ``save`` follows too) or a model file."""
    save_and_say(args, result, summary, " (timm hub folder)" if hub else "", format="hub" if hub else "file", **save)


def sayer(args: argparse.Namespace) -> Say:
    """:func:`say` for this command, as the pipeline's ``say`` argument."""
    return functools.partial(say, args)
