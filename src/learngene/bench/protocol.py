"""The benchmark protocol: one ancestry, every method's gene, descendants on identical budgets.

Stages, each cached on disk under a hash of its configuration (a rerun skips what is done; a
training interrupted half-way resumes from its checkpoint):

1. ``ancestry/``: one ViT trained on Fashion-MNIST.
2. ``genes/``: every method condenses it once (data-driven methods see the same upstream images),
   recording what that cost (epochs, steps, wall time) and the parameters the gene stores.
3. ``adapted/``: adaptable methods (WAVE's scalers, PEG's φ) specialize their gene to each size on
   the same upstream images for ``adapt_steps`` steps. This is part of the initialization, so it is
   done once per size and seed and every task starts from the same descendant; no method sees
   downstream data outside the fine-tuning budget every method gets.
4. ``cells/``: every gene is expanded to every size and fine-tuned on every task with identical
   budgets, seeds and data order; top-1 accuracy is kept at the task's evaluation points. A method
   that cannot make a size (it raises :class:`LearngeneError`) is recorded as n/a. Scratch is also
   trained with ``scratch_factor`` times the epochs.

A profile with several :class:`~learngene.bench.profiles.Upstream` s runs stages 1-4 once per
upstream: an ancestry trained on some Fashion-MNIST classes (for a given number of epochs), its
genes, and descendants fine-tuned on the tasks, where ``other_classes`` tasks use only the classes
that upstream never saw. Genes that store nothing (scratch, mimetic) do not depend on the ancestry,
so their cells are computed once and shared by every upstream with the same downstream classes.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from ..data import ImageData
from ..errors import LearngeneError
from ..formats.atomic import write_text_atomic
from ..registry import get_method
from ..training.loop import resolve_device
from ..training.progress import RunProgress
from ..training.run_dirs import lock_run_dir, unlock_run_dir
from .profiles import Profile, Task
from .report import plural
from .rows import Row
from .stages import OutOfTime
from .tasks import load_task
from .walk import GridWalk
from .workers import REPORT_FOLDER, Claims, SharedClaims


class BenchRun(GridWalk):
    """One run of a profile into ``out_dir``; :meth:`run` executes (or reuses) every stage.

    With ``shared=True`` it is one worker among any number on ``out_dir`` (:mod:`learngene.bench.workers`).
    """

    POLL_SECONDS = 5.0  # how often a worker that can take nothing looks again at what the others hold

    def run(self) -> list[Row]:
        if not str(self.out_given).strip():
            raise LearngeneError("the report folder (out_dir, --out) is empty; give one, e.g. runs/compare")
        resolve_device(self.device)  # a GPU asked for and missing is refused before anything loads
        if self.shared:  # the workers' claims are taken once the inputs are checked (_run)
            return self._run()
        # one run per report folder, as per run directory: two writers would race on its cache and report
        held = lock_run_dir(self.out, REPORT_FOLDER, "report folder")
        try:
            return self._run()
        finally:
            unlock_run_dir(held)

    def _run(self) -> list[Row]:
        work, total = self._prepare()
        if self.shared:
            profile = json.dumps(self.profile.to_dict(), sort_keys=True, default=str)
            self.claims = SharedClaims(self.out, hashlib.sha256(profile.encode()).hexdigest()[:12])
        try:
            return self._work(work, total)
        finally:
            self.claims.close()

    def prepare(self) -> tuple[list[tuple[Any, ...]], float]:
        """Every upstream's data and plan (what each walk of the grid goes through), and the run's total work (its
        ``meta["cells"]``: the grid's cells)."""
        return self._prepare()

    def observe(self, work: list[tuple[Any, ...]], claims: Claims) -> list[Row]:
        """One walk of the grid (``work``, from :meth:`prepare`) that computes and claims nothing: the rows of the cells
        the workers have finished (or recorded as failed in ``claims``); a launcher waiting for its workers."""
        self.claims, self.computing, self.bar = claims, False, None
        self._walk(work)
        return self.rows

    def _prepare(self) -> tuple[list[tuple[Any, ...]], float]:
        """Every upstream's data and plan (what each walk of the grid goes through), and the run's total work."""
        p = self.profile
        loaded: dict[tuple[str, str], ImageData] = {}
        fed = self.data_spec()
        load_task(Task("upstream", p.upstream_data, epochs=1), fed, self.data_dir, loaded)
        work = []
        total = 0.0
        for up in p.all_upstreams():
            tasks = [load_task(t, fed, self.data_dir, loaded, up.classes) for t in p.tasks]
            for td in tasks:
                if td.train.num_classes < 2:
                    raise LearngeneError(
                        f"{td.task.data} has {td.train.num_classes} class; fine-tuning and comparing "
                        f"need data with 2 or more classes"
                    )
            anc_images, upstream, upstream_eval = self._upstream_data(up, loaded)
            plan = self.plan(len(anc_images), tasks, upstream, up)
            trained = list(plan["condense"])
            total += (
                plan["ancestry"]
                + sum(plan["condense"].values())
                + plan["adapt"] * sum(get_method(m).adaptable for m in self._methods(up))
                + sum(plan["cell"])
            )
            work.append((up, tasks, anc_images, upstream, upstream_eval, plan, trained))
        self.meta.update(plan_gflop=round(total), cells=sum(w[5]["cells"] for w in work), methods=self.methods)
        return work, total

    def _work(self, work: list[tuple[Any, ...]], total: float) -> list[Row]:
        """Walk the grid, computing every unit no other worker holds, until every unit is done (or the time limit);
        then write the report from what is done."""
        p = self.profile
        # progress in estimated work, not stages: a 10x scratch run or a deep size weighs what it costs
        self.bar = RunProgress(total, desc=f"bench {p.name}", unit="GFLOP", disable=not self.progress)
        complete = False
        try:
            while True:
                self._walk(work)
                if not self.blocked:
                    complete = True
                    break
                if not self.progressed:  # what is left, other workers hold: wait for them
                    with self.bar.stage(f"waiting for other workers ({plural(self.blocked, 'unit')})", 0.0):
                        self._check_time()
                        time.sleep(self.POLL_SECONDS)
        except OutOfTime:
            pass
        finally:
            self.bar.close()
        self.meta.update(wall_seconds=round(time.perf_counter() - self.started, 1), complete=complete)
        with self.claims.reporting():  # the last worker to get here writes the report every worker sees
            if not complete:  # the time limit: report what every worker has finished, reading only
                self.computing = False
                self._walk(work)
                self.meta["complete"] = not self.blocked
            self.reporter(self.rows, p, self.out, self.meta, plots=self.plots)
            write_text_atomic(self.out / "profile.json", json.dumps(p.to_dict(), indent=2, default=str))
        return self.rows


def run_profile(profile: Profile, out_dir: str | Path, **options: Any) -> list[Row]:
    """Run (or resume) every stage of ``profile`` into ``out_dir`` and write its report there.

    Returns the rows of the finished cells. ``options`` are :class:`BenchRun`'s (``data_dir``, ``device``, ``progress``,
    ``time_limit``, ``command``, ...): after ``time_limit`` seconds no new stage starts, a partial report is written and
    the run can be continued by calling this again; ``command`` is what the report names as the command that
    reproduces it.
    """
    return BenchRun(profile, out_dir, **options).run()
