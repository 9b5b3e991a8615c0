"""Scale: a ViT-g-sized ancestry (random weights) through every weight-picking method, on a CPU machine.

Writes a random-weight checkpoint of ``--arch`` (default ``vit_giant_patch14_dinov2``, 1.1 B parameters,
4.5 GB as float32 safetensors), then for each method runs, each in its own process,

1. ``learngene condense --method M --ancestry CKPT --timm-model ARCH --img-size S``, and
2. ``learngene expand`` of that gene to a ViT-S-sized descendant (depth 12, 6 heads of the ancestry's
   head size: 384 wide for ViT-g/14's 64-dim heads) written as a timm hub folder; the block-copying
   methods (pretrained, heru_lg, auto_lg) keep the ancestry's width by design, so they expand to 2 blocks
   of it instead,

and prints the wall time and the peak resident memory (the child's ``ru_maxrss`` from ``os.wait4``:
anonymous memory plus the pages of memory-mapped files it touched) of every step, against the
checkpoint's size. mimetic needs no ancestry and TLEG / WAVE / Share-Init train an aux net by
distillation (a forward of the ancestry per step), so they are not weight pickers and are not run here.

    python benchmarks/scale.py                       # everything, in /tmp/learngene-scale (deleted after)
    python benchmarks/scale.py --methods weight_selection peg --keep

Nothing here is cached: it is meant to be run once, not in a loop (it needs ~2x the checkpoint in disk
and up to ~1.5x in RAM).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

WEIGHT_PICKERS = ("pretrained", "heru_lg", "auto_lg", "weight_selection", "peg", "cluster")
BLOCK_COPIERS = ("pretrained", "heru_lg", "auto_lg")
GIB = 1024**3


def run(argv: list[str], log: Path) -> tuple[float, int, int]:
    """Run ``argv`` as a child process: (wall seconds, peak RSS in bytes, exit code); output to ``log``."""
    start = time.perf_counter()
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss * 1024, proc.returncode  # ru_maxrss is in KiB on Linux


MAKE = """
import sys, torch, timm
from learngene.formats.weights import save_safetensors
torch.manual_seed(0)
model = timm.create_model(sys.argv[1], pretrained=False)  # timm's own init; the one copy in RAM
save_safetensors(sys.argv[2], model.state_dict(), {"format": "pt"})
print(sum(p.numel() for p in model.parameters()))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="vit_giant_patch14_dinov2", help="timm architecture of the ancestry")
    parser.add_argument(
        "--img-size", type=int, default=224, help="input size the ancestry is loaded at (default: %(default)s)"
    )
    parser.add_argument("--methods", nargs="+", default=list(WEIGHT_PICKERS), choices=WEIGHT_PICKERS)
    parser.add_argument("--workdir", default="/tmp/learngene-scale", help="scratch folder (default: %(default)s)")
    parser.add_argument("--cluster-images", type=int, default=8, help="images cluster measures attention on")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and outputs")
    args = parser.parse_args()

    import timm
    import torch

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    ckpt = work / f"{args.arch}.safetensors"
    py = sys.executable
    rows = []
    try:
        if not ckpt.exists():
            seconds, rss, rc = run([py, "-c", MAKE, args.arch, str(ckpt)], log)
            if rc:
                sys.exit(f"writing the checkpoint failed; see {log}")
            rows.append(("(write checkpoint)", "", seconds, rss, None, None, ""))
        size = ckpt.stat().st_size
        with torch.device("meta"):
            probe = timm.create_model(args.arch, pretrained=False)
        params = sum(p.numel() for p in probe.parameters())
        head_dim = probe.embed_dim // probe.blocks[0].attn.num_heads
        print(f"ancestry: {args.arch}, {params / 1e9:.3f} B parameters, {size / GIB:.2f} GiB checkpoint ({ckpt})")
        for method in args.methods:
            gene = work / f"{method}.safetensors"
            argv = [
                py,
                "-m",
                "learngene",
                "condense",
                "--method",
                method,
                "--ancestry",
                str(ckpt),
                "--timm-model",
                args.arch,
                "--img-size",
                str(args.img_size),
                "--out",
                str(gene),
                "--quiet",
                "--overwrite",
            ]
            if method == "cluster":
                argv += [
                    "--data",
                    "digits",
                    "--opt",
                    f"num_images={args.cluster_images}",
                    "--opt",
                    f"batch_size={args.cluster_images}",
                ]
            c_sec, c_rss, rc = run(argv, log)
            if rc:
                rows.append((method, "condense failed", c_sec, c_rss, None, None, f"exit {rc}, see {log}"))
                continue
            if method in BLOCK_COPIERS:
                target = ["--depth", "2"]
                what = f"L2-D{probe.embed_dim} (the ancestry's width: this method copies whole blocks)"
            else:
                target = ["--depth", "12", "--num-heads", "6", "--embed-dim", str(6 * head_dim)]
                what = f"L12-D{6 * head_dim}-H6"
            e_sec, e_rss, rc = run(
                [
                    py,
                    "-m",
                    "learngene",
                    "expand",
                    str(gene),
                    *target,
                    "--out",
                    str(work / f"{method}-descendant"),
                    "--format",
                    "hub",
                    "--overwrite",
                    "--quiet",
                ],
                log,
            )
            rows.append(
                (
                    method,
                    what,
                    c_sec,
                    c_rss,
                    e_sec if not rc else None,
                    e_rss,
                    f"gene {gene.stat().st_size / GIB:.2f} GiB" + (f"; expand exit {rc}, see {log}" if rc else ""),
                )
            )
            if not args.keep:  # a gene can be as big as the checkpoint: free the disk before the next one
                gene.unlink()
                shutil.rmtree(work / f"{method}-descendant", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print(
        "\n| method | descendant | condense s | condense peak RSS | x checkpoint | expand s | expand peak RSS | note |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for method, what, c_sec, c_rss, e_sec, e_rss, note in rows:
        expand = (
            f"{e_sec:.0f} | {e_rss / GIB:.2f} GiB"
            if e_sec is not None
            else "- | -"
            if e_rss is None
            else f"failed | {e_rss / GIB:.2f} GiB"
        )
        print(f"| {method} | {what} | {c_sec:.0f} | {c_rss / GIB:.2f} GiB | {c_rss / size:.2f} | {expand} | {note} |")
    print(
        f"\npeak RSS: ru_maxrss of each child process (os.wait4); checkpoint {size / GIB:.2f} GiB; "
        f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}, torch {torch.__version__}, timm {timm.__version__}"
    )


if __name__ == "__main__":
    main()
