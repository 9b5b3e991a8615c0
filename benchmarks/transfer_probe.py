"""Why does mimetic beat the stored weights on unseen classes? A linear probe against the full fine-tune.

Reads the ancestries and genes that ``learngene bench --profile transfer`` cached in its out folder
(it trains nothing upstream; run the bench first) and, for each method, upstream and seed, builds the
transfer task's descendant with the task's fresh head and trains it two ways with the task's budget
(20 labels per unseen class, 5 epochs of batch 25, the bench's AdamW and schedule):

- ``probe``: only the head trains, the body stays the initialization: how linearly separable the
  unseen classes are in the features the initialization gives;
- ``finetune``: everything trains, as in the bench.

A method whose probe is above mimetic's but whose fine-tune is below it has useful features that the
fine-tune does not keep; one whose probe is below has features that do not separate the new classes.

    PYTHONPATH=src python benchmarks/transfer_probe.py --out runs/bench-transfer
"""

from __future__ import annotations

import argparse
import statistics

from learngene.bench import get_profile
from learngene.bench.profiles import Task
from learngene.bench.protocol import BenchRun
from learngene.bench.tasks import load_task
from learngene.descendant import make_descendant
from learngene.pipeline.fine_tuning import fresh_head
from learngene.training.loop import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench-transfer", help="the transfer bench's out folder (its cache)")
    parser.add_argument("--upstreams", nargs="+", default=["A-short", "A-converged", "B-short", "B-converged"])
    parser.add_argument("--methods", nargs="+", default=["scratch", "mimetic", "pretrained", "tleg", "wave"])
    parser.add_argument("--size", type=int, nargs=3, default=(4, 64, 4), metavar=("DEPTH", "WIDTH", "HEADS"))
    args = parser.parse_args()

    profile = get_profile("transfer")
    run = BenchRun(profile, args.out, progress=False)
    loaded: dict = {}
    load_task(Task("upstream", "fashion_mnist", epochs=1), profile.ancestry, None, loaded)
    task = profile.tasks[0]
    print(
        f"top-1 (%) on {task.eval_images} test images of the unseen classes, mean ± std over seeds "
        f"{', '.join(map(str, profile.seeds))}; L{args.size[0]}-D{args.size[1]}-H{args.size[2]}"
    )
    print(f"{'upstream':14s} {'method':11s} {'probe':>12s} {'finetune':>12s}")
    for up in (u for u in profile.upstreams if u.name in args.upstreams):
        td = load_task(task, profile.ancestry, None, loaded, up.classes)
        anc_images, upstream, upstream_eval = run._upstream_data(up, loaded)
        ancestry = run.ancestry(anc_images, upstream_eval, up)  # from the cache
        spec = run.ancestry_spec(up).replace(depth=args.size[0], embed_dim=args.size[1], num_heads=args.size[2])
        for name in args.methods:
            gene, key = run.gene(name, ancestry, upstream, upstream_eval, up.condense_epochs)
            accs: dict[str, list[float]] = {"probe": [], "finetune": []}
            for seed in profile.seeds:
                init, _, _ = run.initial_gene(gene, key, spec, seed, upstream)
                for mode in accs:
                    model = make_descendant(init, spec, seed=seed)
                    fresh_head(model, spec, seed)
                    if mode == "probe":
                        model.requires_grad_(False)
                        model.get_classifier().requires_grad_(True)
                    cfg = run._cfg(
                        epochs=task.epochs,
                        seed=seed,
                        eval_every=0,
                        eval_images=task.eval_images,
                        batch_size=task.batch_size,
                    )
                    accs[mode].append(100 * train(model, td.train, cfg, eval_data=td.eval).final_acc)
            cells = [f"{statistics.fmean(v):5.1f} ± {statistics.stdev(v):4.1f}" for v in accs.values()]
            print(f"{up.name:14s} {name:11s} {cells[0]:>12s} {cells[1]:>12s}", flush=True)


if __name__ == "__main__":
    main()
