"""Training speed and MFU: plain timm training, our ancestry step and our aux-net step, side by side in one run.

Three steps of the same ViT (ViT-S/16 and ViT-B/16 at 224 px, 1000 classes; ``--quick``: small sizes for a CPU):

- ``plain timm``: what a timm user writes: ``timm.create_model``, AdamW, bf16 autocast (CUDA),
  cross-entropy, backward, gradient clipping, step; inputs are random tensors already on the device.
- ``ours ancestry``: :func:`learngene.training.loop.train` on a plain timm ViT (the loop that trains
  ancestries and descendants), on in-memory uint8 images.
- ``ours aux-net``: the same loop on the aux net of TLEG (:class:`GeneNet`: every forward expands the
  gene's tensors into the ViT's weights), as in condensation, here with cross-entropy only (λ = 0) so
  that the step itself is compared, not the teacher.

``--kinds`` picks some of them (``plain ancestry`` for a compiled run: the aux net compiles a graph of its own,
and the ratio the speed goal reads is the ancestry step's). The same flags go to all three: ``--compile`` (``torch.compile``), fused AdamW (default: on CUDA),
SDPA attention (timm's ``fused_attn``; flash kernels on CUDA in bf16). Images/s are over the timed
steps after warm-up steps (compilation happens there); the loop's steps are timed by the loop itself (its
epoch seconds, which wait for the device to finish), the plain ones here, both after a device sync. MFU = images/s × 3 × forward matmul FLOPs per
image / the device's dense bf16 peak (a table by device name below; ``n/a`` on a CPU or an unknown
device). Nothing here estimates: a device that did not run prints no number.

    PYTHONPATH=src python benchmarks/gpu_speed.py --quick                      # CPU: small sizes
    PYTHONPATH=src python benchmarks/gpu_speed.py --batch-size 256             # a GPU: ViT-S/16 and ViT-B/16
    PYTHONPATH=src python benchmarks/gpu_speed.py --batch-size 256 --compile --kinds plain ancestry
    ... --json rows.jsonl                     # also one JSON line per size and step (benchmarks/gpu_check.py reads it)

Without a GPU (and without ``--quick``) it refuses in one line with exit code 2 rather than time ViT-B on a CPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from learngene.data import ImageData
from learngene.errors import LearngeneError
from learngene.training.loop import (
    TrainConfig,
    autocast,
    resolve_device,
    set_fused_attention,
    train,
    uses_fused_adamw,
)
from learngene.vit.spec import ViTSpec

# dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets, TFLOP/s; first matching name wins
BF16_PEAK_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM5 (device names "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM ...")
    ("H200", 989.4),
    ("GH200", 989.4),
    ("A100", 312.0),
    ("L40S", 362.0),
)

SIZES = {
    "ViT-S/16": ViTSpec(
        depth=12, embed_dim=384, num_heads=6, img_size=224, patch_size=16, in_chans=3, num_classes=1000
    ),
    "ViT-B/16": ViTSpec(
        depth=12, embed_dim=768, num_heads=12, img_size=224, patch_size=16, in_chans=3, num_classes=1000
    ),
}
QUICK_SIZES = {
    "L4-D96-H3 64px/16": ViTSpec(
        depth=4, embed_dim=96, num_heads=3, img_size=64, patch_size=16, in_chans=3, num_classes=100
    ),
    "L4-D192-H3 64px/16": ViTSpec(
        depth=4, embed_dim=192, num_heads=3, img_size=64, patch_size=16, in_chans=3, num_classes=100
    ),
}


def peak_flops(device: torch.device) -> tuple[float | None, str]:
    """(dense bf16 peak in FLOP/s, device name); the peak is None on a CPU or a GPU not in the table."""
    if device.type != "cuda":
        return None, "cpu"
    name = torch.cuda.get_device_name(device)
    for key, tflops in BF16_PEAK_TFLOPS:
        if key in name:
            return tflops * 1e12, name
    return None, name


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_step_rate(
    model: torch.nn.Module,
    input_size,
    num_classes: int,
    batch: int,
    steps: int,
    device: torch.device,
    compile: bool = False,
    fused_adamw: bool | None = None,
    warmup: int = 2,
) -> float:
    """Images/s of a hand-written timm training step (random inputs already on the device)."""
    model = model.to(device).train()
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=1e-4,
        weight_decay=0.05,
        fused=device.type == "cuda" if fused_adamw is None else fused_adamw,
    )
    net = torch.compile(model) if compile else model
    x = torch.randn(batch, *input_size, device=device)
    y = torch.randint(0, num_classes, (batch,), device=device)

    def step() -> None:
        with autocast(device):
            loss = F.cross_entropy(net(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(warmup):
        step()
    _sync(device)
    tic = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return batch * steps / (time.perf_counter() - tic)


@functools.cache
def random_images(spec: ViTSpec, n: int) -> ImageData:
    """``n`` random uint8 images and labels in memory, made once per size (ViT-B's take seconds to draw)."""
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, spec.in_chans, spec.img_size, spec.img_size), generator=gen, dtype=torch.uint8)
    return ImageData(
        images,
        torch.randint(0, spec.num_classes, (n,), generator=gen),
        spec.num_classes,
        (0.5,) * spec.in_chans,
        (0.25,) * spec.in_chans,
        name="random",
    )


