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
   budgets, seeds and data order; top-1 accuracy is kept after every epoch. A method that cannot
   make a size (it raises :class:`LearngeneError`) is recorded as n/a. Scratch is also trained
   with ``scratch_factor`` times the epochs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..ancestry import load_ancestry
from ..data import ImageData, few_shot, fraction, load_dataset
from ..descendant import make_descendant
from ..errors import LearngeneError
from ..gene import Learngene
from ..io import load_model_file, save_model, write_text_atomic
from ..method import AdaptInputs, Ancestry, CondenseInputs
from ..registry import get_method, list_methods
from ..spec import ViTSpec
from ..train import TrainConfig, seed_everything, train
from .profiles import Profile, Task
from .report import write_report

UPSTREAM_EVAL_IMAGES = 1_000  # test images the ancestry and aux nets report accuracy on


@dataclass
class Row:
    """One descendant: a method at a size, on a task, with a seed and a budget (× the task's epochs)."""

    method: str
    task: str
    size: str
    depth: int
    embed_dim: int
    num_heads: int
    seed: int
    budget: int = 1
    params: int = 0
    stored_params: int = 0
    condense_seconds: float = 0.0
    condense_steps: int = 0
    adapt_seconds: float = 0.0
    train_seconds: float = 0.0
    accs: list[float] = field(default_factory=list)  # top-1 after every fine-tuning epoch
    note: str = ""  # why the cell is n/a

    @property
    def ok(self) -> bool:
        return bool(self.accs)

    @property
    def acc(self) -> float:
        return self.accs[-1]

    @property
    def label(self) -> str:
        """The method, or e.g. ``scratch ×10`` for a longer budget."""
        return self.method if self.budget == 1 else f"{self.method} ×{self.budget}"


def row_from_dict(values: dict[str, Any]) -> Row:
    known = {f.name for f in dataclasses.fields(Row)}
    return Row(**{k: v for k, v in values.items() if k in known})


@dataclass
class TaskData:
    task: Task
    train: ImageData
    eval: ImageData


def stage_key(**config: Any) -> str:
    """Short hash of a stage's configuration: the name of its cached result."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def method_source_hash(name: str) -> str:
    """Hash of the file implementing method ``name``: editing a method invalidates its cached genes and cells."""
    source = Path(inspect.getsourcefile(get_method(name)))
    return hashlib.sha256(source.read_bytes()).hexdigest()[:12]


def take(data: ImageData, images: int | None, seed: int = 0) -> ImageData:
    """A fixed random subset of ``images`` images (all of them for ``None``)."""
    if images is None or images >= len(data):
        return data
    return fraction(data, images / len(data), seed)


def load_task(task: Task, spec: ViTSpec, data_dir: str | None = None, loaded: dict | None = None) -> TaskData:
    """The task's training and test images at the ancestry's input size (``loaded`` memoizes datasets)."""
    loaded = {} if loaded is None else loaded
    for split in ("train", "test"):
        if (task.data, split) not in loaded:
            loaded[task.data, split] = load_dataset(task.data, split, spec.img_size, data_dir, spec.in_chans)
    train_full, test_full = loaded[task.data, "train"], loaded[task.data, "test"]
    train_data = few_shot(train_full, task.shots) if task.shots else take(train_full, task.train_images, seed=1)
    return TaskData(task, train_data, take(test_full, task.eval_images))


def fresh_head(model: torch.nn.Module, spec: ViTSpec, seed: int) -> None:
    """Give ``model`` the classifier a scratch model of this seed gets (the same for every method)."""
    torch.manual_seed(seed)
    reference = spec.create_model()
    model.get_classifier().load_state_dict(reference.get_classifier().state_dict())


class OutOfTime(Exception):
    """The run's time limit is reached; everything finished so far is on disk."""


