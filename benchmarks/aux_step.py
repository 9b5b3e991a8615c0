"""Cost of one aux-net training step (TLEG, Share-Init, WAVE) relative to a plain timm ViT step of the same shape.

Each step is what the training loop does: forward, cross-entropy, backward, gradient clipping and an
AdamW update. The variants are timed in interleaved repetitions (the order rotates every repetition)
so that load drifting on a shared machine hits them alike; the ratio reported is the median over
repetitions of (aux step time / plain step time in the same repetition), for wall-clock time and, on
CPU, for the process's CPU time (less disturbed by other processes competing for the cores), and the
ratio of the fastest steps (the least disturbed estimate on a busy machine).

    PYTHONPATH=src python benchmarks/aux_step.py                   # cpu_small shape, batch 256
    PYTHONPATH=src python benchmarks/aux_step.py --depth 4 --embed-dim 64 --num-heads 4
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from learngene.descendant import GeneNet
from learngene.methods.tleg import TLEG, ShareInit
from learngene.methods.wave import WAVE
from learngene.vit.spec import ViTSpec


def make_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()

    return step


def aux_net(method, spec: ViTSpec) -> GeneNet:
    gene = method.new_gene(method.initial_tensors(spec), spec, None)
    return GeneNet(method, gene, spec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--embed-dim", type=int, default=96)
    p.add_argument("--num-heads", type=int, default=6)
    p.add_argument("--img-size", type=int, default=28)
    p.add_argument("--patch-size", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    spec = ViTSpec(
        depth=args.depth,
        embed_dim=args.embed_dim,
        num_heads=args.num_heads,
        img_size=args.img_size,
        patch_size=args.patch_size,
        in_chans=1,
        num_classes=10,
    )
    x = torch.randn(args.batch_size, 1, args.img_size, args.img_size, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    models = {
        "plain": spec.create_model(),
        "tleg": aux_net(TLEG(), spec),
        "share_init": aux_net(ShareInit(), spec),
        "wave": aux_net(WAVE(), spec),
    }
    steps = {name: make_step(m.to(device).train(), x, y) for name, m in models.items()}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for step in steps.values():  # warm-up
        step(), step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    cpu_times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for rep in range(args.reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            sync()
            tic, cpu_tic = time.perf_counter(), time.process_time()
            steps[name]()
            sync()
            times[name].append(time.perf_counter() - tic)
            cpu_times[name].append(time.process_time() - cpu_tic)
    print(
        f"shape {spec.short()} mlp {spec.mlp_hidden}, {args.img_size}px/{args.patch_size}, batch {args.batch_size}, "
        f"{args.device}, {torch.get_num_threads()} threads, {args.reps} interleaved reps"
    )
    for name in names:
        wall = [t / p for t, p in zip(times[name], times["plain"])]
        line = (
            f"  {name:10s} median step {statistics.median(times[name]) * 1e3:7.1f} ms, fastest "
            f"{min(times[name]) * 1e3:7.1f} ms;  ratio to plain: fastest {min(times[name]) / min(times['plain']):.3f}, "
            f"wall median {statistics.median(wall):.3f} (min {min(wall):.2f}, max {max(wall):.2f})"
        )
        if device.type == "cpu":
            cpu = [t / p for t, p in zip(cpu_times[name], cpu_times["plain"])]
            line += f", CPU-time median {statistics.median(cpu):.3f}"
        print(line)


if __name__ == "__main__":
    main()
