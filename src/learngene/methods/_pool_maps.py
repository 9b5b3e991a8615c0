"""Learngene Pool's stitch start as its paper states it (``stitch_init=learned``, design=authors): each instance
distils the ancestry's hidden states through three learned teacher→student maps, and a stitch layer starts as the
mean of those maps, transposed, with no bias.

The authors' aux-net distillation (``distill.py`` of github.com/ZhenuYang/Yuanmou at b3e20a0) trains with
``trans_layer_map``: a linear map per third of the net from the teacher's hidden width to the student's, the
student's block at the end of each third against the teacher's (blocks 4, 8 and 12 of a 12-block DeiT-B); their
``initialize_stitching_weights(mode='ours')`` stacks the three maps' weights, averages them and transposes the mean
(``permute(1, 0)``) into the stitch layers from the narrowest instance into the widest (as wide as the teacher),
setting no bias. Their stitches between other widths are commented out there (one line composes the wider
instance's map with the narrower's transposed mean); we compose both means, which is that line with the mean of the
wider's maps for its first. Ours distils the hidden states by the mean squared error, weighted like the logits'
term (λ: the loss is ``(1−λ)·CE + λ·(τ²·KL + MSE)``); their attention-output term is not reproduced, and a stitch
bias starts at 0 where theirs keeps ``nn.Linear``'s random draw.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import LearngeneError, assigned
from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Method
from ..training.config import known
from ..training.distill import distill_loss
from ..training.genenet import GeneNet
from ..training.loop import train
from ..vit.transfer import part_of
from ._pool_stitches import paired_stitches, stitch_key

THIRDS = 3


def third_ends(depth: int) -> list[int]:
    """The 0-based blocks that end each third of a ``depth``-block net (their blocks 4, 8 and 12 of 12: 3, 7, 11)."""
    return [max(0, round(depth * (k + 1) / THIRDS) - 1) for k in range(THIRDS)]


class _Hidden:
    """The outputs of chosen blocks of a timm ViT, caught by forward hooks at every forward."""

    def __init__(self, model: Any, blocks: list[int]):
        self.outputs: dict[int, Tensor] = {}
        for i in blocks:
            model.blocks[i].register_forward_hook(self._keeper(i))
        self.blocks = blocks

    def _keeper(self, i: int):
        def keep(module: nn.Module, args: Any, output: Tensor) -> None:
            self.outputs[i] = output

        return keep

    def taken(self) -> list[Tensor]:
        return [self.outputs[i] for i in self.blocks]


class HiddenTeacher(nn.Module):
    """The ancestry seen as one tensor per image: its logits (none for a headless one), then its hidden states at the
    ends of its thirds."""

    def __init__(self, model: nn.Module, depth: int, classes: int):
        super().__init__()
        self.model, self.classes = model, classes
        self.hidden = _Hidden(model, third_ends(depth))

    def forward(self, x: Tensor) -> Tensor:
        out = self.model(x)
        logits = [out.flatten(1)] if self.classes else []
        return torch.cat([*logits, *(h.flatten(1) for h in self.hidden.taken())], dim=1)


class MappedStudent(nn.Module):
    """An instance's aux net that distils the teacher's logits and, through three learned teacher→student maps, its
    hidden states at the ends of the thirds (the maps train with it and start the stitches)."""

    def __init__(self, net: GeneNet, teacher_width: int, teacher_classes: int):
        super().__init__()
        self.net, self.teacher_classes = net, teacher_classes
        spec = net.spec
        self.maps = nn.ModuleList(nn.Linear(teacher_width, spec.embed_dim) for _ in range(THIRDS))
        self.hidden = _Hidden(net.skeleton, third_ends(spec.depth))

    @property
    def skeleton(self) -> nn.Module:
        """The student's timm model (the training loop checks the data against it)."""
        return self.net.skeleton

    def no_weight_decay(self) -> set[str]:
        return {f"net.{k}" for k in self.net.no_weight_decay()}

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def distill_loss(
        self, logits: Tensor, labels: Tensor, teacher: Tensor | None, lam: float, tau: float, smoothing: float = 0.0
    ) -> Tensor:
        """Per image ``(1−λ)·CE + λ·(τ²·KL + MSE)`` (a headless ancestry: no KL): the MSE averages, over the three
        thirds, the squared error between the student's hidden state and the mapped teacher's."""
        if teacher is None:
            raise LearngeneError("pool's learned stitch start distils the ancestry: it needs its outputs")
        classes = self.teacher_classes
        if classes:
            loss = distill_loss(logits, labels, teacher[:, :classes], lam, tau, smoothing)
        else:
            loss = (1.0 - lam) * distill_loss(logits, labels, None, 0.0, tau, smoothing)
        students = self.hidden.taken()
        tokens, width = students[0].shape[1], int(cast(nn.Linear, self.maps[0]).in_features)
        theirs = teacher[:, classes:].reshape(len(teacher), THIRDS, -1, width)
        if theirs.shape[2] != tokens:
            raise LearngeneError(
                f"pool's learned stitch start compares hidden states token by token, and the aux net has {tokens} "
                f"tokens where the ancestry has {theirs.shape[2]}; use {assigned('stitch_init', 'least_squares')}"
            )
        mse = torch.stack(
            [
                F.mse_loss(own.float(), mapped(theirs[:, k].float()), reduction="none").mean(dim=(1, 2))
                for k, (own, mapped) in enumerate(zip(students, self.maps))
            ]
        ).mean(0)
        return loss + lam * mse

    def mean_map(self) -> Tensor:
        """The mean of the three maps' weights (student width × teacher width)."""
        return torch.stack([cast(nn.Linear, m).weight.detach() for m in self.maps]).mean(0).cpu()