class BenchRun:
    """One run of a profile into ``out_dir``; :meth:`run` executes (or reuses) every stage."""

    def __init__(self, profile: Profile, out_dir: str | Path, data_dir: str | None = None, device: str = "auto",
                 progress: bool = True, time_limit: float | None = None, plots: bool = True,
                 command: str | None = None):
        self.profile, self.out, self.data_dir, self.device = profile, Path(out_dir), data_dir, device
        self.progress, self.time_limit, self.plots = progress, time_limit, plots
        self.methods = list(profile.methods or list_methods())
        self.started = time.perf_counter()
        self.bar: tqdm | None = None
        # ``command``: what the report names as the command that reproduces it
        self.meta: dict[str, Any] = {"command": command} if command else {}

    # ---- helpers -------------------------------------------------------------------------------------
    def _cfg(self, **changes: Any) -> TrainConfig:
        p = self.profile
        return TrainConfig(batch_size=p.batch_size, lr=p.lr, device=self.device, progress=False).replace(**changes)

    def _budget_key(self) -> dict[str, Any]:
        return {"lr": self.profile.lr, "batch_size": self.profile.batch_size}

    def _check_time(self) -> None:
        if self.time_limit is not None and time.perf_counter() - self.started > self.time_limit:
            raise OutOfTime

    def _advance(self, work: float, what: str) -> None:
        if self.bar is not None:
            self.bar.update(work)
            self.bar.set_postfix_str(what)

    # ---- stage 1: the ancestry ----------------------------------------------------------------------
    def ancestry(self, train_data: ImageData, eval_data: ImageData) -> Ancestry:
        p = self.profile
        key = stage_key(stage="ancestry", spec=p.ancestry.to_dict(), epochs=p.ancestry_epochs, images=len(train_data),
                        data="fashion_mnist", **self._budget_key())
        path = self.out / "ancestry" / f"ancestry-{key}.safetensors"
        if not path.exists():
            seed_everything(0)
            model = p.ancestry.create_model()
            path.parent.mkdir(parents=True, exist_ok=True)
            # the two long stages show the loop's own bar under the run's bar
            cfg = self._cfg(epochs=p.ancestry_epochs, desc="ancestry", checkpoint_every=200, progress=self.progress)
            result = train(model, train_data, cfg, eval_data=eval_data, run_dir=path.with_suffix(".run"), resume=True)
            save_model(path, model, p.ancestry, origin={"kind": "ancestry", "key": key, "eval_acc": result.final_acc,
                                                        "seconds": round(result.seconds, 2), "steps": result.steps})
            shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
        _, _, origin = load_model_file(path)
        self.meta["ancestry"] = {"spec": p.ancestry.short(), "params": p.ancestry.num_params, "images": len(train_data),
                                 "epochs": p.ancestry_epochs, "eval_acc": origin.get("eval_acc"),
                                 "seconds": origin.get("seconds"), "key": key}
        self.ancestry_key = key
        return load_ancestry(path)

    # ---- stage 2: every method's gene, once ---------------------------------------------------------
    def gene(self, name: str, ancestry: Ancestry, upstream: ImageData, upstream_eval: ImageData) -> tuple[Learngene, str]:
        p = self.profile
        options = p.method_options.get(name, {})
        lam = p.condense_lambda.get(name, get_method(name).distill_lambda)
        key = stage_key(stage="gene", ancestry=self.ancestry_key, method=name, code=method_source_hash(name),
                        options=options, epochs=p.condense_epochs, images=len(upstream), distill_lambda=lam,
                        **self._budget_key())
        path = self.out / "genes" / f"{name}-{key}.safetensors"
        if path.exists():
            return Learngene.load(path), key
        method = get_method(name)(**options)
        inputs = CondenseInputs(train=upstream, eval=upstream_eval, run_dir=path.with_suffix(".run"), resume=True,
                                train_cfg=self._cfg(epochs=p.condense_epochs, distill_lambda=lam, desc=f"condense {name}",
                                                    progress=self.progress))
        seed_everything(0)
        tic = time.perf_counter()
        gene = method.condense(ancestry, inputs)
        gene.cost = {**gene.cost, "seconds": round(time.perf_counter() - tic, 2)}
        path.parent.mkdir(parents=True, exist_ok=True)
        gene.save(path)
        shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
        return gene, key

    # ---- stage 3: the initialization of a size (adapt where the method has that step) -----------------
    def initial_gene(self, gene: Learngene, gene_key: str, spec: ViTSpec, seed: int,
                     upstream: ImageData) -> tuple[Learngene, str, float]:
        """The gene a descendant of ``spec`` is expanded from, its cache key and the adapt seconds."""
        method = get_method(gene.method).from_gene(gene)
        if not method.adaptable:
            return gene, gene_key, 0.0
        p = self.profile
        key = stage_key(stage="adapt", gene=gene_key, spec=spec.to_dict(), seed=seed, steps=p.adapt_steps,
                        images=len(upstream), **self._budget_key())
        path = self.out / "adapted" / gene.method / f"{spec.short()}-s{seed}-{key}.safetensors"
        if not path.exists():
            tic = time.perf_counter()
            cfg = self._cfg(epochs=1, max_steps=p.adapt_steps, seed=seed, desc=f"adapt {gene.method}")
            adapted, _ = method.adapt(gene, spec, AdaptInputs(upstream, cfg, run_dir=path.with_suffix(".run"), resume=True))
            adapted.cost = {**adapted.cost, "bench_adapt_seconds": round(time.perf_counter() - tic, 2)}
            path.parent.mkdir(parents=True, exist_ok=True)
            adapted.save(path)
            shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
        adapted = Learngene.load(path)
        return adapted, key, float(adapted.cost.get("bench_adapt_seconds", 0.0))

    # ---- stage 4: fine-tune a descendant on a task --------------------------------------------------------
    def cell(self, row: Row, init: Learngene, init_key: str, spec: ViTSpec, task: TaskData) -> Row:
        t = task.task
        epochs = t.epochs * row.budget
        key = stage_key(stage="cell", init=init_key, spec=spec.to_dict(), seed=row.seed, epochs=epochs, data=t.data,
                        train_images=t.train_images, shots=t.shots, eval_images=t.eval_images, new_head=t.new_head,
                        **self._budget_key())
        path = (self.out / "cells" / t.name / row.method /
                f"{spec.short()}-s{row.seed}{'' if row.budget == 1 else f'-x{row.budget}'}-{key}.json")
        if path.exists():
            return row_from_dict(json.loads(path.read_text()))
        model = make_descendant(init, spec, seed=row.seed)
        if t.new_head:
            fresh_head(model, spec, row.seed)
        cfg = self._cfg(epochs=epochs, seed=row.seed, desc=f"{t.name} {row.label} {spec.short()}")
        result = train(model, task.train, cfg, eval_data=task.eval, run_dir=path.with_suffix(".run"), resume=True)
        row = dataclasses.replace(row, accs=[h["eval_acc"] for h in result.history],
                                  train_seconds=round(result.seconds, 2))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(dataclasses.asdict(row)))
        shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
        return row

    # ---- the whole run ---------------------------------------------------------------------------------
    def plan(self, ancestry_images: int, tasks: list[TaskData], upstream: ImageData) -> dict[str, Any]:
        """Cells to train and their work in forward GFLOPs (a training image costs ~3 forwards)."""
        p = self.profile
        anc = p.ancestry.flops * p.ancestry_epochs * (3 * ancestry_images + UPSTREAM_EVAL_IMAGES)
        condense = p.ancestry.flops * p.condense_epochs * (3 * len(upstream) + UPSTREAM_EVAL_IMAGES)
        cells = [self._cell_gflop(spec, td, factor) * len(p.seeds)
                 for td in tasks for spec in p.specs() for name in self.methods for factor in self._budgets(name, td.task)]
        adapt = sum(self._adapt_gflop(s) for s in p.specs()) * len(p.seeds)
        return {"ancestry": anc / 1e9, "condense": condense / 1e9, "adapt": adapt, "cell": cells,
                "cells": len(cells) * len(p.seeds)}

    @staticmethod
    def _budgets(name: str, task: Task) -> tuple[int, ...]:
        """Budgets (multiples of the task's epochs) ``name`` gets on ``task``: scratch also the long one."""
        return (1, task.scratch_factor) if name == "scratch" and task.scratch_factor > 1 else (1,)

    @staticmethod
    def _cell_gflop(spec: ViTSpec, task: TaskData, budget: int) -> float:
        return spec.flops * task.task.epochs * budget * (3 * len(task.train) + len(task.eval)) / 1e9

    def _adapt_gflop(self, spec: ViTSpec) -> float:
        return spec.flops * 3 * self.profile.adapt_steps * self.profile.batch_size / 1e9

    def run(self) -> list[Row]:
        p = self.profile
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LearngeneError(f"cannot create the report folder {self.out} ({exc.strerror}); choose another --out") from None
        loaded: dict[tuple[str, str], ImageData] = {}
        tasks = [load_task(t, p.ancestry, self.data_dir, loaded) for t in p.tasks]
        load_task(Task("upstream", "fashion_mnist", epochs=1), p.ancestry, self.data_dir, loaded)
        anc_train, anc_test = loaded["fashion_mnist", "train"], loaded["fashion_mnist", "test"]
        upstream = take(anc_train, p.condense_images, seed=2)
        upstream_eval = take(anc_test, UPSTREAM_EVAL_IMAGES)
        anc_images = take(anc_train, p.ancestry_images)
        plan = self.plan(len(anc_images), tasks, upstream)
        # condensation that trains an aux net costs about an ancestry-sized training run; the others far less
        trained = [m for m in self.methods if get_method(m).needs_data]
        total = plan["ancestry"] + plan["condense"] * len(trained) + plan["adapt"] * sum(
            get_method(m).adaptable for m in self.methods) + sum(plan["cell"])
        self.meta.update(plan_gflop=round(total), cells=plan["cells"], methods=self.methods)
        # progress in estimated work, not stages: a 10x scratch run or a deep size weighs what it costs
        self.bar = tqdm(total=total, desc=f"bench {p.name}", unit="GFLOP", unit_scale=True, disable=not self.progress,
                        dynamic_ncols=True, smoothing=0.05)
        self.rows: list[Row] = []
        complete = False
        try:
            self._check_time()
            ancestry = self.ancestry(anc_images, upstream_eval)
            self._advance(plan["ancestry"], "ancestry done")
            genes: dict[str, tuple[Learngene, str] | LearngeneError] = {}
            for name in self.methods:
                self._check_time()
                try:
                    genes[name] = self.gene(name, ancestry, upstream, upstream_eval)
                except LearngeneError as exc:  # recorded as n/a in every cell of the method
                    genes[name] = exc
                self._advance(plan["condense"] if name in trained else 0.0, f"condensed {name}")
            self._descendants(genes, tasks, upstream)
            complete = True
        except OutOfTime:
            pass
        finally:
            if self.bar is not None:
                self.bar.close()
        self.meta.update(wall_seconds=round(time.perf_counter() - self.started, 1), complete=complete)
        write_report(self.rows, p, self.out, self.meta, plots=self.plots)
        write_text_atomic(self.out / "profile.json", json.dumps(dataclasses.asdict(p), indent=2, default=str))
        return self.rows

    def _descendants(self, genes: dict[str, tuple[Learngene, str] | LearngeneError], tasks: list[TaskData],
                     upstream: ImageData) -> None:
        """Stages 3 and 4 for every seed, size, method and task; rows go to ``self.rows`` as they finish."""
        p = self.profile
        rows = self.rows
        for seed in p.seeds:
            for spec in p.specs():
                for name in self.methods:
                    base = Row(method=name, task="", size=spec.short(), depth=spec.depth, embed_dim=spec.embed_dim,
                               num_heads=spec.num_heads, seed=seed, params=spec.num_params)
                    self._check_time()
                    try:
                        if isinstance(genes[name], LearngeneError):
                            raise LearngeneError(f"condensation failed: {genes[name]}")
                        gene, gene_key = genes[name]
                        base = dataclasses.replace(base, stored_params=gene.num_stored_params,
                                                   condense_seconds=float(gene.cost.get("seconds", 0.0)),
                                                   condense_steps=int(gene.cost.get("steps", 0)))
                        init, init_key, adapt_s = self.initial_gene(gene, gene_key, spec, seed, upstream)
                        self._advance(self._adapt_gflop(spec) if get_method(name).adaptable else 0.0,
                                      f"{name} {spec.short()} seed {seed} initialized")
                    except LearngeneError as exc:
                        init, init_key, adapt_s, why = None, "", 0.0, str(exc)
                    for td in tasks:
                        for budget in self._budgets(name, td.task):
                            row = dataclasses.replace(base, task=td.task.name, budget=budget, adapt_seconds=adapt_s)
                            work = self._cell_gflop(spec, td, budget)
                            if init is None:
                                rows.append(dataclasses.replace(row, note=why))
                                self._advance(work, f"{name} {spec.short()}: n/a")
                                continue
                            self._check_time()
                            try:
                                rows.append(self.cell(row, init, init_key, spec, td))
                            except LearngeneError as exc:
                                rows.append(dataclasses.replace(row, note=str(exc)))
                            self._advance(work, f"{td.task.name} {row.label} {spec.short()} seed {seed}")


def run_profile(profile: Profile, out_dir: str | Path, data_dir: str | None = None, device: str = "auto",
                progress: bool = True, time_limit: float | None = None, command: str | None = None) -> list[Row]:
    """Run (or resume) every stage of ``profile`` into ``out_dir`` and write its report there.

    Returns the rows of the finished cells; after ``time_limit`` seconds no new stage starts, a
    partial report is written and the run can be continued by calling this again. ``command`` is
    what the report names as the command that reproduces it.
    """
    return BenchRun(profile, out_dir, data_dir, device, progress, time_limit, command=command).run()
