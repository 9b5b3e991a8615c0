"""What the training loop's host does for one batch of in-memory images before the GPU can use it, old way and new.

- ``float32 on the CPU`` (the loop up to 0c92777): ``ImageData.get_batch`` gathers the images and normalizes them to
  float32 on the CPU; the step then copies the 4-byte pixels from pageable memory to the GPU.
- ``uint8, pinned`` (now, on CUDA): ``ImageData.gather`` gathers the 1-byte pixels into pinned memory; the copy runs
  without holding the host and the GPU normalizes.

Without CUDA only the host's gathering and normalizing are timed, and the pinned buffer is a reused one (pinning needs
a GPU; torch's pinned-memory cache hands back the same blocks, so no page is touched for the first time); the copies
are left out on both sides. With CUDA each way is timed through to its float32 batch on the GPU (``Batches``), waited
for. Medians of interleaved repetitions.

    PYTHONPATH=src python benchmarks/batch_prep.py                    # 256 images of 3x224x224, from 2,560
    PYTHONPATH=src python benchmarks/batch_prep.py --batch-size 64 --img-size 32
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from learngene.data import Batches, ImageData


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--images", type=int, default=2560, help="images in memory (default: %(default)s)")
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args()
    gen = torch.Generator().manual_seed(0)
    shape = (args.images, 3, args.img_size, args.img_size)
    data = ImageData(
        torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8),
        torch.randint(0, 1000, (args.images,), generator=gen),
        1000,
        (0.485, 0.456, 0.406),
        (0.229, 0.224, 0.225),
    )
    cuda = torch.cuda.is_available()
    pinned = torch.empty((args.batch_size, *shape[1:]), dtype=torch.uint8)

    def old(idx: torch.Tensor) -> None:
        x, y, _ = data.get_batch(idx)
        if cuda:
            x.to("cuda"), y.to("cuda")

    def new(idx: torch.Tensor) -> None:
        if cuda:
            batches = Batches(data, args.batch_size, shuffle=True, seed=int(idx[0]), device=torch.device("cuda"))
            next(iter(batches))
        else:
            torch.index_select(data.images, 0, idx, out=pinned), data.labels[idx]

    times: dict[str, list[float]] = {"float32 on the CPU": [], "uint8, pinned": []}
    for rep in range(args.reps):
        for name, way in list(zip(times, (old, new)))[:: 1 if rep % 2 else -1]:
            idx = torch.randperm(args.images, generator=gen)[: args.batch_size]
            tic = time.perf_counter()
            way(idx)
            if cuda:
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - tic)
    where = torch.cuda.get_device_name() if cuda else f"CPU only, load average {os.getloadavg()[0]:.1f}"
    print(
        f"{args.batch_size} images of 3x{args.img_size}x{args.img_size} from {args.images:,}; {where}; "
        f"{torch.get_num_threads()} torch threads; medians (min) of {args.reps} interleaved repetitions"
    )
    for name, seconds in times.items():
        print(f"{name:20s} {1000 * statistics.median(seconds):9.1f} ms  ({1000 * min(seconds):.1f} ms)")
    ratio = statistics.median(a / b for a, b in zip(*times.values()))
    print(f"old / new: {ratio:.1f}x (median of the per-repetition ratios)")


if __name__ == "__main__":
    main()
