"""Stage 4 of the benchmark, the grid's cells: a descendant of a size made from its gene (or an ablation's
variant of it), given the task's fresh head, and fine-tuned on the task."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast

import torch

from .. import pipeline
from ..binding import bind_gene
from ..descendant import top_up_state
from ..errors import LearngeneError
from ..formats.atomic import write_text_atomic
from ..formats.weights import digest
from ..gene import Learngene
from ..pipeline.fine_tuning import FineTuning, fine_tuning
from ..registry import get_method
from ..training.loop import TrainConfig, train
from ..vit.attention_init import blend_query_key, sincos_pos_embed
from ..vit.spec import ViTSpec
from .probe import fingerprint
from .profiles import Task, Variant
from .rows import Row, row_from_dict
from .stages import RunStages, stage_key
from .tasks import TaskData


def fine_tune_budget(task: Task, budget: int) -> tuple[int, int | None, int]:
    """``(epochs, max_steps, eval_every)`` of a cell fine-tuned ``budget`` times the task's epochs (or steps)."""
    max_steps = task.max_steps * budget if task.max_steps else None
    # a ×N run is read at every multiple of the task's epochs: its curve and "epochs to match" need no more
    eval_every = task.epochs if budget > 1 else task.eval_every
    return task.epochs * budget, max_steps, eval_every


class Start(NamedTuple):
    """Where a method's descendants of one size and seed start: the gene (adapted where the method adapts), its cache
    key and the adapt seconds; ``init`` None: every cell of it is n/a, for the reason ``why``."""

    init: Learngene | None
    key: str = ""
    adapt_seconds: float = 0.0
    why: str = ""


@dataclass(frozen=True)
class Cell:
    """One cell of the grid: ``row``'s descendant of ``spec`` (a size of the grid), expanded from ``start`` (with
    ``variant``'s ablation) and fine-tuned on ``task``."""

    row: Row
    start: Start
    spec: ViTSpec
    task: TaskData
    variant: Variant | None = None

    @property
    def init(self) -> Learngene:
        """The gene the descendant is expanded from (a cell without one is n/a, never fine-tuned)."""
        return cast(Learngene, self.start.init)

    @property
    def fresh(self) -> bool:
        """Whether the descendant gets the task's fresh head (in the task's own label space)."""
        return self.task.task.new_head and not (self.variant and self.variant.head == "reuse")

    @property
    def model_spec(self) -> ViTSpec:
        """The spec of the descendant fine-tuned: the grid's size, in the task's label space where the head is fresh."""
        return self.spec.replace(num_classes=self.task.train.num_classes) if self.fresh else self.spec

    @property
    def distill_lambda(self) -> float | None:
        return self.variant.distill_lambda if self.variant else None

    def key_settings(self) -> dict[str, Any]:
        """What the cell's cache key holds of the cell: its start, size, seed, budget, data and ablation."""
        t = self.task.task
        epochs, max_steps, eval_every = fine_tune_budget(t, self.row.budget)
        # settings that older runs did not have join the key only when set: their cells stay valid
        extra = {
            k: v
            for k, v in (
                ("classes", list(self.task.train.classes) if t.other_classes or t.classes else None),
                ("eval_every", eval_every if eval_every != 1 else None),
                ("fine_tune_batch", t.batch_size),
                ("variant", descendant_options(self.init, self.row.seed, self.variant) or None),
                ("head", "reuse" if t.new_head and not self.fresh else None),
                ("max_steps", max_steps),
                ("distill_lambda", self.distill_lambda),
            )
            if v is not None
        }
        return dict(
            init=self.start.key,
            spec=self.model_spec.to_dict(),
            seed=self.row.seed,
            epochs=epochs,
            data=t.data,
            train_images=t.train_images,
            shots=t.shots,
            eval_images=t.eval_images,
            new_head=t.new_head,
            **extra,
        )


