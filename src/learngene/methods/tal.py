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
import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from ..errors import LearngeneError
from ..gene import Learngene
from ..memory import require_free_memory
from ..method import Ancestry, CondenseInputs, Method, Paper
from ..registry import register_method
from ..training.distill import PooledFeatures, cache_teacher_outputs
from ..training.loop import distill_loss, predict_logits, resolve_device, step_draw, train
from ..validate import CONDENSE, EXPAND, limits_of, option, option_assignment, out_of_range
from ..vit.spec import ViTSpec, block_key
from ..vit.timm_keys import BLOCK_TENSORS, MLP, MSA, WRITER

# PPUDA's ``deepnets1m.genotypes.PRIMITIVES_DEEPNETS1M``: the node kinds, in their order (the embedding's rows)
PRIMITIVES = (
    "max_pool",
    "avg_pool",
    "sep_conv",
    "dil_conv",
    "conv",
    "msa",
    "cse",
    "sum",
    "concat",
    "input",
    "bias",
    "bn",
    "ln",
    "pos_enc",
    "glob_avg",
)
TASK_KEY = "task_embedding"
GHN_PREFIX = "ghn."
UNPREDICTED = ("cls_token", "reg_token", "dist_token", "attn_pool.latent")  # dropped by their tracer: timm's init


# ---- the rules of their GHN3, as functions of tensors ------------------------------------------------------------
def group_size(n: int, max_n: int) -> int:
    """The size a tensor axis is predicted at (``GHN3._map_net_params``' ``min_sz``): capped at ``max_n``, a multiple
    of 3 predicted as 4/3 of it, at least half of ``max_n`` as ``max_n``."""
    n = min(n, max_n)
    if n % 3 == 0:
        n = n // 3 * 4
    if n >= max_n / 2:
        n = max_n
    return n


def lora_block(factors: Tensor, l2: nn.Linear, r: int, shape: tuple[int, int, int, int], n_dim: int) -> Tensor:
    """One node's parameter block from its decoder MLP output ``factors`` (``2r·r`` values), as their
    ``ConvDecoder3LoRA.forward``: ``X = l2(relu(factors as 2r × r))`` (2r × ck) read in memory order as 2ck × r,
    ``A`` = its first ck rows, ``B`` = the next ck rows transposed, ``W = A[:c_out·k_out] @ B[:, :c_in·k_in]``.
    Only the rows of ``X`` that ``A`` and ``B``'s slices read are computed (the values are the same)."""
    ck = l2.out_features
    c_out, c_in, k_out, k_in = shape
    rows_a, rows_b = c_out * k_out, c_in * k_in
    if max(rows_a, rows_b) > ck:
        raise LearngeneError(
            f"tal: a parameter needs {max(rows_a, rows_b)} decoder rows but max_ck is {ck}; "
            f"condense again with {option_assignment('max_ck', str(max(rows_a, rows_b)))} or more"
        )
    y = torch.relu(factors.view(2 * r, r))
    need_a, need_b = math.ceil(rows_a * r / ck), math.ceil(rows_b * r / ck)
    a = l2(y[:need_a]).reshape(-1)[: rows_a * r].view(rows_a, r)
    b = l2(y[r : r + need_b]).reshape(-1)[: rows_b * r].view(rows_b, r).t()
    w = a @ b
    if n_dim == 1:
        return w.reshape(c_out)
    if n_dim == 2:
        return w
    return w.reshape(c_out, k_out, c_in, k_in).transpose(1, 2)


