"""Each benchmark profile's one-line description, torch-free: ``learngene bench --help`` prints them without
loading the method registry (and so torch); :mod:`learngene.bench.profiles` gives them to its profiles.

A time stated here is a measured one, with the command that measures it (no commit, no guess)."""

from __future__ import annotations

PROFILE_DESCRIPTIONS: dict[str, str] = {
    "demo": "`learngene demo`: the whole job on a small CPU; one seed, one task, no claims beyond the table",
    "quick": "a pipeline check (tests, CI; `learngene demo --quick`): every stage and task, numbers mean nothing",
    "cpu": "the evidence run on a CPU: an L6-D64-H4 Fashion-MNIST ancestry, five sizes, Fashion-MNIST, digits "
    "and 20-shot tasks, 3 seeds (its report, docs/bench-cpu/report.md, states the wall time it took)",
    "transfer": "does stored knowledge pay on classes the ancestry never saw? Ancestries on 5 Fashion-MNIST "
    "classes, descendants fine-tuned on 20 labels of each of the other 5; two class splits, short and "
    "converged ancestries, a longer condensation, ablations",
    "gpu": "bigger models and the full data for a GPU (bf16); resumable, so a time limit (time_limit, --time-limit) splits it into short commands",
    "gpu-smoke": "generated 224-px RGB images through the image-folder pipeline (ancestry, condense, "
    "expand, fine-tune), max_steps (--max-steps) optimizer steps per stage",
}


# `/usr/bin/time -v learngene demo --quick --out DIR` (a new DIR) on the shared 2-core machine, default threads,
# 2026-12-02 at f6ac6d5 (tal's and pith's hypernetworks sized for the ancestry): 2 min 19 s wall, 57.7 s CPU (user +
# sys) at a 1-minute load of 4.0 to 4.4 from other processes; at ce92da0, before that change: 7 min 49 s wall, 75.5 s
# CPU at a load of 6.7 to 7.2. Earlier: d12e374, 7 min 5 s wall, 55 s CPU at a load of 10 to 15. The CPU time is the
# demo's own; the wall time follows the other jobs (docs/results/demo-timings.md)
QUICK_DEMO_TIME = "49 s on the idle 2-core machine, 2026-12-02; its wall time follows the machine's other jobs"


def profiles_help() -> str:
    """``--profile``'s help: every profile and its description."""
    return "; ".join(f"{name}: {text}" for name, text in PROFILE_DESCRIPTIONS.items()) + " (default: %(default)s)"
