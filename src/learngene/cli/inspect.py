"""``learngene inspect``: what a learngene, model file or timm hub folder holds (:mod:`learngene.cli.describe`)."""

from __future__ import annotations

import argparse

HELP = "print a learngene's, model file's or hub folder's metadata and sizes"

DESCRIPTION = (
    "Show what a learngene, model file or timm hub folder holds: method, options, "
    "ancestry, stored parameters, cost; or a model's spec, parameters and FLOPs; "
    "a hub folder's config and model card too."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="learngene or model file, or a timm hub folder (config.json, model.safetensors)")
    p.add_argument("--tensors", action="store_true", help="also list every tensor and its shape")
    p.add_argument(
        "--plot", metavar="PNG", help="write a plot of mean attention distance per layer and head (cluster learngenes)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing plot file")


def run(args: argparse.Namespace) -> None:
    from ..binding import bind_gene
    from ..formats.atomic import printable
    from ..gene import Learngene
    from .describe import describe_file
    from .options import check_outputs

    check_outputs(args, [args.plot], [args.path])
    print(describe_file(args.path, show_tensors=args.tensors))
    if args.plot:
        bound = bind_gene(Learngene.load(args.path), source=args.path)
        bound.method.plot(bound.gene, args.plot, overwrite=args.overwrite)
        print(f"wrote {printable(args.plot)}")
