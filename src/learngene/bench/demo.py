"""``learngene demo``: the main job end to end on Fashion-MNIST on a CPU (its report states the wall time)."""

from __future__ import annotations

from pathlib import Path

from . import BenchRun, Profile, get_profile
from .ancestry_stage import UPSTREAM_EVAL_IMAGES
from .report import plural
from .tables import format_table


def run_demo(
    out_dir: Path,
    data_dir: str | None = None,
    device: str = "auto",
    seed: int = 0,
    progress: bool = True,
    quick: bool = False,
) -> None:
    """Train a small ancestry, condense it with every registered method, grow descendants of several depths,
    fine-tune each briefly and print method × depth → top-1 accuracy with the stored parameters."""
    profile = get_profile("quick" if quick else "demo")
    if seed:
        profile = profile.replace(seeds=(seed,))
    command = " ".join(["learngene", "demo", *(["--quick"] if quick else []), *(["--seed", str(seed)] if seed else [])])
    run = BenchRun(profile, out_dir, data_dir=data_dir, device=device, progress=progress, command=command)
    rows = run.run()
    task = profile.tasks[0]
    anc = run.meta.get("ancestry", {})
    acc = anc.get("eval_acc")
    print(
        f"\nFashion-MNIST, ancestry {profile.ancestry.short()} ({plural(profile.ancestry_epochs, 'epoch')}"
        f" on {anc.get('images', 0):,} images; its own top-1: "
        + (f"{100 * acc:.1f}%" if acc is not None else "?")
        + f" on {UPSTREAM_EVAL_IMAGES:,} test images); each descendant fine-tuned {plural(task.epochs, 'epoch')} on "
        f"{task.train_images:,} images; top-1 % on {task.eval_images:,} test images (seed {profile.seeds[0]})\n"
    )
    print(format_table(rows, task.name))
    others = [t.name for t in profile.tasks[1:]]
    if others:  # the progress lines named them: say where their tables are, so this one is not taken for theirs
        print(
            f"\nThis table is {task.name}'s; the run also fine-tuned on {', '.join(others)} (the progress lines that "
            f"name them): their tables are in {out_dir}/report.md."
        )
    trained = sorted({r.method for r in rows if r.condense_steps})
    if trained:
        print(
            f"\nMethods that condense by training trained only {plural(profile.condense_epochs, 'epoch')} here "
            f"({condensation_budgets(profile, trained)}: each the share of the demo's budget its class declares, "
            f"Method.demo_budget), to keep the demo short; the bench's cpu profile (`learngene bench --profile cpu`) "
            f"compares every method "
            f"with the same condensation budget, 3 seeds and low-data tasks (docs/RESULTS.md reports a run of it, "
            f"on the methods its report lists), and `learngene compare` does so on your ancestry and data."
        )
    print(f"genes, ancestry, results.csv and report.md are in {out_dir}/")


def condensation_budgets(profile: Profile, methods: list[str]) -> str:
    """``lets, tleg on 5,000 images; tal on 1,250``: the condensation images of each method, fewest last."""
    total = profile.condense_images or 0  # the demo's profiles name them
    images: dict[int, list[str]] = {}
    for name in methods:
        images.setdefault(max(1, round(profile.condense_share(name) * total)), []).append(name)
    parts = [f"{', '.join(names)} on {count:,}" for count, names in sorted(images.items(), reverse=True)]
    return parts[0] + " images" + "".join(f"; {part}" for part in parts[1:])
