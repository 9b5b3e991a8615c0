"""TAL's whole parameter prediction against the authors' modules at the same weights.

    PYTHONPATH=src python benchmarks/fidelity_tal.py TAL_CHECKOUT PPUDA_CHECKOUT

``TAL_CHECKOUT``: a work tree of github.com/mathieuxu/TAL-Task-Aware-Learngene- (read at 27957e8);
``PPUDA_CHECKOUT``: one of github.com/facebookresearch/ppuda. Their modules run as they are: PPUDA's ``ShapeEncoder``
and ``MLP``, their ``graphormer.create_transformer`` layers (with ``TEN``), and, taken out of ``ghn3_MTL/nn.py``
by their source text (that file imports more than this needs), ``ConvDecoder3LoRA``, ``SequentialMultipleInOut``,
``GHN3._map_net_params``' ``min_sz``, ``GHN3._tile_params`` and ``GHN3._normalize``. Our hypernetwork's weights are
copied into theirs; both predict every tensor of a few ViT specs from our graph and the same task embedding; the
largest difference per spec is printed. The graph is compared on its own: their ``ghn3_MTL/graph.Graph`` traces
torchvision's ViT of each spec's size (``einops``, which only PPUDA's unused ops import, is stubbed if missing), and
its node kinds and virtual-edge distances must equal ours (:func:`learngene.methods.tal.graph_nodes`). The
min_sz rule used on their side is ours (tests/test_tal.py checks it against theirs re-typed).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from learngene.methods.tal import TAL, group_size, spec_graph
from learngene.vit.spec import ViTSpec


def _load_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def their_nn_parts(tal_repo: Path, mlp_cls) -> dict:
    """ConvDecoder3LoRA, SequentialMultipleInOut and GHN3's _tile_params / _normalize, from their source text."""
    source = (tal_repo / "TAL" / "ghn3_MTL" / "nn.py").read_text()
    tree = ast.parse(source)
    wanted: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ("ConvDecoder3LoRA", "SequentialMultipleInOut"):
            wanted.append(node)
        if isinstance(node, ast.ClassDef) and node.name == "GHN3":
            methods = [
                n for n in node.body if isinstance(n, ast.FunctionDef) and n.name in ("_tile_params", "_normalize")
            ]
            wanted.append(ast.ClassDef("GHN3Rules", [], [], methods, [], type_params=[]))
    namespace = {"torch": torch, "nn": nn, "F": F, "np": np, "math": math, "MLP": mlp_cls}
    exec(compile(ast.fix_missing_locations(ast.Module(wanted, [])), "ghn3_MTL/nn.py", "exec"), namespace)
    rules = namespace["GHN3Rules"]()
    rules._is_ghn2, rules.debug_level = False, 0
    namespace["rules"] = rules
    return namespace


def their_prediction(parts, layers, shape_enc, embed, ln, decoder, graph, task, max_shape, seed):
    """GHN3.forward's steps (ghn3_MTL/nn.py lines 431-526) on one graph, with their modules."""
    params_map = {i: ({"sz": n.shape}, None, None) for i, n in enumerate(graph.nodes) if n.shape is not None}
    kinds = torch.tensor([TAL_PRIMITIVES.index(n.kind) for n in graph.nodes])
    x = shape_enc(embed(kinds), params_map).unsqueeze(0)
    n = x.shape[1]
    mask = torch.ones(1, n, n, dtype=torch.bool)
    x = layers(x, task, graph.distances.unsqueeze(0), mask)[0]
    x = ln(x.reshape(-1, x.shape[-1]))
    rules, out = parts["rules"], {}
    for i, node in enumerate(graph.nodes):
        if node.key is None:
            continue
        sz, x_ = node.shape, x[i : i + 1]
        if len(sz) == 1:
            c = group_size(sz[0], max_shape)
            w = decoder(x_, (2 * c, 1, 1, 1), n_dim=1).reshape(1, 2, -1)[0]
            if node.kind == "ln":
                out[node.key] = rules._normalize(None, rules._tile_params(w[0], sz), True, None)
                if node.bias_key is not None:
                    out[node.bias_key] = rules._normalize(None, rules._tile_params(w[1], sz), False, None)
            else:
                out[node.key] = rules._normalize(None, rules._tile_params(w[1], sz), False, None)
            continue
        if node.classifier:
            w = decoder(x_, (group_size(sz[0], max_shape), group_size(sz[1], max_shape), 1, 1), class_pred=True)[0]
        elif len(sz) == 3:
            s = int(np.floor(sz[1] ** 0.5))
            w = decoder(x_, (1, sz[2], s, s))[0]
        elif len(sz) == 2:
            w = decoder(x_, (group_size(sz[0], max_shape), group_size(sz[1], max_shape), 1, 1))[0]
        else:
            w = decoder(x_, (group_size(sz[0], max_shape), group_size(sz[1], max_shape), *sz[2:]))[0]
        torch.manual_seed(seed)  # their class row comes from the global generator; ours from one seeded alike
        out[node.key] = rules._normalize(None, rules._tile_params(w, sz), True, None)
    return out


