"""A benchmark's ``report.md``: its header, a section per task (and upstream) with the tables of :mod:`.tables` and the
plots of :mod:`.plots`, and the n/a cells; with ``results.csv`` (:mod:`.rows`) beside it."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..formats.atomic import now_iso, write_text_atomic
from .plots import has_curves, plot_curves, plot_folder, plot_stored
from .profiles import Profile, Task
from .rows import Row, sizes_by_note, write_csv
from .tables import ancestry_table, epochs_to_match, format_table, gain_table, gene_table, identical_note, mark_rule


def plural(count: int, word: str) -> str:
    """``1 epoch``, ``3 epochs``."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


# ---- the report ----------------------------------------------------------------------------------------
def _task_line(task: Task, seeds: int) -> str:
    data = (
        f"{task.shots} labelled images per class"
        if task.shots
        else f"{task.train_images:,} training images"
        if task.train_images
        else "the whole training split"
    )
    evals = (
        "after the last epoch"
        if not task.eval_every
        else "after every epoch"
        if task.eval_every == 1
        else f"every {task.eval_every} epochs and after the last"
    )
    return (
        f"Fine-tuned {plural(task.epochs, 'epoch')} on {data} of {task.data}"
        + (" (only the classes the upstream never saw)" if task.other_classes else "")
        + (f", batch {task.batch_size}" if task.batch_size else "")
        + (", each method with the same fresh classifier" if task.new_head else "")
        + f"; top-1 (%) on {f'{task.eval_images:,}' if task.eval_images else 'all'} test images, evaluated "
        + evals
        + "; "
        + (f"mean ± std over {seeds} seeds." if seeds > 1 else "one seed.")
    )


def machine() -> str:
    import torch

    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"CPU ({plural(torch.get_num_threads(), 'thread')})"
    )
    return (
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, {device}, "
        f"torch {torch.__version__}, python {platform.python_version()}"
    )


@dataclass
class BenchReport:
    """One benchmark's report in ``out_dir``: its rows, profile and run facts (``meta``), and its plot folder (made
    here; ``plots=False``: none are drawn); :meth:`write` writes ``results.csv``, ``report.md`` and ``plots/*.png``."""

    rows: list[Row]
    profile: Profile
    out_dir: Path
    meta: dict[str, Any] = field(default_factory=dict)
    plots: bool = True
    plot_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.plot_dir = plot_folder(self.out_dir) if self.plots else self.out_dir / "plots"

    def write(self) -> None:
        rows, profile = self.rows, self.profile
        write_csv(rows, self.out_dir / "results.csv")
        parts = _header(rows, profile, self.meta)
        if profile.upstreams:
            parts += _ancestries(profile, self.meta) + _learngenes(rows) + self.upstream_sections()
        else:
            parts += _learngenes(rows) + self.task_sections(rows)
        parts += _na_cells(rows)
        write_text_atomic(self.out_dir / "report.md", "\n".join(parts) + "\n")

    def task_sections(self, rows: list[Row], suffix: str = "", level: str = "##") -> list[str]:
        """A section per task of ``rows``: its line, its marked table, scratch's epochs to match and the plots."""
        parts: list[str] = []
        for task in self.profile.tasks:
            if any(r.task == task.name for r in rows):
                parts += ["", f"{level} {task.name}{suffix}", "", _task_line(task, len(self.profile.seeds))]
                parts += ["", format_table(rows, task.name, mark=True)]
                if note := identical_note(rows, task.name):
                    parts += ["", note]
                if task.scratch_factor > 1 and any(r.task == task.name and r.budget > 1 and r.ok for r in rows):
                    parts += [
                        "",
                        f"Epochs scratch ×{task.scratch_factor} needs to reach each method's final accuracy "
                        f"(of {task.epochs * task.scratch_factor}; it is evaluated at the epochs shown):",
                        "",
                        epochs_to_match(rows, task.name, task.scratch_factor),
                    ]
                if self.plots:
                    parts += ["", self.task_plots(rows, task.name, suffix)]
        return parts

    def task_plots(self, rows: list[Row], task: str, suffix: str) -> str:
        """The task's plots, drawn into the plot folder: accuracy vs stored parameters, and vs epochs where the runs
        were evaluated more than once; their images' markdown."""
        tag = f"{task}{('-' + suffix.strip(' ()').replace(' ', '_')) if suffix else ''}"
        curves, stored = self.plot_dir / f"curves-{tag}.png", self.plot_dir / f"stored-{tag}.png"
        plot_stored(rows, task, stored)
        images = [f"![accuracy vs stored parameters]({stored.relative_to(self.out_dir)})"]
        if has_curves(rows, task):  # one evaluation point per run is no curve: that plot is left out
            plot_curves(rows, task, curves)
            images.insert(0, f"![accuracy vs epochs]({curves.relative_to(self.out_dir)})")
        return " ".join(images)

    def upstream_sections(self) -> list[str]:
        """Each upstream's task sections, then each task's gain by upstream against scratch and mimetic."""
        rows, parts = self.rows, []
        upstreams = list(dict.fromkeys(r.upstream for r in rows))
        for up in self.profile.upstreams:
            if up.name in upstreams:
                mine = [r for r in rows if r.upstream == up.name]
                parts += ["", f"## Upstream {up.name}", *self.task_sections(mine, f" ({up.name})", "###")]
        for task in self.profile.tasks:
            if len(upstreams) > 1 and any(r.task == task.name for r in rows):
                parts += [
                    "",
                    f"## {task.name}: gain by upstream",
                    "",
                    "Mean top-1 difference (points) to the reference, averaged over the sizes both made; "
                    "the upstreams differ in class split, ancestry training and condensation epochs (see "
                    "Ancestries).",
                ]
                for reference in ("scratch", "mimetic"):
                    parts += ["", f"Against {reference}:", "", gain_table(rows, task.name, upstreams, reference)]
        return parts


