"""How fast the command line answers before any work: ``--help``, ``SUB --help`` and an argument error.

Each case runs ``python -m learngene ...`` as a fresh process (what a user's shell does) several times
and prints the median and fastest wall time, and whether torch was loaded (the parser imports no
torch; see learngene/cli/parser.py). Aim: under 0.5 s each, ``bench --help`` included (its profiles'
descriptions live in the torch-free learngene/bench/descriptions.py).

    PYTHONPATH=src python benchmarks/cli_startup.py            # 5 runs per case
    PYTHONPATH=src python benchmarks/cli_startup.py --runs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASES = {
    "learngene --help": ["--help"],
    "learngene expand --help": ["expand", "--help"],
    "learngene condense --help": ["condense", "--help"],
    "learngene expand (missing arguments)": ["expand"],
    "learngene train x --lr nan (bad value)": ["train", "x", "--lr", "nan", "--out", "y"],
    "learngene bench --help": ["bench", "--help"],
}
# the same parse in-process, then reports whether torch got imported
PROBE = (
    "import sys, runpy; sys.argv = ['learngene', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('learngene', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "print('torch loaded' if 'torch' in sys.modules else 'no torch', file=sys.stderr)"
)


def time_case(argv: list[str], runs: int) -> tuple[float, float, str]:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    times = []
    for _ in range(runs):
        tic = time.perf_counter()
        subprocess.run([sys.executable, "-m", "learngene", *argv], capture_output=True, env=env)
        times.append(time.perf_counter() - tic)
    probe = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env)
    return statistics.median(times), min(times), probe.stderr.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per case (default: %(default)s)")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.runs} runs per case")
    print(f"{'command':42s} {'median s':>9s} {'min s':>7s}  torch")
    for name, argv in CASES.items():
        median, fastest, torch_state = time_case(argv, args.runs)
        print(f"{name:42s} {median:9.3f} {fastest:7.3f}  {torch_state}")


if __name__ == "__main__":
    main()
