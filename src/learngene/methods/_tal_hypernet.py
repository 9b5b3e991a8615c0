"""TAL's hypernetwork: PPUDA's shape encoder lookups, their Graphormer layer with task modulation and the GHN-3
that predicts every tensor of a spec's graph (:mod:`learngene.methods.tal` explains the design)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from ..vit.spec import ViTSpec
from ._tal_graph import PRIMITIVES, Graph, Node, graph_nodes, spec_graph
from ._tal_params import group_size, lora_block, normalize, tile_params

if TYPE_CHECKING:
    from .tal import TALConfig


@functools.lru_cache(maxsize=8)
def shape_lookups(num_classes: int, max_kernel: int) -> tuple[dict[int, int], dict[int, int], int, int, int, int]:
    """PPUDA ``ShapeEncoder``'s channel and kernel tables: value -> row, the nearest known value for unknown ones
    (the largest for values past the table); returns (channels, spatial, n_channels, n_spatial, max channel,
    max kernel)."""
    steps = (2**3, 2**6, 2**12, 2**13)
    channels = np.unique(
        [1, 3, num_classes]
        + list(range(steps[0], steps[1], 2**3))
        + list(range(steps[1], steps[2], 2**4))
        + list(range(steps[2], steps[3] + 1, 2**5))
    )
    spatial = np.unique(list(range(1, max(12, max_kernel), 2)) + [14, 16])
    ch = {int(c): i for i, c in enumerate(channels)}
    for c in range(4, steps[0]):
        ch[c] = ch[steps[0]]
    for c in range(1, int(channels[-1])):
        if c not in ch:
            ch[c] = ch[int(channels[np.argmin(abs(channels - c))])]
    sp = {int(c): i for i, c in enumerate(spatial)}
    sp[2] = sp[3]
    for c in range(1, int(spatial[-1])):
        if c not in sp:
            sp[c] = sp[int(spatial[np.argmin(abs(spatial - c))])]
    return ch, sp, len(channels), len(spatial), int(channels[-1]), int(spatial[-1])


def shape_4d(sz: tuple[int, ...]) -> tuple[int, int, int, int]:
    """PPUDA ``ShapeEncoder.tensor_shape_to_4d`` (a (1, N, D) position embedding as (1, D, ⌊√N⌋, ⌊√N⌋))."""
    if len(sz) == 1:
        sz = (sz[0], 1)
    if len(sz) == 2:
        sz = (sz[0], sz[1], 1, 1)
    if len(sz) == 3:
        if sz[0] == 1 and min(sz[1:]) > 1:
            s = int(math.floor(sz[1] ** 0.5))
            sz = (1, sz[2], s, s)
        else:
            sz = (sz[0], sz[1], sz[2], 1)
    return sz  # type: ignore[return-value]


# ---- the hypernetwork ----------------------------------------------------------------------------------------
class GraphormerLayer(nn.Module):
    """Their ``graphormer.TransformerLayer`` with ``TEN``: ``x += attn(TEN(ln1(x), t), edges)``, ``x += ff(ln2(x))``;
    the first layer adds degree and input-distance embeddings and turns distances into an attention bias. With
    ``task_dim`` 0 there is no ``TEN`` (``ghn3/graphormer.py``'s layer, which PITH's GHN uses)."""

    max_degree, max_input_dist = 100, 1000

    def __init__(self, dim: int, task_dim: int, heads: int, first: bool):
        super().__init__()
        self.heads, self.first = heads, first
        self.ln1 = nn.LayerNorm(dim)
        self.fc_gamma: nn.Linear | None = None
        self.fc_beta: nn.Linear | None = None
        if task_dim:
            self.fc_gamma, self.fc_beta = nn.Linear(task_dim, dim), nn.Linear(task_dim, dim)
            for lin in (self.fc_gamma, self.fc_beta):
                nn.init.zeros_(lin.weight)
                nn.init.zeros_(lin.bias)
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        if first:
            self.edge_embed = nn.Embedding(257, dim)  # their sinusoid, overwritten by GHN3's _init_embed
            self.proj_e = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, heads))
            self.centrality_embed_in = nn.Embedding(self.max_degree + 1, dim)
            self.centrality_embed_out = nn.Embedding(self.max_degree + 1, dim)
            self.input_dist_embed = nn.Embedding(self.max_input_dist + 1, dim)

    def forward(
        self, x: Tensor, task: Tensor | None, edges: Tensor, bias: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        # x: (N, C); edges: (N, N) distances; bias: (heads, N, N) from the first layer, passed on
        if self.first:
            one_hop = (edges == 1).long()
            x = x + self.centrality_embed_in(one_hop.sum(0).clamp(0, self.max_degree))
            x = x + self.centrality_embed_out(one_hop.sum(1).clamp(0, self.max_degree))
            x = x + self.input_dist_embed(edges[0].clamp(0, self.max_input_dist))
            both = torch.stack((edges, edges.t()), dim=-1) + 2  # forward and backward distances, shifted past 0/1
            bias = self.proj_e(self.edge_embed(both).flatten(-2)).permute(2, 0, 1)
        h = self.ln1(x)
        if self.fc_gamma is not None and self.fc_beta is not None and task is not None:
            h = (self.fc_gamma(task) + 1) * h + self.fc_beta(task)
        n, c = h.shape
        q, k, v = self.to_qkv(h).reshape(n, 3, self.heads, c // self.heads).permute(1, 2, 0, 3).unbind(0)
        attn = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        if bias is not None:
            attn = attn + bias
        x = x + self.to_out((attn.softmax(-1) @ v).transpose(0, 1).reshape(n, c))
        return x + self.ff(self.ln2(x)), bias


def factor_mlp(hid: int, r: int) -> nn.Sequential:
    """The decoder's MLP from a node embedding to its ``2r × r`` factor matrix (``ConvDecoder3LoRA.mlp``: PPUDA's
    ``MLP(hid, (4 hid, 8 hid, 2 r²))``, ReLU between, none last)."""
    return nn.Sequential(
        nn.Linear(hid, 4 * hid), nn.ReLU(), nn.Linear(4 * hid, 8 * hid), nn.ReLU(), nn.Linear(8 * hid, 2 * r * r)
    )


class GraphEncoder(nn.Module):
    """The part of GHN-3 that embeds a spec's graph: node inputs (op kind + PPUDA's shape encoder), the Graphormer
    layers and the final LayerNorm (``--ln``); TAL's :class:`HyperNet` and PITH's add their decoders to it.
    ``task_dim`` 0: no task modulation. Subclasses call :meth:`init_embeddings` once all their modules exist."""

    def __init__(self, hid: int, heads: int, layers: int, task_dim: int, num_classes: int, ve_cutoff: int):
        super().__init__()
        self.num_classes, self.ve_cutoff = num_classes, ve_cutoff
        _, _, n_ch, n_s, _, _ = shape_lookups(num_classes, 16)  # their ImageNet max_shape: 16 x 16 kernels
        self.embed = nn.Embedding(len(PRIMITIVES), hid)
        self.embed_channel = nn.Embedding(n_ch + 1, hid // 4)
        self.embed_spatial = nn.Embedding(n_s + 1, hid // 4)
        self.gnn = nn.ModuleList(GraphormerLayer(hid, task_dim, heads, i == 0) for i in range(layers))
        self.ln = nn.LayerNorm(hid)

    def init_embeddings(self) -> None:
        """``GHN3._init_embed``: every embedding (the edge sinusoid included), after the modules are made."""
        for m in self.modules():
            if isinstance(m, nn.Embedding):
                nn.init.trunc_normal_(m.weight, std=m.weight.shape[1] ** -0.5)

    def node_inputs(self, graph: Graph, device: torch.device) -> Tensor:
        """Their ``embed(op) + shape_enc``: the op kind's row plus the four shape lookups (dummy rows for ops)."""
        ch, sp, n_ch, n_s, top_c, top_s = shape_lookups(self.num_classes, 16)
        index: list[tuple[int, ...]] = []
        for node in graph.nodes:
            if node.shape is None:
                index.append((n_ch, n_ch, n_s, n_s))
                continue
            sz = shape_4d(node.shape)
            index.append(tuple(ch.get(c, ch[top_c]) for c in sz[:2]) + tuple(sp.get(k, sp[top_s]) for k in sz[2:]))
        idx = torch.tensor(index, device=device)
        kinds = torch.tensor([PRIMITIVES.index(n.kind) for n in graph.nodes], device=device)
        shape = torch.cat(
            (
                self.embed_channel(idx[:, 0]),
                self.embed_channel(idx[:, 1]),
                self.embed_spatial(idx[:, 2]),
                self.embed_spatial(idx[:, 3]),
            ),
            dim=1,
        )
        return self.embed(kinds) + shape

    def encode(self, spec: ViTSpec, task: Tensor | None) -> tuple[Graph, Tensor, list[int]]:
        """``spec``'s graph, its node embeddings after the Graphormer and the final norm, and the rows of the nodes
        that hold a tensor (the decoders' inputs)."""
        graph = spec_graph(spec, self.ve_cutoff)
        device = self.embed.weight.device
        edges = graph.distances.to(device)
        x, bias = self.node_inputs(graph, device), None
        for layer in self.gnn:
            x, bias = layer(x, task, edges, bias)
        return graph, self.ln(x), [i for i, n in enumerate(graph.nodes) if n.key is not None]