class CellStage(RunStages):
    """Stage 4: fine-tune a descendant on a task."""

    def cell(self, cell: Cell) -> Row:
        row, t, spec = cell.row, cell.task.task, cell.model_spec
        teacher = {"teacher": self.ancestry_key} if cell.distill_lambda else {}
        key = stage_key(stage="cell", **cell.key_settings(), **teacher, **self._fed_key(), **self._budget_key())
        name = row.method + (f"{cell.variant.name}" if cell.variant else "")
        path = (
            self.out
            / "cells"
            / t.name
            / name
            / f"{spec.short()}-s{row.seed}{'' if row.budget == 1 else f'-x{row.budget}'}-{key}.json"
        )
        epochs, max_steps, eval_every = fine_tune_budget(t, row.budget)
        cfg = self._cfg(
            epochs=epochs,
            seed=row.seed,
            desc=f"{t.name} {row.label} {spec.short()}",
            eval_every=eval_every,
            eval_images=t.eval_images,
            batch_size=t.batch_size or self.profile.train.batch_size,
            max_steps=max_steps,
            logs_at=path,
        )
        done = self._result(
            path, lambda f: row_from_dict(json.loads(f.read_text())), lambda: self._fine_tune(cell, path, cfg)
        )
        # the gene's costs and the protocol as this run knows them: a cell cached before they were recorded has none
        costs = {k: getattr(row, k) for k in ("condense_images", "condense_gflop", "train_images", "labels_per_class")}
        return dataclasses.replace(done, upstream=row.upstream, **costs)

    def _fine_tune(self, cell: Cell, path: Path, cfg: TrainConfig) -> Row:
        """Make the descendant of a cell, fine-tune it with ``cfg`` and write its row to ``path``."""
        tic = time.perf_counter()
        init, spec, seed, task = cell.init, cell.model_spec, cell.row.seed, cell.task
        if cell.variant:
            check_variant_changes(cell.variant, init, spec)
        model = cell_descendant(init, spec, seed, cell.variant)
        if cell.distill_lambda:
            cfg = cfg.replace(distill_lambda=cell.distill_lambda)
        tuned = self.fine_tuning(model, cell)
        start = digest(model.state_dict())
        probe = fingerprint(model, spec.img_size, spec.in_chans)  # methods that compute alike share one row
        result = train(
            tuned.student,
            tuned.data,
            cfg,
            eval_data=task.eval,
            teacher=tuned.teacher,
            run_dir=path.with_suffix(".run"),
            resume=True,
            loss=tuned.loss,
        )
        evaluated = [h for h in result.history if "eval_acc" in h]
        row = dataclasses.replace(
            cell.row,
            accs=[h["eval_acc"] for h in evaluated],
            eval_epochs=[h["epoch"] for h in evaluated],
            train_seconds=round(result.seconds, 2),
            cell_seconds=round(time.perf_counter() - tic, 2),
            start=start or "",
            probe=probe,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(dataclasses.asdict(row)))
        shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
        return row

    def fine_tuning(self, model: torch.nn.Module, cell: Cell) -> FineTuning:
        """The cell's head and distillation, by ``learngene train``'s rules (:func:`learngene.pipeline.fine_tuning`):
        the task's fresh head where the cell has one (else the descendant's own), and, for a ``+kd`` cell, the
        ancestry distilled; the teacher's outputs on the task's images are computed once per task and kind and shared
        by every cell."""
        task = cell.task
        tuned = fine_tuning(
            model,
            cell.spec,
            task.train,
            cell.row.seed,
            self._cfg(),
            new_head=cell.fresh,
            teacher=self.teacher if cell.distill_lambda else None,
            teacher_outputs=self.teacher_outputs.setdefault(task.task.name, {}),
        )
        if tuned.distillation is not None:
            self.meta.setdefault("distillation", {})[task.task.name] = tuned.distillation.why  # the report names it
        return tuned


