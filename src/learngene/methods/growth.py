"""Growing the ancestry into WIDER and DEEPER descendants: HyperCloning, G_stack and Net2Net.

Width, HyperCloning (Samragh et al., "Scaling Smart: Accelerating Large Language Model Pre-training
with Small Model Initialization", arXiv 2409.12903, 2024). Widths grow by an integer factor ``n``:
every vector is tiled ``n`` times (coordinate ``i`` of the wide model is coordinate ``i mod D``) and
every weight matrix is tiled ``n × n`` and divided by the number of copies of its input,
``W' = (1/n)[W … W; … ; W … W]``, so a layer fed ``[x; …; x]`` outputs ``[Wx; …; Wx]``. The patch
embedding (its input is the image) is tiled without the factor, the classifier (its output is not
widened) is tiled along its input and divided by ``n``. Heads keep their size and their number grows
``n``-fold (new head ``j`` is a copy of head ``j mod H``, its W_O columns divided by ``n``), as the
authors advise for attention. A LayerNorm over ``n`` copies of a vector has the same mean and
variance, so the grown ViT computes the ancestry's function exactly (up to float rounding). The
residual and MLP axes use :func:`~learngene.vit.transfer.axis_map`'s cyclic repeat with reader
scaling, which for an exact multiple is this rule. Noise variant (``snr_db``): as in the authors'
code, Gaussian noise at that signal-to-noise ratio is added to one copy-block of each widened
matrix's input and subtracted from the next (pairs of blocks; an odd last block stays clean), so it
cancels on the tiled input: the weights differ, the function does not (beyond rounding).

Depth, G_stack (Du et al., "Stacking Your Transformers", NeurIPS 2024). ``depth="stack"`` (default)
stacks the whole model: layer ``l`` of the descendant is ancestry layer ``l mod L`` (``L'/L`` copies; a
depth that is not a multiple ends with a partial copy). Stacking is not function preserving (the
residual stream passes every layer again). ``depth="identity"`` is: the layers above the ancestry's
are copies of the layers below with their residual writers (W_O and fc2, weights and biases) set to
zero, so each new block is the identity (Net2DeeperNet's identity layers, written for pre-norm
residual blocks).

Width, Net2Net (Chen et al., "Net2Net: Accelerating Learning via Knowledge Transfer", ICLR 2016),
``width="net2net"``. Where it differs from HyperCloning: the new units are copies of randomly chosen
old units (the old units keep their place), so any larger size works, not only multiples; every
weight reading a copied unit is divided by that unit's number of copies. That keeps the function
for the MLP hidden units and the heads, but not for the residual stream: Net2Net predates LayerNorm,
and a LayerNorm over a vector whose coordinates are copied unequally often has another mean and
variance. Its noise (``snr_db``) is independent per weight (Net2Net adds noise to break symmetry), so
the function changes a little.

The learngene is the whole ancestry. Sizes smaller than the ancestry's are refused (that is what
importance and weight_selection do), but for a shallower one whose layers expand's ``layers`` picks: each kept
layer is widened as above.

Authors' code: HyperCloning, github.com/apple/ml-hypercloning (snapshot read at 7c4e80b, written for
language models); G_stack and Net2Net: none was found in this session's search.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import Tensor

from ..errors import LearngeneError, Remedy, either
from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Method, Paper
from ..registry import carrier, register_method
from ..settings import field
from ..validate import EXPAND
from ..vit.heads import join_proj, select_matrix, split_proj
from ..vit.spec import ViTSpec, block_key
from ..vit.timm_keys import WRITER, block_names
from ..vit.transfer import (
    AxisMap,
    StateDict,
    axis_map,
    block_state,
    carry_non_block,
    cyclic,
    resize_block,
)
from ._head_mixing import mix_heads


def out_of_reach(config: GrowConfig, src: ViTSpec, target: ViTSpec) -> LearngeneError | None:
    """Why grow (``config``) cannot take ``src`` to ``target``, with the advice that can (the smallest size it makes
    that holds the one asked, the net2net width, a method that carries ``src`` to ``target``); None where it can.
    :meth:`Grow.cannot_reach` and :meth:`Grow.expand` both refuse with it."""
    if (
        target.head_dim != src.head_dim
        or target.embed_dim < src.embed_dim
        or target.mlp_hidden < src.mlp_hidden
        or target.depth < src.depth
    ):
        remedies = [r for r in (_grown(config, src, target), carrier(src, target, "grow")) if r]
        return LearngeneError(
            f"grow makes larger models with heads of {src.head_dim} dims: at least {src.short()} with width = "
            f"heads x {src.head_dim} and MLP >= {src.mlp_hidden} (asked {target.short()}, MLP {target.mlp_hidden}); "
            + (either(remedies) if remedies else "it cannot make this size"),
            advice=remedies,
        )
    if config.width == "hyperclone" and (target.embed_dim % src.embed_dim or target.mlp_hidden % src.mlp_hidden):
        net2net = dataclasses.replace(config, width="net2net")
        remedies = [
            r
            for r in (
                _grown(config, src, target),
                Remedy(options={"width": "net2net"}) if not out_of_reach(net2net, src, target) else None,
            )
            if r
        ]
        return LearngeneError(
            f"grow (width=hyperclone) grows by whole multiples of width {src.embed_dim} and MLP {src.mlp_hidden}, "
            f"{target.short()} asks {target.embed_dim} and {target.mlp_hidden}; "
            + (either(remedies) if remedies else "it cannot make this size"),
            advice=remedies,
        )
    return None


def _grown(config: GrowConfig, src: ViTSpec, target: ViTSpec) -> Remedy | None:
    """The smallest size grow makes from ``src`` that holds ``target``: whole multiples of ``src``'s heads (so of its
    width and MLP), at least ``target``'s depth; None where even that is out of reach (an MLP rounded otherwise)."""
    times = max(1, -(-target.embed_dim // src.embed_dim), -(-target.mlp_hidden // src.mlp_hidden))
    size: dict[str, float] = {"depth": max(target.depth, src.depth), "embed_dim": times * src.embed_dim}
    size |= {"num_heads": times * src.num_heads}
    if target.mlp_ratio != src.mlp_ratio:
        size["mlp_ratio"] = src.mlp_ratio
    advised = target.advisable({k: v for k, v in size.items() if getattr(target, k) != v})
    if not advised:
        return None
    return Remedy(size=advised) if out_of_reach(config, src, target.replace(**advised)) is None else None


WRITERS = block_names(tag=WRITER)  # zeroed, a block adds nothing to the residual stream


@dataclass(frozen=True)
class GrowConfig:
    width: Literal["hyperclone", "net2net"] = field(
        "hyperclone",
        phase=EXPAND,
        help="hyperclone: exact multiples, function preserving; net2net: random copies",
    )
    depth: Literal["stack", "identity"] = field(
        "stack",
        phase=EXPAND,
        help="stack: G_stack, layer l = ancestry layer l mod L; identity: new layers are identities",
    )
    snr_db: float | None = field(None, phase=EXPAND, help="noise at this signal-to-noise ratio in dB (None: no noise)")
    seed: int = field(0, phase=EXPAND, help="noise and Net2Net's random copies")


def random_copies(n_src: int, n_dst: int, generator: torch.Generator) -> AxisMap:
    """Net2Net's map: the ``n_src`` units keep their place, the ``n_dst − n_src`` new ones copy random units."""
    extra = torch.randint(0, n_src, (n_dst - n_src,), generator=generator)
    index = torch.cat([torch.arange(n_src), extra])
    copies = torch.bincount(index, minlength=n_src).to(torch.float32)
    return AxisMap(index, 1.0 / copies[index])


def noise_at_snr(signal: Tensor, snr_db: float, generator: torch.Generator) -> Tensor:
    """Gaussian noise whose power is the mean power of ``signal`` divided by ``10^(snr_db/10)``."""
    # drawn on the CPU (the generator's device) wherever the gene lies, so a gene on a GPU gets the CPU's noise
    noise = torch.randn(signal.shape, generator=generator, dtype=signal.dtype).to(signal.device)
    power = signal.pow(2).mean() / 10 ** (snr_db / 10)
    return noise * (power / noise.pow(2).mean()).sqrt()


def cancelling_noise(weight: Tensor, block: int, snr_db: float, generator: torch.Generator) -> Tensor:
    """HyperCloning's noise: ``+N`` on input copy-block ``2i``, ``−N`` on block ``2i+1`` (blocks of ``block`` columns)."""
    blocks = list(weight.split(block, dim=1))
    for i in range(0, len(blocks) - 1, 2):
        noise = noise_at_snr(blocks[i], snr_db, generator)
        blocks[i], blocks[i + 1] = blocks[i] + noise, blocks[i + 1] - noise
    return torch.cat(blocks, dim=1)


@register_method
class Grow(Method):
    name = "grow"
    stores = "the whole ancestry, grown in width (HyperCloning or Net2Net) and depth (G_stack or identity layers)"
    expands_to = "wider and deeper (heads of the ancestry's head size)"
    summary = "HyperCloning (width ×n, function preserving) / Net2Net widening + G_stack stacking; larger sizes"
    paper = (
        Paper(
            "Scaling Smart: Accelerating Large Language Model Pre-training with Small Model Initialization",
            "Samragh et al.",
            "arXiv preprint",
            2024,
            "2409.12903",
            "HyperCloning",
        ),
        Paper(
            "Stacking Your Transformers: A Closer Look at Model Growth for Efficient LLM Pre-Training",
            "Du et al.",
            "NeurIPS",
            2024,
            "2405.15319",
            "G_stack",
        ),
        Paper("Net2Net: Accelerating Learning via Knowledge Transfer", "Chen et al.", "ICLR", 2016, "1511.05641"),
    )
    Config = GrowConfig
    selects_layers = True  # every layer by default; expand's layers keeps fewer, each widened
    preserves = (
        "with width=hyperclone at whole multiples of the ancestry's width and MLP, at its depth (deeper with "
        "depth=identity), input size and classes (without a head at its width only: a wider one tiles the embedding)"
    )

    @classmethod
    def cannot_reach(cls, config: GrowConfig, ancestry: ViTSpec, target: ViTSpec) -> str:
        refusal = out_of_reach(config, ancestry, target)
        return str(refusal) if refusal else ""

    def preserves_function(self, gene: Learngene, spec: ViTSpec) -> bool:
        """HyperCloning keeps the function (module docstring), Net2Net's widening and G_stack's stacking do not."""
        a = gene.ancestry
        if a is None or self.config.width != "hyperclone":
            return False
        rest = spec.replace(depth=a.depth, embed_dim=a.embed_dim, num_heads=a.num_heads, mlp_ratio=a.mlp_ratio)
        depth = spec.depth == a.depth or (spec.depth > a.depth and self.config.depth == "identity")
        multiples = spec.embed_dim % a.embed_dim == 0 and spec.mlp_hidden % a.mlp_hidden == 0
        return rest == a and depth and multiples and (a.num_classes > 0 or spec.embed_dim == a.embed_dim)

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        ancestry, spec = self.require_vit_ancestry(ancestry)
        return self.new_gene(ancestry.state(), spec, spec)

    def _maps(self, src: ViTSpec, spec: ViTSpec, generator: torch.Generator) -> tuple[AxisMap, AxisMap, AxisMap]:
        refusal = out_of_reach(self.config, src, spec)
        if refusal:
            raise refusal
        if self.config.width == "net2net":  # MLP units: fc2's inputs (a SwiGLU fc1 maps its two halves alike)
            return (
                random_copies(src.embed_dim, spec.embed_dim, generator),
                random_copies(src.num_heads, spec.num_heads, generator),
                random_copies(src.mlp_inner, spec.mlp_inner, generator),
            )
        heads = cyclic(src.num_heads, spec.num_heads)
        return (
            axis_map(src.embed_dim, spec.embed_dim),
            AxisMap(heads, torch.full((len(heads),), src.num_heads / len(heads))),
            axis_map(src.mlp_inner, spec.mlp_inner),
        )

    def _noise(self, block: StateDict, src: ViTSpec, generator: torch.Generator) -> StateDict:
        """Noise on every weight whose input is widened (``snr_db``): cancelling for HyperCloning, plain for Net2Net."""
        inputs = {
            "attn.qkv.weight": src.embed_dim,
            "attn.proj.weight": src.embed_dim,
            "mlp.fc1.weight": src.embed_dim,
            "mlp.fc2.weight": src.mlp_inner,
        }
        out = dict(block)
        for name, width in inputs.items():
            w = out[name]
            if w.shape[1] == width:
                continue
            if self.config.width == "hyperclone":
                out[name] = cancelling_noise(w, width, self.config.snr_db, generator)
            else:
                out[name] = w + noise_at_snr(w, self.config.snr_db, generator)
        return out

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """Widen every ancestry layer (heads, residual, MLP), then stack or pad the layers to ``spec.depth``."""
        src = gene.require_layout()
        generator = torch.Generator().manual_seed(self.config.seed)
        width, heads, hidden = self._maps(src, spec, generator)
        # _maps copies whole heads: an index tensor, and the 1/copies scale of every head
        head_index, head_scale = cast(Tensor, heads.index), cast(Tensor, heads.reader_scale)
        widened = []
        for layer in range(src.depth):
            b = block_state(gene.tensors, layer)
            b = mix_heads(b, src, select_matrix(head_index, src.num_heads))
            # W_O columns read copied heads
            proj = b["attn.proj.weight"]
            b["attn.proj.weight"] = join_proj(split_proj(proj, spec.num_heads) * head_scale.to(proj)[:, None, None])
            b = resize_block(b, src, spec, width, hidden)
            widened.append(self._noise(b, src, generator) if self.config.snr_db is not None else b)
        out: StateDict = {}
        for layer in range(spec.depth):
            b = widened[layer % src.depth]
            if layer >= src.depth and self.config.depth == "identity":
                b = {k: torch.zeros_like(v) if k in WRITERS else v for k, v in b.items()}
            out.update({block_key(layer, k): v for k, v in b.items()})
        out.update(carry_non_block(gene.tensors, src, spec, width=width, heads=heads))  # the MAP head's heads too
        return out
