"""Learngene Pool's stitched side (``design=authors``): its third training step over drawn stitched configurations,
and a stitched descendant built from a gene (:mod:`learngene.methods.pool` explains the design; the stitches
themselves are :mod:`learngene.methods._pool_stitches`')."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from torch import nn

from ..errors import GeneFormatError, LearngeneError
from ..gene import Learngene
from ..method import CondenseInputs, OutputModel
from ..training.config import known
from ..training.distill import cache_teacher_outputs
from ..training.loop import train
from ..vit.transfer import StateDict
from ._pool_layout import instance_key, instance_state
from ._pool_stitches import JointPool, StitchedViT, paired_stitches, stitch_key

if TYPE_CHECKING:
    from .pool import LearngenePool


def train_jointly(
    method: LearngenePool, models: list[nn.Module], tensors: StateDict, teacher_model: nn.Module, inputs: CondenseInputs
) -> dict:
    """Their third step (``main.py`` with ``conf_build.yaml``): the whole pool trained by the one training loop
    on a :class:`JointPool` configuration drawn per step, each distilling the ancestry's (``teacher_model``'s) logits
    with the run's loss ``(1−λ)·CE + λ·τ²·KL`` (theirs: λ = 0.5, τ = 1, 50 epochs at lr 1e-4). Updates ``tensors`` in
    place."""
    cfg = inputs.train_cfg.resolved("condense", distill_lambda=method.distill_lambda)
    pool = JointPool(models, tensors, cfg.seed)
    own = dataclasses.replace(cfg, epochs=method.config.joint_epochs)  # a --max-steps caps this stage too
    if own.log_dir is not None:
        own.log_dir = str(Path(own.log_dir) / "joint")
    data, teacher = cast(Any, inputs.train), None  # checked by condense_authors
    if known(own.distill_lambda) > 0:
        data, teacher = cache_teacher_outputs(data, teacher_model, own)
    run_dir = Path(inputs.run_dir) / "joint" if inputs.run_dir is not None else None
    result = train(pool, data, own, inputs.eval, teacher=teacher, run_dir=run_dir, resume=inputs.resume)
    tensors.update((key, value) for key, value in pool.gene_tensors().items() if key in tensors)
    joint = {"epochs": own.epochs, **result.cost}
    joint["configurations"] = len(pool.draws)
    if result.final_acc is not None:
        joint["widest_eval_acc"] = result.final_acc
    return joint


def require_authors_design(gene: Learngene) -> None:
    """One line for a gene that makes no stitched descendant (another method, or pool's other design)."""
    if gene.method != "pool" or gene.config.get("design") != "authors":
        made = f"pool design={gene.config.get('design')}" if gene.method == "pool" else gene.method
        raise LearngeneError(
            f"stitched descendants come from a pool gene of the authors' design (condense with method 'pool' and "
            f"design='authors' (--method pool --opt design=authors)); this gene is {made}"
        )


def build_stitched(
    method: LearngenePool, gene: Learngene, front: int, end: int, cut_front: int, cut_end: int
) -> StitchedViT:
    """:func:`learngene.methods.pool.stitched_descendant` of a gene of the authors' design, with its method built."""
    specs = method.instance_specs(gene.require_layout())
    layers = {(j, k): layer for j, k, layer in paired_stitches(specs[0].depth)}
    if not (0 <= front < end < len(specs)) or (cut_front, cut_end) not in layers:
        raise LearngeneError(
            f"no stitch from instance {front} block {cut_front} into instance {end} block {cut_end} in this pool "
            f"of {len(specs)} instances of {specs[0].depth} blocks; `learngene inspect GENE` says which exist "
            f"(stitch_choices(gene) in Python)"
        )
    model = StitchedViT(specs[front], specs[end], cut_front, cut_end)
    state = {f"front.{k}": v for k, v in instance_state(gene, front).items()}
    state.update({f"end.{k}": v for k, v in instance_state(gene, end).items()})
    layer = layers[(cut_front, cut_end)]
    for p in ("weight", "bias"):
        key = stitch_key(front, end, layer, p)
        if key in gene.tensors:
            state[f"stitch.{p}"] = gene.tensors[key]
    own = model.state_dict()
    # a headless ancestry's instances have no head: the descendant keeps a fresh one
    missing = [k for k in own if k not in state and not k.startswith(("front.head", "end.head"))]
    wrong = [k for k in own if k in state and state[k].shape != own[k].shape]
    if missing or wrong:
        part, _, rest = missing[0].partition(".") if missing else ("", "", "")
        named = {"front": instance_key(front, rest), "end": instance_key(end, rest)}
        what = (
            f"lacks {named.get(part) or stitch_key(front, end, layer, rest)}"
            if missing
            else f"holds {wrong[0]} of shape {tuple(state[wrong[0]].shape)} where its header's options "
            f"({design_text(gene)}) give {tuple(own[wrong[0]].shape)}"
        )
        raise GeneFormatError(
            f"this pool gene {what}: its header does not match its tensors; create it again with `learngene condense`"
        )
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
    return model


def stitched_output(method: LearngenePool, gene: Learngene, stitch: tuple[int, int, int, int]) -> OutputModel:
    """The ``stitch`` output of ``expand``: the stitched descendant ``(front, end, cut_front, cut_end)``."""
    front, end, cut_front, cut_end = stitch
    require_authors_design(gene)
    model = build_stitched(method, gene, front, end, cut_front, cut_end)
    origin = {
        "kind": "stitched descendant",
        "stitch": f"{front}:{cut_front}-{end}:{cut_end}",
        "label_space": gene.label_space if f"instance{end}.head.weight" in gene.tensors else None,  # else fresh
    }
    return OutputModel(
        model,
        origin,
        f"stitched descendant {model.short()}, {model.depth} blocks, {model.num_params:,} params "
        f"(instance {front} through block {cut_front}, a stitch layer, instance {end} from block {cut_end})",
    )


def design_text(gene: Learngene) -> str:
    """The header's options that fix the instances' shapes, for a message."""
    return ", ".join(f"{k}={gene.config.get(k)!r}" for k in ("widths", "instance_depth") if k in gene.config)
