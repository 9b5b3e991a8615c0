"""``learngene expand``: a learngene to a descendant timm ViT, as a model file or a timm hub folder, or to an output
its method declares (parse -> :func:`learngene.pipeline.expand` -> write -> say)."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import LearngeneError
from .flags import add_common, add_gene_and_size, add_license, count

# expand's flags that ask for an output a method declares instead of a timm ViT (Method.expand_outputs): pool's
# stitched descendant
OUTPUT_FLAGS = ("stitch",)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "expand",
        help="expand a learngene into a descendant timm ViT",
        description="Initialize a timm ViT of the given size from a learngene; sizes default to the "
        "ancestry's. The output loads with timm.create_model(...).load_state_dict(..., strict=True).",
    )
    add_gene_and_size(p, "method option for this expansion (repeatable)")
    p.add_argument(
        "--top-up",
        metavar="METHOD",
        help="fill what the gene leaves to timm from a method without a "
        "learngene, e.g. mimetic (attention weights, sin-cos positions)",
    )
    _add_budget(p)
    p.add_argument(
        "--stitch",
        metavar="F:J-E:K",
        help="a pool gene of design=authors only: write a stitched descendant instead of a timm ViT: instance F's "
        "embeddings and blocks 0..J, a learned stitch layer, instance E's blocks K.. and head (F < E, |J-K| <= 1; "
        "e.g. 0:1-2:0). Its size is the instances'; no size, budget, --opt, --top-up or hub flags. "
        "`learngene inspect GENE` lists the instances; `learngene train` fine-tunes the file",
    )
    add_common(p)
    _add_descendant_output(p)
    add_license(p, "descendant's model card or model file")


def _add_budget(p: argparse.ArgumentParser) -> None:
    """``expand``'s budget: the size picked for at most so many parameters or FLOPs."""
    g = p.add_argument_group(
        "size for a budget",
        "Among depths 1..the ancestry's and head counts 1..the ancestry's "
        "(width = heads x head size): the deepest size that fits the budget, then the widest at "
        "that depth, skipping sizes the gene's method cannot expand (tried without allocating); "
        "--depth or --num-heads pin that axis. It says which size it picked and why.",
    )
    g.add_argument("--max-params", type=count, metavar="N", help="at most N parameters (e.g. 5e6 or 5M)")
    g.add_argument("--max-flops", type=count, metavar="N", help="at most N forward FLOPs per image (e.g. 2G)")


def _add_descendant_output(p: argparse.ArgumentParser) -> None:
    """Where ``expand`` writes: a model file or a timm hub folder."""
    p.add_argument(
        "--out",
        "-o",
        required=True,
        help="where to write the descendant: a learngene model file (.safetensors), or timm's hub folder "
        "(config.json, model.safetensors, README.md) when it ends in / or is a folder",
    )
    p.add_argument(
        "--format",
        choices=("file", "hub"),
        help="file: one learngene model file; hub: timm's hub folder, loadable by "
        "timm.create_model('local-dir:DIR', pretrained=True) (default: hub for a folder-like --out)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output file, or the files learngene writes in an existing folder "
        "(other files there are left alone)",
    )


def run(args: argparse.Namespace) -> None:
    from ..pipeline.expanding import expand
    from .options import check_outputs, save_and_say, sayer, size_from_args

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
    from ..formats.export import wants_folder

    hub = wants_folder(args.out, args.format)
    output = next(((n, getattr(args, n)) for n in OUTPUT_FLAGS if getattr(args, n, None) is not None), None)
    if hub and output:
        raise LearngeneError(
            f"--{output[0]} makes no timm ViT, so it has no timm hub folder; give --out FILE.safetensors"
        )
    return hub, output
