"""TAL, Task-Aware Learngene ("Learngene Tells You How to Customize: Task-Aware Parameter Initialization at
Flexible Scales"): a graph hypernetwork of the GHN-3 line that predicts every parameter of a ViT of any size from
the ViT's computational graph and a task embedding.

Authors' code: github.com/mathieuxu/TAL-Task-Aware-Learngene- at commit 27957e8, read: (``TAL/ghn3_MTL/nn.py``,
``graphormer.py``, ``graph.py``; ``TAL/ghn3/trainer_teacher.py``, ``teachermodels.py``, ``multi_tasks.py``,
``vit.py``, ``vit_generator.py``, ``train_ghn_ddp_teacher.py``), built on PPUDA (github.com/facebookresearch/ppuda:
``ppuda/ghn/nn.py``, ``layers.py``, ``mlp.py``, ``deepnets1m/genotypes.py``). The paper was not found in this
session's search (only its abstract, ICML 2025, PMLR 267), so no equation numbers are cited; the rules below are
their code's, cited by function. ``benchmarks/fidelity_tal.py`` runs their modules (and their graph tracer) at
our weights: run once here against 27957e8 and PPUDA 4673a42, the largest difference over every predicted tensor of
three tiny specs was 2.4e-7 and the traced graphs equalled ours.

**Which stage.** The paper pretrains TAL under a teacher (``train_ghn_ddp_teacher.py``, whose ``ghn3/nn.py`` GHN
has no task input), then tunes it on many tasks with their task embeddings and cross-entropy only
(``train_ghn_ddp_MTL_decathlon.py``, ``ghn3_MTL``: TAL+). Condensing here is the first stage's loss on the second
stage's task-conditioned network, with one task, the condensation data's: its embedding conditions every
prediction, but a single condensation cannot learn how predictions should differ between tasks. The multi-task
tuning is not implemented.

**The learngene** is the hypernetwork's weights and the task embedding (the ancestry's mean pooled feature over the
condensation data: their ``multi_tasks.get_task_embedding``, which averages ``teachermodels.get_teacher_label``,
the fc-normed class token). ``expand(spec)`` runs the hypernetwork on the graph of ``spec``'s timm ViT:

1. node embeddings: an op-type embedding (PPUDA's ``PRIMITIVES_DEEPNETS1M``) plus a shape embedding of the node's
   parameter (PPUDA ``ShapeEncoder``: four ``hid/4`` lookups of out/in channels and the two kernel sides);
2. Graphormer layers (their ``graphormer.TransformerLayer``): the first adds in/out-degree and distance-to-input
   embeddings and an attention bias from the (virtual-edge) shortest-path distances; each layer modulates its
   normed input by the task embedding, ``(1 + γ(t))·x + β(t)`` (their ``TEN``, zero-initialized), then attention
   and an MLP; a final LayerNorm (``--ln``);
3. the LoRA decoder (their ``ConvDecoder3LoRA``): an MLP to a ``2r × r`` matrix, ReLU and a Linear to ``ck``
   columns, read as the factors ``A`` (ck × r) and ``B`` (r × ck) whose product, sliced, is the parameter block
   (``n_dim`` 1, 2 or 4 as in ``GHN3.forward``);
4. the block is sliced or tiled to the parameter's shape (``GHN3._tile_params``) and normalized
   (``GHN3._normalize``: fan-in scaling with β = 2 for weights, ``2·sigmoid(p/2)`` for norm gains,
   ``tanh(p/5)`` for biases; position embeddings raw); predicted shapes are grouped by ``GHN3._map_net_params``'s
   ``min_sz`` rule (a size divisible by 3 predicted as 4/3 of it, at least half of ``max_shape`` as ``max_shape``).

**Its size.** Their decoder is set for their nets (at most 768 wide): rank ``lora_r`` 90, ``max_ck`` 2048·16 rows,
``max_shape`` 2048 channels. At a 64-wide ancestry of 205 k parameters (the demo's) that decoder holds 20.2 M of the
hypernetwork's 21.5 M weights. Left at 0, those three options are theirs times ``min(1, width / 768)``, rounded up
(:meth:`TALConfig.sized_for`, which argues the rule): theirs exactly at their scale; at the demo's ancestry 2.06 M
weights (PITH: 50.5 M to 2.79 M), and a condensation step of its sizes took 6 to 7.5× less CPU time (one thread, three
steps each, 2026-12-02). The graph encoder keeps their ``hid``, ``layers`` and ``heads``.

**Condensation** (their ``train_ghn_ddp_teacher.py`` / ``trainer_teacher.Trainer.update``) trains the hypernetwork
by distillation: each step draws one descendant size, predicts its ViT and trains on
``(1−λ)·CE + λ·τ²·KL(teacher ‖ student)`` plus ``predparam_wd · Σ‖W‖_F`` over the predicted tensors (theirs:
λ = 0.2, τ = 3, label smoothing 0.1, 3e-5), in the project's one training loop.

**Our graph.** Theirs is traced by autograd from torchvision's ViT (``graph.Graph._build_graph``); ours is written
from the spec's tensor table, in forward order, with the same node kinds and edge rules as far as they carry over:
``input`` → patch conv weight → its bias → ``sum`` (also fed by ``pos_enc``, which has no input) → per block:
``ln`` (norm gain; its bias is predicted from the same node, theirs likewise) → qkv weight → qkv bias → proj
weight → proj bias → ``sum`` (also fed by the stream before the sub-layer) → ``ln`` → fc1 weight/bias → fc2
weight/bias → ``sum``; final norm → head weight → head bias; edges carry shortest-path lengths up to ``ve_cutoff``
(their virtual edges, ``-v 50``). For a plain ViT this is the graph their tracer builds from torchvision's ViT of the
same size (node kinds and every distance; ``benchmarks/fidelity_tal.py`` compares them): torch's fused attention
leaves no softmax in the autograd graph, so neither has an ``msa`` node (a torch that runs attention unfused would
give theirs one after the qkv bias). Where ours differs: activations, dropout and the class-token select are absent from both; tensors their
tracer drops are not predicted and keep timm's initialization (class/register/distillation tokens: theirs drops the
class token; layer-scale gammas, the MAP head's latent); tensors torchvision's ViT does not have (q/k norms, SwiGLU
halves, separate q/v biases, a MAP head, extra norms) get the node kind of their module (``conv``, ``bias``,
``ln``) in the chain. A position embedding with more prefix rows than their rule makes (one random class row in
front of ``floor(√N)²`` patch rows: a distilled DeiT's two tokens) is tiled along the tokens, where their code
fails. The random class row is drawn from the ``seed`` option's generator (theirs: the global RNG).

**Our condensation.** Their descendant sizes are the 1,000 torchvision ViTs of ``vit_generator.py`` (3–12 layers,
width 192–768); ours are drawn per step from the ancestry's family: depth in ``[min_depth, ancestry depth]``,
heads in ``[1, ancestry heads]`` at the ancestry's head width. Their KL compares the softmax of the student's
class token through a fresh, untrained ``Linear(width, 768)`` (``vit.CustomVisionTransformer.trans_forward``) with
the teacher's fc-normed class token; ours distils the teacher's logits when its head was trained on the data's
classes, else its pooled embedding by cosine through a learned projection (as
:class:`~learngene.training.distill.FeatureDistillation`; a narrower size reads its first columns).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from ..data import Data
from ..errors import LearngeneError, SpecError, assigned
from ..gene import Learngene
from ..host.memory import require_free_memory
from ..method import Ancestry, CondenseInputs, Method, Paper
from ..registry import register_method
from ..settings import field
from ..training.config import TrainConfig, known
from ..training.distill import PooledFeatures, cache_teacher_outputs
from ..training.loop import TrainResult, distill_loss, predict_logits, resolve_device, step_draw, train
from ..validate import CONDENSE, EXPAND, limits_of, out_of_range
from ..vit.spec import ViTSpec, block_key
from ._tal_graph import Graph, Node, graph_nodes, is_layer_scale, spec_graph
from ._tal_hypernet import GraphormerLayer, HyperNet, decoder_rows
from ._tal_params import group_size, lora_block, normalize, tile_params

# the parts in their own modules, importable from here (tests and benchmarks/fidelity_tal.py do)
__all__ = [
    "TAL",
    "TALConfig",
    "Graph",
    "GraphormerLayer",
    "HyperNet",
    "Node",
    "graph_nodes",
    "group_size",
    "lora_block",
    "normalize",
    "spec_graph",
    "tile_params",
]

TASK_KEY = "task_embedding"
GHN_PREFIX = "ghn."


# ---- the method --------------------------------------------------------------------------------------------------
# The authors' scale: their sampled nets (vit_generator.py) are torchvision ViTs at most 768 wide, and their decoder
# settings (lora_r 90, max_ck 2048·16, max_shape 2048 for TAL, 4096 for PITH) are set for it. An option left at 0 is
# sized for the ancestry in front of it (TALConfig.sized_for).
AUTHORS_WIDTH = 768
AUTHORS_LORA_R = 90
AUTHORS_MAX_CK = 2048 * 16


@dataclass(frozen=True)
class TALConfig:
    """Options of TAL (defaults: their README's ``--hid 128 --layers 5 --heads 16 -v 50``; the decoder's ``lora_r``,
    ``max_ck`` and ``max_shape`` at 0 are their ``--lora_r 90``, config.py's ``max_ck_lora`` 2048·16 and
    ``--max_shape 2048`` scaled to the ancestry's width, :meth:`sized_for`)."""

    hid: int = field(128, phase=CONDENSE, at_least=4, multiple_of=4, help="the hypernetwork's hidden size")
    layers: int = field(5, phase=CONDENSE, at_least=1, help="Graphormer layers of the hypernetwork")
    heads: int = field(16, phase=CONDENSE, at_least=1, help="attention heads of the Graphormer (must divide hid)")
    lora_r: int = field(
        0,
        phase=CONDENSE,
        at_least=0,
        help="rank r of the decoder's A·B factors; 0: theirs, 90, times the ancestry's width / 768 (rounded up)",
    )
    max_ck: int = field(
        0,
        phase=CONDENSE,
        at_least=0,
        help="rows of the decoder's factors: the largest channels×kernel predicted; 0: theirs, 2048·16, times the "
        "ancestry's width / 768 (rounded up; at least what the ancestry's own tensors need)",
    )
    max_shape: int = field(
        0,
        phase=CONDENSE,
        at_least=0,
        help="largest channel count predicted, wider is tiled; 0: theirs, 2048, times the ancestry's width / 768 "
        "(rounded up)",
    )
    ve_cutoff: int = field(50, phase=CONDENSE, at_least=1, help="longest shortest path kept as a virtual edge")
    min_depth: int = field(1, phase=CONDENSE, at_least=1, help="fewest layers of the sizes drawn while condensing")
    predparam_wd: float = field(
        3e-5, phase=CONDENSE, at_least=0, help="weight of Σ‖W‖_F over the predicted tensors in the condensing loss"
    )
    seed: int = field(0, phase=EXPAND, help="seeds the random class row of a predicted position embedding")
    method: ClassVar[str] = "tal"  # the method whose options these are, for messages (PITH's extend them)
    authors_max_shape: ClassVar[int] = 2048  # their README's --max_shape

    def axis_size(self, n: int) -> int:
        """The size a tensor axis of ``n`` is predicted at (TAL: :func:`group_size`'s rounding)."""
        return group_size(n, self.max_shape)

    def sized_for(self, spec: ViTSpec) -> TALConfig:
        """These options with each decoder size left at 0 sized for an ancestry of ``spec``'s size.

        The rule: the authors' setting at the authors' scale, scaled with the width. Their sampled nets are at most
        768 wide (``vit_generator.py``); the widest net drawn here is the ancestry (:func:`descendant_sizes`), so each
        of ``lora_r`` (90), ``max_ck`` (2048·16) and ``max_shape`` (TAL 2048, PITH 4096) is theirs times
        ``s = min(1, width / 768)``, rounded up: the rank of a predicted block, the channels predicted before tiling
        and the decoder's rows keep their ratio to the widest matrix. ``max_ck`` is at least the rows the ancestry's
        own tensors need (:func:`decoder_rows`), so the size the gene is evaluated at never fails. The graph encoder
        (``hid``, ``layers``, ``heads``, ``ve_cutoff``) keeps theirs: it embeds the graph's nodes, whose kinds and
        distances do not grow with the width, and our ancestries are no deeper than their nets (3–12 layers). For a
        768-wide ancestry or wider this gives theirs exactly; the demo's 64-wide one (``cpu_tiny``) gets
        ``lora_r`` 8, ``max_shape`` 171 (PITH 342) and ``max_ck`` 2,731."""
        scale = min(1.0, spec.embed_dim / AUTHORS_WIDTH)
        sized = dataclasses.replace(
            self,
            lora_r=self.lora_r or math.ceil(AUTHORS_LORA_R * scale),
            max_shape=self.max_shape or math.ceil(self.authors_max_shape * scale),
        )
        return dataclasses.replace(
            sized, max_ck=self.max_ck or max(math.ceil(AUTHORS_MAX_CK * scale), decoder_rows(spec, sized.axis_size))
        )

    def require_sized(self) -> None:
        """A hypernetwork is built from sized options only (:meth:`sized_for`); a gene records them sized."""
        if not (self.lora_r and self.max_ck and self.max_shape):
            raise ValueError(f"{self.method}'s decoder sizes are 0 (auto): size them first with sized_for(spec)")

    def __post_init__(self) -> None:
        # spans two options, so checked here, when the method is made (before any data loads); a value out of its
        # own range is left to the range check that follows (Method.__init__), which names that range
        fields = {f.name: f for f in dataclasses.fields(self)}
        own = all(
            isinstance(getattr(self, n), int) and not out_of_range(getattr(self, n), limits_of(fields[n]))
            for n in ("hid", "heads")
        )
        if own and self.hid % self.heads:
            raise LearngeneError(
                f"{self.method} option heads ({self.heads}) must divide hid ({self.hid}); "
                f"pass heads=N (--opt heads=N) with N a divisor of {self.hid}"
            )


class HypernetMethod(Method):
    """A hypernetwork method (TAL, PITH): it trains a hypernetwork that predicts a ViT of any size
    (:class:`HypernetCondensation`, :class:`_Drawn`); its options are TAL's or more, and it draws the class row of
    a predicted position embedding with its ``seed`` option."""

    config: TALConfig
    seed_option = "seed"
    # a step runs the hypernetwork over the graph besides the ancestry, and the demo's budget leaves it near chance
    # anyway (its ViT at the ancestry's size: 8 to 18 % on the condensation's evaluation images, 2026-12-02). The
    # demo's 40 steps on the busy machine, 2026-12-02: 131 s (tal) and 171 s (pith) at the authors' decoder sizes
    # (01634ee), 30 s and 38 s sized for the ancestry (TALConfig.sized_for); the aux nets' 158 steps took 55-105 s
    demo_budget = 0.25

    def built_config(self, gene: Learngene) -> Any:
        """The options ``gene``'s hypernetwork was built with: this method's, each decoder size left at 0 (auto) read
        from the gene, which records them sized (:meth:`TALConfig.sized_for`); the method that condensed it may
        still hold the zeros (the check before saving binds the gene to it)."""
        recorded = {k: gene.config.get(k) for k in ("lora_r", "max_ck", "max_shape") if not getattr(self.config, k)}
        return dataclasses.replace(self.config, **{k: v for k, v in recorded.items() if isinstance(v, int)})

    def predict(self, ghn: Any, task: Any, spec: ViTSpec, seed: int | None = None) -> dict[str, Tensor]:
        """``spec``'s tensors as ``ghn`` predicts them (``task``: what else conditions it) under plain-ViT keys."""
        raise NotImplementedError

    def class_row(self, spec: ViTSpec, seed: int | None = None) -> Tensor:
        """The random class row of a predicted position embedding (``_tile_params``' N(0, 0.02²)), drawn from
        ``seed`` (the ``seed`` option when None; condensation draws from the run's seed)."""
        return random_class_row(spec, self.config.seed if seed is None else seed)


class _Drawn(nn.Module):
    """What the training loop trains: the hypernetwork, which predicts a ViT of a size drawn at each training step
    and runs it (the size follows from the run's seed and a step counter saved with the model, so a resumed run
    draws the same sizes; evaluation runs the reference size, the last of ``sizes``). ``task``: what conditions
    every prediction besides the graph (TAL's task embedding; None for PITH)."""

    def __init__(
        self,
        method: HypernetMethod,
        ghn: nn.Module,
        task: Tensor | None,
        sizes: list[ViTSpec],
        seed: int,
        teacher_width: int | None,
    ):
        super().__init__()
        self.ghn, self.sizes, self.seed, self.method = ghn, sizes, seed, method
        self.register_buffer("task", None if task is None else task.clone())
        self.register_buffer("step", torch.zeros((), dtype=torch.long))
        self.proj: nn.Linear | None = None
        if teacher_width is not None:  # distil pooled embeddings through a learned projection (FeatureDistillation's
            # P) whose first columns a narrower size reads: one tensor, used whole at every step (as DDP wants);
            # drawn before timm draws anything
            self.proj = nn.Linear(max(s.embed_dim for s in sizes), teacher_width, bias=False)
        self.__dict__["_reference"] = sizes[-1].create_model()  # for the loop's data checks; not trained
        self._features: Tensor | None = None
        self.last_norm: Tensor | None = None
        self.width = sizes[-1].embed_dim

    @property
    def skeleton(self) -> nn.Module:
        return self.__dict__["_reference"]

    step: Tensor
    task: Tensor | None

    def draw(self) -> ViTSpec:
        return self.sizes[step_draw(self.seed, int(self.step), len(self.sizes))]

    def _keep(self, module: nn.Module, args: tuple[Tensor, ...]) -> None:
        self._features = args[0]

    def forward(self, x: Tensor) -> Tensor:
        spec = self.draw() if self.training else self.sizes[-1]
        if self.training:
            self.step.add_(1)
        state = self.method.predict(self.ghn, self.task, spec, self.seed)
        self.last_norm = torch.stack([p.norm() for p in state.values()]).sum()
        with torch.device(x.device):
            net = spec.create_model()
        net.train(self.training)
        self.width = spec.embed_dim
        if self.proj is not None:
            net.get_classifier().register_forward_pre_hook(self._keep)
        weights = spec.join_layers(spec.model_layout({**unpredicted(spec, state), **state}))
        return functional_call(net, weights, (x,), {}, strict=False)

    def distill_loss(
        self, logits: Tensor, labels: Tensor, soft: Tensor | None, lam: float, tau: float, smoothing: float = 0.0
    ) -> Tensor:
        """The loop's per-sample loss (logit KD, or cosine KD of pooled embeddings) plus their predicted-parameter
        decay (a constant per sample: the batch mean gets it once)."""
        if self.proj is None:
            loss = distill_loss(logits, labels, soft, lam, tau, smoothing)
        else:
            loss = (1.0 - lam) * distill_loss(logits, labels, None, 0.0, tau, smoothing)
            if lam > 0.0:
                if soft is None or self._features is None:
                    raise LearngeneError("feature distillation (λ > 0) needs the teacher's features")
                student = (self._features @ self.proj.weight[:, : self.width].t()).float()
                loss = loss + lam * (1.0 - F.cosine_similarity(student, soft.float(), dim=-1))
        decay = self.method.config.predparam_wd
        return loss + decay * self.last_norm if decay and self.last_norm is not None else loss


def unpredicted(spec: ViTSpec, predicted: dict[str, Tensor]) -> dict[str, Tensor]:
    """While condensing, the tensors the graph does not predict: zero tokens (torchvision's class token starts at
    zero) and MAP latent, layer-scale gammas at the family's init value; fixed, so that the drawn nets do not depend
    on how timm draws its initialization (descendants get timm's)."""
    shapes = dict(spec.non_block_shapes(vit_layout=True))
    for layer in range(spec.depth):
        shapes.update({block_key(layer, k): v for k, v in spec.block_shapes().items()})
    device = next(iter(predicted.values())).device
    return {
        k: torch.full(v, float(spec.family.init_values or 0.0) if is_layer_scale(k) else 0.0, device=device)
        for k, v in shapes.items()
        if k not in predicted
    }


def descendant_sizes(ancestry: ViTSpec, min_depth: int, method: str = "tal") -> list[ViTSpec]:
    """The sizes drawn while condensing: every depth in ``[min_depth, depth]`` × every head count in ``[1, heads]``
    at the ancestry's head width (the ancestry's own size last)."""
    if min_depth > ancestry.depth:  # a range that starts past its end would draw nothing: refused, not clamped
        raise LearngeneError(
            f"{method} option min_depth ({min_depth}) is more than the ancestry's {ancestry.depth} layers; "
            f"pass min_depth=N (--opt min_depth=N) with N at most {ancestry.depth}"
        )
    head_dim = ancestry.head_dim
    out = []
    for h in range(1, ancestry.num_heads + 1):
        for d in range(min_depth, ancestry.depth + 1):
            try:
                out.append(ancestry.replace(depth=d, num_heads=h, embed_dim=h * head_dim))
            except SpecError:  # no ViT of the family at that width (a packed SwiGLU's odd MLP): none to draw
                continue
    out.sort(key=lambda s: (s == ancestry, s.embed_dim, s.depth))
    return out


@dataclass(frozen=True)
class HypernetCondensation:
    """One condensation of a hypernetwork method (TAL, PITH): the method, its ViT ancestry (``base``, its spec) and
    inputs, the run's settings and data, the reference size the hypernetwork is evaluated at (the data's images; the
    data's classes where the ancestry has no head) and the sizes drawn while it trains (the reference last)."""

    method: HypernetMethod
    ancestry: Ancestry
    base: ViTSpec
    inputs: CondenseInputs
    cfg: TrainConfig
    data: Data
    reference: ViTSpec
    sizes: list[ViTSpec]

    @classmethod
    def start(
        cls, method: HypernetMethod, ancestry: Ancestry | None, inputs: CondenseInputs | None, no_data: str
    ) -> HypernetCondensation:
        """``method``'s condensation of ``ancestry`` on ``inputs``; ``no_data``: the one line when there are no
        training images."""
        ancestry, base = method.require_vit_ancestry(ancestry)
        if inputs is None or inputs.train is None:
            raise LearngeneError(no_data)
        cfg, data = inputs.train_cfg.resolved("condense", distill_lambda=method.distill_lambda), inputs.train
        reference = base.replace(img_size=data.img_size, in_chans=data.in_chans)
        if base.num_classes == 0:
            reference = reference.replace(num_classes=data.num_classes)
        sizes = descendant_sizes(reference, method.config.min_depth, method.name)
        # the hypernetwork sized for this ancestry (TALConfig.sized_for); the gene records the sizes it was built with
        sized = type(method)(method.config.sized_for(reference))
        return cls(sized, ancestry, base, inputs, cfg, data, reference, sizes)

    def require_memory(self, ghn: Callable[[], nn.Module], copied: int | None = None) -> None:
        """Refuse in one line, before it is allocated, a hypernetwork (``ghn()``, built on ``meta``, which allocates
        nothing) whose training cannot fit in free memory: its fp32 weights, their gradients and AdamW's two moments,
        and the ``copied`` values it holds besides (PITH's copy of the ancestry's tensors)."""
        with torch.device("meta"):
            params = sum(p.numel() for p in ghn().parameters())
        copies = "" if copied is None else f"; {copied:,} values of the ancestry's"
        require_free_memory(
            4 * (4 * params + (copied or 0)),
            f"training {self.method.name}'s hypernetwork ({params:,} parameters: weights, gradients and AdamW's two "
            f"moments{copies})",
            "choose a smaller hid=N (--opt hid=N) (or layers, lora_r, max_ck)",
        )

    def train(self, ghn: nn.Module, task: Tensor | None, feature_width: int) -> TrainResult:
        """Train ``ghn`` in the project's one loop on a size of ``sizes`` drawn at each step (:class:`_Drawn`), on the
        cross-entropy of the data's labels and, when the run's λ > 0, distillation from the ancestry: its logits when
        its head was trained on the data's classes, else its pooled features (``feature_width`` wide) by cosine."""
        cfg, data, base = self.cfg, self.data, self.base
        features = known(cfg.distill_lambda) > 0 and base.num_classes == 0
        net = _Drawn(self.method, ghn, task, self.sizes, cfg.seed, feature_width if features else None)
        teacher: nn.Module | None = None
        if known(cfg.distill_lambda) > 0:
            if features:
                data, teacher = cache_teacher_outputs(data, PooledFeatures(self.ancestry.model), cfg)
            elif base.num_classes != data.num_classes:
                raise LearngeneError(
                    f"the ancestry predicts {base.num_classes} classes but {data.name} has {data.num_classes}; "
                    f"distil on data with the ancestry's label space, or pass {assigned('distill_lambda', 0)}"
                )
            else:
                data, teacher = cache_teacher_outputs(data, self.ancestry.model, cfg)
        return train(
            net,
            data,
            cfg,
            self.inputs.eval,
            teacher=teacher,
            run_dir=self.inputs.run_dir,
            resume=self.inputs.resume,
            loss=net.distill_loss,
        )

    def gene(self, tensors: dict[str, Tensor], result: TrainResult) -> Learngene:
        """The gene of ``tensors`` (the trained hypernetwork's), with the condensation's cost."""
        cost: dict[str, Any] = {"epochs": self.cfg.epochs, **result.cost}
        if result.final_acc is not None:
            cost["eval_acc_at_reference_size"] = result.final_acc
        return self.method.new_gene(tensors, self.reference, self.base, cost)


def random_class_row(spec: ViTSpec, seed: int) -> Tensor:
    """``_tile_params``' N(0, 0.02²) class row in front of a position embedding predicted as a patch grid, drawn
    from its own generator seeded by ``seed`` (theirs: the global RNG)."""
    g = torch.Generator().manual_seed(seed)
    return torch.normal(0.0, 0.02, size=(1, 1, spec.embed_dim), generator=g)


def task_embedding(ancestry: Ancestry, data: Any, cfg: Any) -> Tensor:
    """The ancestry's mean pooled embedding over ``data`` (their ``get_task_embedding``)."""
    device = resolve_device(cfg.device)
    features = predict_logits(PooledFeatures(ancestry.model), data, cfg.eval_batch_size, device)
    return features.double().mean(0).float().cpu()


@register_method
class TAL(HypernetMethod):
    name = "tal"
    summary = "a graph hypernetwork, conditioned on a task embedding, that predicts every parameter of any size"
    stores = "the weights of a GHN-3 graph hypernetwork and the task embedding (the ancestry's mean pooled feature)"
    expands_to = "any depth, width and head count of the ancestry's family (widths past max_shape are tiled)"
    paper = Paper(
        "Learngene Tells You How to Customize: Task-Aware Parameter Initialization at Flexible Scales",
        "Xu, Xia, Yang, Lv, Geng",
        "ICML",
        2025,
        note="PMLR 267:69806-69818",
    )
    Config = TALConfig
    needs_data = True
    distill_lambda = 0.2  # their trainer_teacher: alpha = 0.2 on the KL, 0.8 on the cross-entropy

    def hypernet(self, gene: Learngene) -> HyperNet:
        layout = gene.require_layout()
        task = gene.tensors.get(TASK_KEY)
        if task is None:
            raise LearngeneError("this tal gene has no task embedding; condense it again")
        with torch.device("meta"):
            return HyperNet(self.built_config(gene), int(task.shape[0]), layout.num_classes)

    def predict(self, ghn: HyperNet, task: Tensor, spec: ViTSpec, seed: int | None = None) -> dict[str, Tensor]:
        """``spec``'s predicted tensors under plain-ViT keys."""
        return ghn(spec, task, self.class_row(spec, seed))

    def expand(self, gene: Learngene, spec: ViTSpec) -> dict[str, Tensor]:
        ghn = self.hypernet(gene)
        weights = {k[len(GHN_PREFIX) :]: v for k, v in gene.tensors.items() if k.startswith(GHN_PREFIX)}
        task = gene.tensors[TASK_KEY]
        state = functional_call(ghn, weights, (spec, task, self.class_row(spec)), {}, strict=True)
        return spec.model_layout(state)

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        no_data = "tal condenses by training its hypernetwork; give training data (data, --data)"
        run = HypernetCondensation.start(self, ancestry, inputs, no_data)
        sized = run.method.config
        run.require_memory(lambda: HyperNet(sized, run.base.embed_dim, run.reference.num_classes))
        task = task_embedding(run.ancestry, run.data, run.cfg)
        torch.manual_seed(run.cfg.seed)
        ghn = HyperNet(sized, int(task.shape[0]), run.reference.num_classes)
        result = run.train(ghn, task, int(task.shape[0]))
        tensors = {
            GHN_PREFIX + k: v.detach().cpu().clone() for k, v in ghn.state_dict().items()
        }  # trained on a GPU too
        tensors[TASK_KEY] = task
        return run.gene(tensors, result)
