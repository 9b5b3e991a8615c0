"""``learngene expand``: a learngene to a descendant timm ViT, as a model file or a timm hub folder, or to an output
its method declares (parse -> :func:`learngene.pipeline.expand` -> write -> say). Its choices' flags are generated
from :class:`~learngene.pipeline.requests.ExpandChoices`: a new expand option is one field there."""

from __future__ import annotations

import argparse
import dataclasses

from ..errors import LearngeneError
from ..pipeline.requests import ExpandChoices
from .flags import add_declared, add_gene_and_size, add_model_output, add_setting, add_threads

BUDGET = (
    "size for a budget",
    "Among depths 1..the ancestry's and head counts 1..the ancestry's "
    "(width = heads x head size): the deepest size that fits the budget, then the widest at "
    "that depth, skipping sizes the gene's method cannot expand (tried without allocating); "
    "--depth or --num-heads pin that axis. It says which size it picked and why.",
)


HELP = "expand a learngene into a descendant timm ViT"

DESCRIPTION = (
    "Initialize a timm ViT of the given size from a learngene; sizes default to the "
    "ancestry's. The output loads with timm.create_model(...).load_state_dict(..., strict=True)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_gene_and_size(p, "method option for this expansion (repeatable)")
    add_declared(p, ExpandChoices, groups={"budget": BUDGET})
    add_setting(p, "device")
    add_threads(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars, no banner: only results and errors")
    add_model_output(p, "descendant")


def run(args: argparse.Namespace) -> None:
    from ..pipeline.expanding import expand
    from .options import check_outputs, choices_from_args, save_model_and_say, sayer, size_from_args

    hub = hub_from_args(args)
    check_outputs(args, [args.out], [args.gene], folder=hub)
    descendant = expand(
        args.gene,
        size_from_args(args),
        options=args.opt or [],
        say=sayer(args),
        **choices_from_args(args, ExpandChoices),
    )
    save_model_and_say(args, descendant, descendant.summary, hub)


def hub_from_args(args: argparse.Namespace) -> bool:
    """Whether ``--out`` is a timm hub folder; a declared output (an ExpandChoices field declared ``output``, e.g.
    ``--stitch``), which is no timm ViT, goes to a file."""
    from ..formats.export import wants_folder

    hub = wants_folder(args.out, args.format)
    output = next(
        (f for f in dataclasses.fields(ExpandChoices) if f.metadata.get("output") and getattr(args, f.name, None)),
        None,
    )
    if hub and output is not None:
        raise LearngeneError(
            f"{output.metadata['flag']} makes no timm ViT, so it has no timm hub folder; give --out FILE.safetensors"
        )
    return hub
