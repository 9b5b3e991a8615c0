"""PITH, Parameter InheriTance HyperNetwork ("Unlocking Pre-trained Weights: Parameter Inheritance for Zero-Shot
Initialization", CVPR 2026; TAL's successor): TAL's graph hypernetwork, whose every predicted weight matrix is
blended with a projection of the ancestry's matrix of the same name and layer, ``W = (1−α)·W_ghn + α·P·W_t·Q``.

Authors' code: github.com/mathieuxu/PITH-Parameter-InheriTance-HyperNetwork at commit 7c7ff0d, read (no licence
file: re-implemented from it, nothing copied): ``pith/ghn3/nn_pith.py`` (``GHN3``, ``ConvDecoder3LoRA``,
``ConvDecoder3LoRA_Gradual``), ``pith/ghn3/trainer_pith.py``, ``pith/train_pith.py``, ``pith/config.py``,
``pith/vit_generator.py`` and the README's training command. Their ``ghn3/graph.py``, ``graphormer.py`` and
``ops.py`` are TAL's ``ghn3`` files (the GHN of TAL's first stage, without task modulation) but for comments, so
the graph, its node embeddings and the Graphormer are :mod:`learngene.methods.tal`'s, with no task input. The
paper itself was not found in this session (a third-party summary gives its venue and its headline: ViT-B 53.35 %
ImageNet top-1 with no training, 6.5 points over TAL); what follows is their code's, cited by function.

**The learngene** is the hypernetwork's weights (``ghn.*``: graph encoder, both decoders and β) and the ancestry's
tensors the fusion reads (``ancestry.*``: every weight matrix of every layer, the patch kernel and the position
table, under their timm names): the fusion needs them at every expansion, so the gene holds as many values as the
ancestry's matrices besides the hypernetwork's (a ViT-B ancestry: about 86 M). Norms, biases and the classifier
come from the hypernetwork alone, so the ancestry's are not stored.

``expand(spec)`` runs the hypernetwork on the graph of ``spec``'s timm ViT (TAL's node embeddings, Graphormer and
final norm, see there), then, per node:

1. the weight block from ``decoder`` (the GHN-3 LoRA decoder: an MLP to a ``2r × r`` factor matrix, each row
   widened gradually ``r → 2r → 4r → ck`` with ReLUs, their ``ConvDecoder3LoRA_Gradual``; TAL widens in one
   Linear), at the tensor's size capped at ``max_shape`` (their ``_map_net_params`` with TAL's rounding of sizes
   commented out);
2. for a matrix, the patch kernel and the position embedding (the tensors predicted from a 4-entry group key),
   ``P`` (m_s × m_t) and ``Q`` (n_t × n_s) from ``decoder_pq`` (TAL's decoder: the MLP and one Linear ``r → ck``)
   on the same node embedding, and the block ``(1−α)·W + α·P·W_t·Q`` with ``α = sigmoid(β)``, β one learned scalar
   shared by every tensor, starting at −1.5 (``fusion_init``); ``W_t`` is the ancestry's tensor of the same key,
   a matrix read as ``(m, n, 1, 1)``, the kernel ``(D, C, p, p)`` (``P·W_t·Q`` at each kernel position), the
   position table as a ``(1, D, s, s)`` grid;
3. TAL's tiling to the tensor's shape and normalization (fan-in scaling of the fused matrix too, as theirs:
   the fusion comes before ``_tile_params`` and ``_normalize``); norms, biases and the classifier from ``decoder``
   alone.

A descendant layer past the ancestry's last reads the ancestry's last layer: their ``_map_student_layer_to_teacher``
says so, but their forward never calls it, and a name the ancestry lacks finds no tensor, so a deeper student fails
there (their students, 3–12 layers, never outgrow their 24-layer ViT-L/16 teacher).

**Condensation** trains the hypernetwork in the project's one loop (as TAL's,
:meth:`~learngene.methods.tal.HypernetCondensation.train`): each step draws one descendant size, predicts its ViT
with the ancestry's tensors fused in and trains on the cross-entropy of the data's labels plus
``predparam_wd · Σ‖W‖_F`` over the predicted tensors (their ``trainer_pith.Trainer.update``: the teacher contributes
its weights, not its outputs; ImageNet runs use label smoothing 0.1). Their README trains with AdamW, lr 3e-4,
weight decay 1e-2, a cosine schedule with warmup, batches of 512, one sampled net per batch, gradient clipping at 5
(config.py), and ViT-L/16 (torchvision, IMAGENET1K_V1) as the ancestry: those are the training flags' business here
(``--lr 3e-4 --weight-decay 0.01 --label-smoothing 0.1 --grad-clip 5``); λ = 0 by default, and a λ > 0 distils the
ancestry as TAL does.

**Where ours differs.** Their sampled nets are torchvision ViTs of ``vit_generator.py`` (3–12 layers, width
192–768 in steps of 64, MLP 4×, patch 16 at 224 px); ours are drawn per step from the ancestry's family as TAL's
(depth in ``[min_depth, ancestry depth]``, heads in ``[1, ancestry heads]`` at the ancestry's head width), which
scales their ranges to the ancestry at any size. Their position table of the ancestry is cut to its first ``s²``
rows (``_transform_positional_encoding``), which in torchvision's layout (and timm's) start with the class token's
row, so every patch reads its predecessor's position; ours takes the ancestry's patch rows. Where the ancestry's
grid or patch size differs from the descendant's (their code fails there), its position grid is resampled as
timm's ``resample_abs_pos_embed`` does and its kernel as FlexiViT's (timm's ``resample_patch_embed``); another
channel count needs nothing (``Q`` maps it). Their teacher lookup by name keeps a tensor 2-D when its name
contains ``fc`` or ``linear`` (meant for the classifier), which would break their einsum for timm's ``mlp.fc1``;
ours reads every matrix but the classifier as ``(m, n, 1, 1)``, as their torchvision names get. Their batch of a
group's ancestry tensors (``torch.stack``) fails where ``max_shape`` caps two widths into one group (``qkv`` and
``proj``); ours fuses each tensor on its own. β's start is an option here (``fusion_init``); theirs is fixed. The
tensors their tracer drops (class and register tokens, layer-scale gammas, a MAP head's latent) keep timm's
initialization, as TAL's. Their decathlon stage (``ghn3_mtl``, task embeddings, ``train_pith_decathlon.py``) is not
implemented.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import Tensor
from torch.func import functional_call

from ..errors import LearngeneError, named
from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Paper
from ..registry import register_method
from ..settings import field
from ..training.distill import PooledFeatures
from ..validate import CONDENSE
from ..vit.spec import ViTSpec
from ._pith_hypernet import GradualExpansion, Inherited, PITHHyperNet, fused
from ._tal_graph import graph_nodes
from .tal import GHN_PREFIX, HypernetCondensation, HypernetMethod, TALConfig

__all__ = ["PITH", "PITHConfig", "GradualExpansion", "Inherited", "PITHHyperNet", "fused", "inherited_tensors"]

ANCESTRY_PREFIX = "ancestry."  # the gene's copy of the ancestry's fused tensors, under their timm keys
INHERITED = "inherited."  # where the hypernetwork holds them


@dataclass(frozen=True)
class PITHConfig(TALConfig):
    """Options of PITH: TAL's hypernetwork options at their README's values (``--hid 128 --layers 5 --heads 16
    -v 50``; ``lora_r``, ``max_ck`` and ``max_shape`` at 0 are ``--lora_r 90``, config.py's ``max_ck_lora`` 2048·16
    and ``--max_shape 4096`` scaled to the ancestry's width, :meth:`~learngene.methods.tal.TALConfig.sized_for`) and
    the fusion's start."""

    max_shape: int = field(
        0,
        phase=CONDENSE,
        at_least=0,
        help="largest channel count predicted, wider is tiled; 0: theirs, 4096, times the ancestry's width / 768 "
        "(rounded up)",
    )
    # sigmoid(±30) is 1 or 0 to float32, where β's gradient vanishes: a start past that could never move
    fusion_init: float = field(
        -1.5,
        phase=CONDENSE,
        at_least=-30,
        at_most=30,
        help="β's start: the ancestry's share of a fused tensor is α = sigmoid(β) (−1.5: 18 %)",
    )
    method: ClassVar[str] = "pith"
    authors_max_shape: ClassVar[int] = 4096  # their README's --max_shape

    def axis_size(self, n: int) -> int:
        """Their ``min_sz`` with its rounding commented out: ``min(n, max_shape)``."""
        return min(n, self.max_shape)


def inherited_tensors(ancestry: Ancestry, spec: ViTSpec) -> dict[str, Tensor]:
    """The ancestry's tensors PITH fuses (:func:`~learngene.methods._pith_hypernet.fused`'s of its graph), fp32
    copies under plain-ViT keys: every weight matrix of every layer, the patch kernel, the position table."""
    state = spec.vit_layout(ancestry.state())
    keys = [n.key for n in graph_nodes(spec)[0] if fused(n) and n.key is not None]
    return {k: state[k].detach().to(torch.float32, copy=True) for k in keys}


@register_method
class PITH(HypernetMethod):
    name = "pith"
    summary = "TAL's graph hypernetwork fused with low-rank projections P·W·Q of the ancestry's own weight matrices"
    stores = (
        "the weights of a GHN-3 graph hypernetwork with a second decoder of projections P, Q and the fusion scalar "
        "β, and the ancestry's weight matrices, patch kernel and position table (the fusion reads them)"
    )
    expands_to = (
        "any depth, width and head count of the ancestry's family (a layer past the ancestry's last fuses its last; "
        "widths past max_shape are tiled); tokens, layer-scale gammas and a MAP head's latent keep timm's init"
    )
    paper = Paper(
        "Unlocking Pre-trained Weights: Parameter Inheritance for Zero-Shot Initialization",
        "",
        "CVPR",
        2026,
        note="PITH",
    )
    Config = PITHConfig
    config: PITHConfig
    needs_data = True
    distill_lambda = 0.0  # their trainer_pith: cross-entropy only; the ancestry gives its weights

    def hypernet(self, gene: Learngene) -> PITHHyperNet:
        """The hypernetwork of ``gene``'s shapes, on ``meta`` (its tensors come from the gene)."""
        layout = gene.require_layout()
        if gene.ancestry is None:
            raise LearngeneError("this pith gene records no ancestry, whose layers its fusion reads; condense it again")
        shapes = {k.removeprefix(ANCESTRY_PREFIX): v for k, v in gene.tensors.items() if k.startswith(ANCESTRY_PREFIX)}
        with torch.device("meta"):
            inherited = {k: torch.empty(v.shape) for k, v in shapes.items()}
            return PITHHyperNet(self.built_config(gene), layout.num_classes, gene.ancestry, inherited)

    def predict(self, ghn: PITHHyperNet, task: Any, spec: ViTSpec, seed: int | None = None) -> dict[str, Tensor]:
        """``spec``'s predicted tensors under plain-ViT keys (``task``: none, PITH conditions on no task)."""
        return ghn(spec, self.class_row(spec, seed))

    def expand(self, gene: Learngene, spec: ViTSpec) -> dict[str, Tensor]:
        ghn = self.hypernet(gene)
        weights = {}
        for key, tensor in gene.tensors.items():
            if key.startswith(GHN_PREFIX):
                weights[key.removeprefix(GHN_PREFIX)] = tensor
            elif key.startswith(ANCESTRY_PREFIX):
                weights[INHERITED + key.removeprefix(ANCESTRY_PREFIX)] = tensor
        state = functional_call(ghn, weights, (spec, self.class_row(spec)), {}, strict=True)
        return spec.model_layout(state)

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        no_data = (
            f"pith condenses by training its hypernetwork on labelled images; give it training data ({named('data')})"
        )
        run = HypernetCondensation.start(self, ancestry, inputs, no_data)
        inherited = inherited_tensors(run.ancestry, run.base)
        copied = sum(t.numel() for t in inherited.values())
        sized = cast(PITHConfig, run.method.config)  # a PITH's sized: PITH's options
        run.require_memory(lambda: PITHHyperNet(sized, run.reference.num_classes, run.base, {}), copied)
        torch.manual_seed(run.cfg.seed)
        ghn = PITHHyperNet(sized, run.reference.num_classes, run.base, inherited)
        result = run.train(ghn, None, PooledFeatures(run.ancestry.model).width)
        tensors = {}
        for key, tensor in ghn.state_dict().items():  # trained on a GPU too
            own = not key.startswith(INHERITED)
            name = GHN_PREFIX + key if own else ANCESTRY_PREFIX + key.removeprefix(INHERITED)
            tensors[name] = tensor.detach().cpu().clone()
        return run.gene(tensors, result)
