"""Is data input the bottleneck? Decode throughput of an image folder for N DataLoader workers, next to the train step.

1. Writes a folder of generated RGB images (JPEG or PNG, about 224-270 px so that resizing and
   cropping do work) with :func:`learngene.data.write_image_folder`.
2. Streams it with learngene's folder pipeline (:func:`learngene.data.load_dataset`: the model's
   preprocessing from its timm ``pretrained_cfg``, optionally DeiT's augmentation) through
   :class:`learngene.data.Batches` for each worker count, and reports images/s. The first batch (worker
   start-up) is timed apart; the steady rate is over the rest of the epoch.
3. Times the train step of the same timm model in the same run (forward, cross-entropy, backward,
   AdamW; bf16 autocast on CUDA), on random tensors already on the device, and prints which is slower.

On a GPU machine the decoders run on the CPU cores while the GPU trains, so input keeps up when the
decode rate with the workers you use is above the step's rate.

    PYTHONPATH=src python benchmarks/decode_speed.py                               # 224 px JPEG, ViT-S/16
    PYTHONPATH=src python benchmarks/decode_speed.py --fmt png --workers 0 1 2 --aug deit
    PYTHONPATH=src python benchmarks/decode_speed.py --images 2048 --workers 0 4 8 16 --batch-size 256 --device cuda
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_speed import plain_step_rate  # noqa: E402

from learngene.data import Batches, load_dataset, preprocessing_cfg, write_image_folder  # noqa: E402
from learngene.training.loop import resolve_device  # noqa: E402


def decode_rate(folder: Path, pre: dict, workers: int, batch_size: int, augment: str) -> tuple[float, float, int]:
    """(seconds to the first batch, steady images/s after it, images) for one pass over the folder."""
    data = load_dataset(f"folder:{folder}", "train", preprocessing=pre, augment=augment, workers=workers)
    batches = Batches(data, batch_size, shuffle=True, seed=0)
    tic = time.perf_counter()
    it = iter(batches)
    next(it)
    first = time.perf_counter() - tic
    tic, count = time.perf_counter(), 0
    for batch in it:
        count += len(batch.y)
    return first, count / (time.perf_counter() - tic), count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--model",
        default="vit_small_patch16_224",
        help="timm model: preprocessing and train step (default: %(default)s)",
    )
    p.add_argument("--images", type=int, default=640, help="images in the generated folder (default: %(default)s)")
    p.add_argument("--size", type=int, default=224, help="side of the generated images (default: %(default)s)")
    p.add_argument("--fmt", choices=("jpg", "png"), default="jpg", help="image format (default: %(default)s)")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="worker counts to time (default: 0 1 2)")
    p.add_argument(
        "--aug", choices=("none", "deit"), default="none", help="training augmentation (default: %(default)s)"
    )
    p.add_argument("--batch-size", type=int, default=64, help="(default: %(default)s)")
    p.add_argument("--train-batch-size", type=int, help="batch of the timed train step (default: --batch-size)")
    p.add_argument(
        "--train-steps", type=int, default=3, help="timed train steps after 2 warm-up steps (default: %(default)s)"
    )
    p.add_argument("--device", default="auto", help="device of the train step (default: %(default)s)")
    p.add_argument("--folder", help="use this image folder (class sub-folders) instead of generating one")
    args = p.parse_args()

    import timm

    device = resolve_device(args.device)
    model = timm.create_model(args.model, pretrained=False, num_classes=10)
    pre = preprocessing_cfg(model)
    with tempfile.TemporaryDirectory() as tmp:
        if args.folder:
            folder = Path(args.folder)
        else:
            folder = (
                write_image_folder(
                    Path(tmp) / "images",
                    num_classes=10,
                    per_class=max(1, args.images // 10),
                    size=args.size,
                    fmt=args.fmt,
                    splits=("train",),
                )
                / "train"
            )
        print(f"{args.model}: preprocessing {pre}")
        print(
            f"folder: {folder if args.folder else f'{args.images} generated {args.size}-{int(args.size * 1.2)} px {args.fmt.upper()}s'}, "
            f"batch {args.batch_size}, --aug {args.aug}, {len(os.sched_getaffinity(0))} CPUs usable, "
            f"torch threads {torch.get_num_threads()}"
        )
        rates = {}
        for workers in args.workers:
            first, rate, count = decode_rate(folder, pre, workers, args.batch_size, args.aug)
            rates[workers] = rate
            print(
                f"  decode, {workers:2d} workers: {rate:8.1f} images/s steady ({count} images), first batch after {first:.2f} s"
            )
    train_batch = args.train_batch_size or args.batch_size
    step = plain_step_rate(model, pre["input_size"], 10, train_batch, args.train_steps, device)
    print(
        f"  train step ({args.model}, batch {train_batch}, {device.type}{', bf16 autocast' if device.type == 'cuda' else ', fp32'}): "
        f"{step:8.1f} images/s"
    )
    best = max(rates, key=rates.get)
    verdict = "data input is NOT the bottleneck" if rates[best] >= step else "data input IS the bottleneck"
    print(
        f"  best decode rate ({best} workers) / train step rate = {rates[best] / step:.2f}: {verdict} on this machine"
    )


if __name__ == "__main__":
    main()
