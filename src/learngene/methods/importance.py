"""Importance-based selection: weight subcloning (Samragh et al., arXiv 2312.09299, 2023) and Minitron's
activation-based importance (Muralidharan et al., "Compact Language Models via Pruning and Knowledge
Distillation", NeurIPS 2024, arXiv 2407.14679).

Data-aware where Weight Selection is not. The ancestry runs in eval mode on a calibration sample of
the upstream images (``num_images``, normalized as in training) and every unit gets a score:

- residual (embedding) channels: mean ``|x|`` over images and tokens of the residual stream, summed
  over the embedding output and every block's output. One order serves every layer, as the residual
  connections demand (subcloning finds the same channels large in every layer; Minitron's embedding
  score is also an activation magnitude);
- MLP neurons, per layer: mean ``|GELU(x W_1ᵀ + b_1)|`` (the activation fc2 reads);
- attention heads, per layer: mean over images and tokens of the L2 norm of the head's output
  ``softmax(q kᵀ/√d) v`` (Minitron's head score);
- layers: mean over images and tokens of ``1 − cos(x_in, x_out)`` of the block's input and output
  (how much the block changes its input: subcloning's block-removal rule, ShortGPT's Block Influence
  that Minitron's depth pruning uses).

Learngene. The whole ancestry, permuted into importance order (residual channels, each layer's
heads, each layer's MLP neurons; a permutation computes the same function), plus the layer scores.
Every narrower descendant is then a prefix slice: the first ``D'`` channels, ``H'`` heads (through
:mod:`learngene.vit.heads`) and ``M'`` neurons. The kept residual channels are put back in the ancestry's
order (the gene stores the permutation), so a same-size descendant outputs the ancestry's embedding
channel for channel, as a probe or a text tower tied to it expects. Depth keeps the ``L'``
highest-scoring layers in their original order (expand's ``layers`` picks others instead).

Rescaling (subcloning). The kept channels carry most of the residual stream's energy, so a
LayerNorm over ``D'`` of ``D`` channels divides by a standard deviation about ``√(D/D')`` larger than
the ancestry's did; every LayerNorm gain (norm1, norm2, the final norm) is multiplied by ``√(D/D')``
so the normalized values keep their scale (``rescale=false`` turns this off). Minitron instead
recovers by distillation after pruning; that retraining is the descendant's ordinary training here.

Heads keep the ancestry's size ``d`` (the descendant has ``D'/d`` heads), as both papers prune whole
heads; sizes larger than the ancestry are the job of :mod:`~learngene.methods.growth`.

Authors' code: none was found in this session's search (weight subcloning, Minitron's importance).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from ..data import Data
from ..errors import LearngeneError, Remedy, either
from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Method, Paper, same_size
from ..registry import carrier, register_method
from ..settings import field
from ..validate import CONDENSE, EXPAND
from ..vit.activation_memory import measured_spec, require_inference_memory
from ..vit.spec import ViTSpec, block_key
from ..vit.timm_keys import WIDTH_GAIN, block_names
from ..vit.transfer import (
    NON_BLOCK_NORMS,
    StateDict,
    block_axes,
    block_state,
    carried,
    given,
    inherit_non_block,
    move_state,
    resize_non_block,
)
from ._calibration import calibration_inputs, calibration_sample, evaluating

LAYER_SCORE, WIDTH_SCORE, WIDTH_ORDER = "importance.layer", "importance.width", "importance.width_order"


def out_of_reach(src: ViTSpec, target: ViTSpec) -> LearngeneError | None:
    """Why importance cannot take ``src`` to ``target``, with the advice that can (the largest size it makes within
    the one asked, a method that carries ``src`` to ``target``); None where it can. :meth:`Importance.cannot_reach`
    and :meth:`Importance.expand` both refuse with it."""
    if (
        target.head_dim == src.head_dim
        and target.num_heads <= src.num_heads
        and target.mlp_inner <= src.mlp_inner
        and target.depth <= src.depth
    ):
        return None
    heads = min(target.num_heads, src.num_heads)
    size = {"depth": min(target.depth, src.depth), "embed_dim": heads * src.head_dim, "num_heads": heads}
    advised = target.advisable({k: v for k, v in size.items() if getattr(target, k) != v})
    narrowed = target.replace(**advised) if advised else None
    within = narrowed is not None and narrowed.mlp_inner <= src.mlp_inner and narrowed.depth <= src.depth
    remedies = [
        r for r in (Remedy(size=advised) if within and advised else None, carrier(src, target, "importance")) if r
    ]
    return LearngeneError(
        f"importance only narrows and keeps heads of {src.head_dim} dims: at most {src.depth} layers and "
        f"{src.num_heads} heads with width = heads x {src.head_dim} (asked {target.short()}); "
        + (either(remedies) if remedies else "it cannot make this size"),
        advice=remedies,
    )


@dataclass(frozen=True)
class ImportanceConfig:
    num_images: int = field(
        256,
        at_least=1,
        phase=CONDENSE,
        help="calibration images (subcloning and Minitron use a small calibration batch)",
    )
    batch_size: int = field(64, at_least=1, phase=CONDENSE, speed_only=True, help="calibration images per forward pass")
    seed: int = field(0, phase=CONDENSE, help="which images are sampled")
    rescale: bool = field(True, phase=EXPAND, help="LayerNorm gains × √(D/D') (subcloning)")


def score_hooks(
    model: nn.Module, spec: ViTSpec, add: Callable[[str, int | slice, Tensor], None]
) -> list[RemovableHandle]:
    """Hooks on ``model``'s blocks that ``add`` each score of a forward pass (the module docstring says which): the
    width from the stream entering the first block and leaving each, a layer's from its input and output, the
    neurons from the MLP's activation, the heads from the per-head outputs entering W_O."""
    H, d = spec.num_heads, spec.head_dim
    hooks = []
    blocks: Any = model.blocks
    for layer, block in enumerate(blocks):

        def on_block(_m, args, out, layer=layer):
            x = args[0]
            if layer == 0:
                add("width", slice(None), x.abs())
            add("width", slice(None), out.abs())
            add("layers", layer, 1 - torch.nn.functional.cosine_similarity(x, out, dim=-1))

        hooks.append(block.register_forward_hook(on_block))
        hooks.append(
            block.mlp.act.register_forward_hook(lambda _m, _a, out, layer=layer: add("neurons", layer, out.abs()))
        )
        hooks.append(
            block.attn.proj.register_forward_pre_hook(
                lambda _m, args, layer=layer: add("heads", layer, args[0].unflatten(-1, (H, d)).norm(dim=-1))
            )
        )
    return hooks


