"""FLOP rate of ancestry training as a fraction of this machine's fp32 GEMM peak, and where the rest goes.

1. Peak: the best rate of a large square fp32 ``torch.matmul`` (2·n³ FLOPs), measured before and
   after the training runs (the machine may be shared; both numbers are printed).
2. Training: ``learngene.train`` on the profile's ancestry size; the rate counts 3× the spec's
   forward matmul FLOPs per image (forward + the two backward matmuls), as papers count them.
3. Where the time goes: the phases of a step timed apart (data, forward, loss, backward, clipping,
   AdamW), then ``torch.profiler`` over a few steps of ``learngene.train``, self CPU time grouped
   into GEMMs (with the rate they reach inside), attention kernels, element-wise/normalization ops,
   the optimizer's own kernels and the rest.

    PYTHONPATH=src python benchmarks/flop_rate.py                          # cpu profile ancestry, batch 256
    PYTHONPATH=src python benchmarks/flop_rate.py --preset cpu_small --steps 20
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from learngene.bench import get_profile
from learngene.data import ImageData
from learngene.training.loop import TrainConfig, train
from learngene.vit.spec import get_preset

# profiler op name -> category (first matching prefix wins)
CATEGORIES = (
    (
        "gemm",
        (
            "aten::addmm",
            "aten::mm",
            "aten::bmm",
            "aten::matmul",
            "aten::linear",
            "aten::convolution",
            "aten::mkldnn_convolution",
            "aten::convolution_backward",
            "aten::_convolution",
        ),
    ),
    (
        "attention",
        (
            "aten::_scaled_dot_product",
            "aten::scaled_dot_product",
            "aten::_flash_attention",
            "aten::softmax",
            "aten::_softmax",
        ),
    ),
    (
        "optimizer",
        (
            "aten::_foreach",
            "Optimizer.",
            "aten::addcdiv",
            "aten::lerp",
            "aten::_fused_adamw",
            "torch::autograd::AccumulateGrad",
            "aten::clamp",
            "aten::linalg_vector_norm",
            "aten::_local_scalar_dense",
        ),
    ),
    (
        "element-wise / norm",
        (
            "aten::gelu",
            "aten::native_layer_norm",
            "aten::layer_norm",
            "aten::add",
            "aten::mul",
            "aten::div",
            "aten::sub",
            "aten::copy_",
            "aten::native_layer_norm_backward",
            "aten::gelu_backward",
            "aten::_softmax_backward",
            "aten::sum",
            "aten::fill_",
            "aten::zero_",
            "aten::cat",
            "aten::clone",
            "aten::empty",
            "aten::t",
            "aten::transpose",
            "aten::view",
            "aten::reshape",
            "aten::permute",
            "aten::contiguous",
            "aten::unbind",
            "aten::select",
            "aten::slice",
            "aten::expand",
            "aten::as_strided",
        ),
    ),
    (
        "loss / data",
        (
            "aten::cross_entropy",
            "aten::log_softmax",
            "aten::nll_loss",
            "aten::_log_softmax",
            "aten::index",
            "aten::randperm",
            "aten::to",
            "aten::_to_copy",
            "aten::argmax",
            "aten::eq",
        ),
    ),
)


def gemm_peak(n: int, reps: int = 5) -> float:
    """Best GFLOP/s of an n×n fp32 matmul."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)
    best = 0.0
    for _ in range(reps):
        tic = time.perf_counter()
        torch.matmul(a, b)
        best = max(best, 2 * n**3 / (time.perf_counter() - tic) / 1e9)
    return best