def loop_step_rate(
    model: torch.nn.Module, spec: ViTSpec, batch: int, steps: int, warmup: int, cfg: TrainConfig
) -> float:
    """Images/s of :func:`learngene.training.loop.train`: epoch 1 is the warm-up, epoch 2 is timed (its own seconds)."""
    n = max(steps, warmup) * batch
    result = train(model, random_images(spec, n), cfg.replace(epochs=2, batch_size=batch, max_steps=None))
    seconds = result.history[1]["seconds"] - result.history[0]["seconds"]
    return n / seconds


def aux_net(spec: ViTSpec) -> torch.nn.Module:
    from learngene.descendant import GeneNet
    from learngene.methods.tleg import TLEG

    method = TLEG()
    return GeneNet(method, method.new_gene(method.initial_tensors(spec), spec, None), spec)


def _count(least: int):
    """An argparse type: an integer of at least ``least``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes for a CPU")
    p.add_argument("--batch-size", type=_count(1), default=256, help="(default: %(default)s; --quick: 32)")
    p.add_argument("--steps", type=_count(1), default=20, help="timed steps (default: %(default)s; --quick: 4)")
    p.add_argument("--warmup", type=_count(0), default=5, help="untimed steps first (default: %(default)s; --quick: 2)")
    p.add_argument(
        "--compile", action="store_true", help="torch.compile the model (and the aux net's expand + forward)"
    )
    p.add_argument(
        "--fused-adamw",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fused AdamW kernel (default: on CUDA only)",
    )
    p.add_argument(
        "--sdpa",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="attention through torch's scaled_dot_product_attention (flash on CUDA) (default: on)",
    )
    p.add_argument("--sizes", nargs="+", help="only these sizes (names as printed)")
    p.add_argument(
        "--kinds",
        nargs="+",
        choices=KINDS,
        default=list(KINDS),
        help="only these steps (default: all; the ratio column needs plain)",
    )
    p.add_argument("--json", metavar="PATH", help="append one JSON line per size and step to PATH")
    p.add_argument(
        "--reps", type=_count(1), default=3, help="interleaved repetitions of each step (default: %(default)s)"
    )
    p.add_argument("--device", default="auto", help="(default: %(default)s)")
    args = p.parse_args(argv)
    if args.quick:
        args.batch_size = 32 if args.batch_size == 256 else args.batch_size
        args.steps, args.warmup = (4 if args.steps == 20 else args.steps), (2 if args.warmup == 5 else args.warmup)
    return args


# the steps timed, by the names --kinds takes, and as the table prints them
KINDS = {"plain": "plain timm", "ancestry": "ours ancestry", "aux-net": "ours aux-net (tleg)"}


def check_run(args: argparse.Namespace) -> tuple[torch.device, dict[str, ViTSpec]]:
    """The device and sizes to time, or one line (LearngeneError) on why not: checked before anything is built."""
    device = resolve_device(args.device)
    if device.type != "cuda" and not args.quick:
        why = "no CUDA device is visible" if args.device == "auto" else f"--device {args.device} was given"
        raise LearngeneError(
            f"gpu_speed.py times ViT-S/16 and ViT-B/16 at 224 px and needs a GPU, but {why}; run it on a GPU "
            f"machine, or pass --quick for small sizes on a CPU"
        )
    sizes = QUICK_SIZES if args.quick else SIZES
    unknown = [name for name in args.sizes or () if name not in sizes]
    if unknown:
        raise LearngeneError(f"unknown size(s) {', '.join(map(repr, unknown))}; choose from {', '.join(sizes)}")
    return device, sizes


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        device, sizes = check_run(args)
    except LearngeneError as exc:
        print(f"gpu_speed.py: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    peak, device_name = peak_flops(device)
    fused = uses_fused_adamw(TrainConfig(fused_adamw=args.fused_adamw), device)
    cfg = TrainConfig(
        lr=1e-4, device=str(device), progress=False, compile=args.compile, fused_adamw=fused, sdpa=args.sdpa
    )
    print(
        f"device: {device_name}; dense bf16 peak: {f'{peak / 1e12:.1f} TFLOP/s' if peak else 'n/a'}; "
        f"precision: {'bf16 autocast' if device.type == 'cuda' else 'fp32'}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
        + (f", load average {os.getloadavg()[0]:.1f}" if device.type == "cpu" else "")
    )
    print(
        f"batch {args.batch_size}, {args.warmup} warm-up + {args.steps} timed steps; compile {args.compile}, "
        f"fused AdamW {fused}, SDPA {args.sdpa}"
    )
    print(
        f"{'size':20s} {'step':20s} {'images/s':>10s} {'MFU':>7s} {'vs plain':>9s}   (medians of {args.reps} interleaved reps)"
    )
    for name, spec in sizes.items():
        if not args.sizes or name in args.sizes:
            for row in time_size(name, spec, args, cfg, device, fused):
                mfu = f"{100 * row['images_per_s'] * 3 * spec.flops / peak:6.1f}%" if peak else "    n/a"
                ratio = f"{row['vs_plain']:9.3f}" if row["vs_plain"] is not None else "      n/a"
                print(f"{name:20s} {KINDS[row['kind']]:20s} {row['images_per_s']:10.1f} {mfu} {ratio}", flush=True)
                if args.json:
                    row.update(device=device_name, compile=args.compile, batch=args.batch_size, steps=args.steps)
                    row.update(warmup=args.warmup, mfu=row["images_per_s"] * 3 * spec.flops / peak if peak else None)
                    with open(args.json, "a") as fh:
                        fh.write(json.dumps(row) + "\n")


def time_size(
    name: str, spec: ViTSpec, args: argparse.Namespace, cfg: TrainConfig, device: torch.device, fused: bool
) -> list[dict]:
    """Images/s of each step in ``args.kinds`` for one size (medians of ``args.reps`` interleaved repetitions),
    and its ratio to the plain step's rate in the same repetition (None without the plain step)."""
    shape = (spec.in_chans, spec.img_size, spec.img_size)

    def plain() -> float:
        torch.manual_seed(0)
        model = spec.create_model()
        set_fused_attention(model, args.sdpa)
        return plain_step_rate(
            model, shape, spec.num_classes, args.batch_size, args.steps, device, args.compile, fused, args.warmup
        )

    steps = {
        "plain": plain,
        "ancestry": lambda: loop_step_rate(spec.create_model(), spec, args.batch_size, args.steps, args.warmup, cfg),
        "aux-net": lambda: loop_step_rate(aux_net(spec), spec, args.batch_size, args.steps, args.warmup, cfg),
    }
    names = [kind for kind in KINDS if kind in args.kinds]
    rates: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(args.reps):  # the order rotates, so that load drifting on a shared machine hits all alike
        for step in names[rep % len(names) :] + names[: rep % len(names)]:
            rates[step].append(steps[step]())
            # as it is measured, so that a run stopped part-way (a time limit) still shows it
            print(f"# {name} {KINDS[step]}, rep {rep + 1}: {rates[step][-1]:.1f} images/s", file=sys.stderr, flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return [
        {
            "size": name,
            "kind": step,
            "images_per_s": statistics.median(rates[step]),
            "vs_plain": statistics.median(r / p for r, p in zip(rates[step], rates["plain"]))
            if "plain" in rates
            else None,
            "rates": rates[step],
        }
        for step in names
    ]


if __name__ == "__main__":
    main()
