"""Cluster-Learngene (Wang et al., "Cluster-Learngene: Inheriting Adaptive Clusters for Self-Attention").

Learngene (Sec. 2.2). The mean attention distance of every head (Eq. 4, in pixels, class token
excluded) is measured on a sample of real images; in each layer DBSCAN groups the heads by that
distance (radius ``Eps`` px, ``MinHds`` heads; Algorithm 1) and the head nearest each cluster's mean
becomes its centroid. The gene keeps each layer's centroid heads (q, k, v rows and biases, and their
W_O columns), ordered by cluster size, largest first; the rest of each block (W_O bias, norms, and
the FFN unless ``ffn="random"``), the patch/position embeddings and the final norm are inherited.
The distances and clusters are stored too, for ``learngene inspect`` and its plot (the paper's
Fig. 1c).

Inheriting (Sec. 2.3, priority weight-sharing). Descendant head ``i`` of ``H_d`` is a copy of centroid
``i mod c_l``: when ``H_d`` is a multiple of ``c_l`` every centroid is shared ``H_d / c_l`` times, otherwise
the first ``H_d mod c_l`` (largest-cluster) centroids get one copy more; with ``H_d < c_l`` the largest
clusters win. W_O columns follow their heads (App. D) and are copied unscaled. Copies are independent
parameters of a plain timm ViT, so every layer has the same ``H_d`` heads (the paper's incrementing /
decrementing head counts per layer are not plain timm ViTs and are not offered). Heads keep the
ancestry's size ``d``, so the descendant is ``H_d·d`` wide; other residual widths, MLP sizes and
depths are carried over by :mod:`learngene.vit.transfer`.

Unlike the authors' code, heads are sliced in timm's ``[Q; K; V]`` layout (:mod:`learngene.vit.heads`),
the qkv bias is kept, images are normalized exactly as in training, and clusters are computed, not
hard-coded.

Two departures from the paper, kept on purpose:

- Width. The paper's descendants (and the authors' model) keep the residual width ``D`` and prune
  only W_O's input columns, so ``H_d`` heads of size ``d`` need not fill ``D``. timm 1.0.31's
  ``Attention`` accepts an ``attn_head_dim``, but ``VisionTransformer`` and ``Block`` do not forward it:
  only a custom ``attn_layer=partial(Attention, attn_head_dim=d)`` expresses it, and such a model is
  not a plain timm ViT (whoever loads it must rebuild that layer; :class:`~learngene.vit.spec.ViTSpec`
  maps onto ``timm.create_model``'s keyword arguments). Our descendants therefore have width
  ``H_d·d``, with the residual and MLP axes carried over by :mod:`learngene.vit.transfer`.
- Attention distance. Eq. 4 weights each key patch's pixel distance by its attention; the authors
  use the raw probabilities after dropping the class token, so a head that attends to the class
  token gets a smaller "distance" only because its patch weights sum to less than one. We
  renormalize the patch weights to sum to one, so the value is the expected distance to the patches
  a head attends to, whatever its class-token share.

Authors' code: github.com/BruceQFWang/NeurIPS24-Cluster-Learngene (snapshot read at cc00657).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from ..data import Data
from ..errors import LearngeneError, Remedy
from ..formats.atomic import atomic_path
from ..gene import Learngene
from ..host.memory import give_back, release_pages
from ..method import Ancestry, CondenseInputs, Method, Paper, keeps_ancestry_heads
from ..registry import register_method
from ..settings import field
from ..validate import CONDENSE
from ..vit.activation_memory import measured_spec, require_inference_memory
from ..vit.eva import block_inputs
from ..vit.heads import select_matrix
from ..vit.spec import ViTSpec, block_key
from ..vit.timm_keys import MLP, MSA, NORM, block_names, head_sliced
from ..vit.transfer import (
    StateDict,
    block_state,
    carry_non_block,
    cyclic,
    inherit_non_block,
    resize_block,
    stretch,
)
from ._calibration import calibration_inputs, calibration_sample, evaluating
from ._head_mixing import mix_heads

PAPER_EPS_PX, PAPER_IMG_SIZE = 10.0, 224  # Eps = 10 px at 224-px images (App. C)
DISTANCE, LABELS, CENTROIDS = "clusters.distance", "clusters.labels", "clusters.centroids."
ATTENTION = tuple(n for n in block_names(sublayer=MSA) if head_sliced(n))  # the head-sliced tensors
FFN = block_names(sublayer=MLP, without=NORM)


@dataclass(frozen=True)
class ClusterConfig:
    AUTO_OPTIONS = ("eps",)  # 0: automatic

    eps: float = field(
        0.0, phase=CONDENSE, help="DBSCAN radius in pixels; 0: the paper's 10 px scaled to the image size"
    )
    min_heads: int = field(1, at_least=1, phase=CONDENSE, help="DBSCAN MinHds (1: every head belongs to a cluster)")
    num_images: int = field(256, at_least=1, phase=CONDENSE, help="images the attention distances are averaged over")
    batch_size: int = field(
        64,
        at_least=1,
        phase=CONDENSE,
        speed_only=True,
        help="images per forward pass while measuring attention distances",
    )
    ffn: Literal["inherit", "random"] = field(
        "inherit", phase=CONDENSE, help="inherit: Cluster-Learngene*; random: Cluster-Learngene"
    )
    seed: int = field(0, phase=CONDENSE, help="which images are sampled")


# ---- mean attention distance (Eq. 4) --------------------------------------------------------------------
def patch_distances(spec: ViTSpec) -> Tensor:
    """``(N, N)`` Euclidean distances in pixels between the centres of the patches (timm's row-major order)."""
    g = spec.grid_size
    rows, cols = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=1).double() * spec.patch_size
    return (centres[:, None] - centres[None]).pow(2).sum(-1).sqrt()


