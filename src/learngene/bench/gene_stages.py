"""Stages 2 and 3 of the benchmark: every method's gene, condensed once per upstream, and the gene a size starts
from (adapted to it where the method adapts)."""

from __future__ import annotations

import time
from typing import Any, cast

from .. import pipeline
from ..data import Data, take
from ..gene import Learngene
from ..method import Ancestry
from ..registry import get_method
from ..training.config import known
from ..vit.spec import ViTSpec, parse_size
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

        gene = self._result(path, Learngene.load, condense)
        if cls.needs_data and "images_seen" not in gene.cost:  # a gene cached before these were recorded too
            batch = known(self._cfg(epochs=how.epochs).batch_size)
            spec = ancestry.spec.replace(img_size=self.fed_size or ancestry.spec.img_size) if ancestry.spec else None
            gene.cost = {**gene.cost, **condense_work(gene.cost, spec, len(upstream), batch)}
        return gene, key

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


def seen_images(steps: int, images: int, batch: int) -> int:
    """The images ``steps`` optimizer steps read from ``images`` in batches of ``batch``: an epoch's last batch is
    short (no batch is dropped, :class:`learngene.data.batches.Batches`)."""
    per_epoch = -(-images // batch)
    epochs, rest = divmod(steps, per_epoch)
    return epochs * images + min(rest * batch, images)


def condense_work(cost: dict[str, Any], ancestry: ViTSpec | None, images: int, batch: int) -> dict[str, Any]:
    """``images_seen`` and ``gflop`` of a condensation on ``images`` images in batches of ``batch``, from what its gene
    recorded (``cost``); ``gflop`` None where the rule below does not know the trained network.

    The rule (forward FLOPs per image: :attr:`ViTSpec.flops`, at the images' size): a condensation that trains an
    aux net it names (``cost["aux"]``) costs 3 × the aux net's forward FLOPs per image seen (a forward and a backward
    pass, the backward about twice the forward), plus, where it distils, the ancestry's forward FLOPs per distinct
    image (its outputs are computed once and cached); pool's aux nets (``cost["instances"]``) are summed, each by
    that rule. One that trains something else (tal's and pith's hypernetworks, pool's joint training of its widths)
    is counted in images, not FLOPs. One that only measures the ancestry (importance, cluster: ``cost["images"]``,
    no gradient) costs the ancestry's forward FLOPs per image measured. Evaluations are left out.
    """
    steps = int(cost.get("steps") or 0)
    if not steps:
        measured = int(cost.get("images") or 0)
        return {"images_seen": measured, "gflop": ancestry.flops * measured / 1e9 if ancestry else None}
    parts = cost.get("instances") or [cost]  # pool's aux nets, each trained (and distilling) on its own
    if sum(int(part.get("steps") or 0) for part in parts) != steps:  # steps no aux net took (pool's joint training)
        parts = []
    seen = [seen_images(int(part.get("steps") or 0), images, batch) for part in parts] or [
        seen_images(steps, images, batch)
    ]
    if ancestry is None or not parts or not all(part.get("aux") for part in parts):
        return {"images_seen": sum(seen), "gflop": None}
    flops = 0
    for part, part_seen in zip(parts, seen):
        depth, width, heads = parse_size(str(part["aux"]))
        aux = ancestry.replace(depth=depth, embed_dim=width, num_heads=heads)
        teacher = ancestry.flops * images if float(part.get("distill_lambda") or 0) > 0 else 0
        flops += 3 * aux.flops * part_seen + teacher
    return {"images_seen": sum(seen), "gflop": flops / 1e9}
