"""Condensation through an auxiliary net: the part TLEG, Share-Init and WAVE share.

The aux net is a plain timm ViT of an ``aux`` spec whose parameters are the method's
``expand(gene, aux_spec)`` on every forward (:class:`~learngene.descendant.GeneNet`), trained by
distillation from the ancestry with the one training loop (TLEG Eq. 5-6, WAVE Eq. 5-6). Aux net and
descendants are built from the same timm configuration, so a descendant of the aux spec computes the
aux net's function exactly.

The aux net pools like the ancestry unless ``aux_pool`` says otherwise: ``avg`` is the TLEG authors'
setup (no class token, average pooling), except that timm's average pooling normalizes after
averaging where their net normalizes before; descendants built with the same pooling compute the aux
net's function, others inherit what fits (no class-token position embedding to give).

A gene condensed this way has the aux net's spec as its layout (``gene.layout``): the width its block
tensors have and the layout of its embeddings and head.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn
from tqdm import tqdm

from ..data import Data
from ..errors import LearngeneError
from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Method
from ..settings import field
from ..validate import CONDENSE
from ..vit.spec import ViTSpec
from ..vit.transfer import StateDict, inherit_non_block, part_of
from . import distributed as dist
from .config import TrainConfig, known
from .distill import FeatureDistillation, cache_teacher_outputs
from .genenet import GeneNet
from .loop import TrainResult, resolve_device, train


@dataclass(frozen=True)
class AuxConfig:
    """Size of the auxiliary net (0 = the ancestry's value; required when the ancestry is not a ViT).

    Attributes:
        aux_depth: the aux net's layers (0: the ancestry's).
        aux_embed_dim: the aux net's width (0: the ancestry's).
        aux_num_heads: the aux net's attention heads (0: the ancestry's).
        aux_patch_size: the aux net's patch size (0: the ancestry's).
    """

    AUTO_OPTIONS: ClassVar[tuple[str, ...]] = (
        "aux_depth",
        "aux_embed_dim",
        "aux_num_heads",
        "aux_patch_size",
        "aux_pool",
    )  # 0 / "": automatic

    aux_depth: int = field(0, phase=CONDENSE)
    aux_embed_dim: int = field(0, phase=CONDENSE)
    aux_num_heads: int = field(0, phase=CONDENSE)
    aux_patch_size: int = field(0, phase=CONDENSE)
    aux_pool: Literal["", "token", "avg"] = field(
        "", phase=CONDENSE, help="\"\": the ancestry's; avg: no class token, average pooling (the authors' aux net)"
    )


@dataclass(frozen=True)
class DrawnStartConfig(AuxConfig):
    """An aux-net method whose gene starts as trunc-normal draws (TLEG, SWS, WAVE; LeTs and Pool start otherwise)."""

    init_std: float = field(
        0.02, phase=CONDENSE, help="trunc-normal std of weight tensors at the start of condensation"
    )


def resolve_aux_spec(
    config: AuxConfig, ancestry: Ancestry | None, inputs: CondenseInputs | None, method: str
) -> ViTSpec:
    """The aux net's spec: sizes from the options, else from the ancestry; input and labels from the data."""
    base = ancestry.spec if ancestry is not None else None
    sizes = {"depth": config.aux_depth, "embed_dim": config.aux_embed_dim, "num_heads": config.aux_num_heads}
    missing = [f"aux_{k}" for k, v in sizes.items() if not v]
    sizes["patch_size"] = config.aux_patch_size
    if missing and base is None:
        raise LearngeneError(
            f"{method}: the ancestry is not a ViT, so give the aux net's size: "
            + ", ".join(f"{m}=N (--opt {m}=N)" for m in missing)
        )
    values = base.to_dict() if base is not None else ViTSpec().to_dict()
    values.update({k: v for k, v in sizes.items() if v})
    if config.aux_pool:
        # timm normalizes after averaging (fc_norm); the authors' aux net normalizes, then averages
        values.update(global_pool=config.aux_pool, class_token=config.aux_pool == "token")
    data = inputs.train if inputs is not None else None
    if data is not None:
        values.update(img_size=data.img_size, in_chans=data.in_chans)
        if base is None or base.num_classes == 0:  # a headless ancestry: the aux net gets a head for the data's labels
            values.update(num_classes=data.num_classes)
    return ViTSpec.from_dict(values)


def aux_size(config: AuxConfig, ancestry: ViTSpec) -> ViTSpec:
    """The aux net's depth, width and heads as :func:`resolve_aux_spec` sets them from ``config`` and an ancestry of
    ``ancestry``'s size, before any data is read: what a method's reach (``Method.cannot_reach``) compares with."""
    sizes = {"depth": config.aux_depth, "embed_dim": config.aux_embed_dim, "num_heads": config.aux_num_heads}
    return ancestry.replace(**{k: v for k, v in sizes.items() if v})


def vector_start(spec: ViTSpec, name: str) -> float:
    """timm's initial value of block vector ``name``: 1 for norm weights, the family's init value for a
    layer-scale gamma, 0 for biases (and for mixed RoPE's frequencies, which timm draws: no rotation until trained,
    as the gene's other vectors start from constants)."""
    if name.endswith(".gamma"):
        return float(spec.family.init_values or 0.0)  # a gamma exists only where init_values is set
    return 1.0 if "norm" in name and name.endswith("weight") else 0.0


def initial_non_block(spec: ViTSpec) -> StateDict:
    """timm's own initialization of the embeddings, final norm and head (drawn from the global RNG)."""
    state = spec.create_model().state_dict()
    return {k: state[k].detach().clone() for k in spec.non_block_shapes()}