def write_report(
    rows: list[Row], profile: Profile, out_dir: Path, meta: dict[str, Any] | None = None, plots: bool = True
) -> None:
    """``results.csv``, ``report.md`` and (unless ``plots=False``) ``plots/*.png`` in ``out_dir``
    (:class:`BenchReport`)."""
    BenchReport(rows, profile, out_dir, meta or {}, plots).write()


def run_lines(meta: dict[str, Any], command: str, work: str = "") -> list[str]:
    """The lines every report opens with: the command that reproduces it (``meta``'s, else ``command``), the date and
    machine, and the wall time (then ``work``), marked where the run stopped at its time limit."""
    return [
        f"- command: `{meta.get('command', command)}`",
        f"- date: {now_iso()}; machine: {machine()}",
        f"- wall time of this command: {meta.get('wall_seconds', 0) / 60:.1f} min (stages found in the cache are not "
        "rerun)"
        + work
        + ("" if meta.get("complete", True) else " — **partial run** (time limit): rerun the command to finish"),
    ]


def _header(rows: list[Row], profile: Profile, meta: dict[str, Any]) -> list[str]:
    """The title, the run, the methods, the single ancestry (a profile with one upstream) and the marks' legend."""
    work = (
        f"; planned work of the whole run: {meta.get('plan_gflop', 0):,.0f} GFLOP (3× forward FLOPs per training "
        "image, 1× per evaluated one)"
    )
    parts = [
        f"# learngene benchmark: profile `{profile.name}`",
        "",
        *run_lines(meta, f"learngene bench --profile {profile.name}", work),
        f"- methods: {', '.join(meta.get('methods', sorted({r.method for r in rows})))}",
    ]
    anc = meta.get("ancestry", {})
    if anc and not profile.upstreams:
        acc = anc.get("eval_acc")
        parts.append(
            f"- ancestry {anc['spec']} ({anc['params']:,} params), {plural(anc['epochs'], 'epoch')} on "
            f"{anc['images']:,} Fashion-MNIST images: top-1 "
            + (f"{100 * acc:.1f}%" if acc is not None else "?")
            + " on 1,000 test images"
        )
    return parts + ["", mark_rule(rows, [t.name for t in profile.tasks], len(profile.seeds))]


def _ancestries(profile: Profile, meta: dict[str, Any]) -> list[str]:
    """The section on a profile's several ancestries: what each trains on, and whether it converged."""
    return [
        "",
        "## Ancestries",
        "",
        "Each upstream trains its own ancestry on the Fashion-MNIST classes listed "
        f"({profile.upstream_images_per_class or 'all'} training images per class; top-1 on up to 1,000 "
        "test images of those classes after every epoch) and condenses every gene from it; the transfer "
        "tasks fine-tune on the other classes. Converged? applies the rule: the best of the last 3 epochs "
        "is less than 0.5 points above the best before them (the cosine schedule also flattens the end).",
        "",
        ancestry_table(meta),
    ]


def _learngenes(rows: list[Row]) -> list[str]:
    """The section on the genes: what each stores and what its condensation and adaptation cost."""
    return [
        "",
        "## Learngenes",
        "",
        "Condensation runs once per method; adaptable methods then adapt once per "
        "size and seed on the same upstream images.",
        "",
        gene_table(rows),
    ]


def _na_cells(rows: list[Row]) -> list[str]:
    """The section listing every method that could not make (or finish) a size, and why; none where all did."""
    refused = sorted(sizes_by_note(rows).items())
    if not refused:
        return []
    return ["", "## n/a cells", ""] + [f"- {method} at {', '.join(sizes)}: {note}" for (method, note), sizes in refused]


def scratch_lines(methods: Sequence[str], model_class: str = "vit") -> list[str]:
    """The report's lines naming the random starts of a ``model_class`` family: scratch's timm initialization
    (``weight_init`` as the installed timm's VisionTransformer defaults it, which learngene never sets) and, where
    compared, scratch_fix_init's (:class:`learngene.methods.baselines.ScratchFixInit`)."""
    import inspect

    import timm
    from timm.models.vision_transformer import VisionTransformer

    default = inspect.signature(VisionTransformer.__init__).parameters["weight_init"].default
    fix = "`fix_init=False`" if model_class == "vit" else f"timm's {model_class} rescales as `fix_init` does"
    lines = [
        f"- scratch: a timm ViT of the size as timm {timm.__version__} initialises it (`weight_init={default!r}`, "
        f"{fix}: trunc-normal(0.02) weights, zero biases, the class token and position table drawn small), "
        "the fresh head of the seed included"
    ]
    if "scratch_fix_init" in methods:
        lines.append(
            "- scratch_fix_init: scratch's draws of the same seed with timm's `fix_init=True`: each block's "
            "`attn.proj` and `mlp.fc2` weights divided by sqrt(2 (l + 1)) for block l = 0, 1, ... (BEiT's rescaling)"
            + ("" if model_class == "vit" else "; in this family the same start as scratch")
        )
    return lines
