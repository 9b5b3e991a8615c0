"""``learngene expand``: a learngene to a descendant timm ViT, as a model file or a timm hub folder."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ..data import preprocessing_cfg
from ..descendant import fit_gene_to_budget, make_descendant
from ..errors import LearngeneError
from ..formats.atomic import check_not_input, quote
from ..formats.export import check_output_folder, export_hub_folder, wants_folder
from ..formats.labels import describe as describe_labels
from ..formats.model_file import save_model
from ..gene import Learngene
from ..method import citations
from ..registry import get_method
from ..training import distributed as dist
from .making import head_label_space, license_entry
from .options import SPEC_FIELDS, check_outputs, parse_options, say, spec_from_args

SIZE_FLAGS = ("preset", *SPEC_FIELDS, "opt", "top_up", "max_params", "max_flops")  # what --stitch leaves out


def cmd_expand(args: argparse.Namespace) -> None:
    if args.stitch is not None:
        return _expand_stitched(args)
    hub = wants_folder(args.out, args.format)
    if hub:
        check_not_input(args.out, [args.gene], folder_output=True)
        check_output_folder(args.out, args.overwrite)
    else:
        check_outputs(args, [args.out], [args.gene])
    gene = Learngene.load(args.gene)  # checked against its method where make_descendant expands it
    method_cls = get_method(gene.method)
    if gene.ancestry is None and not args.preset:
        raise LearngeneError(f"{quote(args.gene)} records no ancestry size; give --preset and/or all size flags")
    spec = spec_from_args(args, base=gene.ancestry)
    options = parse_options(method_cls.Config, args.opt or [])
    if args.max_params is not None or args.max_flops is not None:
        spec = _fit_gene_to_budget(args, gene, spec, options)
    model, provided = make_descendant(
        gene, spec, seed=args.seed, top_up=args.top_up, source=args.gene, return_keys=True, options=options
    )
    if hub:
        dist.on_main(lambda: _export_descendant(args, gene, model, spec, options, provided))
    else:
        dist.on_main(
            lambda: save_model(
                args.out,
                model,
                spec,
                overwrite=args.overwrite,
                origin={
                    "kind": "descendant",
                    "method": gene.method,
                    "gene": str(args.gene),
                    "options": options,
                    "provided_keys": len(provided),
                    "top_up": args.top_up,
                    "label_space": head_label_space(gene, provided),
                    **license_entry(args.license or gene.license),
                },
                preprocessing=gene.preprocessing,
            )
        )
    say(
        args,
        f"wrote {args.out}{' (timm hub folder)' if hub else ''}: {spec.short()} timm ViT ({spec.num_params:,} params), "
        f"{len(provided)}/{len(spec.state_shapes())} tensors from the {gene.method} gene"
        + (f", the rest topped up by {args.top_up} where it has weights" if args.top_up else ""),
    )


def parse_stitch(text: str) -> tuple[int, int, int, int]:
    """``F:J-E:K`` -> ``(front, end, cut_front, cut_end)``."""
    match = re.fullmatch(r"(\d+):(\d+)-(\d+):(\d+)", text.strip())
    if match is None:
        raise LearngeneError(
            f"--stitch {text!r} is not FRONT:BLOCK-END:BLOCK; e.g. 0:1-2:0 runs instance 0 through block 1, "
            f"then instance 2 from block 0"
        )
    front, cut_front, end, cut_end = map(int, match.groups())
    return front, end, cut_front, cut_end


def _expand_stitched(args: argparse.Namespace) -> None:
    """``expand --stitch``: a pool gene of the authors' design to a stitched descendant (:class:`StitchedViT`)."""
    from ..methods.pool import stitched_descendant
    from ..training.loop import seed_everything

    given = next((f for f in SIZE_FLAGS if getattr(args, f, None) not in (None, [])), None)
    if given is not None:
        flag = "--" + given.replace("_", "-")
        raise LearngeneError(
            f"{flag} does not apply with --stitch: a stitched descendant has its instances' sizes; leave it out"
        )
    if wants_folder(args.out, args.format):
        raise LearngeneError(
            "a stitched descendant is not a timm ViT, so it has no timm hub folder; give --out FILE.safetensors"
        )
    check_outputs(args, [args.out], [args.gene])
    front, end, cut_front, cut_end = parse_stitch(args.stitch)
    gene = Learngene.load(args.gene)
    seed_everything(args.seed)  # a headless ancestry's instances have no head: the descendant draws a fresh one
    model = stitched_descendant(gene, front, end, cut_front, cut_end)
    origin = {
        "kind": "stitched descendant",
        "method": gene.method,
        "gene": str(args.gene),
        "stitch": args.stitch,
        "label_space": gene.label_space if f"instance{end}.head.weight" in gene.tensors else None,  # else fresh
        **license_entry(args.license or gene.license),
    }
    dist.on_main(
        lambda: model.save(args.out, origin=origin, overwrite=args.overwrite, preprocessing=gene.preprocessing)
    )
    say(
        args,
        f"wrote {args.out}: stitched descendant {model.short()}, {model.depth} blocks, {model.num_params:,} params "
        f"(instance {front} through block {cut_front}, a stitch layer, instance {end} from block {cut_end})",
    )


