"""The walk of a benchmark's grid: every upstream's ancestry and genes, then the descendants of every seed, size,
method (and ablation) and task, in the grid's order; what another worker holds is skipped and counted."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..data import Data
from ..errors import LearngeneError, PlaceError
from ..gene import Learngene
from ..registry import get_method
from ..vit.spec import ViTSpec
from .cells import Cell, CellStage, Start
from .plan import WorkPlan
from .profiles import Upstream
from .rows import Row
from .tasks import TaskData
from .workers import Busy


class GridWalk(CellStage, WorkPlan):
    """One walk of the grid: every unit done is read, every free one computed."""

    def _walk(self, work: list[tuple[Any, ...]]) -> None:
        """One walk of the grid in its order: every unit done is read, every free one computed (``computing``),
        every one another worker holds skipped and counted in ``blocked``; the rows go to ``self.rows``."""
        self.rows, self.blocked, self.progressed = [], 0, False
        for up, tasks, anc_images, upstream, upstream_eval, plan, trained in work:
            self._check_time()
            try:
                with self._stage(plan["ancestry"], f"ancestry {up.name}".strip()):
                    ancestry = self.ancestry(anc_images, upstream_eval, up)
            except Busy:  # another worker trains this ancestry: everything of this upstream waits for it
                self.blocked += 1
                continue
            genes: dict[str, tuple[Learngene, str] | LearngeneError] = {}
            for name in self._methods(up):
                self._check_time()
                try:
                    work_done = plan["condense"].get(name, 0.0) if name in trained else 0.0
                    with self._stage(work_done, f"condense {name}", f"{up.name}/condense/{name}"):
                        data = self.condense_data(name, upstream)
                        genes[name] = self.gene(name, ancestry, data, upstream_eval, up.condense_epochs)
                except PlaceError:  # a full or read-only disk: every later stage would fail too
                    raise
                except LearngeneError as exc:  # recorded as n/a in every cell of the method
                    genes[name] = exc
                except Busy:  # another worker condenses it: its cells wait, this worker takes the others
                    self.blocked += 1
            self._descendants(genes, tasks, upstream, up)

    def _descendants(
        self,
        genes: dict[str, tuple[Learngene, str] | LearngeneError],
        tasks: list[TaskData],
        upstream: Data,
        up: Upstream | None = None,
    ) -> None:
        """Stages 3 and 4 for every seed, size, method (and ablation) and task; rows go to ``self.rows``."""
        up = up or self.profile.all_upstreams()[0]
        methods = [m for m in self._methods(up) if m in genes]
        for seed in self.profile.seeds:
            for spec in self._specs(up):
                for name in methods:
                    self._check_time()
                    try:
                        base, start = self._start(size_row(name, spec, seed, up), genes[name], spec, upstream)
                    except Busy:  # another worker adapts it: this size and seed of the method waits
                        self.blocked += 1
                        continue
                    variants = [None] + [
                        v for v in self.profile.variants if v.runs_on(up) and name in self._variant_methods(v, methods)
                    ]
                    for td in tasks:
                        for variant in variants:
                            for budget in self._budgets(name, td.task) if variant is None else (1,):
                                row = dataclasses.replace(
                                    base,
                                    task=td.task.name,
                                    budget=budget,
                                    adapt_seconds=start.adapt_seconds,
                                    variant=variant.name if variant else "",
                                    train_images=len(td.train),
                                    labels_per_class=td.task.shots,
                                )
                                self._cell_row(Cell(row, start, spec, td, variant))

    def _start(
        self, base: Row, condensed: tuple[Learngene, str] | LearngeneError, spec: ViTSpec, upstream: Data
    ) -> tuple[Row, Start]:
        """Stage 3 for a method at a size and seed: ``base`` with its gene's costs, and where its descendants start
        (the gene, adapted to the size where the method adapts; why there is none where the gene or the adaptation
        failed). :class:`Busy` when another worker adapts it."""
        name, seed = base.method, base.seed
        try:
            if isinstance(condensed, LearngeneError):
                raise LearngeneError(f"condensation failed: {condensed}")
            gene, gene_key = condensed
            base = dataclasses.replace(
                base,
                stored_params=gene.num_stored_params,
                condense_seconds=float(gene.cost.get("seconds", 0.0)),
                condense_steps=int(gene.cost.get("steps", 0)),
                **_condense_cost(gene),
            )
            with self._stage(
                self._adapt_gflop(spec) if get_method(name).adaptable else 0.0,
                f"adapt {name} {spec.short()} seed {seed}",
                f"{base.upstream}/adapt/{name}/{spec.short()}/{seed}",
            ):
                return base, Start(*self.initial_gene(gene, gene_key, spec, seed, upstream))
        except PlaceError:
            raise
        except LearngeneError as exc:
            return base, Start(None, why=str(exc))

    def _cell_row(self, cell: Cell) -> None:
        """Stage 4 for one cell: its row, fine-tuned from its start (n/a, with why, where there is none or it fails),
        goes to ``self.rows``; another worker's is counted in ``blocked``."""
        row, spec, task = cell.row, cell.spec, cell.task.task
        work = self._cell_gflop(spec, cell.task, row.budget)
        unit = f"{row.upstream}/{task.name}/{row.label}/{spec.short()}/{row.seed}"
        if cell.start.init is None:
            with self._stage(work, f"{row.method} {spec.short()}: n/a", unit):
                self.rows.append(dataclasses.replace(row, note=cell.start.why))
            return
        self._check_time()
        try:
            with self._stage(work, f"fine-tune {task.name} {row.label} {spec.short()} seed {row.seed}", unit):
                self.rows.append(self.cell(cell))
        except PlaceError:
            raise
        except LearngeneError as exc:
            self.rows.append(dataclasses.replace(row, note=str(exc)))
        except Busy:  # another worker fine-tunes it
            self.blocked += 1


def size_row(method: str, spec: ViTSpec, seed: int, up: Upstream) -> Row:
    """The row of ``method``'s descendant of ``spec`` and ``seed`` on upstream ``up``, before its task and results."""
    return Row(
        method=method,
        task="",
        size=spec.short(),
        depth=spec.depth,
        embed_dim=spec.embed_dim,
        num_heads=spec.num_heads,
        seed=seed,
        params=spec.num_params,
        upstream=up.name,
    )


def _condense_cost(gene: Learngene) -> dict[str, Any]:
    """A row's ``condense_images`` and ``condense_gflop``: nothing for a method that condenses on no data, else what
    :func:`learngene.bench.gene_stages.condense_work` added to its gene's cost (None where it knows none)."""
    if not get_method(gene.method).needs_data:
        return {"condense_images": 0, "condense_gflop": 0.0}
    gflop = gene.cost.get("gflop")
    return {
        "condense_images": gene.cost.get("images_seen"),
        "condense_gflop": None if gflop is None else float(gflop),
    }
