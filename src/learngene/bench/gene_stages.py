"""Stages 2 and 3 of the benchmark: every method's gene, condensed once per upstream, and the gene a size starts
from (adapted to it where the method adapts)."""

from __future__ import annotations

import shutil
import time
from typing import Any, cast

from ..data import Data, take
from ..gene import Learngene
from ..method import AdaptInputs, Ancestry, CondenseInputs
from ..registry import get_method
from ..training.loop import seed_everything
from ..vit.spec import ViTSpec
from .stages import RunStages, method_source_hash, stage_key


class GeneStages(RunStages):
    """Stage 2 (every method's gene, once) and stage 3 (the initialization of a size)."""

    def gene(
        self,
        name: str,
        ancestry: Ancestry,
        upstream: Data,
        upstream_eval: Data,
        condense_epochs: int | None = None,
    ) -> tuple[Learngene, str]:
        p = self.profile
        epochs = p.condense_epochs if condense_epochs is None else condense_epochs
        options = p.options_for(name)
        lam = p.condense_lambda.get(name, get_method(name).distill_lambda)
        cls = get_method(name)
        key = self._gene_key(name, ancestry, options, epochs, len(upstream), lam)
        path = self.out / "genes" / f"{name}-{key}.safetensors"

        def condense() -> Learngene:
            method = cls(**options)
            inputs = CondenseInputs(
                train=upstream,
                eval=upstream_eval,
                run_dir=path.with_suffix(".run"),
                resume=True,
                train_cfg=self._cfg(
                    epochs=epochs,
                    distill_lambda=lam,
                    desc=f"condense {name}",
                    progress=self.inner_progress,
                    logs_at=path,
                ),
            )
            seed_everything(0)
            tic = time.perf_counter()
            gene = method.condense(ancestry, inputs)
            gene.cost = {**gene.cost, "seconds": round(time.perf_counter() - tic, 2)}
            gene.label_space = ancestry.label_space
            path.parent.mkdir(parents=True, exist_ok=True)
            gene.save(path)
            shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
            return gene

        return self._result(path, Learngene.load, condense), key

    def _gene_key(
        self, name: str, ancestry: Ancestry, options: dict[str, Any], epochs: int, images: int, lam: float
    ) -> str:
        """The cache key of method ``name``'s gene: what it condenses (the ancestry, or only its size where the gene
        reads neither weights nor data), the method's code and options, and the condensation's budget."""
        cls = get_method(name)
        # a gene that reads neither weights nor data is the same for every ancestry of a size: one key
        reads_ancestry = cls.needs_data or cls.needs_vit_ancestry or ancestry.spec is None
        source = self.ancestry_key if reads_ancestry else cast(ViTSpec, ancestry.spec).to_dict()
        return stage_key(
            stage="gene",
            ancestry=source,
            method=name,
            code=method_source_hash(name),
            options=options,
            epochs=epochs,
            images=images,
            distill_lambda=lam,
            **self._fed_key(),
            **self._budget_key(),
        )

    def initial_gene(
        self, gene: Learngene, gene_key: str, spec: ViTSpec, seed: int, upstream: Data
    ) -> tuple[Learngene, str, float]:
        """The gene a descendant of ``spec`` is expanded from, its cache key and the adapt seconds."""
        method = get_method(gene.method).from_gene(gene)
        if not method.adaptable:
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
            adapted, _ = method.adapt(
                gene, spec, AdaptInputs(upstream, cfg, run_dir=path.with_suffix(".run"), resume=True)
            )
            adapted.cost = {**adapted.cost, "bench_adapt_seconds": round(time.perf_counter() - tic, 2)}
            path.parent.mkdir(parents=True, exist_ok=True)
            adapted.save(path)
            shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
            return Learngene.load(path)

        adapted = self._result(path, Learngene.load, adapt)
        return adapted, key, float(adapted.cost.get("bench_adapt_seconds", 0.0))

    def condense_data(self, name: str, upstream: Data) -> Data:
        """The upstream images method ``name`` condenses on: all of them, or its share in a profile of method
        budgets (the demo: :meth:`~learngene.bench.profiles.Profile.condense_share`)."""
        share = self.profile.condense_share(name)
        return upstream if share == 1 else take(upstream, max(1, round(share * len(upstream))))