TAL_PRIMITIVES: tuple[str, ...] = ()


def main() -> None:
    global TAL_PRIMITIVES
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tal_repo", type=Path)
    parser.add_argument("ppuda_repo", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.ppuda_repo))
    from ppuda.deepnets1m.genotypes import PRIMITIVES_DEEPNETS1M
    from ppuda.ghn.layers import ShapeEncoder
    from ppuda.ghn.mlp import MLP

    TAL_PRIMITIVES = tuple(PRIMITIVES_DEEPNETS1M)
    parts = their_nn_parts(args.tal_repo, MLP)
    graphormer = _load_file(args.tal_repo / "TAL" / "ghn3_MTL" / "graphormer.py", "tal_graphormer")
    layer_cls = graphormer.create_transformer(
        nn.Module, nn.Linear, nn.GELU, nn.ReLU, nn.LayerNorm, nn.Dropout, nn.Identity, nn.Sequential
    )["TransformerLayer"]

    torch.manual_seed(0)
    method = TAL(hid=32, layers=2, heads=4, lora_r=6, max_ck=2048, max_shape=64)
    cfg, task_dim, classes = method.config, 24, 10
    from learngene.methods.tal import HyperNet

    ours = HyperNet(cfg, task_dim, classes)
    with torch.no_grad():  # our zero-initialized task modulation would hide the task input: give it weights
        for p in ours.parameters():
            p.add_(0.05 * torch.randn_like(p))
    task = torch.randn(task_dim)

    layers = parts["SequentialMultipleInOut"](
        *[
            layer_cls(
                dim=cfg.hid,
                task_embedding_dim=task_dim,
                num_heads=cfg.heads,
                mlp_ratio=4,
                edge_dim=2 if i == 0 else 0,
                act_layer=nn.GELU,
                return_edges=i < cfg.layers - 1,
            )
            for i in range(cfg.layers)
        ]
    )
    shape_enc = ShapeEncoder(hid=cfg.hid, num_classes=classes, max_shape=(cfg.max_shape, cfg.max_shape, 16, 16))
    embed, ln = nn.Embedding(len(TAL_PRIMITIVES), cfg.hid), nn.LayerNorm(cfg.hid)
    decoder = parts["ConvDecoder3LoRA"](
        in_features=cfg.hid, hid=(4 * cfg.hid, 8 * cfg.hid), ck=cfg.max_ck, r=cfg.lora_r
    )
    with torch.no_grad():
        embed.weight.copy_(ours.embed.weight)
        ln.load_state_dict(ours.ln.state_dict())
        shape_enc.embed_channel.weight.copy_(ours.embed_channel.weight)
        shape_enc.embed_spatial.weight.copy_(ours.embed_spatial.weight)
        for k in (0, 2, 4):
            decoder.mlp.fc[k].load_state_dict(ours.decoder[k].state_dict())
        decoder.l2.load_state_dict(ours.l2.state_dict())
        for theirs, mine in zip(layers, ours.gnn, strict=True):
            theirs.ln1.load_state_dict(mine.ln1.state_dict())
            theirs.ln2.load_state_dict(mine.ln2.state_dict())
            theirs.TEN.fc_gamma.load_state_dict(mine.fc_gamma.state_dict())
            theirs.TEN.fc_beta.load_state_dict(mine.fc_beta.state_dict())
            theirs.attn.to_qkv.load_state_dict(mine.to_qkv.state_dict())
            theirs.attn.to_out[0].load_state_dict(mine.to_out.state_dict())
            theirs.ff.net[0].load_state_dict(mine.ff[0].state_dict())
            theirs.ff.net[3].load_state_dict(mine.ff[2].state_dict())
            if mine.first:
                theirs.attn.edge_embed.embed.load_state_dict(mine.edge_embed.state_dict())
                theirs.attn.proj_e[0].load_state_dict(mine.proj_e[0].state_dict())
                theirs.attn.proj_e[2].load_state_dict(mine.proj_e[2].state_dict())
                for name in ("centrality_embed_in", "centrality_embed_out", "input_dist_embed"):
                    setattr(theirs, name, getattr(mine, name))  # GHN3.fix_embed_layers puts them on gnn[0]

    specs = [
        ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, num_classes=10),
        ViTSpec(depth=3, embed_dim=96, num_heads=3, img_size=32, patch_size=4, num_classes=10),
        ViTSpec(depth=1, embed_dim=48, num_heads=4, img_size=28, patch_size=7, num_classes=5).replace(
            global_pool="avg", class_token=False
        ),
    ]
    worst = 0.0
    for spec in specs:
        graph = spec_graph(spec, cfg.ve_cutoff)
        with torch.no_grad():
            mine = method.predict(ours, task, spec)
            theirs = their_prediction(
                parts, layers, shape_enc, embed, ln, decoder, graph, task, cfg.max_shape, cfg.seed
            )
        assert set(mine) == set(theirs), set(mine) ^ set(theirs)
        diff = max(float((mine[k] - theirs[k]).abs().max()) for k in mine)
        scale = max(float(theirs[k].abs().max()) for k in theirs)
        worst = max(worst, diff)
        print(f"{spec.short():>14}: {len(mine)} tensors, max |ours - theirs| = {diff:.3g} (largest value {scale:.3g})")
    print(f"worst: {worst:.3g}")
    compare_graphs(args.tal_repo, specs)