def tile_params(w: Tensor, target: tuple[int, ...], class_row: Tensor | None = None) -> Tensor:
    """A predicted block ``w`` sliced or tiled to ``target`` (``GHN3._tile_params``, the GHN-3 branch).

    ``class_row``: the (1, 1, D) row put in front of a position embedding built from a 4-D block (theirs draws it
    from N(0, 0.02²) there). A position embedding longer than that row plus the block's ``s²`` patch rows is tiled
    along the tokens (their code fails there)."""
    t, s = target, w.shape
    if len(t) == 1:
        if len(s) == 1:
            w = w[: min(t[0], s[0])]
        elif len(s) == 2:
            w = w[: min(t[0], s[0]), 0]
        else:
            w = w[: min(t[0], s[0]), 0, s[-2] // 2, s[-1] // 2]
    elif len(t) == 2:
        if len(s) == 2:
            w = w[: min(t[0], s[0]), : min(t[1], s[1])]
        else:
            w = w[: min(t[0], s[0]), : min(t[1], s[1]), s[-2] // 2, s[-1] // 2]
    elif len(t) == 3:
        if len(s) == 3:
            w = w[: min(t[0], s[0]), : min(t[1], s[1]), : min(t[2], s[2])]
        else:  # a position embedding predicted as (1, D, s, s)
            w = w.reshape(*s[:2], -1).permute(0, 2, 1)
            w = w[: min(t[0], w.shape[0]), : min(t[1], w.shape[1]), : min(t[2], w.shape[2])]
            if class_row is None:
                raise ValueError("a position embedding from a 4-D block needs its class row")
            w = torch.cat((class_row.to(w), w), dim=1)
    else:
        s2 = min(t[2], s[2]) if len(s) > 2 else 1
        s3 = min(t[3], s[3]) if len(s) > 3 else 1
        if len(s) > 2:
            o2, o3 = s[-2] // 2, s[-1] // 2
            w = w[
                : min(t[0], s[0]),
                : min(t[1], s[1]),
                o2 - s2 // 2 : o2 + math.ceil(s2 / 2),
                o3 - s3 // 2 : o3 + math.ceil(s3 / 2),
            ]
        else:
            w = w[: min(t[0], s[0]), : min(t[1], s[1])].unsqueeze(2).unsqueeze(3)
    s = w.shape
    if t[0] > s[0]:  # tile the output channels
        w = w.repeat((math.ceil(t[0] / s[0]),) + (1,) * (len(t) - 1))[: t[0]]
    if len(t) > 1 and t[1] > s[1]:  # tile the input channels (the tokens of a position embedding: ours)
        w = w.repeat((1, math.ceil(t[1] / s[1])) + (1,) * (len(t) - 2))[:, : t[1]]
    elif len(t) == 3 and len(s) == 3 and t[2] > s[2]:
        w = w.repeat((1, 1, math.ceil(t[2] / s[2])))[:, :, : t[2]]
    if len(t) == 1:
        return w[: t[0]]
    if len(t) == 2:
        return w[: t[0], : t[1]]
    if len(t) == 3:
        return w[: t[0], : t[1], : t[2]]
    o2, o3 = w.shape[-2] // 2, w.shape[-1] // 2
    return w[: t[0], : t[1], o2 - t[2] // 2 : o2 + math.ceil(t[2] / 2), o3 - t[3] // 2 : o3 + math.ceil(t[3] / 2)]


def normalize(p: Tensor, is_weight: bool) -> Tensor:
    """``GHN3._normalize``: fan-in scaling ``p·√(β / fan_in)`` of a matrix or kernel (β = 1 for a kernel with one
    input channel or a wide-not-tall kernel, else 2), a position embedding (``(1, N, D)``; theirs: D ≥ 11) left as it is; a norm
    gain ``2·sigmoid(p/2)`` in (0, 2); a bias ``tanh(p/5)`` in (-1, 1)."""
    if p.dim() > 1:
        sz = p.shape
        if len(sz) == 3:  # a position embedding (1, N, D): theirs only for D ≥ 11, a narrower one fails there
            return p
        beta = 1.0 if len(sz) > 2 and (sz[1] == 1 or sz[2] < sz[3]) else 2.0
        return p * (beta / p[0].numel()) ** 0.5
    return 2 * torch.sigmoid(0.5 * p) if is_weight else torch.tanh(0.2 * p)


# ---- the graph of a timm ViT -------------------------------------------------------------------------------------
class Node(NamedTuple):
    kind: str  # one of PRIMITIVES
    key: str | None  # the predicted tensor (a norm node: its gain; the bias comes with it), None for ops
    shape: tuple[int, ...] | None
    bias_key: str | None = None  # a norm's bias, predicted from the same node
    classifier: bool = False  # their "last weight" / "last bias": the decoder's 2-D (class) path


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    distances: Tensor  # (N, N) long: shortest-path length i -> j up to the cutoff, 0 = none


def _tensor_node(key: str, shape: tuple[int, ...], shapes: dict[str, tuple[int, ...]], head: bool = False) -> Node:
    name = key.rsplit(".", 1)[-1]
    if key.endswith("pos_embed"):
        return Node("pos_enc", key, shape)
    if "norm" in key.split(".")[-2 if "." in key else 0] and name == "weight":
        bias = key[: -len("weight")] + "bias"
        return Node("ln", key, shape, bias if bias in shapes else None)
    if len(shape) == 1 or name.endswith("bias"):
        return Node("bias", key, shape, classifier=head)
    return Node("conv", key, shape, classifier=head)


def graph_nodes(spec: ViTSpec) -> tuple[tuple[Node, ...], list[tuple[int, int]]]:
    """The nodes of ``spec``'s ViT in forward order and its edges (see the module docstring)."""
    shapes = spec.non_block_shapes(vit_layout=True)
    nodes: list[Node] = [Node("input", None, None)]
    edges: list[tuple[int, int]] = []

    def add(node: Node, inputs: tuple[int, ...]) -> int:
        nodes.append(node)
        for i in inputs:
            edges.append((i, len(nodes) - 1))
        return len(nodes) - 1

    def chain(keys: list[str], start: int, table: dict[str, tuple[int, ...]], head: bool = False) -> int:
        last = start
        for key in keys:
            if key in UNPREDICTED or key.endswith(".bias") and _is_norm_bias(key, table):
                continue
            last = add(_tensor_node(key, table[key], table, head), (last,))
        return last

    stem = [k for k in shapes if k.startswith("patch_embed.")]
    last = chain(stem, 0, shapes)
    if "pos_embed" in shapes:
        pos = add(Node("pos_enc", "pos_embed", shapes["pos_embed"]), ())
        last = add(Node("sum", None, None), (last, pos))
    last = chain([k for k in shapes if k.startswith("norm_pre.")], last, shapes)
    block = spec.block_shapes()
    for layer in range(spec.depth):
        table = {block_key(layer, k): v for k, v in block.items()}
        for sublayer in (MSA, MLP):
            stream = last
            names = [k for k in block if BLOCK_TENSORS[k].sublayer == sublayer and not _layer_scale(k)]
            writers = [k for k in names if WRITER in BLOCK_TENSORS[k].tags]
            readers = [k for k in names if k not in writers]
            last = chain([block_key(layer, k) for k in readers + writers], last, table)
            last = add(Node("sum", None, None), (stream, last))
    tail = [k for k in shapes if k.startswith(("norm.", "fc_norm.", "attn_pool."))]
    last = chain(tail, last, shapes)
    heads = [k for k in shapes if k.startswith(("head.", "head_dist."))]
    head_start = last
    for prefix in ("head.", "head_dist."):
        chain([k for k in heads if k.startswith(prefix)], head_start, shapes, head=True)
    return tuple(nodes), edges


def _is_norm_bias(key: str, table: dict[str, tuple[int, ...]]) -> bool:
    return key[: -len("bias")] + "weight" in table and "norm" in key


def _layer_scale(name: str) -> bool:
    return name.endswith(("gamma", "gamma_1", "gamma_2"))


@functools.lru_cache(maxsize=64)
def spec_graph(spec: ViTSpec, ve_cutoff: int) -> Graph:
    """``spec``'s graph with their virtual edges: shortest-path lengths up to ``ve_cutoff`` (1: real edges only)."""
    nodes, edges = graph_nodes(spec)
    n = len(nodes)
    out: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        out[a].append(b)
    dist = torch.zeros(n, n, dtype=torch.long)
    for i in range(n):  # breadth-first from every node (the graph is a small DAG)
        seen, frontier, d = {i}, [i], 0
        while frontier and d < ve_cutoff:
            d += 1
            nxt = []
            for u in frontier:
                for v in out[u]:
                    if v not in seen:
                        seen.add(v)
                        dist[i, v] = d
                        nxt.append(v)
            frontier = nxt
    return Graph(nodes, dist)


# ---- PPUDA's shape encoder lookups -----------------------------------------------------------------------------
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
    the first layer adds degree and input-distance embeddings and turns distances into an attention bias."""

    max_degree, max_input_dist = 100, 1000

    def __init__(self, dim: int, task_dim: int, heads: int, first: bool):
        super().__init__()
        self.heads, self.first = heads, first
        self.ln1 = nn.LayerNorm(dim)
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

    def forward(self, x: Tensor, task: Tensor, edges: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor | None]:
        # x: (N, C); edges: (N, N) distances; bias: (heads, N, N) from the first layer, passed on
        if self.first:
            one_hop = (edges == 1).long()
            x = x + self.centrality_embed_in(one_hop.sum(0).clamp(0, self.max_degree))
            x = x + self.centrality_embed_out(one_hop.sum(1).clamp(0, self.max_degree))
            x = x + self.input_dist_embed(edges[0].clamp(0, self.max_input_dist))
            both = torch.stack((edges, edges.t()), dim=-1) + 2  # forward and backward distances, shifted past 0/1
            bias = self.proj_e(self.edge_embed(both).flatten(-2)).permute(2, 0, 1)
        h = self.ln1(x)
        h = (self.fc_gamma(task) + 1) * h + self.fc_beta(task)
        n, c = h.shape
        q, k, v = self.to_qkv(h).reshape(n, 3, self.heads, c // self.heads).permute(1, 2, 0, 3).unbind(0)
        attn = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        if bias is not None:
            attn = attn + bias
        x = x + self.to_out((attn.softmax(-1) @ v).transpose(0, 1).reshape(n, c))
        return x + self.ff(self.ln2(x)), bias


class HyperNet(nn.Module):
    """GHN-3 with task modulation (their ``ghn3_MTL.nn.GHN3`` with ``lora=True``, ``use_1d_decoder=False``,
    ``layernorm=True``, ``weight_norm=True``): predicts a timm state_dict for a spec (:meth:`predict`)."""

    def __init__(self, cfg: TALConfig, task_dim: int, num_classes: int):
        super().__init__()
        hid = cfg.hid
        self.cfg, self.num_classes = cfg, num_classes
        _, _, n_ch, n_s, _, _ = shape_lookups(num_classes, 16)  # their ImageNet max_shape: 16 x 16 kernels
        self.embed = nn.Embedding(len(PRIMITIVES), hid)
        self.embed_channel = nn.Embedding(n_ch + 1, hid // 4)
        self.embed_spatial = nn.Embedding(n_s + 1, hid // 4)
        self.gnn = nn.ModuleList(GraphormerLayer(hid, task_dim, cfg.heads, i == 0) for i in range(cfg.layers))
        self.ln = nn.LayerNorm(hid)
        r = cfg.lora_r
        self.decoder = nn.Sequential(  # PPUDA's MLP(hid, (4 hid, 8 hid, 2 r²)), ReLU between, none last
            nn.Linear(hid, 4 * hid), nn.ReLU(), nn.Linear(4 * hid, 8 * hid), nn.ReLU(), nn.Linear(8 * hid, 2 * r * r)
        )
        self.l2 = nn.Linear(r, cfg.max_ck)
        for m in self.modules():  # GHN3._init_embed: every embedding (the edge sinusoid included)
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

    def forward(self, spec: ViTSpec, task: Tensor, class_row: Tensor) -> dict[str, Tensor]:
        """Every tensor of ``spec``'s timm ViT the graph holds (plain-ViT keys), differentiable in the weights."""
        graph = spec_graph(spec, self.cfg.ve_cutoff)
        device = self.embed.weight.device
        edges = graph.distances.to(device)
        x, bias = self.node_inputs(graph, device), None
        for layer in self.gnn:
            x, bias = layer(x, task, edges, bias)
        x = self.ln(x)
        rows = [i for i, n in enumerate(graph.nodes) if n.key is not None]
        factors = self.decoder(x[rows])
        out: dict[str, Tensor] = {}
        m, r = self.cfg.max_shape, self.cfg.lora_r
        for f, i in zip(factors, rows, strict=True):
            node = graph.nodes[i]
            assert node.key is not None and node.shape is not None
            sz = node.shape
            if len(sz) == 1:  # a bias or a norm: their 1-D path, (2, c) with the gain at 0 and the bias at 1
                c = group_size(sz[0], m)
                w = lora_block(f, self.l2, r, (2 * c, 1, 1, 1), n_dim=1).reshape(2, c)
                if node.kind == "ln":
                    out[node.key] = normalize(tile_params(w[0], sz), True)
                    if node.bias_key is not None:
                        out[node.bias_key] = normalize(tile_params(w[1], sz), False)
                else:
                    out[node.key] = normalize(tile_params(w[1], sz), False)
                continue
            if node.classifier:
                block = lora_block(f, self.l2, r, (group_size(sz[0], m), group_size(sz[1], m), 1, 1), n_dim=2)
            elif len(sz) == 3:  # a (1, N, D) position embedding, predicted as (1, D, s, s)
                s = int(math.floor(sz[1] ** 0.5))
                block = lora_block(f, self.l2, r, (1, sz[2], s, s), n_dim=4)
            elif len(sz) == 2:
                block = lora_block(f, self.l2, r, (group_size(sz[0], m), group_size(sz[1], m), 1, 1), n_dim=4)
            else:
                kernel = (group_size(sz[0], m), group_size(sz[1], m), sz[2], sz[3])
                block = lora_block(f, self.l2, r, kernel, n_dim=4)
            out[node.key] = normalize(tile_params(block, sz, class_row), True)
        return out


# ---- the method --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TALConfig:
    """Options of TAL (defaults: their README's ``--hid 128 --layers 5 --heads 16 --lora_r 90 --max_shape 2048
    -v 50`` and config.py's ``max_ck_lora`` 2048·16)."""

    hid: int = option(128, phase=CONDENSE, at_least=4, multiple_of=4, help="the hypernetwork's hidden size")
    layers: int = option(5, phase=CONDENSE, at_least=1, help="Graphormer layers of the hypernetwork")
    heads: int = option(16, phase=CONDENSE, at_least=1, help="attention heads of the Graphormer (must divide hid)")
    lora_r: int = option(90, phase=CONDENSE, at_least=1, help="rank r of the decoder's A·B factors")
    max_ck: int = option(
        32768, phase=CONDENSE, at_least=1, help="rows of the decoder's factors: the largest channels×kernel predicted"
    )
    max_shape: int = option(2048, phase=CONDENSE, at_least=1, help="largest channel count predicted; wider is tiled")
    ve_cutoff: int = option(50, phase=CONDENSE, at_least=1, help="longest shortest path kept as a virtual edge")
    min_depth: int = option(1, phase=CONDENSE, at_least=1, help="fewest layers of the sizes drawn while condensing")
    predparam_wd: float = option(
        3e-5, phase=CONDENSE, at_least=0, help="weight of Σ‖W‖_F over the predicted tensors in the condensing loss"
    )
    seed: int = option(0, phase=EXPAND, help="seeds the random class row of a predicted position embedding")

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
                f"tal option heads ({self.heads}) must divide hid ({self.hid}); "
                f"pass {option_assignment('heads', 'N')} with N a divisor of {self.hid}"
            )


class _Drawn(nn.Module):
    """What the training loop trains: the hypernetwork, which predicts a ViT of a size drawn at each training step
    and runs it (the size follows from the run's seed and a step counter saved with the model, so a resumed run
    draws the same sizes; evaluation runs the reference size, the last of ``sizes``)."""

    def __init__(
        self, method: TAL, ghn: HyperNet, task: Tensor, sizes: list[ViTSpec], seed: int, teacher_width: int | None
    ):
        super().__init__()
        self.ghn, self.sizes, self.seed, self.method = ghn, sizes, seed, method
        self.register_buffer("task", task.clone())
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
    task: Tensor

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
        return functional_call(net, spec.model_layout({**unpredicted(spec, state), **state}), (x,), {}, strict=False)

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
        k: torch.full(v, float(spec.family.init_values or 0.0) if _layer_scale(k) else 0.0, device=device)
        for k, v in shapes.items()
        if k not in predicted
    }


def descendant_sizes(ancestry: ViTSpec, min_depth: int) -> list[ViTSpec]:
    """The sizes drawn while condensing: every depth in ``[min_depth, depth]`` × every head count in ``[1, heads]``
    at the ancestry's head width (the ancestry's own size last)."""
    if min_depth > ancestry.depth:  # a range that starts past its end would draw nothing: refused, not clamped
        raise LearngeneError(
            f"tal option min_depth ({min_depth}) is more than the ancestry's {ancestry.depth} layers; "
            f"pass {option_assignment('min_depth', 'N')} with N at most {ancestry.depth}"
        )
    head_dim = ancestry.head_dim
    out = [
        ancestry.replace(depth=d, num_heads=h, embed_dim=h * head_dim)
        for h in range(1, ancestry.num_heads + 1)
        for d in range(min_depth, ancestry.depth + 1)
    ]
    out.sort(key=lambda s: (s == ancestry, s.embed_dim, s.depth))
    return out


def task_embedding(ancestry: Ancestry, data: Any, cfg: Any) -> Tensor:
    """The ancestry's mean pooled embedding over ``data`` (their ``get_task_embedding``)."""
    device = resolve_device(cfg.device)
    features = predict_logits(PooledFeatures(ancestry.model), data, cfg.eval_batch_size, device)
    return features.double().mean(0).float().cpu()


@register_method
class TAL(Method):
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
    seed_option = "seed"
    # a step runs the hypernetwork over the graph besides the ancestry (the demo at b6feb21, one run on a shared
    # machine: 389 s for its 158 steps, the aux nets' 120-166 s), and the demo's budget leaves it near scratch anyway
    demo_budget = 0.25

    def require_hypernet_memory(self, task_dim: int, num_classes: int) -> None:
        """Refuse in one line, before it is allocated, a hypernetwork whose training cannot fit in free memory: its
        fp32 weights, their gradients and AdamW's two moments (counted on ``meta``, which allocates nothing)."""
        with torch.device("meta"):
            params = sum(p.numel() for p in HyperNet(self.config, task_dim, num_classes).parameters())
        require_free_memory(
            4 * 4 * params,
            f"training tal's hypernetwork ({params:,} parameters: weights, gradients and AdamW's two moments)",
            f"choose a smaller {option_assignment('hid', 'N')} (or layers, lora_r, max_ck)",
        )

    def hypernet(self, gene: Learngene) -> HyperNet:
        layout = gene.require_layout()
        task = gene.tensors.get(TASK_KEY)
        if task is None:
            raise LearngeneError("this tal gene has no task embedding; condense it again")
        with torch.device("meta"):
            return HyperNet(self.config, int(task.shape[0]), layout.num_classes)

    def class_row(self, spec: ViTSpec, seed: int | None = None) -> Tensor:
        """The random class row of a predicted position embedding (``_tile_params``' N(0, 0.02²)), drawn from
        ``seed`` (the ``seed`` option when None; condensation draws from the run's seed)."""
        g = torch.Generator().manual_seed(self.config.seed if seed is None else seed)
        return torch.normal(0.0, 0.02, size=(1, 1, spec.embed_dim), generator=g)

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
        ancestry = self.require_ancestry(ancestry)
        base = ancestry.require_vit(self.name)
        if inputs is None or inputs.train is None:
            raise LearngeneError("tal condenses by training its hypernetwork; give training data (--data)")
        cfg, data = inputs.train_cfg, inputs.train
        reference = base.replace(img_size=data.img_size, in_chans=data.in_chans)
        if base.num_classes == 0:
            reference = reference.replace(num_classes=data.num_classes)
        sizes = descendant_sizes(reference, self.config.min_depth)
        self.require_hypernet_memory(base.embed_dim, reference.num_classes)
        task = task_embedding(ancestry, data, cfg)
        torch.manual_seed(cfg.seed)
        ghn = HyperNet(self.config, int(task.shape[0]), reference.num_classes)
        features = cfg.distill_lambda > 0 and base.num_classes == 0
        net = _Drawn(self, ghn, task, sizes, cfg.seed, int(task.shape[0]) if features else None)
        teacher: nn.Module | None = None
        if cfg.distill_lambda > 0:
            if features:
                data, teacher = cache_teacher_outputs(data, PooledFeatures(ancestry.model), cfg)
            elif base.num_classes != data.num_classes:
                raise LearngeneError(
                    f"the ancestry predicts {base.num_classes} classes but {data.name} has {data.num_classes}; "
                    f"distil on data with the ancestry's label space, or pass --distill-lambda 0"
                )
            else:
                data, teacher = cache_teacher_outputs(data, ancestry.model, cfg)
        result = train(
            net,
            data,
            cfg,
            inputs.eval,
            teacher=teacher,
            run_dir=inputs.run_dir,
            resume=inputs.resume,
            loss=net.distill_loss,
        )
        tensors = {
            GHN_PREFIX + k: v.detach().cpu().clone() for k, v in ghn.state_dict().items()
        }  # trained on a GPU too
        tensors[TASK_KEY] = task
        cost: dict[str, Any] = {"epochs": cfg.epochs, "steps": result.steps, "seconds": round(result.seconds, 2)}
        if result.final_acc is not None:
            cost["eval_acc_at_reference_size"] = result.final_acc
        return self.new_gene(tensors, reference, base, cost)