def _head_status(gene, spec, provided, top_up: str | None = None) -> str | None:
    """Whether a descendant's classifier is the ancestry's (carried by the gene) or fresh; None: it has none."""
    if not spec.num_classes:
        return None
    if "head.weight" in provided:
        return f"the ancestry's, carried by the gene ({describe_labels(gene.label_space, spec.num_classes)})"
    if top_up:
        return f"topped up by {top_up} where it has one of this shape, else fresh (timm's initialization)"
    return f"fresh: timm's initialization of a {spec.num_classes}-way head, untrained (fine-tune before use)"


def _export_descendant(args: argparse.Namespace, gene, model, spec, options: dict[str, Any], provided) -> None:
    ancestry = gene.ancestry
    card = {
        "method": gene.method,
        "citation": "; ".join(map(str, citations(get_method(gene.method)))),
        "ancestry": (
            f"timm `{getattr(ancestry, 'arch', None) or 'ViT'}` {ancestry.short()}, {ancestry.num_params:,} parameters"
            if ancestry
            else "none recorded (a non-ViT teacher, or no ancestry)"
        ),
        "gene": f"`{Path(args.gene).name}`, {gene.num_stored_params:,} stored parameters, made by learngene "
        f"{gene.library_version} on {gene.created}",
        "tensors from the gene": f"{len(provided)} of {len(spec.state_shapes())}"
        + (f", the rest topped up by {args.top_up}" if args.top_up else ", the rest timm's init"),
        "head": _head_status(gene, spec, provided, args.top_up),
        "licence": (
            f"{args.license} (stated with --license)"
            if args.license
            else f"{gene.license} (the ancestry's, recorded in the learngene)"
            if gene.license
            else None
        ),
        "license_id": args.license or gene.license,
    }
    if options:
        card["options"] = ", ".join(f"{k}={v!r}" for k, v in options.items())
    data_config = None
    if gene.preprocessing is not None:  # the gene's, at the descendant's input size
        data_config = preprocessing_cfg(gene.preprocessing, spec.img_size, spec.in_chans)
    export_hub_folder(args.out, model, spec, card, data_config=data_config, overwrite=args.overwrite)


def _fit_gene_to_budget(args: argparse.Namespace, gene, base, options: dict[str, Any]):
    """The deepest, then widest, size under --max-params/--max-flops that the gene's method can expand."""
    heads = args.num_heads or (base.num_heads if args.embed_dim else None)
    refused: list = []
    spec = fit_gene_to_budget(
        gene, base, args.max_params, args.max_flops, depth=args.depth, num_heads=heads, refused=refused, **options
    )
    budget = ", ".join(
        f"{name} {value:,}"
        for name, value in (("params", args.max_params), ("FLOPs", args.max_flops))
        if value is not None
    )
    why = (
        f"--depth {args.depth} kept (it wins over the budget), the widest size within the budget at that depth "
        f"that the {gene.method} gene expands to"
        if args.depth
        else f"the deepest, then widest size within the budget that the {gene.method} gene expands to"
    )
    if refused:
        first, reason = refused[0]
        why += (
            f"; {len(refused)} deeper or wider size(s) within the budget it refuses, e.g. {first.short()}: "
            f"{reason.split('; ')[0]}"
        )  # the reason without the advice to pass other sizes
    say(
        args,
        f"picked {spec.short()}: {spec.num_params:,} params, {spec.flops / 1e6:,.1f} MFLOPs per image "
        f"(budget: {budget}; {why})",
        banner=True,
    )
    return spec
