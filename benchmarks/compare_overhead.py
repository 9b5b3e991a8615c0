"""Does `learngene compare` add passes of its own? Its wall time against the sum of its condense and fine-tune runs.

Runs one compare (in this process, an empty out folder, plots on) and sums the wall time of the runs it is
made of, each timed where it happens: every condensation (``gene.cost["seconds"]``: the method's
``condense``), every adaptation (``adapt_seconds``) and every fine-tuning cell (``cell_seconds``: expansion,
the training loop with its evaluations, and the saved row). What is left is compare's own work: loading
the data and the ancestry, planning, the report, the CSV and the plots. Target: wall ≤ 1.05 × the sum.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/compare_overhead.py
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

from learngene.comparison.choices import CompareChoices
from learngene.comparison.profile import compare_profile, run_compare
from learngene.formats.model_file import save_model
from learngene.vit.spec import ViTSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="pretrained,tleg,wave")
    parser.add_argument("--sizes", default="L2-D64-H4,L4-D64-H4")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-images", type=int, default=1000)
    args = parser.parse_args()
    spec = ViTSpec(depth=4, embed_dim=64, num_heads=4, img_size=28, patch_size=7, in_chans=1, num_classes=10)
    work = Path(tempfile.mkdtemp(prefix="compare-overhead-"))
    try:
        torch.manual_seed(0)
        ancestry = work / "ancestry.safetensors"
        save_model(ancestry, spec.create_model(), spec)
        profile = compare_profile(
            spec,
            str(ancestry),
            "digits",
            args.sizes.split(","),
            {"epochs": args.epochs, "eval_images": 300},
            CompareChoices(
                methods=args.methods.split(","),
                seeds=args.seeds,
                train_images=args.train_images,
                condense_images=1000,
                adapt_steps=20,
            ),
        )
        tic = time.perf_counter()
        rows = run_compare(profile, work / "out", progress=False)
        wall = time.perf_counter() - tic
        condense = {r.method: r.condense_seconds for r in rows}  # once per method
        adapt = sum(r.adapt_seconds for r in rows if r.budget == 1 and not r.variant)
        cells = sum(r.cell_seconds for r in rows)
        runs = sum(condense.values()) + adapt + cells
        print(
            f"compare: {len(rows)} cells, {len(condense)} methods ({args.methods} + references), sizes {args.sizes}, "
            f"{args.seeds} seeds, {args.epochs} epochs of {args.train_images} digits images"
        )
        print(
            f"wall {wall:.1f} s; condense {sum(condense.values()):.1f} s + adapt {adapt:.1f} s + fine-tune cells "
            f"{cells:.1f} s = {runs:.1f} s; wall / runs = {wall / runs:.3f} (target <= 1.05)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
