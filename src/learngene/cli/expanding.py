"""``learngene expand``: a learngene to a descendant timm ViT, as a model file or a timm hub folder, or to an output
its method declares (parse -> :func:`learngene.pipeline.expand` -> write -> say)."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import LearngeneError
from ..formats.export import wants_folder
from ..pipeline.expanding import expand
from .options import check_outputs, save_and_say, sayer, size_from_args

# expand's flags that ask for an output a method declares instead of a timm ViT (Method.expand_outputs): pool's
# stitched descendant
OUTPUT_FLAGS = ("stitch",)


def cmd_expand(args: argparse.Namespace) -> None:
    hub, output = destination_from_args(args)
    check_outputs(args, [args.out], [args.gene], folder=hub)
    descendant = expand(
        args.gene,
        size_from_args(args),
        seed=args.seed,
        options=args.opt or [],
        top_up=args.top_up,
        max_params=args.max_params,
        max_flops=args.max_flops,
        license=args.license,
        output=output,
        say=sayer(args),
    )
    save_and_say(
        args, descendant, descendant.summary, " (timm hub folder)" if hub else "", format="hub" if hub else "file"
    )


def destination_from_args(args: argparse.Namespace) -> tuple[bool, tuple[str, Any] | None]:
    """Whether ``--out`` is a timm hub folder, and ``(name, text)`` of the declared-output flag given
    (:data:`OUTPUT_FLAGS`; None: a timm ViT); a declared output, which is no timm ViT, goes to a file."""
    hub = wants_folder(args.out, args.format)
    output = next(((n, getattr(args, n)) for n in OUTPUT_FLAGS if getattr(args, n, None) is not None), None)
    if hub and output:
        raise LearngeneError(
            f"--{output[0]} makes no timm ViT, so it has no timm hub folder; give --out FILE.safetensors"
        )
    return hub, output