@contextmanager
def attention_probabilities(model: nn.Module, seen: Callable[[int, Tensor], None]) -> Iterator[None]:
    """Inside the context, every block's attention probabilities ``(B, H, T, T)`` go to ``seen(layer, probs)``
    as they are computed (nothing keeps them: a ViT-g's 40 layers of maps would outweigh a batch's activations).

    With ``fused_attn`` off, timm's Attention sends its softmax through ``attn_drop``; a forward hook
    there sees the probabilities (dropout is the identity in eval mode). Flags and hooks are restored.
    """
    blocks: list[Any] = list(cast(Any, model).blocks)
    fused = [block.attn.fused_attn for block in blocks]
    hooks = []
    try:
        for layer, block in enumerate(blocks):
            block.attn.fused_attn = False
            hooks.append(block.attn.attn_drop.register_forward_hook(lambda _m, _i, out, layer=layer: seen(layer, out)))
        yield
    finally:
        for hook in hooks:
            hook.remove()
        for block, flag in zip(blocks, fused):
            block.attn.fused_attn = flag


def tokens_before_blocks(model: nn.Module, x: Tensor) -> tuple[Tensor, list[dict]]:
    """What a timm ViT or Eva feeds its first block (``forward_features`` up to the blocks): patches, prefix
    tokens, positions; and the keyword arguments each block takes (an Eva's RoPE table, per layer for mixed RoPE)."""
    return block_inputs(model, x)


@torch.no_grad()
def mean_attention_distance(
    model: nn.Module, spec: ViTSpec, data: Data, num_images: int = 256, batch_size: int = 64, seed: int = 0
) -> Tensor:
    """Mean attention distance of every head in pixels (Eq. 4), averaged over a sample of ``data``.

    For a query patch, the attention over the key patches (class token left out, renormalized to sum
    to one) weights the pixel distance to each key; the head's value is the mean over query patches and
    images. The model runs in eval mode on batches normalized as in training (``data.get_batch``).

    The sample goes through the model block by block (every batch through block ``l``, then block
    ``l + 1``): each block's weights are read once, and a memory-mapped ancestry's pages are given back
    after it (:func:`~learngene.host.memory.release_pages`), so a ViT-g is never resident whole; only the
    sample's tokens and one block's activations are. Each batch sees the same operations as in a
    whole-model forward, so the distances are the same.

    Returns:
        ``(depth, num_heads)`` distances.
    """
    spec = measured_spec(model, spec, data)  # labels may differ: they are not used
    empty = "cluster needs at least one image to measure attention distances; pass data (--data)"
    picked = calibration_sample(data, num_images, seed, empty)
    count, device = len(picked), next(model.parameters()).device
    # every image's tokens stay between blocks; each block's maps are read as float64
    require_inference_memory(spec, min(batch_size, count), "cluster", kept_images=count, map_bytes=12, device=device)
    distance = patch_distances(spec).to(device)
    prefix = spec.num_prefix_tokens
    totals = torch.zeros(spec.depth, spec.num_heads, dtype=torch.float64)

    def add(layer: int, probs: Tensor) -> None:
        patches = probs[:, :, prefix:, prefix:].double()
        patches /= patches.sum(-1, keepdim=True)
        patches *= distance
        totals[layer] += patches.sum(-1).mean(-1).sum(0).cpu()

    with evaluating(model):
        tokens = [
            tokens_before_blocks(model, data.get_batch(picked[start : start + batch_size])[0].to(device))
            for start in range(0, count, batch_size)
        ]
        with attention_probabilities(model, add):
            for layer, block in enumerate(cast(Any, model).blocks):
                for i, (x, kwargs) in enumerate(tokens):
                    tokens[i] = block(x, **kwargs[layer]), kwargs
                release_pages(*block.parameters())  # read once: a mapped ancestry's pages may go
    return (totals / count).float()