class HyperNet(GraphEncoder):
    """GHN-3 with task modulation (their ``ghn3_MTL.nn.GHN3`` with ``lora=True``, ``use_1d_decoder=False``,
    ``layernorm=True``, ``weight_norm=True``): predicts a timm state_dict for a spec (:meth:`predict`)."""

    def __init__(self, cfg: TALConfig, task_dim: int, num_classes: int):
        cfg.require_sized()
        super().__init__(cfg.hid, cfg.heads, cfg.layers, task_dim, num_classes, cfg.ve_cutoff)
        self.cfg = cfg
        self.decoder = factor_mlp(cfg.hid, cfg.lora_r)
        self.l2 = nn.Linear(cfg.lora_r, cfg.max_ck)
        self.init_embeddings()

    def forward(self, spec: ViTSpec, task: Tensor, class_row: Tensor) -> dict[str, Tensor]:
        """Every tensor of ``spec``'s timm ViT the graph holds (plain-ViT keys), differentiable in the weights."""
        graph, x, rows = self.encode(spec, task)
        factors = self.decoder(x[rows])
        out: dict[str, Tensor] = {}
        m, r = self.cfg.max_shape, self.cfg.lora_r
        for f, i in zip(factors, rows, strict=True):
            node = graph.nodes[i]
            assert node.key is not None and node.shape is not None
            if len(node.shape) == 1:  # a bias or a norm: their 1-D path, (2, c) with the gain at 0 and the bias at 1
                c = group_size(node.shape[0], m)
                out.update(vector_params(node, lora_block(f, self.l2, r, (2 * c, 1, 1, 1), n_dim=1).reshape(2, c)))
                continue
            shape = block_shape(node.shape, lambda n: group_size(n, m))
            block = lora_block(f, self.l2, r, shape, n_dim=2 if node.classifier else 4)
            out[node.key] = normalize(tile_params(block, node.shape, class_row), True)
        return out


