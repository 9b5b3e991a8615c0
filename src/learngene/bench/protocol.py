"""The benchmark protocol: one ancestry, every method's gene, descendants on identical budgets.

Stages: (1) train an ancestry on Fashion-MNIST; (2) every registered method condenses it once,
recording its cost and stored parameters; (3) each gene is expanded to every depth of the profile,
adapted where the method has an adapt step, and fine-tuned with the same budget, seed and data
order as every other method; top-1 accuracy is kept after every epoch.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..ancestry import load_ancestry
from ..data import ImageData, fashion_mnist, fraction
from ..gene import Learngene, get_method, list_methods
from ..io import load_model_file, save_model
from ..methods.base import Ancestry, CondenseInputs, make_descendant
from ..spec import ViTSpec
from ..train import TrainConfig, seed_everything, train
from .profiles import Profile


@dataclass
class Row:
    """One descendant: a method at a size, on a task, with a seed."""

    method: str
    task: str
    depth: int
    seed: int
    params: int
    stored_params: int
    condense_seconds: float
    accs: list[float] = field(default_factory=list)  # top-1 after every fine-tuning epoch

    @property
    def acc(self) -> float:
        return self.accs[-1]


def take(data: ImageData, images: int | None, seed: int = 0) -> ImageData:
    """A fixed random subset of ``images`` images (all of them for ``None``)."""
    if images is None or images >= len(data):
        return data
    return fraction(data, images / len(data), seed)


def _train_cfg(profile: Profile, device: str, **changes: Any) -> TrainConfig:
    return TrainConfig(batch_size=profile.batch_size, lr=profile.lr, device=device, progress=False).replace(**changes)


def stage_ancestry(profile: Profile, train_data: ImageData, eval_data: ImageData, out_dir: Path, device: str) -> Ancestry:
    """Train the profile's ancestry, or reuse the one a previous run with the same budget left."""
    path = out_dir / "ancestry.safetensors"
    key = {"spec": profile.ancestry.to_dict(), "epochs": profile.ancestry_epochs, "images": len(train_data),
           "lr": profile.lr, "batch_size": profile.batch_size}
    if path.exists():
        _, spec, origin = load_model_file(path)
        if origin.get("key") == key:
            return load_ancestry(path)
    seed_everything(0)
    model = profile.ancestry.create_model()
    result = train(model, train_data, _train_cfg(profile, device, epochs=profile.ancestry_epochs, desc="ancestry"),
                   eval_data=eval_data, run_dir=out_dir / "ancestry_run")
    save_model(path, model, profile.ancestry, origin={"kind": "ancestry", "key": key, "eval_acc": result.final_acc,
                                                      "seconds": result.seconds})
    return Ancestry(model.cpu().eval(), profile.ancestry)


def stage_condense(name: str, profile: Profile, ancestry: Ancestry, condense_data: ImageData, out_dir: Path,
                   device: str) -> Learngene:
    """Condense ``ancestry`` with method ``name``; the gene's cost gets the wall time of the whole stage."""
    method = get_method(name)(**profile.method_options.get(name, {}))
    inputs = CondenseInputs(train=condense_data, train_cfg=_train_cfg(
        profile, device, epochs=profile.condense_epochs, distill_lambda=1.0, desc=f"condense {name}"),
        run_dir=out_dir / "condense" / name)
    seed_everything(0)
    tic = time.perf_counter()
    gene = method.condense(ancestry, inputs)
    gene.cost = {**gene.cost, "seconds": round(time.perf_counter() - tic, 2)}
    gene.save(out_dir / "genes" / f"{name}.safetensors")
    return gene


def stage_descendant(gene: Learngene, spec: ViTSpec, task: str, train_data: ImageData, eval_data: ImageData,
                     seed: int, profile: Profile, device: str) -> Row:
    """Adapt (where the method has that step), expand, fine-tune, evaluate after every epoch."""
    method = get_method(gene.method).from_gene(gene)
    if method.adaptable:
        gene, _ = method.adapt(gene, spec, train_data, _train_cfg(profile, device, epochs=1, max_steps=profile.adapt_steps,
                                                                  seed=seed, desc=f"adapt {gene.method}"))
    model = make_descendant(gene, spec, seed=seed)
    result = train(model, train_data, _train_cfg(profile, device, epochs=profile.finetune_epochs, seed=seed),
                   eval_data=eval_data)
    return Row(method=gene.method, task=task, depth=spec.depth, seed=seed, params=spec.num_params,
               stored_params=gene.num_stored_params, condense_seconds=gene.cost.get("seconds", 0.0),
               accs=[h["eval_acc"] for h in result.history])


def run_profile(profile: Profile, out_dir: str | Path, data_dir: str | None = None, device: str = "auto",
                progress: bool = True) -> list[Row]:
    """Run every stage of ``profile``; writes genes, models and ``results.csv``/``report.md`` to ``out_dir``."""
    from .report import write_report

    out_dir = Path(out_dir)
    (out_dir / "genes").mkdir(parents=True, exist_ok=True)
    methods = list(profile.methods or list_methods())
    train_full, test_full = fashion_mnist("train", data_dir), fashion_mnist("test", data_dir)
    eval_data = take(test_full, profile.eval_images)
    finetune_data = take(train_full, profile.finetune_images, seed=1)
    total = 1 + len(methods) + len(methods) * len(profile.depths) * len(profile.seeds)
    bar = tqdm(total=total, desc=f"bench {profile.name}", disable=not progress, dynamic_ncols=True)

    bar.set_postfix_str("ancestry")
    ancestry = stage_ancestry(profile, take(train_full, profile.ancestry_images), eval_data, out_dir, device)
    bar.update(1)
    genes = {}
    for name in methods:
        bar.set_postfix_str(f"condense {name}")
        genes[name] = stage_condense(name, profile, ancestry, take(train_full, profile.condense_images, seed=2),
                                     out_dir, device)
        bar.update(1)
    rows: list[Row] = []
    for seed in profile.seeds:
        for depth in profile.depths:
            spec = profile.ancestry.replace(depth=depth)
            for name in methods:
                bar.set_postfix_str(f"{name} depth {depth} seed {seed}")
                rows.append(stage_descendant(genes[name], spec, "fashion_mnist", finetune_data, eval_data, seed,
                                             profile, device))
                bar.update(1)
    bar.close()
    write_report(rows, profile, out_dir)
    (out_dir / "profile.json").write_text(json.dumps(dataclasses.asdict(profile), indent=2, default=str))
    return rows

