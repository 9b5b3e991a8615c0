"""FRONT without fine-tuning: the authors' rule against our earlier orthonormal reading, at two keep ratios.

For a trained ancestry (e.g. one the transfer bench cached in ``OUT/ancestry/``) and its upstream classes,
condense it with ``front`` (``variant=authors`` and ``variant=orthonormal``, ``keep_ratio`` 1 and 0.5),
expand to the ancestry's size and to depth 2, and print top-1 on the upstream test images with no
training at all, beside the share of each block matrix's energy (sum of squares, after removing its mean)
that the expanded weights keep at the ancestry's own size. Why: a low-pass along a neuron axis keeps
about the kept share of the energy when neurons are in no particular order (their spectrum is flat).

    PYTHONPATH=src python benchmarks/front_check.py --ancestry OUT/ancestry/ancestry-KEY.safetensors --classes 0,1,2,3,4
"""

from __future__ import annotations

import argparse

import torch

from learngene.ancestry import load_ancestry
from learngene.data import class_subset, load_splits
from learngene.descendant import make_descendant
from learngene.registry import get_method
from learngene.training.loop import evaluate
from learngene.vit.spec import block_key


def energy_kept(state: dict, ancestry_state: dict, depth: int) -> float:
    """Σ‖W' − mean(W')‖² / Σ‖W − mean(W)‖² over the block weight matrices."""
    kept = total = 0.0
    for layer in range(depth):
        for name in ("attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight", "mlp.fc2.weight"):
            w, v = ancestry_state[block_key(layer, name)], state[block_key(layer, name)]
            total += float((w - w.mean()).pow(2).sum())
            kept += float((v - v.mean()).pow(2).sum())
    return kept / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ancestry", required=True)
    parser.add_argument("--classes", default="", help="the ancestry's upstream classes, e.g. 0,1,2,3,4 (default: all)")
    parser.add_argument("--eval-images", type=int, default=1000)
    args = parser.parse_args()
    ancestry = load_ancestry(args.ancestry)
    spec = ancestry.spec
    _, test = load_splits("fashion_mnist", img_size=spec.img_size, in_chans=spec.in_chans)
    if args.classes:
        test = class_subset(test, [int(c) for c in args.classes.split(",")])
    test = test.subset(torch.randperm(len(test), generator=torch.Generator().manual_seed(0))[: args.eval_images])
    ancestry.model.eval()
    print(
        f"ancestry {spec.short()}: top-1 {100 * evaluate(ancestry.model, test)['acc']:.1f} % on {len(test)} upstream test images"
    )
    print("| variant | keep_ratio | stored params | energy kept (own size) | top-1 own size | top-1 depth 2 |")
    print("|---|---|---|---|---|---|")
    base = {k: v.detach() for k, v in ancestry.model.state_dict().items()}
    for variant in ("authors", "orthonormal"):
        for keep in (1.0, 0.5):
            gene = get_method("front")(variant=variant, keep_ratio=keep).condense(ancestry)
            own = make_descendant(gene, spec).eval()
            short = make_descendant(gene, spec.replace(depth=2)).eval()
            print(
                f"| {variant} | {keep} | {gene.num_stored_params:,} | "
                f"{energy_kept(own.state_dict(), base, spec.depth):.3f} | {100 * evaluate(own, test)['acc']:.1f} | "
                f"{100 * evaluate(short, test)['acc']:.1f} |"
            )


if __name__ == "__main__":
    main()
