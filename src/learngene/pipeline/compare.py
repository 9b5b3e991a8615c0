"""``learngene compare``: which start wins for my ancestry, my data and my sizes.

The bench engine (:mod:`learngene.bench.protocol`) run with a profile built from the command line
(:func:`compare_profile`): the given ancestry instead of stage 1, every method condensed once (on the
user's data unless ``--condense-data`` says otherwise), every size made (adapted where the method
adapts), and every method × size × seed fine-tuned on the user's data with the same budget, data order
and fresh head. Scratch also trains ×10 as long. Everything is cached and resumable like ``bench``.

The report (:func:`write_compare_report`) gives, per size, top-1 mean ± std over seeds, marks against each
reference (scratch, scratch ×10, mimetic, and ``structured`` where that method is registered) by the
2-pooled-std rule of the transfer profile (:func:`learngene.bench.report.compare`), stored parameters,
condensation and fine-tuning seconds, the first epoch at which each method reaches scratch ×10's final
accuracy with the speed-up that means, and one recommendation line (:func:`recommend`).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..bench.profiles import Profile, Task, Upstream, Variant
from ..bench.report import (
    compare,
    finish_figure,
    has_curves,
    line_style,
    machine,
    mean_curve,
    plot_curves,
    plural,
    style_per_method,
    write_csv,
)
from ..errors import LearngeneError
from ..formats.atomic import now_iso, write_text_atomic
from ..registry import get_method, list_methods
from ..training.loop import TrainConfig
from ..vit.spec import ViTSpec

TASK = "data"  # the one task of a compare profile: the user's data
LONG = 10  # scratch's long budget: ×10 the fine-tuning
LONG_LABEL = f"scratch ×{LONG}"
DEFAULT_REFERENCES = ("scratch", "scratch_x10", "mimetic", "structured")
KD = "+kd"


def parse_size(text: str) -> tuple[int, int, int]:
    """``L4-D192-H3`` → ``(4, 192, 3)`` (depth, embed_dim, num_heads)."""
    match = re.fullmatch(r"L(\d+)-D(\d+)-H(\d+)", text.strip())
    if not match:
        raise LearngeneError(f"size {text!r} is not of the form L<depth>-D<width>-H<heads>, e.g. L4-D192-H3")
    depth, width, heads = map(int, match.groups())
    return depth, width, heads


def parse_classes(text: str, flag: str = "--classes") -> list[int]:
    """``5,6,7`` → ``[5, 6, 7]``."""
    try:
        return [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise LearngeneError(f"{flag} takes class indices separated by commas, e.g. 5,6,7,8,9; got {text!r}") from None


def _refuse_repeats(values: list[Any], flag: str, shown: list[str] | None = None) -> None:
    """A value given twice in a list flag would count its rows twice (a size's seeds doubled): refused."""
    seen: set[Any] = set()
    for value, text in zip(values, shown or list(map(str, values)), strict=True):
        if value in seen:
            raise LearngeneError(f"{flag} names {text} twice; give each once")
        seen.add(value)


def reference_labels(names: Sequence[str]) -> tuple[str, ...]:
    """Report labels of ``--references`` names (``scratch_x10`` is scratch trained ×10 as long); a default
    reference whose method is not registered (``structured`` before it exists) is left out."""
    labels = []
    for name in names:
        if name in ("scratch_x10", LONG_LABEL, "scratchx10"):
            labels.append(LONG_LABEL)
        elif name in list_methods():
            labels.append(name)
        elif name not in DEFAULT_REFERENCES:
            raise LearngeneError(
                f"unknown reference {name!r}; choose from scratch_x10 or a method: {', '.join(list_methods())}"
            )
    return tuple(dict.fromkeys(labels))


def compare_profile(
    ancestry_spec: ViTSpec | None,
    ancestry_file: str,
    data: str,
    sizes: Sequence[str],
    methods: Sequence[str] | None = None,
    seeds: int = 3,
    epochs: int = 5,
    max_steps: int | None = None,
    few_shot: int | None = None,
    train_images: int | None = None,
    eval_images: int | None = None,
    references: Sequence[str] = DEFAULT_REFERENCES,
    kd_lambda: float | None = None,
    condense_data: str | None = None,
    condense_epochs: int = 2,
    condense_images: int | None = None,
    adapt_steps: int = 50,
    batch_size: int = 64,
    lr: float = 1e-3,
    timm_model: str | None = None,
    eval_every: int = 1,
    classes: Sequence[int] | None = None,
    condense_classes: Sequence[int] | None = None,
    drop_head: bool = False,
) -> Profile:
    """The profile of one ``learngene compare`` command; every bad input is one :class:`LearngeneError` line."""
    if ancestry_spec is None:
        raise LearngeneError(
            "compare makes descendants of the ancestry's own family; give a ViT ancestry whose size "
            "a ViTSpec describes (a learngene model file, a timm ViT checkpoint or folder)"
        )
    for value, flag in (
        (seeds, "--seeds"),
        (epochs, "--epochs"),
        (max_steps, "--max-steps"),
        (few_shot, "--few-shot"),
        (train_images, "--train-images"),
        (eval_images, "--eval-images"),
        (condense_epochs, "--condense-epochs"),
        (adapt_steps, "--adapt-steps"),
        (batch_size, "--batch-size"),
        (condense_images, "--condense-images"),
    ):
        if value is not None and value < 1:
            raise LearngeneError(f"{flag} must be at least 1, got {value}; a budget of 0 compares nothing")
    # the training flags are checked by the code that checks train's own (one rule, one message)
    TrainConfig(epochs=epochs, max_steps=max_steps, batch_size=batch_size, lr=lr)
    if not sizes:
        raise LearngeneError("give at least one descendant size, e.g. --sizes L4-D192-H3,L12-D384-H6")
    _refuse_repeats([parse_size(t) for t in sizes], "--sizes", [t.strip() for t in sizes])
    for given, flag in ((classes, "--classes"), (condense_classes, "--condense-classes")):
        if given:
            _refuse_repeats(list(given), flag)
    if methods is not None and not [m for m in methods if m]:
        raise LearngeneError("--methods names no method; give a comma-separated list, e.g. --methods tleg,wave, or all")
    shapes = []
    for text in sizes:
        shape = parse_size(text)
        try:
            ancestry_spec.replace(depth=shape[0], embed_dim=shape[1], num_heads=shape[2])
        except LearngeneError as exc:
            raise LearngeneError(f"no method can make size {text.strip()}: {exc}") from None
        shapes.append(shape)
    requested = list(dict.fromkeys(methods or list_methods()))
    for name in requested:
        get_method(name)  # an unknown method is one line
    if condense_classes and not any(get_method(m).needs_data for m in requested):
        raise LearngeneError(
            f"--condense-classes chooses the images that methods condensing on data read, and none of "
            f"{', '.join(requested)} does; leave --condense-classes out"
        )
    refs = reference_labels(references)
    base = [r for r in refs if r != LONG_LABEL]
    if LONG_LABEL in refs:
        base = ["scratch", *base]
    all_methods = tuple(dict.fromkeys([*base, *requested]))
    task = Task(
        TASK,
        data,
        epochs=epochs,
        max_steps=max_steps,
        shots=few_shot,
        train_images=train_images,
        eval_images=eval_images,
        new_head=True,
        scratch_factor=LONG if LONG_LABEL in refs else 1,
        eval_every=eval_every,
        classes=tuple(classes) if classes else None,
    )
    for given, flag in ((classes, "--classes"), (condense_classes, "--condense-classes")):
        if given is not None and len(set(given)) < 2:  # a classifier of one class (or none) learns nothing
            said = f"{flag} {','.join(map(str, given))} keeps one class" if given else f"{flag} names no class"
            raise LearngeneError(f"{said}; give 2 or more class indices, e.g. 0,1,2")
    # the data-driven methods condense and adapt on --condense-classes, else on the user's classes (unless
    # --condense-data): e.g. the ancestry's own classes, so that no condensation reads the user's labels
    condense_on = condense_classes or (classes if not condense_data else None)
    upstreams = (
        (Upstream("", tuple(condense_on), ancestry_epochs=0, condense_epochs=condense_epochs),) if condense_on else ()
    )
    variants = (Variant(KD, methods=all_methods, distill_lambda=kd_lambda, upstreams=("",)),) if kd_lambda else ()
    narrowest = min(w for _, w, _ in shapes)
    return Profile(
        name="compare",
        description="learngene compare: a profile built from the command line",
        ancestry=ancestry_spec,
        ancestry_epochs=0,
        ancestry_images=None,
        condense_epochs=condense_epochs,
        condense_images=condense_images,
        sizes=tuple(shapes),
        tasks=(task,),
        adapt_steps=adapt_steps,
        seeds=tuple(range(seeds)),
        methods=all_methods,
        method_options={"wave": {"template_size": narrowest}} if "wave" in all_methods else {},
        batch_size=batch_size,
        lr=lr,
        variants=variants,
        ancestry_file=str(ancestry_file),
        ancestry_timm_model=timm_model,
        ancestry_drop_head=drop_head,
        upstream_data=condense_data or data,
        references=refs,
        upstreams=upstreams,
    )


# ---- the recommendation ---------------------------------------------------------------------------------
def _mean(accs: list[float]) -> str:
    return (
        f"{100 * statistics.fmean(accs):.1f} ± {100 * statistics.stdev(accs):.1f}"
        if len(accs) > 1
        else f"{100 * accs[0]:.1f}"
    )


def recommend(size: str, accs: dict[str, list[float]], references: Sequence[str], seeds: int | None = None) -> str:
    """One line for ``size``: the best method that beats every reference by more than 2 pooled std, or which
    reference no method beats. ``accs``: final top-1 per seed of every label (references among them).

    Never on noise: with fewer than two seeds (``seeds``, the distinct seeds behind ``accs``, when known; else
    the number of results per label) there is no recommendation, and two winners that do not differ by 2 pooled
    std are reported as a tie.
    """
    if seeds is not None and seeds < 2:
        return f"{size}: one seed: no recommendation (the 2-std rule needs --seeds 2 or more)"
    refs = [r for r in references if accs.get(r)]
    candidates = {label: a for label, a in accs.items() if label not in references and a}
    if not refs:
        return f"{size}: no recommendation: no reference ({', '.join(references)}) finished at this size"
    if not candidates:
        return f"{size}: no recommendation: no method other than the references finished at this size"
    if min(len(a) for a in [*candidates.values(), *(accs[r] for r in refs)]) < 2:
        return f"{size}: one seed: no recommendation (the 2-std rule needs --seeds 2 or more)"
    winners = sorted(
        (label for label, a in candidates.items() if all(compare(a, accs[r]) == "+" for r in refs)),
        key=lambda label: -statistics.fmean(candidates[label]),
    )
    if winners:
        best = winners[0]
        tied = [w for w in winners[1:] if compare(candidates[best], candidates[w]) != "+"]
        if tied:
            names = " or ".join([best, *tied])
            return (
                f"{size}: use {names} (a tie: each beats {', '.join(refs)} by more than 2 std, and they do not "
                f"differ by 2 std: " + ", ".join(f"{w} {_mean(candidates[w])}" for w in [best, *tied]) + ")"
            )
        return f"{size}: use {best} ({_mean(candidates[best])}): it beats {', '.join(refs)} by more than 2 std"
    unbeaten = [r for r in refs if not any(compare(a, accs[r]) == "+" for a in candidates.values())]
    if unbeaten:
        strongest = max(unbeaten, key=lambda r: statistics.fmean(accs[r]))
        advice = {
            "scratch": "train from scratch",
            LONG_LABEL: "training from scratch 10× longer is the better start",
            "mimetic": "use mimetic (it stores nothing)",
        }.get(strongest, f"use {strongest}")
        return f"{size}: no method beats {strongest} here ({_mean(accs[strongest])}): {advice}"
    closest = max(candidates, key=lambda label: statistics.fmean(candidates[label]))
    missing = [r for r in refs if compare(candidates[closest], accs[r]) != "+"]
    return (
        f"{size}: no method beats every reference by 2 std here (the best mean, {closest} "
        f"{_mean(candidates[closest])}, does not beat {', '.join(missing)})"
    )


# ---- the report -------------------------------------------------------------------------------------------
def _by_label(rows: list[Any], size: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        if r.task == TASK and r.size == size and r.ok:
            out[r.label].append(r)
    return out


def _first_reaching(group: list[Any], target: float) -> int | None:
    """The first evaluated epoch at which the mean curve over seeds reaches ``target``."""
    curve, _ = mean_curve(group)
    return next((group[0].epochs[e] for e, acc in enumerate(curve) if acc >= target - 1e-12), None)


def size_table(rows: list[Any], size: str, references: Sequence[str]) -> tuple[str, str]:
    """(markdown table, recommendation line) of one size."""
    groups = _by_label(rows, size)
    labels = list(dict.fromkeys(r.label for r in rows if r.task == TASK and r.size == size and r.ok))
    refs = [r for r in references if r in groups]
    long = groups.get(LONG_LABEL)
    target = statistics.fmean(g.acc for g in long) if long else None
    long_epoch = _first_reaching(long, target) if long and target is not None else None
    header = [
        "method",
        "top-1 (%)",
        *(f"vs {r}" for r in refs),
        "stored params",
        "condense s",
        "fine-tune s",
        f"epoch reaching {LONG_LABEL}'s final",
        "speed-up vs scratch",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label in labels:
        group = groups[label]
        accs = [g.acc for g in group]
        marks = [compare(accs, [g.acc for g in groups[r]]) if r != label else "" for r in refs]
        reach = _first_reaching(group, target) if target is not None else None
        reached = "–" if target is None else (str(reach) if reach else f"not reached in {group[0].epochs[-1]}")
        speed = f"{long_epoch / reach:.1f}×" if reach and long_epoch else "–"
        first = group[0]
        lines.append(
            f"| {label} | {_mean(accs)} | "
            + " | ".join(marks)
            + ("" if not marks else " | ")
            + f"{first.stored_params:,} | {first.condense_seconds:.1f} | "
            f"{statistics.fmean(g.train_seconds for g in group):.1f} | {reached} | {speed} |"
        )
    seeds = min((len({g.seed for g in groups[label]}) for label in labels), default=0)
    line = recommend(size, {label: [g.acc for g in groups[label]] for label in labels}, references, seeds)
    return "\n".join(lines), line


def refusals(rows: list[Any]) -> list[str]:
    """``method at sizes: reason`` for every method that could not make (or finish) a size."""
    by: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in rows:
        if r.note and r.size not in by[r.label, r.note]:
            by[r.label, r.note].append(r.size)
    return [f"{label} at {', '.join(sizes)}: {note}" for (label, note), sizes in by.items()]


def compare_text(rows: list[Any], profile: Profile) -> str:
    """What ``learngene compare`` prints: per size the table and its recommendation line, then the refusals."""
    parts = []
    for size in dict.fromkeys(r.size for r in rows if r.task == TASK):
        table, line = size_table(rows, size, profile.references)
        parts += [f"## {size}", "", table, "", f"**Recommendation** {line}", ""]
    refused = refusals(rows)
    if refused:
        parts += ["## Methods that refused a size", ""] + [f"- {r}" for r in refused] + [""]
    return "\n".join(parts)


def recommendation_lines(rows: list[Any], profile: Profile) -> list[str]:
    """One recommendation line per size of the compare task's rows (``use METHOD``, or which reference no method beats)."""
    return [
        size_table(rows, size, profile.references)[1] for size in dict.fromkeys(r.size for r in rows if r.task == TASK)
    ]


def plot_by_size(rows: list[Any], path: Path, data_name: str) -> None:
    """Final top-1 (mean ± std over seeds) against the descendant size, one line per method, in the colours and
    markers of the learning curves."""
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(r.size for r in rows if r.task == TASK))
    labels = list(dict.fromkeys(r.label for r in rows if r.task == TASK and r.ok))
    styles = style_per_method(labels)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(sizes) + 3), 4.2))
    for i, label in enumerate(labels):
        xs, ys, es = [], [], []
        for k, size in enumerate(sizes):
            accs = [100 * g.acc for g in _by_label(rows, size).get(label, [])]
            if accs:
                xs.append(k + 0.03 * (i - len(labels) / 2))
                ys.append(statistics.fmean(accs))
                es.append(statistics.stdev(accs) if len(accs) > 1 else 0.0)
        ax.errorbar(xs, ys, yerr=es, capsize=3, ls=line_style(label), label=label, **styles[label])
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set_xlabel("descendant size")
    ax.set_ylabel("final top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    finish_figure(fig, [ax], f"{data_name}: accuracy by size (mean ± std over seeds)", path)


def _labels_note(profile: Profile) -> str:
    """Which condensations also learn from the condensation data's labels (a cross-entropy term, λ < 1): with the
    user's data, they see more labelled images of the task than the fine-tuning budget gives the others."""
    labelled = [
        m
        for m in profile.methods or ()
        if get_method(m).needs_data and profile.condense_lambda.get(m, get_method(m).distill_lambda) < 1
    ]
    return (
        f". {', '.join(labelled)}'s condensation loss has a cross-entropy term (λ < 1): it also learns from "
        f"those images' labels"
        if labelled
        else ""
    )


def write_compare_report(
    rows: list[Any], profile: Profile, out_dir: Path, meta: dict[str, Any] | None = None, plots: bool = True
) -> None:
    """``results.csv``, ``report.md`` and (unless ``plots=False``) ``plots/by-size.png`` and ``plots/curves.png``."""
    meta = meta or {}
    write_csv(rows, out_dir / "results.csv")
    task = profile.tasks[0]
    budget = plural(task.max_steps, "step") if task.max_steps else plural(task.epochs, "epoch")
    data = (
        f"{task.shots} images per class"
        if task.shots
        else f"{task.train_images} images"
        if task.train_images
        else "every training image"
    )
    anc = meta.get("ancestry", {})
    parts = [
        "# learngene compare",
        "",
        f"- command: `{meta.get('command', 'learngene compare')}`",
        f"- date: {now_iso()}; machine: {machine()}",
        f"- wall time of this command: {meta.get('wall_seconds', 0) / 60:.1f} min (stages found in the cache are "
        "not rerun)"
        + ("" if meta.get("complete", True) else " — **partial run** (time limit): rerun the command to finish"),
        f"- ancestry: {anc.get('file', profile.ancestry_file)} ({profile.ancestry.short()}, "
        f"{profile.ancestry.num_params:,} params); "
        + (
            f"its own top-1: {100 * anc['eval_acc']:.1f}% on the test images of "
            f"{anc.get('eval_data') or 'its training data'} (recorded in the file)"
            if anc.get("eval_acc") is not None
            else "its own accuracy: not recorded in the file (a checkpoint or hub folder records none)"
        ),
        f"- data: {task.data}"
        + (f" classes {', '.join(map(str, task.classes))}" if task.classes else "")
        + f", fine-tuned on {data} for {budget} (batch {task.batch_size or profile.batch_size}, "
        f"AdamW lr {profile.lr:g}, warmup + cosine), a fresh head for every method, top-1 on "
        f"{task.eval_images or 'every'} test image(s); seeds {', '.join(map(str, profile.seeds))}",
        f"- condensation: {plural(profile.condense_epochs, 'epoch')} of aux-net distillation on {profile.upstream_data}"
        + (
            f" classes {', '.join(map(str, profile.upstreams[0].classes))}"
            if profile.upstreams and profile.upstreams[0].classes
            else ""
        )
        + (f" ({profile.condense_images:,} images)" if profile.condense_images else " (every training image)")
        + f"; adaptation: {profile.adapt_steps} steps"
        + _labels_note(profile),
        *(
            [f"- distillation while fine-tuning (`{KD}` rows): λ = {profile.variants[0].distill_lambda:g}"]
            if profile.variants
            else []
        ),
        "",
        "Marks (`vs` columns): `+` the method's mean beats the reference's by more than 2 × the pooled std "
        "over seeds (√((s₁² + s₂²)/2)), `−` loses by that much, `=` neither, `?` fewer than 2 seeds. "
        f"`epoch reaching {LONG_LABEL}'s final`: the first evaluated fine-tuning epoch at which the method's mean "
        f"curve reaches the mean final accuracy of scratch trained ×{LONG}; the speed-up is the epoch at which "
        f"{LONG_LABEL} itself first reaches it (evaluated at every multiple of the others' budget) divided by "
        "the method's.",
        "",
        compare_text(rows, profile),
    ]
    if plots:
        import matplotlib

        matplotlib.use("Agg")
        plot_dir = out_dir / "plots"
        plot_dir.mkdir(parents=True, exist_ok=True)
        if any(r.ok for r in rows):
            data_name = task.data + (f" classes {','.join(map(str, task.classes))}" if task.classes else "")
            plot_by_size(rows, plot_dir / "by-size.png", data_name)
            parts += ["![accuracy by size](plots/by-size.png)", ""]
            if has_curves(rows, TASK):  # one evaluation point per run is no curve: that plot is left out
                plot_curves(rows, TASK, plot_dir / "curves.png", data_name)
                parts += ["![learning curves per size](plots/curves.png)", ""]
    write_text_atomic(out_dir / "report.md", "\n".join(parts))


def run_compare(
    profile: Profile,
    out_dir: str | Path,
    data_dir: str | None = None,
    device: str = "auto",
    progress: bool = True,
    time_limit: float | None = None,
    command: str | None = None,
    plots: bool = True,
) -> list[Any]:
    """Run (or resume) a compare profile into ``out_dir``; returns its rows (the report is written there)."""
    from ..bench.protocol import BenchRun

    return BenchRun(
        profile,
        out_dir,
        data_dir,
        device,
        progress,
        time_limit,
        plots=plots,
        command=command,
        reporter=write_compare_report,
    ).run()
