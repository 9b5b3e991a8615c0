"""``learngene compare``: which start wins for my ancestry, my data and my sizes.

The bench engine (:mod:`learngene.bench.protocol`) run with a profile built from the command line
(:func:`compare_profile`): the given ancestry instead of stage 1, every method condensed once (on the
user's data unless ``--condense-data`` says otherwise), every size made (adapted where the method
adapts), and every method × size × seed fine-tuned on the user's data with the same budget, data order
and fresh head. Scratch also trains ×10 as long. Everything is cached and resumable like ``bench``, and any
number of processes on one ``--out`` share the grid (:mod:`learngene.bench.workers`).

The report (:func:`write_compare_report`) gives, per size, top-1 mean ± std over seeds, the paired difference
against each reference (scratch, scratch ×10, mimetic, and ``structured`` where that method is registered) with
its 95 % t interval and a Holm-corrected decision (:mod:`learngene.bench.stats`), stored parameters,
condensation and fine-tuning seconds, the first epoch at which each method reaches scratch ×10's final
accuracy with the speed-up that means, and one recommendation line (:func:`recommend`) that says ``use X`` only
for resolved wins, and otherwise what is resolved, the cheapest of the best starts and how many seeds would resolve
the closest difference with 80 % power. Methods that start from the same weights share a row
(:mod:`learngene.bench.findings`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..bench.profiles import Profile, Task, Upstream, Variant, shared_settings
from ..bench.workers import worker_device
from ..errors import LearngeneError
from ..pipeline.inputs import train_config
from ..registry import get_method, list_methods
from ..training.config import TrainConfig, known
from ..vit.spec import ViTSpec, parse_size
from .choices import KD, LONG, LONG_LABEL, TASK, CompareChoices, reference_labels, refuse_repeats
from .report import write_compare_report

if TYPE_CHECKING:
    from ..bench.protocol import BenchRun


def compare_profile(
    ancestry_spec: ViTSpec | None,
    ancestry_file: str,
    data: str,
    sizes: Sequence[str],
    train: TrainConfig | Mapping[str, Any] | None = None,
    choices: CompareChoices | None = None,
) -> Profile:
    """The profile of one ``learngene compare``: every method × size × seed fine-tuned on ``data`` with ``train``'s
    settings (a TrainConfig, or settings by name over the command's defaults, ``USE_CASE_DEFAULTS["compare"]``; its
    epochs, steps and evaluation are the fine-tuning's, its device and logs :func:`run_compare`'s), every other setting
    shared by every stage. Every bad input is one :class:`LearngeneError` line."""
    cfg, choices = train_config(train, "compare", "compare"), choices or CompareChoices()
    shapes = _shapes(ancestry_spec, sizes)
    refs = reference_labels(choices.references)
    methods = _compared_methods(choices, refs)
    skipped = _unreachable(ancestry_spec, shapes, methods, refs)
    methods = tuple(m for m in methods if m not in skipped)
    kd = (Variant(KD, methods=methods, distill_lambda=choices.kd_lambda, upstreams=("",)),)
    # the data-driven methods condense and adapt on condense_classes, else on the compared classes (unless
    # condense_data): e.g. the ancestry's own classes, so that no condensation reads the user's labels
    condense_on = choices.condense_classes or (choices.classes if not choices.condense_data else None)
    return Profile(
        name="compare",
        description="learngene compare: a profile built from the command line",
        ancestry=cast(ViTSpec, ancestry_spec),
        ancestry_epochs=0,
        condense_epochs=choices.condense_epochs,
        condense_images=choices.condense_images,
        sizes=shapes,
        tasks=(_task(data, cfg, choices, refs),),
        adapt_steps=choices.adapt_steps,
        seeds=tuple(range(choices.seeds)),
        methods=methods,
        train=TrainConfig(**shared_settings(cfg)),
        variants=kd if choices.kd_lambda else (),
        ancestry_file=str(ancestry_file),
        ancestry_timm_model=choices.timm_model,
        ancestry_drop_head=choices.drop_head,
        upstream_data=choices.condense_data or data,
        references=refs,
        upstreams=(Upstream("", condense_on, 0, choices.condense_epochs),) if condense_on else (),
        left_out=tuple(skipped.items()),
    )


def _unreachable(
    ancestry: ViTSpec | None, shapes: Sequence[tuple[int, int, int]], methods: Sequence[str], refs: Sequence[str]
) -> dict[str, str]:
    """The compared methods (the references' aside) that can make none of the sizes, by their declared reach, each
    with why: condensing them would spend compute on a gene no size can use."""
    from ..advice import left_out

    base = cast(ViTSpec, ancestry)
    specs = [base.replace(depth=d, embed_dim=w, num_heads=h) for d, w, h in shapes]
    return left_out(base, specs, [m for m in methods if m not in refs and m != "scratch"])


def _shapes(ancestry: ViTSpec | None, sizes: Sequence[str]) -> tuple[tuple[int, int, int], ...]:
    """The ``--sizes`` as ``(depth, embed_dim, num_heads)``, each refused in one line where the ancestry's family has no
    such size."""
    if ancestry is None:
        raise LearngeneError(
            "compare makes descendants of the ancestry's own family; give a ViT ancestry whose size "
            "a ViTSpec describes (a learngene model file, a timm ViT checkpoint or folder)"
        )
    if not sizes:
        raise LearngeneError(
            "give at least one descendant size, e.g. sizes=['L4-D192-H3', 'L12-D384-H6'] (--sizes L4-D192-H3,L12-D384-H6)"
        )
    shapes = []
    for text in sizes:
        shape = parse_size(text)
        try:
            ancestry.replace(depth=shape[0], embed_dim=shape[1], num_heads=shape[2])
        except LearngeneError as exc:
            raise LearngeneError(f"no method can make size {text.strip()}: {exc}") from None
        shapes.append(shape)
    refuse_repeats(shapes, "sizes", [t.strip() for t in sizes])
    return tuple(shapes)


def _compared_methods(choices: CompareChoices, refs: tuple[str, ...]) -> tuple[str, ...]:
    """The references' methods (scratch for its ×10 run), then the methods asked for (each registered)."""
    requested = list(dict.fromkeys(choices.methods or list_methods()))
    for name in requested:
        get_method(name)  # an unknown method is one line
    if choices.condense_classes and not any(get_method(m).needs_data for m in requested):
        raise LearngeneError(
            f"condense_classes (--condense-classes) chooses the images that methods condensing on data read, and "
            f"none of {', '.join(requested)} does; leave it out"
        )
    base = (["scratch"] if LONG_LABEL in refs else []) + [r for r in refs if r != LONG_LABEL]
    return tuple(dict.fromkeys([*base, *requested]))


def _task(data: str, cfg: TrainConfig, choices: CompareChoices, refs: tuple[str, ...]) -> Task:
    """The one task: fine-tuning on the user's data with ``cfg``'s budget and evaluation, a fresh head for every method."""
    return Task(
        TASK,
        data,
        epochs=known(cfg.epochs),
        max_steps=cfg.max_steps,
        shots=choices.few_shot,
        train_images=choices.train_images,
        eval_images=cfg.eval_images or None,  # 0 and None: every test image
        new_head=True,
        scratch_factor=LONG if LONG_LABEL in refs else 1,
        eval_every=cfg.eval_every,
        classes=choices.classes,
    )


def start_compare(profile: Profile, out_dir: str | Path, *, device: str = "auto", **options: Any) -> BenchRun:
    """The run of a compare profile into ``out_dir``, ready to :meth:`~learngene.bench.protocol.BenchRun.run` (which
    returns its rows and writes the report there; its ``meta`` then holds what it recorded of itself).

    Any number of these on one ``out_dir`` (processes, ``torchrun`` ranks, SLURM array tasks) share the grid: each
    computes the cells no other has claimed or finished, and the last to finish writes the report
    (:mod:`learngene.bench.workers`). Under ``torchrun`` each rank works on its own GPU (``LOCAL_RANK``).

    ``options`` are :class:`~learngene.bench.protocol.BenchRun`'s (``data_dir``, ``progress``, ``time_limit``,
    ``command``, ``plots``, and ``log``: loggers of every training stage's curves, ``TrainConfig.log``, under
    ``out_dir/logs``).
    """
    from ..bench.protocol import BenchRun

    return BenchRun(
        profile, out_dir, device=worker_device(device), reporter=write_compare_report, shared=True, **options
    )


def run_compare(profile: Profile, out_dir: str | Path, *, device: str = "auto", **options: Any) -> list[Any]:
    """Run (or resume) a compare profile into ``out_dir`` (:func:`start_compare`); returns its rows (the report is
    written there)."""
    return start_compare(profile, out_dir, device=device, **options).run()