@torch.no_grad()
def activation_scores(
    model: nn.Module, spec: ViTSpec, data: Data, num_images: int, batch_size: int, seed: int
) -> dict[str, Tensor]:
    """Importance scores of ``model``'s residual channels, heads, MLP neurons and layers on a sample of ``data``.

    Returns:
        ``width`` ``(D,)``, ``heads`` ``(L, H)``, ``neurons`` ``(L, M)``, ``layers`` ``(L,)``; means over
        images and tokens (see the module docstring for each score).
    """
    spec = measured_spec(model, spec, data)
    empty = "importance ranks units on calibration images: give training data (data, --data)"
    picked = calibration_sample(data, num_images, seed, empty)
    count, device = len(picked), next(model.parameters()).device
    require_inference_memory(spec, min(batch_size, count), "importance", device=device)
    L = spec.depth
    sums = {
        "width": torch.zeros(spec.embed_dim, dtype=torch.float64),
        "heads": torch.zeros(L, spec.num_heads, dtype=torch.float64),
        "neurons": torch.zeros(L, spec.mlp_inner, dtype=torch.float64),
        "layers": torch.zeros(L, dtype=torch.float64),
    }

    def add(name: str, index: int | slice, values: Tensor) -> None:
        # values (B, N, ...) → summed over images, mean over tokens
        sums[name][index] += values.double().mean(1).sum(0).cpu()

    hooks = score_hooks(model, spec, add)
    with evaluating(model):
        try:
            for start in range(0, count, batch_size):
                x, _, _ = data.get_batch(picked[start : start + batch_size])
                model(x.to(device))
        finally:
            for hook in hooks:
                hook.remove()
    return {k: (v / count).float() for k, v in sums.items()}


def residual_order(gene: Learngene, width: int) -> Tensor | slice:
    """The gene's first ``width`` residual channels, put back in the ancestry's order: a headless ancestry
    outputs its residual stream, so the same-size descendant must output it unpermuted (and a narrower one
    keeps the kept channels in the order a probe on the ancestry's embedding reads them). Genes written
    before the order was stored keep importance order."""
    order = gene.tensors.get(WIDTH_ORDER)
    return slice(0, width) if order is None else torch.argsort(order.detach()[:width])


def descending(scores: Tensor) -> Tensor:
    """Indices of ``scores`` from the largest down (ties: the lower index first)."""
    return torch.sort(scores, descending=True, stable=True).indices


def permute_block(b: StateDict, spec: ViTSpec, width: Tensor, heads: Tensor, neurons: Tensor) -> StateDict:
    """One block's tensors (in-block names) with residual channels, heads and MLP neurons reordered
    (every tensor the family has, by its axes: :mod:`learngene.vit.transfer`)."""
    return move_state(b, block_axes(spec), spec.block_shapes(), (spec.num_heads,) * 2, given(width, neurons, heads))


def width_norm_gains(keys) -> list[str]:
    """The LayerNorm gains that normalize over the residual width (every family's; not the per-head q/k norms)."""
    in_blocks = tuple(f".{name}" for name in block_names(tag=WIDTH_GAIN))
    outside = {f"{norm}.weight" for norm in NON_BLOCK_NORMS}
    return [k for k in keys if (k.startswith("blocks.") and k.endswith(in_blocks)) or k in outside]


