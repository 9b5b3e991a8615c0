"""The torchrun stage of ``benchmarks/gpu_check.py``: ``learngene condense`` (tleg, a tiny ancestry, digits) under
``torchrun --nproc-per-node 1``, killed with SIGKILL mid-epoch and resumed with ``--resume``, against the same run
uninterrupted: the two genes must be equal bit for bit.

learngene joins a process group only for 2+ processes: under a 1-process torchrun it trains as a plain process, so
no NCCL call would run. So that DDP and NCCL run for real on a machine with one GPU, the compared runs go through
this file's ``--world-1-ddp`` mode, which makes the library treat a 1-process torchrun as distributed (it replaces
``launched_distributed`` and ``is_distributed`` in :mod:`learngene.training.distributed`: the process group is
joined, the model wrapped in DDP, every collective of the loop runs) and then calls the CLI. A plain
``torchrun ... -m learngene condense`` (what a user types) and a second uninterrupted DDP run go alongside the
first one; whether their genes equal it is reported, not required (the second DDP run tells a kernel that is not
deterministic apart from a resume that is not exact).

    PYTHONPATH=src python benchmarks/gpu_check_torchrun.py WORKDIR [--device cuda]   # the last stdout line: JSON

The kill takes the training process and torchrun's agent (every process below the torchrun command), as a crash
of the machine would; the resumed run starts from the checkpoint it left.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EPOCHS, STEPS_PER_EPOCH = 4, 40  # 640 digits in batches of 16; a checkpoint every 7 steps
JOINED = "gpu_check_torchrun: joined the process group:"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]


def world_1_ddp(argv: list[str]) -> int:
    """The CLI, with a 1-process torchrun treated as distributed (see the module's docstring)."""
    import torch.distributed as td

    from learngene.cli import main
    from learngene.training import distributed

    joined = distributed.init_from_env

    def join_and_say(device: str = "auto") -> None:
        joined(device)
        if td.is_initialized():
            print(f"{JOINED} {td.get_backend_config()}, world {td.get_world_size()}", file=sys.stderr, flush=True)

    distributed.launched_distributed = lambda: "WORLD_SIZE" in os.environ
    distributed.is_distributed = lambda: td.is_available() and td.is_initialized()
    distributed.init_from_env = join_and_say
    sys.argv = ["learngene", *argv]
    return main()


def condense_args(ancestry: Path, run_dir: Path, out: Path, device: str) -> list[str]:
    # one CPU thread for every compared run: the default count follows the machine's load, and a CPU run's float sums
    # follow the count (the CPU stand-in's runs at 1 and 2 threads end in different genes)
    return [
        "condense",
        "--threads",
        "1",
        "--method",
        "tleg",
        "--ancestry",
        str(ancestry),
        "--data",
        "digits",
        "--train-images",
        str(16 * STEPS_PER_EPOCH),
        "--batch-size",
        "16",
        "--epochs",
        str(EPOCHS),
        "--lr",
        "0.002",
        "--checkpoint-every",
        "7",
        "--augment",
        "--seed",
        "3",
        "--quiet",
        "--device",
        device,
        "--run-dir",
        str(run_dir),
        "--out",
        str(out),
    ]


def launch(args: list[str], ddp: bool, log: Path) -> subprocess.Popen:
    entry = [str(Path(__file__).resolve()), "--world-1-ddp"] if ddp else ["-m", "learngene"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's deterministic setting (no effect on a CPU)
    print(f"$ torchrun {' '.join(entry + args)}   (log: {log.name})", flush=True)
    return subprocess.Popen([*TORCHRUN, *entry, *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc): torchrun starts its workers in sessions of their own."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def kill_mid_epoch(proc: subprocess.Popen, run_dir: Path, limit: float) -> dict | None:
    """SIGKILL ``proc`` and every process below it once a checkpoint taken inside epoch 2 or later exists; the
    checkpoint's position, or None if the run ended (or ``limit`` seconds passed) first."""
    from learngene.training.checkpoint import load_checkpoint

    ckpt_path, seen, deadline = run_dir / "checkpoint.pt", None, time.monotonic() + limit
    while proc.poll() is None and time.monotonic() < deadline:
        stamp = ckpt_path.stat().st_mtime_ns if ckpt_path.exists() else None
        if stamp != seen:
            seen = stamp
            try:
                ckpt = load_checkpoint(ckpt_path)
            except Exception:  # caught between its write and rename? the next stamp tells
                continue
            if ckpt["epoch"] >= 1 and ckpt["step_in_epoch"] > 0:
                for pid in [*descendants(proc.pid), proc.pid]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                proc.wait()
                return {k: int(ckpt[k]) for k in ("epoch", "step_in_epoch", "global_step")}
        time.sleep(0.005)
    return None


def gene_digest(path: Path) -> str:
    """sha256 over the gene's tensors (names, dtypes, shapes and bytes, in name order): the file's metadata aside."""
    import torch
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for name, tensor in sorted(load_file(path).items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def history(run_dir: Path) -> list[dict] | None:
    """The run's log without its timings (None when it wrote none)."""
    log = run_dir / "log.jsonl"
    if not log.exists():
        return None
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in log.read_text().splitlines()]


def check(work: Path, device: str) -> dict:
    import torch

    from learngene.formats.model_file import save_model
    from learngene.vit.spec import ViTSpec

    work.mkdir(parents=True, exist_ok=True)
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    ancestry = work / "ancestry.safetensors"
    torch.manual_seed(0)
    save_model(ancestry, spec.create_model(), spec, overwrite=True)
    result: dict = {"device": device, "steps": EPOCHS * STEPS_PER_EPOCH}

    def paths(name: str) -> tuple[Path, Path]:
        return work / f"{name}_run", work / f"{name}.safetensors"

    tic = time.perf_counter()  # the uninterrupted runs side by side: a second DDP one tells nondeterminism apart
    runs = {
        name: launch(condense_args(ancestry, *paths(name), device), name != "plain", work / f"{name}.log")
        for name in ("reference", "repeat", "plain")
    }
    for name, proc in runs.items():
        result[f"{name}_exit"] = proc.wait()
    result["reference_seconds"] = round(time.perf_counter() - tic, 1)

    run_dir, out = paths("resumed")
    killed = launch(condense_args(ancestry, run_dir, out, device), True, work / "killed.log")
    result["killed_at"] = kill_mid_epoch(killed, run_dir, limit=240)
    if result["killed_at"] is None:
        result["killed_exit"] = killed.poll()
    tic = time.perf_counter()
    resumed = launch([*condense_args(ancestry, run_dir, out, device), "--resume"], True, work / "resumed.log")
    result["resumed_exit"] = resumed.wait()
    result["resumed_seconds"] = round(time.perf_counter() - tic, 1)
    for name in ("reference", "repeat", "plain", "resumed"):
        gene = paths(name)[1]
        result[f"{name}_sha256"] = gene_digest(gene) if gene.exists() else None
    result["bit_exact"] = (
        result["killed_at"] is not None
        and result["reference_sha256"] is not None
        and result["resumed_sha256"] == result["reference_sha256"]
        and history(paths("reference")[0]) is not None
        and history(paths("resumed")[0]) == history(paths("reference")[0])
    )
    said = [ln for ln in (work / "reference.log").read_text(errors="replace").splitlines() if ln.startswith(JOINED)]
    result["process_group"] = said[0][len(JOINED) :].strip() if said else None
    result["repeat_equals_reference"] = (
        result["repeat_sha256"] is not None and result["repeat_sha256"] == result["reference_sha256"]
    )
    result["plain_equals_ddp"] = (
        result["plain_sha256"] is not None and result["plain_sha256"] == result["reference_sha256"]
    )
    result["errors"] = {}
    for name in ("reference", "repeat", "plain", "killed", "resumed"):  # each run's last lines, for the stage's log
        lines = (work / f"{name}.log").read_text(errors="replace").splitlines()
        said = error_lines(lines)
        result["errors"][name] = said[:5]
        print(f"--- {name}.log (lines naming an error) ---", *said, sep="\n", flush=True)
        print(f"--- {name}.log (last lines) ---", *lines[-8:], sep="\n", flush=True)
    return result


# what torchrun adds to every failed run's log, whatever the run said
TORCHRUN_BOILERPLATE = ("error_file:", "errors.html", "ChildFailedError", "/errors/__init__.py")


def error_lines(lines: list[str]) -> list[str]:
    """The lines of a run's log that name an error (learngene's one-line ``error:``, a traceback's exception),
    torchrun's own report of the failure left out."""
    return [
        ln.strip()
        for ln in lines
        if re.search("error", ln, re.IGNORECASE) and not any(b in ln for b in TORCHRUN_BOILERPLATE)
    ]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--world-1-ddp":
        raise SystemExit(world_1_ddp(sys.argv[2:]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="a folder for the runs (created)")
    p.add_argument("--device", default="cuda", help="cuda (NCCL for CUDA tensors) or cpu (gloo) (default: %(default)s)")
    args = p.parse_args()
    print(json.dumps(check(args.work, args.device)), flush=True)


if __name__ == "__main__":
    main()