def expand_non_block(gene: Learngene, spec: ViTSpec) -> StateDict:
    """The gene's embeddings, final norm and head, carried to ``spec`` where they fit (see ``inherit_non_block``)."""
    source = gene.require_layout()
    state = {k: gene.tensors[k] for k in source.non_block_shapes() if k in gene.tensors}
    return inherit_non_block(state, source, spec)


class AuxNetMethod(Method):
    """A method whose gene is trained inside an aux net: ``condense`` starts from :meth:`initial_tensors` at the
    aux spec (seeded by the run's seed) and distils the ancestry into them (:func:`condense_through_aux`)."""

    aux_net = True

    def initial_tensors(self, aux: ViTSpec) -> StateDict:
        """The gene's tensors at the start of condensation, for the aux net ``aux``."""
        raise NotImplementedError

    def aux_spec(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> ViTSpec:
        """The aux net the gene is distilled in: the ``aux_*`` options, the rest from the ancestry and data."""
        return resolve_aux_spec(self.config, ancestry, inputs, self.name)

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        aux = self.aux_spec(ancestry, inputs)
        torch.manual_seed(inputs.train_cfg.seed if inputs is not None else 0)
        start = self.new_gene(self.initial_tensors(aux), aux, ancestry.spec if ancestry is not None else None)
        return condense_through_aux(self, start, self.require_ancestry(ancestry), inputs)


def condense_through_aux(
    method: Method,
    start: Learngene,
    ancestry: Ancestry,
    inputs: CondenseInputs | None,
    trainable: Callable[[str], bool] | None = None,
) -> Learngene:
    """Train ``start``'s tensors through the aux net of its layout by distillation from ``ancestry``.

    Loss ``(1−λ)·CE + λ·τ²·KL`` with λ, τ from ``inputs.train_cfg`` (TLEG Eq. 6; WAVE Eq. 6 is λ = 0.5
    up to a factor 2). Without augmentation the teacher's logits are computed once and cached. The
    returned gene records what the condensation cost and the aux net's final test accuracy.
    """
    if inputs is None or inputs.train is None:
        raise LearngeneError(f"{method.name} condenses by training an aux net; give training data (data, --data)")
    cfg = inputs.train_cfg.resolved("condense", distill_lambda=method.distill_lambda)  # the method's λ unless given
    aux = start.require_layout()
    headless = is_headless(ancestry)
    if headless:  # the aux net's head only serves the CE term: descendants get a fresh one for their task
        start = dataclasses.replace(start, tensors={k: v for k, v in start.tensors.items() if part_of(k) != "head"})
    net = GeneNet(method, start, aux, trainable=trainable)
    student: nn.Module = net
    teacher: nn.Module | None = ancestry.model  # None once its outputs are cached with the data
    data, teacher_seconds = inputs.train, 0.0
    distilled = "nothing (λ = 0: cross-entropy on the labels only)"
    if known(cfg.distill_lambda) > 0:
        tic = time.perf_counter()
        student, distilled = _student(net, ancestry, data, cfg)
        data, teacher = cache_teacher_outputs(data, ancestry.model, cfg)
        teacher_seconds = time.perf_counter() - tic
    if cfg.progress and dist.is_main():
        tqdm.write(
            f"{method.name}: the aux net {aux.short()} distils the ancestry's {distilled}, λ = {cfg.distill_lambda:g}"
        )
    loss = student.distill_loss if isinstance(student, FeatureDistillation) else None
    result = train(
        student, data, cfg, inputs.eval, teacher=teacher, run_dir=inputs.run_dir, resume=inputs.resume, loss=loss
    )
    gene = net.gene()
    gene.cost = _cost(cfg, result, teacher_seconds, aux, distilled)
    return gene


def _student(net: GeneNet, ancestry: Ancestry, data: Data, cfg: TrainConfig) -> tuple[nn.Module, str]:
    """What distils from ``ancestry`` into the aux net ``net`` and what it distils: the aux net its logits, or, for an
    ancestry without a classifier, the aux net's pooled features through a :class:`FeatureDistillation` (its width
    read from the ancestry's output on two images)."""
    device, aux = resolve_device(cfg.device), net.spec
    with torch.no_grad():
        probe = ancestry.model.to(device).eval()(data.get_batch(torch.arange(min(2, len(data))))[0].to(device))
    if is_headless(ancestry):
        features = FeatureDistillation(net, probe.shape[-1])
        return features, features.describe("; it has no classifier")
    if probe.shape[-1] != aux.num_classes:
        raise LearngeneError(
            f"the ancestry predicts {probe.shape[-1]} classes but the aux net has "
            f"{aux.num_classes}; distil on data with the ancestry's label space"
        )
    return net, f"logits (τ² KL at τ = {cfg.distill_tau:g})"


def _cost(
    cfg: TrainConfig, result: TrainResult, teacher_seconds: float, aux: ViTSpec, distilled: str
) -> dict[str, Any]:
    """What the condensation cost, as the gene records it, and the aux net's final test accuracy."""
    cost: dict[str, Any] = {
        "epochs": cfg.epochs,
        **result.cost,
        "teacher_seconds": round(teacher_seconds, 2),
        "aux": aux.short(),
        "distilled": distilled,
        "distill_lambda": cfg.distill_lambda,
        "distill_tau": cfg.distill_tau,
    }
    if result.final_acc is not None:
        cost["aux_eval_acc"] = result.final_acc
    return cost


def is_headless(ancestry: Ancestry) -> bool:
    """A feature extractor (timm ``num_classes=0``: DINOv2, CLIP image towers) rather than a classifier."""
    if ancestry.spec is not None:
        return ancestry.spec.num_classes == 0
    return getattr(ancestry.model, "num_classes", None) == 0


def block_params_per_layer(spec: ViTSpec) -> int:
    return sum(int(torch.Size(s).numel()) for s in spec.block_shapes().values())
