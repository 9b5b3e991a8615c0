"""Stage 1 of the benchmark: the ancestry, trained on the upstream's images or loaded from the profile's file, and
the upstream's images every later stage reads."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from .. import pipeline
from ..ancestry import ancestry_preprocessing, feed_size, load_ancestry
from ..data import Data, class_subset, few_shot, take
from ..errors import LearngeneError
from ..formats.hub import is_hub_name
from ..formats.model_file import load_model_file, save_model
from ..method import Ancestry
from ..vit.spec import ViTSpec
from .profiles import Upstream
from .stages import RunStages, stage_key

UPSTREAM_EVAL_IMAGES = 1_000  # test images the ancestry and aux nets report accuracy on


class AncestryStage(RunStages):
    """Stage 1: the ancestry of an upstream (trained once, or the profile's file) and its images."""

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
        path = self.ancestry_path(key)
        cached = self._result(
            path, load_model_file, lambda: self._train_ancestry(upstream, key, train_data, eval_data), False
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

    def ancestry_path(self, key: str) -> Path:
        """Where the ancestry of cache key ``key`` is kept."""
        return self.out / "ancestry" / f"ancestry-{key}.safetensors"

    def _train_ancestry(self, upstream: Upstream, key: str, train_data: Data, eval_data: Data) -> Any:
        """Train ``upstream``'s ancestry (cache key ``key``) and keep it; what :func:`load_model_file` reads of it."""
        spec, path = self.ancestry_spec(upstream), self.ancestry_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # the two long stages show the loop's own bar under the run's bar; every test image the stage was given
        cfg = self._cfg(
            epochs=upstream.ancestry_epochs,
            desc=f"ancestry {upstream.name}".strip(),
            checkpoint_every=200,
            progress=self.inner_progress,
            eval_images=0,
            logs_at=path,
        )
        # learngene ancestry's run (the model drawn from the run's seed, as timm initializes it)
        trained = pipeline.train_ancestry(
            (train_data, eval_data), spec, train_cfg=cfg, run_dir=path.with_suffix(".run"), resume=True
        )
        result = trained.result
        save_model(
            path,
            trained.model,
            spec,
            origin={
                "kind": "ancestry",
                "key": key,
                "eval_acc": result.final_acc,
                **result.cost,
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
            raise LearngeneError(f"profile {p.name} names no ancestry file; pass ancestry_file (--ancestry)")
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
