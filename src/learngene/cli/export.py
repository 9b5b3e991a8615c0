"""``learngene export``: a model file or hub folder to a timm hub folder, ONNX or a plain timm state dict (parse ->
:func:`learngene.pipeline.exporting.export` -> say)."""

from __future__ import annotations

import argparse

from .flags import add_threads, bounded, integer

HELP = "export a model to a timm hub folder, ONNX (checked by onnxruntime) or a timm state dict"

DESCRIPTION = (
    "Write a model learngene made (an ancestry, descendant, fine-tuned or adapted model file, or a hub folder) as "
    "the file the next tool reads: timm's hub folder with a model card, an ONNX file from torch's dynamo exporter "
    "whose outputs onnxruntime checks against PyTorch's on a probe batch (the largest difference is printed and "
    "recorded in the file; above the bound nothing is written), or a plain timm state dict."
)

# the default opset and the largest batch, as learngene.formats.onnx_file says them (not imported: --help loads no
# torch); the library checks the opset against the installed onnx's range
DEFAULT_OPSET = 18
MAX_BATCH = 65536


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a model file (ancestry, expand, adapt or train wrote it) or a timm hub folder")
    p.add_argument(
        "--out", "-o", required=True, help="the output: a folder (hub), a .onnx file, a .safetensors or .pth file"
    )
    p.add_argument(
        "--format",
        choices=("hub", "onnx", "timm"),
        help="hub: timm's hub folder with a model card; onnx: ONNX checked by onnxruntime; timm: timm's state dict "
        "(default: told by --out: a trailing /, .onnx, .safetensors or .pth)",
    )
    p.add_argument(
        "--opset",
        type=bounded("opset", integer, {"at_least": 1, "at_most": 1000}),
        default=DEFAULT_OPSET,
        help=f"ONNX opset (default {DEFAULT_OPSET}, recorded)",
    )
    p.add_argument(
        "--dynamic-batch",
        action="store_true",
        help="ONNX: the graph takes any batch size (checked at two); default: a fixed batch of --batch-size",
    )
    p.add_argument(
        "--batch-size",
        type=bounded("batch size", integer, {"at_least": 1, "at_most": MAX_BATCH}),
        default=1,
        help="ONNX: the fixed batch size (default 1)",
    )
    p.add_argument(
        "--push-to-hub",
        metavar="REPO",
        help="hub: upload the folder to this Hugging Face Hub repo (ORG/NAME), with HF_TOKEN and HF_ENDPOINT",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output (a hub folder: only the files learngene writes there)",
    )
    add_threads(p)


def run(args: argparse.Namespace) -> None:
    from ..pipeline.exporting import export
    from .options import say

    exported = export(
        args.model,
        args.out,
        args.format,
        opset=args.opset,
        dynamic_batch=args.dynamic_batch,
        batch_size=args.batch_size,
        overwrite=args.overwrite,
        push_to_hub=args.push_to_hub,
    )
    say(args, f"wrote {args.out}: {exported.summary}")
