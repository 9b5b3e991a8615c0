"""Time to initialize a ViT-B-sized descendant (86 M parameters) from a learngene on CPU (target: < 1 s).

A deit_base-shaped ancestry with random weights is condensed by ``pretrained`` and by
``weight_selection`` (their genes hold the whole ancestry, 86 M parameters) and each gene is
expanded back to the deit_base size. Timed separately, median over repetitions:

- ``load``: ``Learngene.load`` of the gene file (safetensors);
- ``expand``: ``method.expand(gene, spec)`` under ``no_grad``;
- ``load_state_dict``: into an already created timm model;
- ``expand + load_state_dict``: the two together, the number the target is about;
- ``create_model``: ``timm.create_model`` with timm's own initialization, which ``make_descendant``
  also pays (it draws the weights the gene does not provide);
- ``make_descendant``: the whole call.

    PYTHONPATH=src python benchmarks/expand_load.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from learngene.descendant import make_descendant
from learngene.gene import Learngene
from learngene.method import Ancestry
from learngene.registry import get_method
from learngene.vit.spec import get_preset


def timed(fn, reps: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(reps):
        tic = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - tic)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="deit_base")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--methods", nargs="+", default=["pretrained", "weight_selection"])
    args = p.parse_args()

    spec = get_preset(args.preset)
    torch.manual_seed(0)
    ancestry = Ancestry(spec.create_model().eval(), spec)
    print(
        f"{args.preset}: {spec.short()}, {spec.num_params / 1e6:.1f} M params; {torch.get_num_threads()} threads; "
        f"median of {args.reps}"
    )
    print(
        f"{'method':18s} {'load':>7s} {'expand':>7s} {'load_sd':>8s} {'exp+load':>9s} {'create':>7s} {'make_desc':>9s}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.methods:
            method = get_method(name)()
            path = Path(tmp) / f"{name}.safetensors"
            method.condense(ancestry).save(path)
            t_load, gene = timed(lambda: Learngene.load(path), args.reps)

            def expand():
                with torch.no_grad():
                    return method.expand(gene, spec)

            t_expand, state = timed(expand, args.reps)
            model = spec.create_model()
            t_sd, _ = timed(lambda: model.load_state_dict(state, strict=False), args.reps)
            t_both, _ = timed(lambda: model.load_state_dict(expand(), strict=False), args.reps)
            t_create, _ = timed(spec.create_model, args.reps)
            t_make, made = timed(lambda: make_descendant(gene, spec), args.reps)
            assert made.state_dict()["blocks.11.mlp.fc2.weight"].equal(
                ancestry.model.state_dict()["blocks.11.mlp.fc2.weight"]
            )
            print(
                f"{name:18s} {t_load:7.3f} {t_expand:7.3f} {t_sd:8.3f} {t_both:9.3f} {t_create:7.3f} {t_make:9.3f}   "
                f"(seconds; expand + load_state_dict {'<' if t_both < 1 else '>='} 1 s target)"
            )


if __name__ == "__main__":
    main()