def compare_graphs(tal_repo: Path, specs: list[ViTSpec]) -> None:
    """Their tracer on torchvision's ViT of each spec's size against our graph: node kinds and distances."""
    import types

    import torchvision

    if importlib.util.find_spec("einops") is None:
        stub = types.ModuleType("einops")
        stub.rearrange = None  # type: ignore[attr-defined]
        sys.modules["einops"] = stub
    package = types.ModuleType("ghn3_MTL")  # their package's __init__ imports their trainer and its dependencies
    package.__path__ = [str(tal_repo / "TAL" / "ghn3_MTL")]
    sys.modules["ghn3_MTL"] = package
    from ghn3_MTL.graph import Graph  # type: ignore[import-not-found]

    for spec in specs:
        if not spec.class_token:
            print(f"{spec.short():>14}: graph not compared (torchvision's ViT always has a class token)")
            continue
        net = torchvision.models.VisionTransformer(
            image_size=spec.img_size,
            patch_size=spec.patch_size,
            num_layers=spec.depth,
            num_heads=spec.num_heads,
            hidden_dim=spec.embed_dim,
            mlp_dim=spec.mlp_hidden,
            num_classes=spec.num_classes,
        )
        net.expected_input_sz = spec.img_size
        theirs = Graph(net, ve_cutoff=50, verbose=False)
        ours = spec_graph(spec, 50)
        kinds = [TAL_PRIMITIVES[int(i)] for i in theirs.node_feat[:, 0]]
        same_kinds = kinds == [n.kind for n in ours.nodes]
        same_edges = same_kinds and torch.equal(theirs._Adj.long(), ours.distances)
        print(
            f"{spec.short():>14}: their traced graph has {len(kinds)} nodes; kinds equal: {same_kinds}, "
            f"distances equal: {same_edges}"
        )


if __name__ == "__main__":
    main()