def category(name: str) -> str:
    for cat, prefixes in CATEGORIES:
        if name.startswith(prefixes):
            return cat
    return "other"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", help="spec preset (default: the cpu benchmark profile's ancestry)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--gemm-n", type=int, default=2048)
    args = p.parse_args()

    spec = get_preset(args.preset) if args.preset else get_profile("cpu").ancestry
    n = args.steps * args.batch_size
    gen = torch.Generator().manual_seed(0)
    data = ImageData(
        torch.randint(0, 256, (n, spec.in_chans, spec.img_size, spec.img_size), generator=gen, dtype=torch.uint8),
        torch.randint(0, spec.num_classes, (n,), generator=gen),
        spec.num_classes,
        (0.5,) * spec.in_chans,
        (0.25,) * spec.in_chans,
    )
    cfg = TrainConfig(epochs=1, batch_size=args.batch_size, device="cpu", progress=False)

    peak_before = max(gemm_peak(args.gemm_n), gemm_peak(args.gemm_n * 2, reps=2))
    train(spec.create_model(), data.subset(torch.arange(3 * args.batch_size)), cfg)  # warm-up
    rates = []
    for _ in range(args.reps):
        model = spec.create_model()
        tic = time.perf_counter()
        train(model, data, cfg)
        rates.append(3 * spec.flops * n / (time.perf_counter() - tic) / 1e9)
    peak_after = max(gemm_peak(args.gemm_n), gemm_peak(args.gemm_n * 2, reps=2))
    peak = max(peak_before, peak_after)
    rate = statistics.median(rates)
    print(
        f"{spec.short()} ({spec.num_params:,} params, {spec.flops / 1e6:.1f} MFLOP forward per image), batch "
        f"{args.batch_size}, {torch.get_num_threads()} threads"
    )
    print(
        f"fp32 GEMM peak (torch.matmul {args.gemm_n} and {2 * args.gemm_n}): {peak_before:.0f} GFLOP/s before, "
        f"{peak_after:.0f} after"
    )
    print(
        f"training (3 x forward matmul FLOPs): {rate:.0f} GFLOP/s median of {args.reps} "
        f"({', '.join(f'{r:.0f}' for r in rates)}) = {rate / peak:.1%} of peak, "
        f"{rate * 1e9 / (3 * spec.flops):.0f} img/s"
    )

    # where the time goes (1): the phases of the same step, timed one by one
    phases = step_phases(spec, data, args.batch_size, steps=min(args.steps, 8))
    total = sum(phases.values())
    print(f"\nphases of a training step (median of {min(args.steps, 8)} steps, {total * 1e3:.0f} ms per step):")
    for name, t in phases.items():
        print(f"  {name:22s} {t * 1e3:7.1f} ms {t / total:6.1%}")

    # where the time goes (2): torch.profiler over a few steps of learngene.train
    model = spec.create_model()
    small = data.subset(torch.arange(min(n, 6 * args.batch_size)))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        train(model, small, cfg)
    self_time: dict[str, float] = defaultdict(float)
    gemm_flops = 0.0
    ops: dict[str, float] = defaultdict(float)
    for evt in prof.key_averages():
        if evt.key.startswith(("ProfilerStep", "## ", "Optimizer.", "autograd::engine")):
            continue
        cat = category(evt.key)
        self_time[cat] += evt.self_cpu_time_total
        ops[evt.key] += evt.self_cpu_time_total
        if cat == "gemm":
            gemm_flops += evt.flops or 0
    total = sum(self_time.values())
    print(f"\nprofile of {len(small) // args.batch_size} steps of learngene.train: self CPU time by op kind")
    for cat, t in sorted(self_time.items(), key=lambda kv: -kv[1]):
        extra = (
            f"  ({gemm_flops / (t / 1e6) / 1e9:.0f} GFLOP/s inside these ops, by the profiler's FLOP count)"
            if cat == "gemm" and t
            else ""
        )
        print(f"  {cat:22s} {t / 1e6:7.2f} s {t / total:6.1%}{extra}")
    print("top ops by self CPU time:")
    for key, t in sorted(ops.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {key[:60]:60s} {t / 1e6:7.3f} s {t / total:6.1%}")


def step_phases(spec, data: ImageData, batch: int, steps: int) -> dict[str, float]:
    """Median seconds of each phase of the step ``learngene.train`` takes (same ops, timed apart)."""
    model = spec.create_model().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    times: dict[str, list[float]] = defaultdict(list)
    for step in range(steps + 1):
        clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            if step:  # the first step warms up
                times[name].append(now - clock)
            clock = now

        x, y, _ = data.get_batch(torch.arange(step * batch, (step + 1) * batch) % len(data))
        lap("data (uint8 -> float)")
        logits = model(x)
        lap("forward")
        loss = torch.nn.functional.cross_entropy(logits, y)
        lap("loss")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        lap("backward")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        lap("gradient clipping")
        optimizer.step()
        lap("AdamW step")
    return {name: statistics.median(t) for name, t in times.items()}


if __name__ == "__main__":
    main()
