"""Stage 4 of the benchmark, the grid's cells: a descendant of a size made from its gene (or an ablation's
variant of it), given the task's fresh head, and fine-tuned on the task."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any, cast

import torch

from .. import pipeline
from ..binding import bind_gene
from ..descendant import top_up_state
from ..errors import LearngeneError
from ..formats.atomic import write_text_atomic
from ..formats.weights import digest
from ..gene import Learngene
from ..registry import get_method
from ..training.distill import cache_teacher_outputs, setup_distillation
from ..training.loop import TrainConfig, train
from ..vit.attention_init import blend_query_key, sincos_pos_embed
from ..vit.spec import ViTSpec
from .profiles import Task, Variant
from .rows import Row, row_from_dict
from .stages import RunStages, stage_key
from .tasks import TaskData


def fresh_head(model: torch.nn.Module, spec: ViTSpec, seed: int) -> None:
    """Give ``model`` the classifier a scratch model of this seed gets (the same for every method)."""
    torch.manual_seed(seed)
    reference: Any = spec.create_model()
    cast(Any, model).get_classifier().load_state_dict(reference.get_classifier().state_dict())


def fine_tune_budget(task: Task, budget: int) -> tuple[int, int | None, int]:
    """``(epochs, max_steps, eval_every)`` of a cell fine-tuned ``budget`` times the task's epochs (or steps)."""
    max_steps = task.max_steps * budget if task.max_steps else None
    # a ×N run is read at every multiple of the task's epochs: its curve and "epochs to match" need no more
    eval_every = task.epochs if budget > 1 else task.eval_every
    return task.epochs * budget, max_steps, eval_every


class CellStage(RunStages):
    """Stage 4: fine-tune a descendant on a task."""

    def cell(
        self, row: Row, init: Learngene, init_key: str, spec: ViTSpec, task: TaskData, variant: Variant | None = None
    ) -> Row:
        t = task.task
        fresh = t.new_head and not (variant and variant.head == "reuse")
        if fresh:  # the task's own label space
            spec = spec.replace(num_classes=task.train.num_classes)
        options = descendant_options(init, row.seed, variant)
        key = self._cell_key(row, init_key, spec, task, variant, options, fresh)
        name = row.method + (f"{variant.name}" if variant else "")
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
            path,
            lambda f: row_from_dict(json.loads(f.read_text())),
            lambda: self._fine_tune(row, init, spec, task, variant, path, cfg, fresh),
        )
        return dataclasses.replace(done, upstream=row.upstream)

    def _cell_key(
        self,
        row: Row,
        init_key: str,
        spec: ViTSpec,
        task: TaskData,
        variant: Variant | None,
        options: dict[str, Any],
        fresh: bool,
    ) -> str:
        """The cache key of a cell: its start, size, seed, budget, data, ablation and the run's shared settings."""
        t = task.task
        epochs, max_steps, eval_every = fine_tune_budget(t, row.budget)
        # settings that older runs did not have join the key only when set: their cells stay valid
        extra = {
            k: v
            for k, v in (
                ("classes", list(task.train.classes) if t.other_classes or t.classes else None),
                ("eval_every", eval_every if eval_every != 1 else None),
                ("fine_tune_batch", t.batch_size),
                ("variant", options or None),
                ("head", "reuse" if t.new_head and not fresh else None),
                ("max_steps", max_steps),
                ("distill_lambda", variant.distill_lambda if variant else None),
                ("teacher", self.ancestry_key if variant and variant.distill_lambda else None),
            )
            if v is not None
        }
        return stage_key(
            stage="cell",
            init=init_key,
            spec=spec.to_dict(),
            seed=row.seed,
            epochs=epochs,
            data=t.data,
            train_images=t.train_images,
            shots=t.shots,
            eval_images=t.eval_images,
            new_head=t.new_head,
            **extra,
            **self._fed_key(),
            **self._budget_key(),
        )

    def _fine_tune(
        self,
        row: Row,
        init: Learngene,
        spec: ViTSpec,
        task: TaskData,
        variant: Variant | None,
        path: Path,
        cfg: TrainConfig,
        fresh: bool,
    ) -> Row:
        """Make the descendant of a cell, fine-tune it and write its row to ``path``."""
        tic = time.perf_counter()
        if variant:
            check_variant_changes(variant, init, spec)
        model = cell_descendant(init, spec, row.seed, variant)
        if fresh:
            fresh_head(model, spec, row.seed)
        start = digest(model.state_dict())  # methods that start alike share one row of the report
        student, data, teacher, loss = model, task.train, None, None
        if variant and variant.distill_lambda:
            cfg = cfg.replace(distill_lambda=variant.distill_lambda)
            student, data, teacher, loss = self.distillation(model, task)
        result = train(
            student,
            data,
            cfg,
            eval_data=task.eval,
            teacher=teacher,
            run_dir=path.with_suffix(".run"),
            resume=True,
            loss=loss,
        )
        evaluated = [h for h in result.history if "eval_acc" in h]
        row = dataclasses.replace(
            row,
            accs=[h["eval_acc"] for h in evaluated],
            eval_epochs=[h["epoch"] for h in evaluated],
            train_seconds=round(result.seconds, 2),
            cell_seconds=round(time.perf_counter() - tic, 2),
            start=start or "",
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(dataclasses.asdict(row)))
        shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
        return row

    def distillation(self, model: torch.nn.Module, task: TaskData) -> tuple[torch.nn.Module, Any, Any, Any]:
        """``(student, data, teacher, loss)`` to fine-tune ``model`` distilling the ancestry; the teacher's outputs on the
        task's images are computed once per task and kind and shared by every cell."""
        kd = setup_distillation(model, self.teacher.model, task.train, self.teacher.label_space)
        key = (task.task.name, kd.kind)
        if key not in self.teacher_outputs:
            self.teacher_outputs[key] = cache_teacher_outputs(task.train, kd.teacher, self._cfg())
        data, teacher = self.teacher_outputs[key]
        return kd.student, data, teacher, kd.loss


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
