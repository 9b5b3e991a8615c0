"""CPU-seconds and wall time of one tiny training job with learngene's default threads, 1 thread and N threads.

Each setting trains the same ViT for the same steps in a fresh process (so torch's thread pool starts as a user's
would), in interleaved rounds (the order rotates) so that a load drifting on a shared machine meets every setting
alike. The table gives each setting's median wall time and CPU-seconds and its CPU-seconds over the best
setting's; target: the default within 1.1x of the best in CPU-seconds on a loaded machine.

``--load K`` first starts K busy processes of its own (pure Python loops, ended when the benchmark ends and in
any case after ``--load-seconds``) to make the machine a loaded one; the other processes of a shared machine load
it as well, and the header says the load average before and after.

    PYTHONPATH=src python benchmarks/threads.py                  # the machine as it is
    PYTHONPATH=src python benchmarks/threads.py --load 2         # plus 2 busy processes
    PYTHONPATH=src python benchmarks/threads.py --steps 30 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


def child(setting: str, steps: int) -> None:
    """One training job with the threads ``setting`` names; prints its threads, wall and CPU seconds as JSON."""
    import torch

    from learngene.data import ImageData
    from learngene.host.threads import set_threads, usable_cpus
    from learngene.training.loop import TrainConfig, train
    from learngene.vit.spec import ViTSpec

    threads = set_threads(None if setting == "default" else usable_cpus() if setting == "N" else int(setting))
    spec = ViTSpec(depth=4, embed_dim=64, num_heads=4, img_size=28, patch_size=4, in_chans=1, num_classes=10)
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (64 * steps, 1, 28, 28), generator=gen, dtype=torch.uint8)
    data = ImageData(images, torch.arange(len(images)) % 10, 10, (0.5,), (0.5,), name="random")
    torch.manual_seed(0)
    model = spec.create_model()
    wall, cpu = time.perf_counter(), time.process_time()
    train(model, data, TrainConfig(epochs=1, batch_size=64, progress=False, device="cpu"))
    print(json.dumps({"threads": threads, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}))


def run_setting(setting: str, steps: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the default must not be told
    out = subprocess.run(
        [sys.executable, __file__, "--child", setting, "--steps", str(steps)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps of the job (batch 64)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions of every setting")
    parser.add_argument("--load", type=int, default=0, help="busy processes to start first (a loaded machine)")
    parser.add_argument("--load-seconds", type=float, default=900, help="they stop by themselves after this")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return

    from learngene.host.threads import usable_cpus

    cpus = usable_cpus()
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=args.load_seconds)]) for _ in range(args.load)
    ]
    try:
        if spinners:
            time.sleep(5)  # the load is running before the first job measures the machine
        before = os.getloadavg()[0]
        settings = ["default", "1", "N"]
        results: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
        for r in range(args.rounds):
            for setting in settings[r % 3 :] + settings[: r % 3]:
                results[setting].append(run_setting(setting, args.steps))
        after = os.getloadavg()[0]
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    print(
        f"threads benchmark: {args.steps} steps of an L4-D64-H4 ViT (28 px, batch 64), {args.rounds} rounds; "
        f"{cpus} usable CPUs; {args.load} busy processes of ours; 1-min load average {before:.1f} before, "
        f"{after:.1f} after"
    )
    medians = {
        s: {k: statistics.median(x[k] for x in results[s]) for k in ("wall", "cpu")} | {"runs": results[s]}
        for s in settings
    }
    best = min(m["cpu"] for m in medians.values())
    print(f"{'setting':>8} {'threads':>14} {'wall s':>8} {'CPU s':>8} {'CPU / best':>10}")
    for s in settings:
        m = medians[s]
        used = ",".join(str(int(x["threads"])) for x in m["runs"])
        print(f"{s:>8} {used:>14} {m['wall']:8.1f} {m['cpu']:8.1f} {m['cpu'] / best:10.2f}")
    ratio = medians["default"]["cpu"] / best
    print(f"default / best CPU-seconds: {ratio:.2f} ({'within' if ratio <= 1.1 else 'NOT within'} 1.1x)")


if __name__ == "__main__":
    main()
