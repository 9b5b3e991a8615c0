"""The commands that train: ``ancestry``, ``condense``, ``adapt`` and ``train`` (each: parse -> the pipeline's use case
-> write -> say)."""

from __future__ import annotations

import argparse

from ..pipeline.adapting import adapt
from ..pipeline.condensing import condense
from ..pipeline.training import train, train_ancestry
from .options import (
    check_outputs,
    data_from_args,
    run_from_args,
    save_and_say,
    say,
    sayer,
    settings_from_args,
    size_from_args,
    timm_kwargs_from_args,
)


def cmd_ancestry(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out])
    trained = train_ancestry(
        data_from_args(args),
        size_from_args(args),
        settings_from_args(args),
        **run_from_args(args),
        say=sayer(args),
    )
    save_and_say(args, trained, trained.summary)


def cmd_condense(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out], [args.ancestry])
    condensed = condense(
        args.method,
        args.ancestry,
        options=args.opt or [],
        data=data_from_args(args),
        train_cfg=settings_from_args(args),
        **run_from_args(args),
        timm_model=args.timm_model,
        drop_head=args.drop_head,
        timm_kwargs=timm_kwargs_from_args(args),
    )
    save_and_say(args, condensed, condensed.summary)
    if condensed.note:
        say(args, condensed.note)


def cmd_adapt(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out, args.gene_out], [args.gene])
    adapted = adapt(
        args.gene,
        data_from_args(args),
        size_from_args(args),
        options=args.opt or [],
        train_cfg=settings_from_args(args),
        **run_from_args(args),
    )
    save_and_say(args, adapted, adapted.descendant.summary, gene_path=args.gene_out)


def cmd_train(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out], [args.model, args.teacher])
    trained = train(
        args.model,
        data_from_args(args),
        settings_from_args(args),
        teacher=args.teacher,
        teacher_timm_model=args.teacher_timm_model,
        new_head=args.new_head,
        **run_from_args(args),
        say=sayer(args),
    )
    save_and_say(args, trained, trained.summary)
