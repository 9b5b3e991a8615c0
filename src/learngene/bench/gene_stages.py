"""Stages 2 and 3 of the benchmark: every method's gene, condensed once per upstream, and the gene a size starts
from (adapted to it where the method adapts)."""

from __future__ import annotations

import time
from typing import cast

from .. import pipeline
from ..data import Data, take
from ..gene import Learngene
from ..method import Ancestry
from ..registry import get_method
from ..vit.spec import ViTSpec
from .profiles import Condensing
from .stages import RunStages, method_source_hash, stage_key, stage_run_dir


class GeneStages(RunStages):
    """Stage 2 (every method's gene, once) and stage 3 (the initialization of a size)."""

    def gene(
        self, name: str, ancestry: Ancestry, upstream: Data, upstream_eval: Data, condense_epochs: int | None = None
    ) -> tuple[Learngene, str]:
        how, cls = self.profile.condensing(name, condense_epochs), get_method(name)
        key = self._gene_key(how, ancestry, len(upstream))
        path = self.out / "genes" / f"{name}-{key}.safetensors"

        def condense() -> Learngene:
            cfg = self._cfg(
                epochs=how.epochs,
                distill_lambda=how.distill_lambda,
                desc=f"condense {name}",
                progress=self.inner_progress,
                logs_at=path,
            )
            tic = time.perf_counter()
            with stage_run_dir(path) as run_dir:
                condensed = pipeline.condense(
                    name,
                    ancestry,
                    options=how.options,
                    data=(upstream, upstream_eval),
                    train_cfg=cfg,
                    run_dir=run_dir if cls.needs_data else None,  # a checkpoint, for a condensation on data
                    resume=cls.needs_data,
                )
                condensed.gene.cost = {**condensed.gene.cost, "seconds": round(time.perf_counter() - tic, 2)}
                path.parent.mkdir(parents=True, exist_ok=True)
                condensed.save(path)
            return condensed.gene

        return self._result(path, Learngene.load, condense), key

    def _gene_key(self, how: Condensing, ancestry: Ancestry, images: int) -> str:
        """The cache key of a gene condensed ``how`` from ``images`` images: what it condenses (the ancestry, or only
        its size where the gene reads neither weights nor data), the method's code and options, and the budget."""
        cls = get_method(how.method)
        # a gene that reads neither weights nor data is the same for every ancestry of a size: one key
        reads_ancestry = cls.needs_data or cls.needs_vit_ancestry or ancestry.spec is None
        source = self.ancestry_key if reads_ancestry else cast(ViTSpec, ancestry.spec).to_dict()
        return stage_key(
            stage="gene",
            ancestry=source,
            method=how.method,
            code=method_source_hash(how.method),
            options=how.options,
            epochs=how.epochs,
            images=images,
            distill_lambda=how.distill_lambda,
            **self._fed_key(),
            **self._budget_key(),
        )

    def initial_gene(
        self, gene: Learngene, gene_key: str, spec: ViTSpec, seed: int, upstream: Data
    ) -> tuple[Learngene, str, float]:
        """The gene a descendant of ``spec`` is expanded from, its cache key and the adapt seconds."""
        if not get_method(gene.method).adaptable:
            return gene, gene_key, 0.0
        p = self.profile
        key = stage_key(
            stage="adapt",
            gene=gene_key,
            spec=spec.to_dict(),
            seed=seed,
            steps=p.adapt_steps,
            images=len(upstream),
            **self._budget_key(),
        )
        path = self.out / "adapted" / gene.method / f"{spec.short()}-s{seed}-{key}.safetensors"

        def adapt() -> Learngene:
            tic = time.perf_counter()
            cfg = self._cfg(epochs=1, max_steps=p.adapt_steps, seed=seed, desc=f"adapt {gene.method}", logs_at=path)
            with stage_run_dir(path) as run_dir:
                adapted = pipeline.adapt(gene, data=upstream, size=spec, train_cfg=cfg, run_dir=run_dir, resume=True)
                adapted.gene.cost = {**adapted.gene.cost, "bench_adapt_seconds": round(time.perf_counter() - tic, 2)}
                path.parent.mkdir(parents=True, exist_ok=True)
                pipeline.save_gene(adapted.gene, path, method=adapted.method)
            return Learngene.load(path)

        adapted = self._result(path, Learngene.load, adapt)
        return adapted, key, float(adapted.cost.get("bench_adapt_seconds", 0.0))

    def condense_data(self, name: str, upstream: Data) -> Data:
        """The upstream images method ``name`` condenses on: all of them, or its share in a profile of method
        budgets (the demo: :meth:`~learngene.bench.profiles.Profile.condense_share`)."""
        share = self.profile.condense_share(name)
        return upstream if share == 1 else take(upstream, max(1, round(share * len(upstream))))