@register_method
class Importance(Method):
    name = "importance"
    stores = (
        "the whole ancestry permuted into activation-importance order (channels, heads, MLP neurons), plus layer scores"
    )
    expands_to = "narrower and shallower: a prefix slice of the most important units and layers"
    summary = "ancestry in activation-importance order (channels, heads, neurons, layers); narrower = prefix slice"
    paper = (
        Paper(
            "Weight subcloning: direct initialization of transformers using larger pretrained ones",
            "Samragh et al.",
            "arXiv preprint",
            2023,
            "2312.09299",
        ),
        Paper(
            "Compact Language Models via Pruning and Knowledge Distillation",
            "Muralidharan et al.",
            "NeurIPS",
            2024,
            "2407.14679",
            "Minitron",
        ),
    )
    Config = ImportanceConfig
    needs_data = True
    demo_budget = 0.1  # it scores num_images (256) of them: the demo's budget counts no more
    selects_layers = True  # the highest-scoring layers by the papers; expand's layers picks others
    preserves = "at the ancestry's own size (its tensors permuted: the same function up to float rounding)"

    @classmethod
    def cannot_reach(cls, config: ImportanceConfig, ancestry: ViTSpec, target: ViTSpec) -> str:
        refusal = out_of_reach(ancestry, target)
        return str(refusal) if refusal else ""

    def preserves_function(self, gene: Learngene, spec: ViTSpec) -> bool:
        return same_size(gene, spec)

    def keep_layers(self, gene: Learngene, layers: list[int]) -> Learngene:
        """The chosen layers and their scores: a descendant of that depth keeps them all, in this order."""
        kept = super().keep_layers(gene, layers)
        scores = gene.tensors[LAYER_SCORE][torch.tensor(layers)]
        return dataclasses.replace(kept, tensors={**kept.tensors, LAYER_SCORE: scores})

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        """Scores on a calibration sample of ``inputs.train``; the ancestry permuted into their order."""
        no_data = "importance ranks units on calibration images: give training data (data, --data)"
        ancestry, spec, data = calibration_inputs(self, ancestry, inputs, no_data)
        cfg = self.config
        scores = activation_scores(ancestry.model, spec, data, cfg.num_images, cfg.batch_size, cfg.seed)
        state = ancestry.state()
        width = descending(scores["width"])
        tensors: StateDict = {}
        for layer in range(spec.depth):
            block = permute_block(
                block_state(state, layer),
                spec,
                width,
                descending(scores["heads"][layer]),
                descending(scores["neurons"][layer]),
            )
            tensors.update({block_key(layer, k): v for k, v in block.items()})
        non_block = {k: state[k] for k in spec.non_block_shapes()}  # the MAP head's heads keep their order
        tensors.update(resize_non_block(non_block, spec, spec, given(width=width)))
        tensors[LAYER_SCORE] = scores["layers"]
        tensors[WIDTH_SCORE] = scores["width"][width]
        tensors[WIDTH_ORDER] = width.float()  # float: every gene tensor can be a parameter; exact below 2^24
        return self.new_gene(tensors, spec, spec, cost={"images": min(cfg.num_images, len(data))})

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """The ``spec.depth`` most important layers, each a prefix slice of channels, heads and neurons."""
        src = gene.require_layout()
        refusal = out_of_reach(src, spec)
        if refusal:
            raise refusal
        D, H, M = spec.embed_dim, spec.num_heads, spec.mlp_inner
        gain = math.sqrt(src.embed_dim / D) if self.config.rescale else 1.0
        layers = descending(gene.tensors[LAYER_SCORE])[: spec.depth].sort().values.tolist()
        width = residual_order(gene, D)
        prefix = given(width=width, hidden=slice(0, M), heads=slice(0, H))
        out: StateDict = {}
        for target, source in enumerate(layers):
            kept = move_state(
                block_state(gene.tensors, source), block_axes(src), spec.block_shapes(), (src.num_heads, H), prefix
            )
            out.update({block_key(target, name): t for name, t in kept.items()})
        narrow = carried(src, spec)
        pool_hidden = narrow.non_block_shapes().get("attn_pool.mlp.fc1.bias", (0,))[0]
        non_block = resize_non_block(
            {k: gene.tensors[k] for k in src.non_block_shapes()},
            src,
            spec,
            given(width=width, hidden=slice(0, pool_hidden), heads=slice(0, H)),
        )
        for key in width_norm_gains([*out, *non_block]):
            part = out if key in out else non_block
            part[key] = part[key] * gain
        out.update(inherit_non_block(non_block, narrow, spec))
        return out

    def describe(self, gene: Learngene) -> list[str]:
        scores = gene.tensors[LAYER_SCORE]
        order = descending(scores).tolist()
        return [
            "layers by 1 - cos(input, output), most important first: "
            + ", ".join(f"{i}:{scores[i]:.3f}" for i in order),
            (
                f"residual channel magnitude, first / last kept: {gene.tensors[WIDTH_SCORE][0]:.3f} / "
                f"{gene.tensors[WIDTH_SCORE][-1]:.3f}"
            ),
        ]