# ---- clustering (Algorithm 1) ---------------------------------------------------------------------------
def default_eps(img_size: int) -> float:
    """The paper's Eps (10 px at 224 px) scaled to ``img_size``."""
    return PAPER_EPS_PX * img_size / PAPER_IMG_SIZE


def cluster_heads(distances: Tensor, eps: float, min_heads: int = 1) -> tuple[Tensor, list[int]]:
    """DBSCAN of one layer's heads on their 1-D mean attention distances.

    Returns:
        ``labels`` (``-1`` for noise) and the centroid heads, one per cluster, ordered by cluster size
        (largest first; ties: the cluster with the lowest head index first). A centroid is the member
        nearest the cluster's mean distance (ties: the lowest index).
    """
    from sklearn.cluster import DBSCAN

    values = distances.double().numpy().reshape(-1, 1)
    labels = torch.from_numpy(DBSCAN(eps=eps, min_samples=min_heads).fit_predict(values)).long()
    clusters = [(labels == c).nonzero().flatten() for c in labels.unique() if c >= 0]
    clusters.sort(key=lambda members: (-len(members), int(members[0])))
    centroids = []
    for members in clusters:
        values_in = distances.double()[members]
        centroids.append(int(members[(values_in - values_in.mean()).abs().argmin()]))
    return labels, centroids


def priority_sharing(num_centroids: int, num_heads: int) -> Tensor:
    """Centroid of each of ``num_heads`` descendant heads: ``i mod c`` (Sec. 2.3, Fig. 2)."""
    return cyclic(num_centroids, num_heads)