def vector_params(node: Node, w: Tensor) -> dict[str, Tensor]:
    """A 1-D node's tensors from its ``(2, c)`` block (``GHN3.forward``'s 1-D path): a norm's gain from row 0 and its
    bias from row 1, a bias from row 1; tiled to the tensor's length and normalized."""
    assert node.key is not None and node.shape is not None
    if node.kind != "ln":
        return {node.key: normalize(tile_params(w[1], node.shape), False)}
    out = {node.key: normalize(tile_params(w[0], node.shape), True)}
    if node.bias_key is not None:
        out[node.bias_key] = normalize(tile_params(w[1], node.shape), False)
    return out


def block_shape(shape: tuple[int, ...], grouped: Callable[[int], int]) -> tuple[int, int, int, int]:
    """The block a tensor of ``shape`` (2-D or more) is predicted as (``GHN3._map_net_params``' key): a matrix as
    ``(out, in, 1, 1)``, a ``(1, N, D)`` position embedding as ``(1, D, s, s)`` with ``s = ⌊√N⌋``, a kernel as
    ``(out, in, kh, kw)``; channel counts as ``grouped`` sizes them (TAL: :func:`group_size`)."""
    if len(shape) == 3:
        s = int(math.floor(shape[1] ** 0.5))
        return (1, shape[2], s, s)
    if len(shape) == 2:
        return (grouped(shape[0]), grouped(shape[1]), 1, 1)
    return (grouped(shape[0]), grouped(shape[1]), shape[2], shape[3])


def decoder_rows(spec: ViTSpec, grouped: Callable[[int], int]) -> int:
    """The most rows of the decoder's factors (``max_ck``) one tensor of ``spec`` reads (:func:`lora_rows`' count,
    either side), its axes predicted at the sizes ``grouped`` gives: a bias or norm as ``(2c, 1, 1, 1)``, the rest
    as :func:`block_shape` says."""
    most = 0
    for node in graph_nodes(spec)[0]:
        if node.shape is None:
            continue
        if len(node.shape) == 1:
            most = max(most, 2 * grouped(node.shape[0]))
            continue
        c_out, c_in, k_out, k_in = block_shape(node.shape, grouped)
        most = max(most, c_out * k_out, c_in * k_in)
    return most
