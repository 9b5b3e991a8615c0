"""Throughput of learngene's training loop relative to a bare timm + torch loop (target: ≥ 0.95×).

Both train the same timm ViT (same initial weights) on the same images with the same math: AdamW
with decoupled weight decay, cross-entropy, gradient clipping at 1.0 and a per-step LR schedule. The
bare loop is what one writes by hand: the images normalized to float once, a random permutation per
epoch, nothing else. learngene's loop adds what it is for: uint8 batches normalized on the fly,
deterministic resumable batch order, per-step loss/accuracy sums, the non-finite-loss check, a JSONL
log and checkpoint per epoch (only with a run dir: off here, as in ``learngene bench``'s timing,
and measured separately with ``--run-dir``).

The two run in interleaved repetitions (the order alternates) so that load drifting on a shared
machine hits both alike; the ratio is the median over repetitions of bare time / our time.

    PYTHONPATH=src python benchmarks/train_loop.py                       # cpu_tiny, batch 256
    PYTHONPATH=src python benchmarks/train_loop.py --preset cpu_small --steps 20
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from learngene.data import DEBIAN_FASHION_MNIST, ImageData, fashion_mnist, normalize
from learngene.training.loop import TrainConfig, train
from learngene.vit.spec import get_preset


def images(n: int, spec) -> ImageData:
    """Fashion-MNIST's first ``n`` training images when installed, else random ones of the same shape."""
    if DEBIAN_FASHION_MNIST.is_dir() and spec.img_size == 28 and spec.in_chans == 1:
        data = fashion_mnist("train")
        return data.subset(torch.arange(n))
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, spec.in_chans, spec.img_size, spec.img_size), generator=gen, dtype=torch.uint8)
    return ImageData(
        x,
        torch.randint(0, spec.num_classes, (n,), generator=gen),
        spec.num_classes,
        (0.5,) * spec.in_chans,
        (0.25,) * spec.in_chans,
        name="random",
    )


def ours(model: torch.nn.Module, data: ImageData, steps: int, batch: int, run_dir: str | None) -> float:
    cfg = TrainConfig(epochs=1, max_steps=steps, batch_size=batch, lr=1e-3, device="cpu", progress=False)
    tic = time.perf_counter()
    train(model, data, cfg, run_dir=run_dir)
    return time.perf_counter() - tic


def bare(model: torch.nn.Module, data: ImageData, steps: int, batch: int) -> float:
    tic = time.perf_counter()
    x_all = normalize(data.images, data.mean, data.std)
    y_all = data.labels
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3
    )
    warmup = max(1, steps // 5)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * max(0, s - warmup) / max(1, steps - warmup)))),
    )
    model.train()
    order = torch.randperm(len(y_all))
    for step in range(steps):
        idx = order[step * batch : (step + 1) * batch]
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    return time.perf_counter() - tic


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="cpu_tiny")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=30, help="optimizer steps per timed run")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--run-dir", action="store_true", help="let our loop write its log and checkpoint every epoch")
    args = p.parse_args()

    spec = get_preset(args.preset)
    data = images(args.steps * args.batch_size, spec)
    torch.manual_seed(0)
    init = spec.create_model().state_dict()

    def fresh() -> torch.nn.Module:
        model = spec.create_model()
        model.load_state_dict(init)
        return model

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = tmp if args.run_dir else None
        ours(fresh(), data, 3, args.batch_size, run_dir)  # warm-up: allocator, oneDNN primitives
        bare(fresh(), data, 3, args.batch_size)
        ratios, t_ours, t_bare = [], [], []
        for rep in range(args.reps):
            pair = {}
            for name in ("ours", "bare") if rep % 2 == 0 else ("bare", "ours"):
                pair[name] = (
                    ours(fresh(), data, args.steps, args.batch_size, run_dir)
                    if name == "ours"
                    else bare(fresh(), data, args.steps, args.batch_size)
                )
            t_ours.append(pair["ours"])
            t_bare.append(pair["bare"])
            ratios.append(pair["bare"] / pair["ours"])
    imgs = args.steps * args.batch_size
    print(
        f"{spec.short()} ({spec.num_params:,} params), batch {args.batch_size}, {args.steps} steps x {args.reps} "
        f"interleaved reps, {torch.get_num_threads()} threads" + (", with log+checkpoint" if args.run_dir else "")
    )
    print(f"bare timm+torch loop: {imgs / statistics.median(t_bare):7.0f} img/s (median)")
    print(f"learngene train():    {imgs / statistics.median(t_ours):7.0f} img/s (median)")
    print(
        f"throughput ratio ours/bare: median {statistics.median(ratios):.3f} "
        f"(per rep: {', '.join(f'{r:.3f}' for r in ratios)}; target >= 0.95)"
    )


if __name__ == "__main__":
    main()
