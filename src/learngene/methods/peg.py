"""PEG: Probabilistic Expansion from learnGene (Wang et al., "Vision Transformers as Probabilistic
Expansion from Learngene", ICML 2024).

Learngene (Sec. 3.3). For every ancestry layer, ``H_b`` heads, each a convex combination of that
layer's ``H_a`` heads with weights ``softmax(g)``, ``g ~ N(0, I)`` (Eq. 4); and ``L_b`` FFNs, each a
convex combination of the ancestry's ``L_a`` FFNs (Eq. 5). Patch and position embeddings and the
final norm are inherited (App. B). By default ``H_b`` is about two thirds of ``H_a`` (12 → 8, 6 → 4), as the
authors' configs keep, and ``L_b = ⌈L_a/2⌉``. Each LayerNorm travels with its sub-layer (norm1 with the MSA
layer, norm2 with the FFN, mixed with the same weights).

Weight-space mixing (where this differs from Eq. 4). Eq. 4 mixes the heads' attention logits and
values, ``Σ_i p_i (Q_i K_iᵀ, V_i)``: a sum of ``H_a`` rank-``d`` bilinear forms that no single head of
size ``d`` can hold. We mix the weights instead, ``q̃ = Σ_i p_i q_i`` (likewise k, v, their biases and
the matching W_O columns, :func:`~learngene.vit.heads.mix_heads`), so ``q̃ k̃ᵀ = Σ_ij p_i p_j q_i k_jᵀ``
carries cross terms Eq. 4 does not, and every gene head is an ordinary head: descendants stay plain
timm ViTs.

Expansion (Sec. 3.4, Eq. 6). A learnable non-linear map φ (Linear–ReLU–Linear, no biases) acts on
the layer axis (ancestry layers → ``L_c`` MSA layers; ``L_b`` → ``L_c`` FFNs) and, per descendant
layer, on the head axis (``H_b`` → ``H_c`` heads), elementwise over every weight entry. Its biases are
left out so that φ is positively homogeneous: weights of very different scales (W_q, biases, W_O)
share one map. φ starts as an exact repeat (``W1 = [I; −I]``, ``W2 = [R, −R]``, so
``W2·ReLU(W1 x) = R x``): layers stretched, head ``c`` a copy of gene head ``c mod H_b``, whose W_O
columns are divided by its number of copies so the layer's output is the gene's. ``adapt`` trains φ
(and the classifier) on downstream data through :class:`~learngene.descendant.GeneNet`; the gene it
returns holds φ and the trained classifier (its ``descendant.*`` tensors) for that size, and
``expand`` then gives the adapted descendant.

Widths follow heads × head size: the descendant has ``H_c`` heads of the ancestry's size ``d`` and
width ``H_c·d``; the residual and MLP axes are carried over by :mod:`learngene.vit.transfer`.
Unlike the authors' released code this keeps the mixtures (not the first heads), trains the depth
map and never re-initializes inherited weights.

Authors' code: the released code named above could not be located in this session's search, so no
repository or commit is recorded here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import LearngeneError, Remedy
from ..gene import DESCENDANT, Learngene
from ..host.memory import give_back, release_pages
from ..method import AdaptInputs, Ancestry, CondenseInputs, Method, Paper, keeps_ancestry_heads
from ..registry import register_method
from ..settings import field
from ..training.genenet import GeneNet
from ..training.loop import TrainResult, train
from ..validate import CONDENSE
from ..vit.heads import join_proj, join_qkv, split_proj, split_qkv
from ..vit.spec import ViTSpec, block_key
from ..vit.timm_keys import MLP, MSA, NORM, block_names, has_tag, head_sliced, per_head
from ..vit.transfer import (
    KEEP,
    WIDTH,
    WIDTH_IN,
    Axis,
    StateDict,
    block_axes,
    block_state,
    carry_non_block,
    cyclic,
    inherit_non_block,
    mapped,
    move_tensor,
    stretch,
)
from ._head_mixing import mix_heads

# gene tensors stacked over layers: (layers, heads, ...) for the MSA heads, (layers, ...) otherwise
# (q, k, v biases only where the family has them); the per-layer vectors of each sub-layer travel with it:
# norm1, W_O's bias, the layer-scale gamma and the q/k norms with the MSA, norm2 and ls2 with the FFN
# Eva's own head-structured vectors (its separate q/v biases, its sub-norm on the heads' outputs): (H, d) per layer
HEAD_VECTORS = {
    "eva_q_bias": "attn.q_bias",
    "eva_v_bias": "attn.v_bias",
    "inner_norm_weight": "attn.norm.weight",
    "inner_norm_bias": "attn.norm.bias",
}
HEAD_PARTS = ("q", "k", "v", "q_bias", "k_bias", "v_bias", "proj_cols", *HEAD_VECTORS)


def part_name(name: str) -> str:
    """A block tensor's name inside its sub-layer's gene group: ``attn.proj.bias`` -> ``proj_bias``,
    ``norm2.weight`` -> ``norm_weight``, ``ls1.gamma`` -> ``ls_gamma`` (stored in gene files: keep them)."""
    name = name.removeprefix("attn.").removeprefix("mlp.")
    if name.startswith("norm."):  # Eva's sub-norm inside the MLP, beside norm2
        name = "inner_" + name
    for numbered in ("norm1", "norm2", "ls1", "ls2"):
        name = name.replace(numbered, numbered[:-1])
    return name.replace(".", "_")


def _parts(names: tuple[str, ...]) -> dict[str, str]:
    # weights and biases, then norm-like vectors over the width, then the per-head q/k norms: the order the gene's
    # tensors have always been built and trained in (the float sums of a training step follow it)
    return {part_name(n): n for n in sorted(names, key=lambda n: (has_tag(n, NORM), per_head(n)))}


# the per-layer tensors of each sub-layer, by part name (MSA: besides its head-sliced q/k/v and W_O)
MSA_LAYER_PARTS = _parts(tuple(n for n in block_names(sublayer=MSA) if not head_sliced(n)))
FFN_PARTS = _parts(block_names(sublayer=MLP))
PHI_MAPS = ("msa_layers", "ffn_layers", "heads")


def gene_axes(layout: ViTSpec) -> dict[str, tuple[Axis, ...]]:
    """The axes of the stacked gene tensors (:mod:`learngene.vit.transfer`'s roles): the layer axis, then, for the
    per-head parts, the head and its channels (kept), then the block tensor's own residual or MLP axis."""
    blocks, keep = block_axes(layout), Axis(KEEP)
    axes: dict[str, tuple[Axis, ...]] = {f"msa.{p}": (keep, keep, keep, Axis(WIDTH_IN)) for p in "qkv"}  # (L, H, d, D)
    axes.update({f"msa.{p}": (keep, keep, keep) for p in ("q_bias", "k_bias", "v_bias", *HEAD_VECTORS)})
    axes["msa.proj_cols"] = (keep, keep, Axis(WIDTH), keep)  # (layers, heads, D, d)
    axes.update({f"msa.{p}": (keep, *blocks[n]) for p, n in MSA_LAYER_PARTS.items() if n in blocks})
    axes.update({f"ffn.{p}": (keep, *blocks[n]) for p, n in FFN_PARTS.items() if n in blocks})
    return axes


def gene_shapes(gene_tensors: StateDict, spec: ViTSpec) -> dict[str, tuple[int, ...]]:
    """What the stacked gene tensors become at ``spec``'s width and MLP size (parts ``spec`` lacks left out)."""
    target, D = spec.block_shapes(), spec.embed_dim
    shapes = {}
    for key, t in gene_tensors.items():
        group, _, part = key.partition(".")
        if group == "msa" and part in ("q", "k", "v"):
            shapes[key] = (*t.shape[:3], D)
        elif group == "msa" and part == "proj_cols":
            shapes[key] = (*t.shape[:2], D, t.shape[3])
        elif group == "msa" and part in HEAD_PARTS:  # biases: per head, no residual axis
            shapes[key] = tuple(t.shape)
        elif group == "msa" and MSA_LAYER_PARTS[part] in target:
            shapes[key] = (t.shape[0], *target[MSA_LAYER_PARTS[part]])
        elif group == "ffn" and FFN_PARTS[part] in target:
            shapes[key] = (t.shape[0], *target[FFN_PARTS[part]])
    return shapes


@dataclass(frozen=True)
class PEGConfig:
    AUTO_OPTIONS = ("gene_heads", "gene_ffns")  # 0: automatic

    gene_heads: int = field(
        0,
        phase=CONDENSE,
        help="H_b heads kept per ancestry layer; 0: about two thirds of the ancestry's (the authors' configs)",
    )
    gene_ffns: int = field(0, phase=CONDENSE, help="L_b FFNs kept; 0: half the ancestry's depth, rounded up")
    seed: int = field(0, phase=CONDENSE, help="the Gaussian draws of the mixing weights")


def default_gene_heads(ancestry_heads: int) -> int:
    """``H_b`` when not given: two thirds of ``H_a``, rounded (12 → 8, 6 → 4, 3 → 2), as the authors' configs keep."""
    return max(1, round(2 * ancestry_heads / 3))


def mixing_weights(rows: int, cols: int, generator: torch.Generator) -> Tensor:
    """Row-stochastic ``(rows, cols)``: ``softmax`` of standard-normal samples (Eqs. 4-5, ``p ≥ 0, Σp = 1``)."""
    return torch.softmax(torch.randn(rows, cols, generator=generator), dim=1)


def phi_init(n_in: int, source: Tensor) -> tuple[Tensor, Tensor]:
    """Linear–ReLU–Linear weights with ``W2·ReLU(W1 x) = x[source]`` exactly (hidden width ``2·n_in``)."""
    eye = torch.eye(n_in)
    pick = torch.nn.functional.one_hot(source, n_in).float()
    return torch.cat([eye, -eye]), torch.cat([pick, -pick], dim=1)


def apply_phi(w1: Tensor, w2: Tensor, x: Tensor, batch_dims: int = 0) -> Tensor:
    """φ(x) = W2·ReLU(W1·x) over axis ``batch_dims`` of ``x`` (elementwise over the remaining axes)."""
    lead = x.shape[: batch_dims + 1]
    flat = x.reshape(*lead, -1)
    out = w2 @ torch.relu_(w1 @ flat)  # in place: φ's hidden layer is twice x, a second one would be too
    return out.reshape(*out.shape[: batch_dims + 1], *x.shape[batch_dims + 1 :])


def at_width(source: Tensor, axes: tuple[Axis, ...], shape: tuple[int, ...], gene_heads: int) -> Tensor:
    """A stacked gene tensor at the descendant's widths; a mapped gene's pages go once it is read. Without a
    graph to keep, layer by layer (axis 0 is kept), so the rule's intermediates are never whole."""

    def move(t: Tensor, dims: int) -> Tensor:
        return move_tensor(t, axes[dims:], shape[dims:], (gene_heads, gene_heads), mapped)

    if torch.is_grad_enabled() or source.device.type == "meta":
        return give_back([source], {"part": move(source, 0)})["part"]
    width = source.new_empty(shape)
    for layer, part in enumerate(source):
        width[layer] = move(part, 1)
        release_pages(part)  # a layer of 1 MiB or more (a ViT-g's FFN part is 1 GiB in all) ...
    release_pages(source)  # ... or all of them, if the layers are smaller
    return width


def grow_parts(
    phi: StateDict,
    moved: Callable[[str], Tensor],
    shapes: dict[str, tuple[int, ...]],
    gene_heads: int,
    num_heads: int,
    device: torch.device,
) -> tuple[StateDict, StateDict]:
    """The MSA's and the FFN's parts at the descendant's depth and head count (Eq. 6): φ over the layer axis of each
    ``moved`` part, then per layer over the head axis of the per-head ones."""
    # part by part, so that only one part is ever held at the gene's depth
    head_parts = [p for p in HEAD_PARTS if f"msa.{p}" in shapes]
    msa = {}
    for p in head_parts + [p for p in MSA_LAYER_PARTS if f"msa.{p}" in shapes]:
        msa[p] = apply_phi(phi["phi.msa_layers.w1"], phi["phi.msa_layers.w2"], moved(f"msa.{p}"))
        if p in head_parts:
            msa[p] = apply_phi(phi["phi.heads.w1"], phi["phi.heads.w2"], msa[p], batch_dims=1)
    # a head φ's initial repeat copies m times reads 1/m of its W_O columns: the layer starts as the gene's
    source = cyclic(gene_heads, num_heads)
    copies = torch.bincount(source, minlength=gene_heads).float()[source].to(device)
    msa["proj_cols"] = msa["proj_cols"] / copies.view(1, -1, 1, 1)
    ffn = {
        p: apply_phi(phi["phi.ffn_layers.w1"], phi["phi.ffn_layers.w2"], moved(f"ffn.{p}"))
        for p in FFN_PARTS
        if f"ffn.{p}" in shapes
    }
    return msa, ffn


def msa_parts(mixed: StateDict, block: StateDict, heads: int) -> StateDict:
    """One layer's MSA as the gene stores it (what :func:`layer_blocks` joins back): q, k, v, W_O's columns, the
    biases and per-head vectors of ``mixed``'s ``heads`` heads, and ``block``'s tensors that are not per head."""
    qkv_w, qkv_b, proj_w = mixed["attn.qkv.weight"], mixed.get("attn.qkv.bias"), mixed["attn.proj.weight"]
    parts = dict(zip("qkv", split_qkv(qkv_w, heads)), proj_cols=split_proj(proj_w, heads))
    if qkv_b is not None:
        parts.update(zip(("q_bias", "k_bias", "v_bias"), split_qkv(qkv_b, heads)))
    parts.update({part: mixed[name].view(heads, -1) for part, name in HEAD_VECTORS.items() if name in mixed})
    parts.update({part: block[name] for part, name in MSA_LAYER_PARTS.items() if name in block})
    return parts


def layer_blocks(msa: StateDict, ffn: StateDict, depth: int) -> StateDict:
    """Each of ``depth`` layers' timm block tensors from the grown parts (q, k, v and W_O's columns joined)."""
    out: StateDict = {}
    for layer in range(depth):
        block = {
            "attn.qkv.weight": join_qkv(msa["q"][layer], msa["k"][layer], msa["v"][layer]),
            "attn.proj.weight": join_proj(msa["proj_cols"][layer]),
            **{name: msa[part][layer] for part, name in MSA_LAYER_PARTS.items() if part in msa},
            **{name: ffn[part][layer] for part, name in FFN_PARTS.items() if part in ffn},
        }
        if "q_bias" in msa:
            block["attn.qkv.bias"] = join_qkv(msa["q_bias"][layer], msa["k_bias"][layer], msa["v_bias"][layer])
        block.update({name: msa[part][layer].flatten() for part, name in HEAD_VECTORS.items() if part in msa})
        out.update({block_key(layer, k): v for k, v in block.items()})
    return out


@register_method
class PEG(Method):
    name = "peg"
    stores = "convex mixtures of the ancestry's heads and FFNs, grown by a learned map φ (`adapt`)"
    expands_to = "any depth and head count"
    summary = "convex head/FFN mixtures of the ancestry, expanded by a learned map φ (adapt)"
    paper = Paper("Vision Transformers as Probabilistic Expansion from Learngene", "Wang et al.", "ICML", 2024)
    Config = PEGConfig
    adaptable = True

    cannot_reach = classmethod(keeps_ancestry_heads)

    # ---- condensation: Eqs. 4-5 ---------------------------------------------------------------------
    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        ancestry, spec = self.require_vit_ancestry(ancestry)
        heads = self.config.gene_heads or default_gene_heads(spec.num_heads)
        ffns = self.config.gene_ffns or math.ceil(spec.depth / 2)
        if not (1 <= heads <= spec.num_heads and 1 <= ffns <= spec.depth):
            raise LearngeneError(
                f"peg keeps 1..{spec.num_heads} heads and 1..{spec.depth} FFNs of this ancestry, "
                f"asked gene_heads={heads}, gene_ffns={ffns}"
            )
        state = ancestry.state()
        generator = torch.Generator().manual_seed(self.config.seed)
        tensors: StateDict = {}
        for layer in range(spec.depth):
            b = block_state(state, layer)
            parts = msa_parts(mix_heads(b, spec, mixing_weights(heads, spec.num_heads, generator)), b, heads)
            # written into the gene's stacked tensors at once: a ViT-g's heads are never held twice, and each
            # layer's temporaries are freed for the next one's (held until a stack, they stayed resident)
            for part, value in parts.items():
                if layer == 0:
                    tensors[f"msa.{part}"] = torch.empty(spec.depth, *value.shape, dtype=value.dtype)
                tensors[f"msa.{part}"][layer] = value
            release_pages(b["attn.qkv.weight"], b["attn.proj.weight"])  # read once: a mapped ancestry's pages may go
        ffn_mixing = mixing_weights(ffns, spec.depth, generator)
        for part, name in FFN_PARTS.items():
            if name not in spec.block_shapes():
                continue
            # Σ_a m_ba·W_a (Eq. 5) one ancestry layer at a time, not over a stacked copy of every layer's FFN
            stacked = torch.zeros(ffns, *state[block_key(0, name)].shape)
            for layer in range(spec.depth):
                weight = state[block_key(layer, name)]
                for ffn in range(ffns):
                    stacked[ffn].add_(weight, alpha=float(ffn_mixing[ffn, layer]))
                release_pages(weight)
            tensors[f"ffn.{part}"] = stacked
        tensors.update(inherit_non_block(state, spec, spec, ("embed", "norm")))
        return self.new_gene(tensors, spec, spec)

    # ---- expansion: Eq. 6 ------------------------------------------------------------------------------
    def initial_phi(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """φ before training: stretched layers, cyclically repeated heads."""
        msa_layers, gene_heads = gene.tensors["msa.q"].shape[:2]
        ffn_layers = gene.tensors["ffn.fc2_weight"].shape[0]  # every family's FFN has an fc2
        out: StateDict = {}
        for name, n_in in (("msa_layers", msa_layers), ("ffn_layers", ffn_layers)):
            out[f"phi.{name}.w1"], out[f"phi.{name}.w2"] = phi_init(n_in, stretch(n_in, spec.depth))
        w1, w2 = phi_init(gene_heads, cyclic(gene_heads, spec.num_heads))
        out["phi.heads.w1"] = w1.expand(spec.depth, -1, -1).clone()
        out["phi.heads.w2"] = w2.expand(spec.depth, -1, -1).clone()
        return out

    def _phi(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """φ stored in the gene (adapted for ``spec``), else its initial value."""
        initial = self.initial_phi(gene, spec)
        if not any(k.startswith("phi.") for k in gene.tensors):
            return initial
        stored = {k: gene.tensors[k] for k in initial if k in gene.tensors}
        if len(stored) < len(initial) or any(t.shape != initial[k].shape for k, t in stored.items()):
            layers, heads = gene.tensors["phi.heads.w2"].shape[:2]
            raise LearngeneError(
                f"this peg gene was adapted for {layers} layers of {heads} heads, not {spec.short()}; "
                f"expand or adapt the unadapted gene for this size"
            )
        return stored

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """Widths by :mod:`learngene.vit.transfer`, then φ over the layer axis and per layer over the head axis (Eq. 6).

        The residual and MLP axes move first, on the gene's own layers: φ acts elementwise over them, and
        without biases it is positively homogeneous (a reader's 1/copies commutes with it), so this is
        φ-then-narrow computed on the descendant's coordinates only (equal up to float rounding). A
        ViT-S from a ViT-g gene never holds a ViT-g-wide tensor.
        """
        src = gene.require_layout()
        gene_heads, head_dim = gene.tensors["msa.q"].shape[1:3]
        if spec.head_dim != head_dim:
            size = spec.advisable({"embed_dim": spec.num_heads * head_dim})
            raise LearngeneError(
                f"peg heads have {head_dim} dims, so a {spec.num_heads}-head descendant is "
                f"{spec.num_heads * head_dim} wide; "
                + (Remedy(size=size).text if size else "no such ViT of this family exists, so it cannot make it"),
                advice=[Remedy(size=size)] if size else [],
            )
        device = gene.tensors["msa.q"].device  # φ and the copies too: a CPU operand would make a meta expansion real
        phi = {k: v.to(device) for k, v in self._phi(gene, spec).items()}
        axes, shapes = gene_axes(src), gene_shapes(gene.tensors, spec)

        def moved(key: str) -> Tensor:
            return at_width(gene.tensors[key], axes[key], shapes[key], gene_heads)

        msa, ffn = grow_parts(phi, moved, shapes, gene_heads, spec.num_heads, device)
        out = layer_blocks(msa, ffn, spec.depth)
        out.update(carry_non_block(gene.tensors, src, spec, ("embed", "norm")))
        out.update(gene.descendant_state())
        return out

    # ---- adaptation: train φ on downstream data ----------------------------------------------------
    def adapt(self, gene: Learngene, spec: ViTSpec, inputs: AdaptInputs) -> tuple[Learngene, TrainResult]:
        """Train φ (and what the gene does not provide, i.e. the classifier) for ``spec`` with the descendant's loss.

        φ is trained without weight decay: decaying it would shrink every expanded weight towards
        zero rather than regularize the map. Returns the gene with φ and the trained classifier for
        ``spec`` (the gene's ``descendant.*`` group), so that ``expand(adapted, spec)`` is the adapted net.
        """
        start = dataclasses.replace(gene, tensors={**gene.tensors, **self._phi(gene, spec)})
        torch.manual_seed(inputs.train_cfg.seed)  # the new classifier's init: the same gene and seed, the same result
        net = GeneNet(self, start, spec, trainable=lambda key: key.startswith(("phi.", DESCENDANT)))
        result = train(
            net,
            inputs.train,
            inputs.train_cfg.replace(weight_decay=0.0),
            eval_data=inputs.eval,
            run_dir=inputs.run_dir,
            resume=inputs.resume,
        )
        adapted = net.gene()
        provided = set(self.provided_keys(start, spec))
        adapted.tensors.update(
            {
                DESCENDANT + k: v.detach().cpu().clone()
                for k, v in net.skeleton.state_dict().items()
                if k not in provided
            }
        )
        adapted.cost = {**gene.cost, "adapt_steps": result.steps, "adapted_for": spec.short()}
        return adapted, result

    def describe(self, gene: Learngene) -> list[str]:
        t, layout = gene.tensors, gene.require_layout()
        layers, heads = t["msa.q"].shape[:2]
        lines = [
            f"MSA learngene: {heads} of {layout.num_heads} heads (convex mixtures) in each of {layers} layers",
            f"FFN learngene: {t['ffn.fc2_weight'].shape[0]} of {layout.depth} FFNs (convex mixtures)",
        ]
        if "phi.heads.w2" in t:
            depth, target_heads = t["phi.heads.w2"].shape[:2]
            lines.append(
                f"φ adapted for {depth} layers of {target_heads} heads (width {target_heads * t['msa.q'].shape[2]})"
            )
        else:
            lines.append("φ not adapted: expand repeats the gene (learngene adapt trains φ for a size)")
        return lines
