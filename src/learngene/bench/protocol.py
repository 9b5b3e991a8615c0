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

import dataclasses
import hashlib
import inspect
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import torch

from ..ancestry import ancestry_preprocessing, feed_size, load_ancestry
from ..data import Data, ImageData, class_subset, few_shot, load_dataset, take
from ..descendant import make_descendant, top_up_state
from ..errors import LearngeneError, PlaceError
from ..formats.atomic import quote, write_text_atomic
from ..formats.hub import is_hub_name
from ..formats.model_file import load_model_file, save_model
from ..gene import Learngene
from ..method import AdaptInputs, Ancestry, CondenseInputs
from ..registry import get_method, list_methods
from ..run_dirs import lock_run_dir, unlock_run_dir
from ..training.config import Logger
from ..training.distill import cache_teacher_outputs, setup_distillation
from ..training.loop import TrainConfig, resolve_device, seed_everything, train
from ..training.progress import RunProgress, on_terminal
from ..vit.spec import ViTSpec
from .profiles import Profile, Task, Upstream, Variant
from .report import Row, plural, write_report
from .workers import Busy, Claims, SharedClaims

UPSTREAM_EVAL_IMAGES = 1_000  # test images the ancestry and aux nets report accuracy on
T = TypeVar("T")


def row_from_dict(values: dict[str, Any]) -> Row:
    known = {f.name for f in dataclasses.fields(Row)}
    return Row(**{k: v for k, v in values.items() if k in known})


@dataclass
class TaskData:
    task: Task
    train: Data
    eval: Data


