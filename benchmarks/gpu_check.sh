#!/usr/bin/env bash
# The prepared GPU check (docs/results/gpu-profile.md): every check of learngene's CUDA path in at most 8 minutes,
# the logs, summary.md / summary.json and each pytest stage's failures in OUTDIR. A failing stage never stops the others.
#
# On the lent GPU machine, from the repository's root (the limit leaves ~70 s beyond the check's own 470 s budget):
#
#     GIT_COMMIT=<sha> bash benchmarks/gpu_check.sh $OUT
#
# What to carry: the Fashion-MNIST IDX files (30 MB) for the demo stage, in the ignored folder data/fashion-mnist:
#
#     mkdir -p data && cp -r /usr/share/datasets/fashion-mnist data/      # then carry ["data/fashion-mnist"]
#
# Without them the demo stage runs `learngene bench --profile gpu-smoke` (generated images) instead, and says so.
# Nothing else is carried: learngene runs from src/ (PYTHONPATH), scikit-learn's digits ship with scikit-learn.
#
# Settings: PYTHON (default python3), GIT_COMMIT (else a COMMIT file, else git), GPU_CHECK_BUDGET (seconds; default
# 470 with CUDA), GPU_CHECK_STAGES (comma list, e.g. GPU_CHECK_STAGES=gpu-tests,torchrun for a rerun; stages:
# env speed-eager compile-vit-s suite gpu-tests torchrun demo compile-vit-b), GPU_CHECK_WORKERS (default 14),
# GPU_CHECK_SUITE_ARGS (more pytest arguments for the suite: test files, -k EXPR, --dist load).
# Without CUDA (a dry run) every stage that needs it says so in one line and runs a CPU stand-in instead.
set -u
if [ $# -ne 1 ]; then
    echo "usage: bash benchmarks/gpu_check.sh OUTDIR" >&2
    exit 2
fi
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "gpu_check.sh: cannot create $1" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" benchmarks/gpu_check.py "$out"
