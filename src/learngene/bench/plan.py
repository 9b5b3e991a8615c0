"""The plan of a benchmark run: the cells of the grid and the work of every stage in forward GFLOPs (what the
run's progress bar counts)."""

from __future__ import annotations

from typing import Any

from ..data import Data
from ..registry import get_method
from ..training.config import known
from ..vit.spec import ViTSpec
from .ancestry_stage import UPSTREAM_EVAL_IMAGES, AncestryStage
from .gene_stages import GeneStages
from .profiles import Task, Upstream, Variant
from .tasks import TaskData


class WorkPlan(GeneStages, AncestryStage):
    """The grid's sizes, rows and budgets, and what each stage costs."""

    def plan(
        self, ancestry_images: int, tasks: list[TaskData], upstream: Data, up: Upstream | None = None
    ) -> dict[str, Any]:
        """Cells to train and their work in forward GFLOPs (a training image costs ~3 forwards)."""
        p = self.profile
        up = up or p.all_upstreams()[0]
        methods = self._methods(up)
        fed = self.fed_size or p.ancestry.img_size  # FLOPs at the images' size, not a RADIO's grid
        flops = p.ancestry.replace(img_size=fed).flops
        anc = flops * up.ancestry_epochs * (3 * ancestry_images + UPSTREAM_EVAL_IMAGES)
        # a condensation on data counts as an ancestry-sized training on its images: about what an aux net's costs
        # (those that only measure a few hundred images cost far less, tal's hypernetwork more)
        per_image = flops * up.condense_epochs / 1e9
        condense = {
            name: per_image * (3 * len(self.condense_data(name, upstream)) + UPSTREAM_EVAL_IMAGES)
            for name in methods
            if get_method(name).needs_data
        }
        rows = len(methods) + sum(len(self._variant_methods(v, methods)) for v in p.variants if v.runs_on(up))
        specs = [spec.replace(img_size=fed) for spec in self._specs(up)]
        cells = [
            self._cell_gflop(spec, td, factor) * len(p.seeds)
            for td in tasks
            for spec in specs
            for name in methods
            for factor in self._budgets(name, td.task)
        ]
        count = len(cells) + (rows - len(methods)) * len(tasks) * len(specs)  # the ablations' cells too
        cells += [
            self._cell_gflop(spec, td, 1) * len(p.seeds) * (rows - len(methods)) for td in tasks for spec in specs
        ]
        adapt = sum(self._adapt_gflop(s) for s in specs) * len(p.seeds)
        return {
            "ancestry": anc / 1e9,
            "condense": condense,
            "adapt": adapt,
            "cell": cells,
            "cells": count * len(p.seeds),
        }

    def _specs(self, up: Upstream) -> list[ViTSpec]:
        """The descendant sizes of an upstream, with its ancestry's classifier."""
        classes = self.ancestry_spec(up).num_classes
        sizes = up.sizes or self.profile.sizes
        return [
            self.profile.ancestry.replace(depth=d, embed_dim=w, num_heads=h, num_classes=classes) for d, w, h in sizes
        ]

    @staticmethod
    def _variant_methods(variant: Variant, methods: list[str]) -> list[str]:
        """The methods an ablation applies to: those named, else every method that stores weights."""
        if variant.methods is not None:
            return [m for m in variant.methods if m in methods]
        return [m for m in methods if get_method(m).needs_vit_ancestry]

    @staticmethod
    def _budgets(name: str, task: Task) -> tuple[int, ...]:
        """Budgets (multiples of the task's epochs) ``name`` gets on ``task``: scratch also the long one."""
        return (1, task.scratch_factor) if name == "scratch" and task.scratch_factor > 1 else (1,)

    def _cell_gflop(self, spec: ViTSpec, task: TaskData, budget: int) -> float:
        t = task.task
        batch = t.batch_size or known(self.profile.train.batch_size)
        epochs = -(-t.max_steps * batch // len(task.train)) if t.max_steps else t.epochs
        evals = budget if budget > 1 else (epochs // t.eval_every if t.eval_every else 1)
        eval_images = min(t.eval_images or len(task.eval), len(task.eval))
        images = t.max_steps * batch if t.max_steps else t.epochs * len(task.train)
        return spec.flops * (images * budget * 3 + evals * eval_images) / 1e9

    def _adapt_gflop(self, spec: ViTSpec) -> float:
        return spec.flops * 3 * self.profile.adapt_steps * known(self.profile.train.batch_size) / 1e9