def load_cached(path: Path, load: Callable[[Path], Any]) -> Any:
    """A cached stage's result read from ``path``, or ``None`` when there is none or it is damaged (a crash, a
    concurrent writer): a damaged one is said in one line and removed, so the stage is computed again."""
    if not path.exists():
        return None
    try:
        return load(path)
    except (LearngeneError, ValueError, TypeError, KeyError, AttributeError, OSError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        print(f"learngene: cached {quote(path)} is damaged ({reason}); recomputing it", file=sys.stderr)
        path.unlink(missing_ok=True)
        return None


def stage_key(**config: Any) -> str:
    """Short hash of a stage's configuration: the name of its cached result."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def method_source_hash(name: str) -> str:
    """Hash of the file implementing method ``name``: editing a method invalidates its cached genes and cells."""
    source = Path(inspect.getfile(get_method(name)))
    return hashlib.sha256(source.read_bytes()).hexdigest()[:12]


def load_task(
    task: Task,
    spec: ViTSpec,
    data_dir: str | None = None,
    loaded: dict | None = None,
    upstream_classes: tuple[int, ...] | None = None,
) -> TaskData:
    """The task's training and test images at the ancestry's input size (``loaded`` memoizes datasets).

    An ``other_classes`` task keeps only the classes outside ``upstream_classes``.
    """
    loaded = {} if loaded is None else loaded
    for split in ("train", "test"):
        if (task.data, split) not in loaded:
            loaded[task.data, split] = load_dataset(task.data, split, spec.img_size, data_dir, spec.in_chans)
    train_full, test_full = loaded[task.data, "train"], loaded[task.data, "test"]
    if task.other_classes:
        if not upstream_classes:
            raise LearngeneError(
                f"task {task.name} fine-tunes on the classes the upstream never saw, but the upstream "
                f"sees every class; give the profile upstreams with a class subset"
            )
        others = [c for c in range(train_full.num_classes) if c not in upstream_classes]
        train_full, test_full = class_subset(train_full, others), class_subset(test_full, others)
    if task.classes:
        if max(task.classes) >= train_full.num_classes or min(task.classes) < 0:
            raise LearngeneError(
                f"{task.data} has classes 0..{train_full.num_classes - 1}; --classes "
                f"{','.join(map(str, task.classes))} is outside them"
            )
        train_full, test_full = class_subset(train_full, task.classes), class_subset(test_full, task.classes)
    train_data = few_shot(train_full, task.shots) if task.shots else take(train_full, task.train_images, seed=1)
    return TaskData(task, train_data, test_full)


def fresh_head(model: torch.nn.Module, spec: ViTSpec, seed: int) -> None:
    """Give ``model`` the classifier a scratch model of this seed gets (the same for every method)."""
    torch.manual_seed(seed)
    reference: Any = spec.create_model()
    cast(Any, model).get_classifier().load_state_dict(reference.get_classifier().state_dict())


class OutOfTime(Exception):
    """The run's time limit is reached; everything finished so far is on disk."""


class BenchRun:
    """One run of a profile into ``out_dir``; :meth:`run` executes (or reuses) every stage.

    With ``shared=True`` it is one worker among any number on ``out_dir`` (:mod:`learngene.bench.workers`).
    """

    POLL_SECONDS = 5.0  # how often a worker that can take nothing looks again at what the others hold

    def __init__(
        self,
        profile: Profile,
        out_dir: str | Path,
        data_dir: str | None = None,
        device: str = "auto",
        progress: bool = True,
        time_limit: float | None = None,
        plots: bool = True,
        command: str | None = None,
        reporter: Callable[..., None] = write_report,
        shared: bool = False,
        log: tuple[Logger, ...] = (),
    ):
        self.profile, self.out, self.data_dir, self.device = profile, Path(out_dir), data_dir, device
        self.log = TrainConfig(log=log).log  # (checks that the loggers' packages are there before a stage runs)
        self.out_given = out_dir
        self.reporter = reporter  # writes report.md, results.csv and plots from the rows (bench's, or compare's)
        self.teacher_outputs: dict[tuple[str, str], Any] = {}  # (task, kind) -> fine-tuning data with them
        self.progress, self.time_limit, self.plots = progress, time_limit, plots
        # the long stages' own bars show under the run's bar on a terminal; in a log only the run's bar
        self.inner_progress = progress and on_terminal()
        self.methods = list(profile.methods or list_methods())
        self.started = time.perf_counter()
        self.bar: RunProgress | None = None
        # ``command``: what the report names as the command that reproduces it
        self.meta: dict[str, Any] = {"command": command} if command else {}
        self.meta["ancestries"] = {}
        self.given: Ancestry | None = None  # the profile's ancestry file, once loaded
        # the image size the data are loaded at where it is not the ancestry spec's (a RADIO's pretrained input)
        self.fed_size: int | None = None
        # ``shared``: any number of processes may work on ``out_dir`` at once, each taking the units no other has
        # (learngene.bench.workers); else this run holds the folder alone
        self.shared = shared
        self.claims = Claims()
        self.computing = True  # False: a walk that only reads what every worker has finished
        self.blocked = 0  # units of this walk that another worker holds (or, reading only, that are not done)
        self.progressed = False  # this walk computed a unit
        self.counted: set[str] = set()  # the units the run's bar has counted as done
        self.rows: list[Row] = []  # the last walk's, in the grid's order

    # ---- helpers -------------------------------------------------------------------------------------
    def _cfg(self, logs_at: Path | None = None, **changes: Any) -> TrainConfig:
        """A stage's settings: the profile's shared ones, then the stage's ``changes`` (:meth:`Profile.stage_config`);
        with ``--log``, its curves go under ``OUT/logs/``, at the stage's path there (its run directory is removed once
        the stage is done)."""
        cfg = self.profile.stage_config(**{"device": self.device, "progress": False, **changes})
        if self.log and logs_at is not None:
            where = self.out / "logs" / logs_at.relative_to(self.out).with_suffix("")
            cfg = cfg.replace(log=self.log, log_dir=str(where))
        return cfg

    def _budget_key(self) -> dict[str, Any]:
        return self.profile.training_key()

    def _fed_key(self) -> dict[str, Any]:
        """The data's image size, in the keys of stages that read data, where it is not the spec's (older keys
        stay valid)."""
        return {"img_size": self.fed_size} if self.fed_size is not None else {}

    def _check_time(self) -> None:
        if self.computing and self.time_limit is not None and time.perf_counter() - self.started > self.time_limit:
            raise OutOfTime

    @contextmanager
    def _stage(self, work: float, what: str, unit: str | None = None) -> Iterator[None]:
        """A stage of the run's bar: named while it runs, moving with its training steps. ``unit`` (default
        ``what``) names it among the walks of the grid: its work counts once, when it is done (by any worker)."""
        unit = unit or what
        if self.bar is None or not self.computing or unit in self.counted:
            yield
            return
        busy = False
        try:
            with self.bar.stage(what, work):
                yield
        except Busy:
            busy = True
            self.bar.cached -= work  # another worker's: counted when it is done
            raise
        finally:
            if not busy:
                self.counted.add(unit)

    def _result(self, path: Path, load: Callable[[Path], T], compute: Callable[[], T], record: bool = True) -> T:
        """The cached result at ``path``, else ``compute()``'s under this worker's claim on it: :class:`Busy` when
        another worker holds the claim (or this walk only reads). A :class:`LearngeneError` of ``compute`` is
        recorded (``record``) so that no worker repeats it, and a recorded one is raised again."""
        unit = path.relative_to(self.out).as_posix()
        cached = self._done(path, load, unit)
        if cached is not None:
            return cached
        if not self.computing:
            raise Busy(unit)
        with self.claims.hold(unit):
            cached = self._done(path, load, unit)  # another worker may have finished it before the claim
            if cached is not None:
                return cached
            self.progressed = True
            try:
                return compute()
            except LearngeneError as exc:
                if record:
                    self.claims.fail(unit, str(exc))
                raise

    def _done(self, path: Path, load: Callable[[Path], T], unit: str) -> T | None:
        """The cached result at ``path``, None when there is none; a failure a worker recorded is raised again."""
        cached = load_cached(path, load)
        if cached is None and (why := self.claims.failure(unit)) is not None:
            raise LearngeneError(why)
        return cached

    def _methods(self, upstream: Upstream) -> list[str]:
        return [m for m in self.methods if upstream.methods is None or m in upstream.methods]

    # ---- stage 1: the ancestry ----------------------------------------------------------------------
    def ancestry(self, train_data: Data, eval_data: Data, upstream: Upstream | None = None) -> Ancestry:
        p = self.profile
        upstream = upstream or p.all_upstreams()[0]
        if p.ancestry_file:
            return self.given_ancestry()
        spec = self.ancestry_spec(upstream)
        # a class split is part of the key only when there is one: the keys of older runs stay valid
        split = {"classes": upstream.classes, "per_class": p.upstream_images_per_class} if upstream.classes else {}
        key = stage_key(
            stage="ancestry",
            spec=spec.to_dict(),
            epochs=upstream.ancestry_epochs,
            images=len(train_data),
            data="fashion_mnist",
            **split,
            **self._budget_key(),
        )
        path = self.out / "ancestry" / f"ancestry-{key}.safetensors"
        cached = self._result(
            path, load_model_file, lambda: self._train_ancestry(spec, key, path, train_data, eval_data, upstream), False
        )
        origin = cached[2]
        info = {
            "spec": spec.short(),
            "params": spec.num_params,
            "images": len(train_data),
            "epochs": upstream.ancestry_epochs,
            "eval_acc": origin.get("eval_acc"),
            "eval_curve": origin.get("eval_curve"),
            "seconds": origin.get("seconds"),
            "key": key,
            "classes": list(upstream.classes) if upstream.classes else None,
            "converged": upstream.converged,
            "condense_epochs": upstream.condense_epochs,
        }
        self.meta["ancestries"][upstream.name] = info
        if upstream.name == p.all_upstreams()[0].name:  # all_upstreams() builds new objects: compare names
            self.meta["ancestry"] = info
        self.ancestry_key = key
        self.teacher = load_ancestry(path)
        return self.teacher

    def _train_ancestry(
        self, spec: ViTSpec, key: str, path: Path, train_data: Data, eval_data: Data, upstream: Upstream
    ) -> Any:
        seed_everything(0)
        model = spec.create_model()
        path.parent.mkdir(parents=True, exist_ok=True)
        # the two long stages show the loop's own bar under the run's bar
        cfg = self._cfg(
            epochs=upstream.ancestry_epochs,
            desc=f"ancestry {upstream.name}".strip(),
            checkpoint_every=200,
            progress=self.inner_progress,
            logs_at=path,
        )
        result = train(model, train_data, cfg, eval_data=eval_data, run_dir=path.with_suffix(".run"), resume=True)
        save_model(
            path,
            model,
            spec,
            origin={
                "kind": "ancestry",
                "key": key,
                "eval_acc": result.final_acc,
                "seconds": round(result.seconds, 2),
                "steps": result.steps,
                "eval_curve": [h["eval_acc"] for h in result.history],
                "label_space": train_data.label_space,
            },
        )
        shutil.rmtree(path.with_suffix(".run"), ignore_errors=True)
        return load_model_file(path, lazy=True)

    def given_ancestry(self) -> Ancestry:
        """The profile's ancestry file, loaded once (its cache key: the file's path, size and modification time)."""
        if self.given is not None:
            return self.given
        p = self.profile
        if p.ancestry_file is None:
            raise LearngeneError(f"profile {p.name} names no ancestry file; pass --ancestry")
        path = Path(p.ancestry_file)
        if is_hub_name(p.ancestry_file):  # by name on the Hub: its repo and revision are its key
            ancestry = load_ancestry(p.ancestry_file, p.ancestry_timm_model, drop_head=p.ancestry_drop_head)
            where: dict[str, Any] = {"hub": ancestry.source}
        else:
            try:
                stat = path.stat()
            except OSError as exc:
                raise LearngeneError(
                    f"cannot read the ancestry {path} ({exc.strerror}); give an existing file or folder"
                ) from None
            where = {"path": str(path.resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns}
            ancestry = load_ancestry(path, p.ancestry_timm_model, drop_head=p.ancestry_drop_head)
        self.ancestry_key = stage_key(
            stage="ancestry-file",
            **where,
            timm_model=p.ancestry_timm_model,
            **({"drop_head": True} if p.ancestry_drop_head else {}),  # the keys of older runs stay valid
        )
        self.meta["ancestry"] = {
            "spec": p.ancestry.short(),
            "params": p.ancestry.num_params,
            "file": str(p.ancestry_file),
            "key": self.ancestry_key,
            "label_space": ancestry.label_space,
            **recorded_accuracy(path, p.ancestry_timm_model),
        }
        self.meta["ancestries"][""] = self.meta["ancestry"]
        self.teacher = self.given = ancestry
        return ancestry

    def data_spec(self) -> ViTSpec:
        """The ancestry's spec at the image size every stage's data are loaded at: a given ancestry's is the size
        condensation feeds it (:func:`~learngene.ancestry.feed_size`: a RADIO's 512-px pretrained input, not its
        2048-px position grid); a trained one's is its own."""
        p = self.profile
        if not p.ancestry_file:
            return p.ancestry
        ancestry = self.given_ancestry()
        size = feed_size(ancestry, ancestry_preprocessing(p.ancestry_file, p.ancestry_timm_model, ancestry))
        if size is None or size == p.ancestry.img_size:
            return p.ancestry
        self.fed_size = size
        return p.ancestry.replace(img_size=size)

    def ancestry_spec(self, upstream: Upstream) -> ViTSpec:
        p = self.profile
        return p.ancestry.replace(num_classes=len(upstream.classes)) if upstream.classes else p.ancestry

    # ---- stage 2: every method's gene, once ---------------------------------------------------------
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
        # a gene that reads neither weights nor data is the same for every ancestry of a size: one key
        reads_ancestry = cls.needs_data or cls.needs_vit_ancestry or ancestry.spec is None
        source = self.ancestry_key if reads_ancestry else cast(ViTSpec, ancestry.spec).to_dict()
        key = stage_key(
            stage="gene",
            ancestry=source,
            method=name,
            code=method_source_hash(name),
            options=options,
            epochs=epochs,
            images=len(upstream),
            distill_lambda=lam,
            **self._fed_key(),
            **self._budget_key(),
        )
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

    # ---- stage 3: the initialization of a size (adapt where the method has that step) -----------------
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

    # ---- stage 4: fine-tune a descendant on a task --------------------------------------------------------
    def cell(
        self, row: Row, init: Learngene, init_key: str, spec: ViTSpec, task: TaskData, variant: Variant | None = None
    ) -> Row:
        t = task.task
        epochs = t.epochs * row.budget
        max_steps = t.max_steps * row.budget if t.max_steps else None
        fresh = t.new_head and not (variant and variant.head == "reuse")
        if fresh:  # the task's own label space
            spec = spec.replace(num_classes=task.train.num_classes)
        # a ×N run is read at every multiple of the task's epochs: its curve and "epochs to match" need no more
        eval_every = t.epochs if row.budget > 1 else t.eval_every
        batch_size = t.batch_size or self.profile.train.batch_size
        options = descendant_options(init, row.seed, variant)
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
        key = stage_key(
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
        name = row.method + (f"{variant.name}" if variant else "")
        path = (
            self.out
            / "cells"
            / t.name
            / name
            / f"{spec.short()}-s{row.seed}{'' if row.budget == 1 else f'-x{row.budget}'}-{key}.json"
        )
        cfg = self._cfg(
            epochs=epochs,
            seed=row.seed,
            desc=f"{t.name} {row.label} {spec.short()}",
            eval_every=eval_every,
            eval_images=t.eval_images,
            batch_size=batch_size,
            max_steps=max_steps,
            logs_at=path,
        )
        done = self._result(
            path,
            lambda f: row_from_dict(json.loads(f.read_text())),
            lambda: self._fine_tune(row, init, spec, task, variant, path, cfg, options, fresh),
        )
        return dataclasses.replace(done, upstream=row.upstream)

    def _fine_tune(
        self,
        row: Row,
        init: Learngene,
        spec: ViTSpec,
        task: TaskData,
        variant: Variant | None,
        path: Path,
        cfg: TrainConfig,
        options: dict[str, Any],
        fresh: bool,
    ) -> Row:
        """Make the descendant of a cell, fine-tune it and write its row to ``path``."""
        tic = time.perf_counter()
        if variant:
            check_variant_changes(variant, init, spec)
        model = make_descendant(
            init, spec, seed=row.seed, **{k: v for k, v in options.items() if not k.startswith("expand_")}
        )
        if fresh:
            fresh_head(model, spec, row.seed)
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

    # ---- the whole run ---------------------------------------------------------------------------------
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
        cells += [
            self._cell_gflop(spec, td, 1) * len(p.seeds) * (rows - len(methods)) for td in tasks for spec in specs
        ]
        adapt = sum(self._adapt_gflop(s) for s in specs) * len(p.seeds)
        return {
            "ancestry": anc / 1e9,
            "condense": condense,
            "adapt": adapt,
            "cell": cells,
            "cells": len(cells) * len(p.seeds),
        }

    def condense_data(self, name: str, upstream: Data) -> Data:
        """The upstream images method ``name`` condenses on: all of them, or its share in a profile of method
        budgets (the demo: :meth:`~learngene.bench.profiles.Profile.condense_share`)."""
        share = self.profile.condense_share(name)
        return upstream if share == 1 else take(upstream, max(1, round(share * len(upstream))))

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
        batch = t.batch_size or self.profile.train.batch_size
        epochs = -(-t.max_steps * batch // len(task.train)) if t.max_steps else t.epochs
        evals = budget if budget > 1 else (epochs // t.eval_every if t.eval_every else 1)
        eval_images = min(t.eval_images or len(task.eval), len(task.eval))
        images = t.max_steps * batch if t.max_steps else t.epochs * len(task.train)
        return spec.flops * (images * budget * 3 + evals * eval_images) / 1e9

    def _adapt_gflop(self, spec: ViTSpec) -> float:
        return spec.flops * 3 * self.profile.adapt_steps * self.profile.train.batch_size / 1e9

    def _upstream_data(self, up: Upstream, loaded: dict) -> tuple[Data, Data, Data]:
        """(ancestry training images, condensation images, evaluation images) of an upstream."""
        p = self.profile
        train_all, test_all = loaded[p.upstream_data, "train"], loaded[p.upstream_data, "test"]
        if up.classes:
            train_all, test_all = class_subset(train_all, up.classes), class_subset(test_all, up.classes)
            if p.upstream_images_per_class:
                train_all = few_shot(train_all, p.upstream_images_per_class, seed=2)
        anc_images = take(train_all, p.ancestry_images)
        return anc_images, take(train_all, p.condense_images, seed=2), take(test_all, UPSTREAM_EVAL_IMAGES)

    def run(self) -> list[Row]:
        if not str(self.out_given).strip():
            raise LearngeneError("--out is empty; give the report folder, e.g. --out runs/compare")
        resolve_device(self.device)  # a GPU asked for and missing is refused before anything loads
        if self.shared:  # the workers' claims are taken once the inputs are checked (_run)
            return self._run()
        # one run per report folder, as per run directory: two writers would race on its cache and report
        held = lock_run_dir(self.out, flag="--out", what="report folder")
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
        p = self.profile
        up = up or p.all_upstreams()[0]
        rows = self.rows
        methods = [m for m in self._methods(up) if m in genes]
        for seed in p.seeds:
            for spec in self._specs(up):
                for name in methods:
                    base = Row(
                        method=name,
                        task="",
                        size=spec.short(),
                        depth=spec.depth,
                        embed_dim=spec.embed_dim,
                        num_heads=spec.num_heads,
                        seed=seed,
                        params=spec.num_params,
                        upstream=up.name,
                    )
                    self._check_time()
                    try:
                        condensed = genes[name]
                        if isinstance(condensed, LearngeneError):
                            raise LearngeneError(f"condensation failed: {condensed}")
                        gene, gene_key = condensed
                        base = dataclasses.replace(
                            base,
                            stored_params=gene.num_stored_params,
                            condense_seconds=float(gene.cost.get("seconds", 0.0)),
                            condense_steps=int(gene.cost.get("steps", 0)),
                        )
                        with self._stage(
                            self._adapt_gflop(spec) if get_method(name).adaptable else 0.0,
                            f"adapt {name} {spec.short()} seed {seed}",
                            f"{up.name}/adapt/{name}/{spec.short()}/{seed}",
                        ):
                            init, init_key, adapt_s = self.initial_gene(gene, gene_key, spec, seed, upstream)
                    except PlaceError:
                        raise
                    except LearngeneError as exc:
                        init, init_key, adapt_s, why = None, "", 0.0, str(exc)
                    except Busy:  # another worker adapts it: this size and seed of the method waits
                        self.blocked += 1
                        continue
                    variants = [None] + [
                        v for v in p.variants if v.runs_on(up) and name in self._variant_methods(v, methods)
                    ]
                    for td in tasks:
                        for variant in variants:
                            for budget in self._budgets(name, td.task) if variant is None else (1,):
                                row = dataclasses.replace(
                                    base,
                                    task=td.task.name,
                                    budget=budget,
                                    adapt_seconds=adapt_s,
                                    variant=variant.name if variant else "",
                                )
                                work = self._cell_gflop(spec, td, budget)
                                unit = f"{up.name}/{td.task.name}/{row.label}/{spec.short()}/{seed}"
                                if init is None:
                                    with self._stage(work, f"{name} {spec.short()}: n/a", unit):
                                        rows.append(dataclasses.replace(row, note=why))
                                    continue
                                self._check_time()
                                try:
                                    with self._stage(
                                        work, f"fine-tune {td.task.name} {row.label} {spec.short()} seed {seed}", unit
                                    ):
                                        rows.append(self.cell(row, init, init_key, spec, td, variant))
                                except PlaceError:
                                    raise
                                except LearngeneError as exc:
                                    rows.append(dataclasses.replace(row, note=str(exc)))
                                except Busy:  # another worker fine-tunes it
                                    self.blocked += 1


def recorded_accuracy(path: Path, timm_model: str | None) -> dict[str, Any]:
    """The top-1 a learngene model file records for itself (``learngene ancestry`` / ``train`` write it), as
    ``{"eval_acc": ..., "eval_data": ...}``; empty for a checkpoint or hub folder, which record none."""
    if timm_model is not None or not path.is_file():
        return {}
    try:
        _, _, origin = load_model_file(path, lazy=True)
    except LearngeneError:
        return {}
    acc = origin.get("eval_acc")
    return {"eval_acc": acc, "eval_data": origin.get("data")} if isinstance(acc, int | float) else {}


def check_variant_changes(variant: Variant, init: Learngene, spec: ViTSpec) -> None:
    """Refuse (recorded as n/a, with why) an ablation that would change nothing for this gene and size."""
    provided = set(get_method(init.method).from_gene(init).provided_keys(init, spec))
    if variant.top_up and set(top_up_state(variant.top_up, spec)) <= provided:
        raise LearngeneError(
            f"the {init.method} gene gives every tensor {variant.top_up} sets at {spec.short()}: "
            f"the top-up changes nothing"
        )
    if variant.head == "reuse" and "head.weight" not in provided:
        raise LearngeneError(f"the {init.method} gene gives no classifier head to reuse")
    if variant.options:
        plain = get_method(init.method).from_gene(init).expand(init, spec)
        changed = get_method(init.method).from_gene(init, **dict(variant.options)).expand(init, spec)
        if plain.keys() == changed.keys() and all(torch.equal(plain[k], changed[k]) for k in plain):
            options = " ".join(f"{k}={v}" for k, v in variant.options)
            raise LearngeneError(f"{options} changes nothing in the {init.method} descendant at {spec.short()}")


def descendant_options(init: Learngene, seed: int, variant: Variant | None = None) -> dict[str, Any]:
    """``make_descendant`` arguments of a cell (the ablation's), plus, for the cache key only, the seed of a
    method that draws at expansion (mimetic): ``make_descendant`` draws it with the cell's seed."""
    options = variant.descendant_options() if variant else {}
    seed_option = get_method(init.method).seed_option
    if seed_option and seed:  # seed 0 was always the method's default: the keys of older runs stay valid
        options[f"expand_{seed_option}"] = seed
    return options


def run_profile(
    profile: Profile,
    out_dir: str | Path,
    data_dir: str | None = None,
    device: str = "auto",
    progress: bool = True,
    time_limit: float | None = None,
    command: str | None = None,
) -> list[Row]:
    """Run (or resume) every stage of ``profile`` into ``out_dir`` and write its report there.

    Returns the rows of the finished cells; after ``time_limit`` seconds no new stage starts, a
    partial report is written and the run can be continued by calling this again. ``command`` is
    what the report names as the command that reproduces it.
    """
    return BenchRun(profile, out_dir, data_dir, device, progress, time_limit, command=command).run()