def distil_with_maps(
    method: Method, start: Learngene, ancestry: Ancestry, inputs: CondenseInputs
) -> tuple[Learngene, Tensor]:
    """``start``'s instance distilled from ``ancestry`` through its aux net with the hidden-state term; the trained
    gene and the mean of its three teacher→student maps."""
    spec = ancestry.spec
    if spec is None:
        raise LearngeneError(
            "pool's learned stitch start distils a ViT's hidden states, and this ancestry is not one; use "
            f"{assigned('stitch_init', 'least_squares', flag='--opt')}"
        )
    if inputs.train is None:
        raise LearngeneError("pool condenses by training aux nets; give training data (--data)")
    cfg = inputs.train_cfg.resolved("condense", distill_lambda=method.distill_lambda)
    if not known(cfg.distill_lambda) > 0:
        raise LearngeneError(
            "pool's learned stitch start trains its maps by distillation, and λ = 0 distils nothing; give "
            f"distill_lambda > 0 or {assigned('stitch_init', 'least_squares', flag='--opt')}"
        )
    aux = start.require_layout()
    if not spec.num_classes:  # as condense_through_aux: the aux net's head only serves the CE term
        start = dataclasses.replace(start, tensors={k: v for k, v in start.tensors.items() if part_of(k) != "head"})
    net = GeneNet(method, start, aux)
    student = MappedStudent(net, spec.embed_dim, spec.num_classes)
    teacher = HiddenTeacher(ancestry.model, spec.depth, spec.num_classes)
    tic = time.perf_counter()
    result = train(
        student,
        inputs.train,
        cfg,
        inputs.eval,
        teacher=teacher,
        run_dir=inputs.run_dir,
        resume=inputs.resume,
        loss=student.distill_loss,
    )
    gene = net.gene()
    gene.cost = {
        "epochs": cfg.epochs,
        **result.cost,
        "aux": aux.short(),
        "distilled": ("logits and " if spec.num_classes else "")
        + "hidden states at the ends of the thirds, through three learned maps",
        "distill_lambda": cfg.distill_lambda,
        "distill_tau": cfg.distill_tau,
        "wall_seconds": round(time.perf_counter() - tic, 2),
    }
    return gene, student.mean_map()


def learned_stitches(maps: list[Tensor], teacher_width: int, depth: int) -> dict[str, Tensor]:
    """Every stitch layer's start from the instances' mean maps (narrowest first, each student width × teacher
    width): from instance ``f`` into a wider ``e`` as wide as the teacher, ``mean(M_f)ᵀ`` (theirs); into a narrower
    one, ``mean(M_e) · mean(M_f)ᵀ`` (through the teacher's width); every window's layer alike, bias 0."""
    tensors: dict[str, Tensor] = {}
    layers = sorted({layer for _, _, layer in paired_stitches(depth)})
    for front in range(len(maps)):
        for end in range(front + 1, len(maps)):
            into = maps[end].shape[0]
            weight = maps[front].T if into == teacher_width else maps[end] @ maps[front].T
            for layer in layers:
                tensors[stitch_key(front, end, layer, "weight")] = weight.clone()
                tensors[stitch_key(front, end, layer, "bias")] = torch.zeros(into)
    return tensors
