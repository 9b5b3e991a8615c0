"""TAL's graph of a timm ViT: its nodes in forward order and their virtual edges (the module docstring of
:mod:`learngene.methods.tal` says how it follows their tracer's)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

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
UNPREDICTED = ("cls_token", "reg_token", "dist_token", "attn_pool.latent")  # dropped by their tracer: timm's init


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
            names = [k for k in block if BLOCK_TENSORS[k].sublayer == sublayer and not is_layer_scale(k)]
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


def is_layer_scale(name: str) -> bool:
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