@register_method
class ClusterLearngene(Method):
    name = "cluster"
    stores = "centroid heads of DBSCAN clusters of mean attention distance, shared by priority"
    expands_to = "any head count and depth; width = heads × the ancestry's head size"
    summary = "head centroids of DBSCAN clusters of attention distance, shared to any head count"
    paper = Paper(
        "Cluster-Learngene: Inheriting Adaptive Clusters for Vision Transformers", "Wang et al.", "NeurIPS", 2024
    )
    Config = ClusterConfig
    needs_data = True
    record_tensors = (DISTANCE,)  # for inspect and the plot
    demo_budget = 0.1  # it averages over num_images (256) of them: the demo's budget counts no more

    cannot_reach = classmethod(keeps_ancestry_heads)

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        """Distances on ``inputs.train`` (Eq. 4), DBSCAN per layer (Algorithm 1), the centroid heads kept."""
        no_data = "cluster measures attention on real images: give training data (data, --data)"
        ancestry, spec, data = calibration_inputs(self, ancestry, inputs, no_data)
        cfg = self.config
        distances = mean_attention_distance(ancestry.model, spec, data, cfg.num_images, cfg.batch_size, cfg.seed)
        eps = cfg.eps or default_eps(data.img_size)  # distances are in pixels of the images measured
        state = ancestry.state()
        tensors: StateDict = {DISTANCE: distances}
        labels = []
        for layer in range(spec.depth):
            layer_labels, centroids = cluster_heads(distances[layer], eps, cfg.min_heads)
            if not centroids:
                raise LearngeneError(
                    f"layer {layer} has no cluster of {cfg.min_heads} heads within {eps:g} px; "
                    f"lower min_heads or raise eps"
                )
            labels.append(layer_labels)
            tensors[f"{CENTROIDS}{layer}"] = torch.tensor(centroids)
            b = block_state(state, layer)
            replaced = [b[k] for k in ATTENTION if k in b] + (
                [b[k] for k in FFN if k in b] if cfg.ffn == "random" else []
            )
            b = mix_heads(b, spec, select_matrix(centroids, spec.num_heads))
            if cfg.ffn == "random":
                b = {k: v for k, v in b.items() if k not in FFN}
            release_pages(*replaced)  # not in the gene: a memory-mapped ancestry's pages may go
            tensors.update({block_key(layer, k): v for k, v in b.items()})
        tensors[LABELS] = torch.stack(labels)
        tensors.update(inherit_non_block(state, spec, spec, ("embed", "norm")))
        return self.new_gene(tensors, spec, spec, cost={"images": min(cfg.num_images, len(data)), "eps_px": eps})

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """Priority weight-sharing of each (stretched) layer's centroids to ``spec.num_heads`` heads (Sec. 2.3)."""
        src = gene.require_layout()
        if spec.head_dim != src.head_dim:
            size = spec.advisable({"embed_dim": spec.num_heads * src.head_dim})
            raise LearngeneError(
                f"cluster copies heads of {src.head_dim} dims, so a {spec.num_heads}-head descendant "
                f"is {spec.num_heads * src.head_dim} wide; "
                + (Remedy(size=size).text if size else "no such ViT of this family exists, so it cannot make it"),
                advice=[Remedy(size=size)] if size else [],
            )
        out: StateDict = {}
        for layer, source in enumerate(stretch(src.depth, spec.depth).tolist()):
            b = block_state(gene.tensors, source)
            read = list(b.values())
            centroids = len(gene.tensors[f"{CENTROIDS}{source}"])
            b = mix_heads(b, src, select_matrix(priority_sharing(centroids, spec.num_heads), centroids))
            # a mapped gene, read once: its pages may go
            out.update(give_back(read, {block_key(layer, k): v for k, v in resize_block(b, src, spec).items()}))
        out.update(carry_non_block(gene.tensors, src, spec, ("embed", "norm")))
        return out

    def describe(self, gene: Learngene) -> list[str]:
        if DISTANCE not in gene.tensors or LABELS not in gene.tensors:  # expand needs only the centroids
            return ["head clusters: this gene records no attention distances or cluster labels"]
        distances, labels = gene.tensors[DISTANCE], gene.tensors[LABELS]
        lines = [
            f"head clusters per layer (1 = first block, as in the plot) by mean attention distance (px; eps {gene.cost.get('eps_px', '?')}, "
            f"min_heads {self.config.min_heads}), largest first, * = centroid:"
        ]
        for layer in range(len(distances)):
            groups = []
            for centroid in gene.tensors[f"{CENTROIDS}{layer}"].tolist():
                members = (labels[layer] == labels[layer][centroid]).nonzero().flatten().tolist()
                groups.append(
                    "{"
                    + " ".join(f"h{h}{'*' if h == centroid else ''}:{distances[layer, h]:.1f}" for h in members)
                    + "}"
                )
            noise = (labels[layer] < 0).nonzero().flatten().tolist()
            lines.append(
                f"  layer {layer + 1}: {len(groups)} cluster{'s' if len(groups) > 1 else ''} "
                + " ".join(groups)
                + (f" noise {noise}" if noise else "")
            )
        return lines

    def plot(self, gene: Learngene, path: str | os.PathLike, overwrite: bool = False) -> None:
        plot_attention_distance(gene, path, overwrite=overwrite)


def plot_attention_distance(gene: Learngene, path: str | os.PathLike, overwrite: bool = False) -> None:
    """PNG of each head's mean attention distance per layer, centroids ringed (the paper's Fig. 1c)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if DISTANCE not in gene.tensors:
        raise LearngeneError(f"this {gene.method} learngene holds no attention distances; plot a cluster learngene")
    distances, labels = gene.tensors[DISTANCE], gene.tensors[LABELS]
    fig = Figure(figsize=(max(4.5, 1.2 + 0.5 * len(distances)), 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for layer in range(len(distances)):
        x = torch.full((distances.shape[1],), layer + 1.0)
        ax.scatter(x, distances[layer], c=labels[layer], cmap="tab10", vmin=0, vmax=9, s=22, zorder=2)
        centroids = gene.tensors[f"{CENTROIDS}{layer}"]
        ax.scatter(
            x[centroids],
            distances[layer, centroids],
            s=90,
            facecolors="none",
            edgecolors="black",
            linewidths=1.0,
            zorder=3,
        )
    ax.set_xlabel("layer")
    ax.set_ylabel("mean attention distance (px)")
    ax.set_xticks(range(1, len(distances) + 1))
    ax.set_ylim(0, float(distances.max()) * 1.1)
    ax.set_title(
        f"mean attention distance per head, {gene.layout.short() if gene.layout else 'ancestry'}\n"
        f"colour: cluster, ring: centroid",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    with atomic_path(path, overwrite) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