def cell_descendant(init: Learngene, spec: ViTSpec, seed: int, variant: Variant | None = None) -> torch.nn.Module:
    """The descendant of ``spec`` a cell fine-tunes: ``learngene expand``'s (:func:`learngene.pipeline.expand`), with
    the variant's method options and top-up, then its ablation of the position table or attention (:func:`ablate`)."""
    made = pipeline.expand(
        init,
        size=spec,
        seed=seed,
        options=dict(variant.options) if variant else None,
        top_up=variant.top_up if variant else None,
    )
    if variant:
        ablate(made.model, made.provided, spec, seed, pos_embed=variant.pos_embed, blend_mimetic=variant.blend_mimetic)
    return made.model


def ablate(
    model: torch.nn.Module,
    provided: list[str],
    spec: ViTSpec,
    seed: int,
    pos_embed: str | None = None,
    blend_mimetic: float | None = None,
) -> None:
    """Change a descendant of ``spec`` and ``seed`` as an ablation says, in place (``provided``: the keys its gene gave).

    ``blend_mimetic=α`` makes every head's ``W_q W_kᵀ`` ``α·gene + (1−α)·mimetic`` where the gene gave the attention
    (mimetic drawn with ``seed``); ``pos_embed="sincos"`` puts in the 2-D sin-cos position table, ``"learned"`` timm's
    initialization of ``seed`` (the table a scratch model of this seed starts from), whatever the gene gave.
    """
    if pos_embed not in (None, "learned", "sincos"):
        raise LearngeneError(f"pos_embed must be learned or sincos, not {pos_embed!r}")
    if pos_embed is not None and not spec.family.abs_pos_embed:
        raise LearngeneError(
            f"pos_embed={pos_embed} replaces the absolute position table, which {spec.arch} does not have (its "
            f"positions are RoPE's); leave pos_embed out"
        )
    own = model.state_dict()
    changes: dict[str, torch.Tensor] = {}
    if blend_mimetic is not None:
        given = {k: own[k] for k in provided}
        changes.update(
            (k, v) for k, v in blend_query_key(given, spec, blend_mimetic, seed).items() if v is not given[k]
        )
    if pos_embed == "sincos":
        changes.update(spec.model_layout({"pos_embed": sincos_pos_embed(spec)}))
    elif pos_embed == "learned":
        torch.manual_seed(seed)
        key = spec.key("pos_embed")
        changes[key] = spec.create_model().state_dict()[key]
    model.load_state_dict(changes, strict=False)


def check_variant_changes(variant: Variant, init: Learngene, spec: ViTSpec) -> None:
    """Refuse (recorded as n/a, with why) an ablation that would change nothing for this gene and size."""
    bound = bind_gene(init, at=spec)
    provided = set(bound.check(spec))
    if variant.top_up and set(top_up_state(variant.top_up, spec)) <= provided:
        raise LearngeneError(
            f"the {init.method} gene gives every tensor {variant.top_up} sets at {spec.short()}: "
            f"the top-up changes nothing"
        )
    if variant.head == "reuse" and "head.weight" not in provided:
        raise LearngeneError(f"the {init.method} gene gives no classifier head to reuse")
    if variant.options:
        plain = bound.expand(spec)
        changed = bind_gene(init, options=dict(variant.options), check=False).expand(spec)
        if plain.keys() == changed.keys() and all(torch.equal(plain[k], changed[k]) for k in plain):
            options = " ".join(f"{k}={v}" for k, v in variant.options)
            raise LearngeneError(f"{options} changes nothing in the {init.method} descendant at {spec.short()}")


def descendant_options(init: Learngene, seed: int, variant: Variant | None = None) -> dict[str, Any]:
    """What makes a cell's descendant, for its cache key: the ablation's settings and method options, and the seed of
    a method that draws at expansion (mimetic), which :func:`cell_descendant` draws with the cell's seed."""
    options = variant.descendant_options() if variant else {}
    seed_option = get_method(init.method).seed_option
    if seed_option and seed:  # seed 0 was always the method's default: the keys of older runs stay valid
        options[f"expand_{seed_option}"] = seed
    return options
