"""PITH's hypernetwork: TAL's graph encoder without task modulation, GHN-3's decoder widened gradually, a second
decoder of the projections P and Q, and the fusion ``W = (1−α)·W_ghn + α·P·W_t·Q`` with the ancestry's tensor
``W_t`` of the same name and layer (:mod:`learngene.methods.pith` explains the design)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..vit.spec import ViTSpec, block_key
from ._tal_graph import Graph, Node
from ._tal_hypernet import GraphEncoder, block_shape, factor_mlp, vector_params
from ._tal_params import lora_blocks, normalize, tile_params

if TYPE_CHECKING:
    from .pith import PITHConfig


class GradualExpansion(nn.Module):
    """``ConvDecoder3LoRA_Gradual``'s widening of each row of the ``2r × r`` factor matrix: ``r → 2r → 4r → ck``, a
    ReLU between (the ReLU before the first is :func:`~learngene.methods._tal_params.lora_block`'s)."""

    def __init__(self, r: int, ck: int):
        super().__init__()
        self.out_features = ck
        self.step1, self.step2, self.step3 = nn.Linear(r, 2 * r), nn.Linear(2 * r, 4 * r), nn.Linear(4 * r, ck)

    def forward(self, rows: Tensor) -> Tensor:
        return self.step3(torch.relu(self.step2(torch.relu(self.step1(rows)))))


class Inherited(nn.Module):
    """The ancestry's tensors the fusion reads, as buffers under their plain-ViT keys (a submodule per part of the
    key, so that ``state_dict`` names them ``blocks.0.attn.qkv.weight``): they move with the hypernetwork, and on
    expansion they are the gene's tensors themselves (``functional_call``), so the expansion is differentiable in
    them."""

    def __init__(self, tensors: dict[str, Tensor]):
        super().__init__()
        for key, tensor in tensors.items():
            *path, leaf = key.split(".")
            module: nn.Module = self
            for part in path:
                if part not in dict(module.named_children()):
                    module.add_module(part, nn.Module())
                module = module.get_submodule(part)
            module.register_buffer(leaf, tensor)


def fused(node: Node) -> bool:
    """Whether PITH fuses ``node``'s tensor with the ancestry's: every tensor their ``GHN3.forward`` predicts from a
    4-entry group key (matrices, the patch kernel, the position embedding), not the classifier, norms or biases."""
    return node.key is not None and node.shape is not None and len(node.shape) > 1 and not node.classifier


def project(both: Tensor, ancestral: Tensor, shape: tuple[int, int, int, int]) -> Tensor:
    """``P·W_t·Q`` at every kernel position, ``P`` (m_s × m_t) and ``Q`` (n_t × n_s) the corners of ``both``."""
    (m_s, n_s), (m_t, n_t) = shape[:2], ancestral.shape[:2]
    return torch.einsum("ij,jklm,kn->inlm", both[:m_s, :m_t], ancestral, both[:n_t, :n_s])


class PITHHyperNet(GraphEncoder):
    """Their ``ghn3.nn_pith.GHN3`` with ``lora=True``, ``use_1d_decoder=False``, ``layernorm=True``,
    ``weight_norm=True``: predicts a timm state_dict for a spec, fused with ``inherited`` (the ancestry's tensors
    under plain-ViT keys, :func:`fused`'s of ``ancestry``'s graph)."""

    def __init__(self, cfg: PITHConfig, num_classes: int, ancestry: ViTSpec, inherited: dict[str, Tensor]):
        cfg.require_sized()
        super().__init__(cfg.hid, cfg.heads, cfg.layers, 0, num_classes, cfg.ve_cutoff)
        self.cfg, self.ancestry = cfg, ancestry
        self.fusion = nn.Parameter(torch.tensor(float(cfg.fusion_init)))  # β; α = sigmoid(β), shared by all tensors
        self.decoder = factor_mlp(cfg.hid, cfg.lora_r)  # their ``decoder`` (ConvDecoder3LoRA_Gradual)
        self.widen = GradualExpansion(cfg.lora_r, cfg.max_ck)
        self.decoder_pq = factor_mlp(cfg.hid, cfg.lora_r)  # their ``decoderpq`` (ConvDecoder3LoRA)
        self.l2_pq = nn.Linear(cfg.lora_r, cfg.max_ck)
        self.inherited = Inherited(inherited)
        self.init_embeddings()

    def grouped(self, n: int) -> int:
        """The size an axis is predicted at (:meth:`PITHConfig.axis_size`)."""
        return self.cfg.axis_size(n)

    def forward(self, spec: ViTSpec, class_row: Tensor) -> dict[str, Tensor]:
        """Every tensor of ``spec``'s timm ViT the graph holds (plain-ViT keys), differentiable in the weights and in
        the inherited tensors."""
        graph, x, rows = self.encode(spec, None)
        return self.decode(graph, x, rows, class_row)

    def decode(self, graph: Graph, x: Tensor, rows: list[int], class_row: Tensor) -> dict[str, Tensor]:
        """The tensors of ``graph``'s nodes ``rows`` from their embeddings ``x`` (their ``GHN3.forward`` after the
        Graphormer). Each decoder widens the factor rows of every node in one call (:func:`lora_blocks`)."""
        nodes = [graph.nodes[i] for i in rows]
        wanted: list[tuple[tuple[int, int, int, int], int]] = []
        ancestrals: list[Tensor | None] = []
        for node in nodes:
            assert node.key is not None and node.shape is not None
            if len(node.shape) == 1:  # a bias or a norm: (2, c), the gain at 0 and the bias at 1
                wanted.append(((2 * self.grouped(node.shape[0]), 1, 1, 1), 1))
                ancestrals.append(None)
                continue
            shape = block_shape(node.shape, self.grouped)
            wanted.append((shape, 2 if node.classifier else 4))
            ancestrals.append(self.ancestral(node.key, shape) if fused(node) else None)
        blocks = lora_blocks(self.decoder(x[rows]), self.widen, self.cfg.lora_r, list(wanted))
        products = self.projection_products(x, rows, wanted, ancestrals)
        alpha = torch.sigmoid(self.fusion)
        out: dict[str, Tensor] = {}
        for node, block, (shape, _), ancestral, both in zip(nodes, blocks, wanted, ancestrals, products, strict=True):
            assert node.key is not None and node.shape is not None and block is not None
            if len(node.shape) == 1:
                out.update(vector_params(node, block.reshape(2, -1)))
                continue
            if ancestral is not None and both is not None:
                block = (1 - alpha) * block + alpha * project(both, ancestral, shape)
            out[node.key] = normalize(tile_params(block, node.shape, class_row), True)
        return out

    def projection_products(
        self,
        x: Tensor,
        rows: list[int],
        wanted: list[tuple[tuple[int, int, int, int], int]],
        ancestrals: list[Tensor | None],
    ) -> list[Tensor | None]:
        """For each fused node the one ``A·B`` product of ``decoder_pq`` that holds its ``P`` and ``Q`` as corners
        (their ``decoderpq`` called twice on the same embedding, at ``(m_s, m_t)`` and ``(n_t, n_s)``); None for
        the others."""
        corners: list[tuple[tuple[int, int, int, int], int] | None] = []
        for (shape, _), ancestral in zip(wanted, ancestrals, strict=True):
            if ancestral is None:
                corners.append(None)
                continue
            (m_s, n_s), (m_t, n_t) = shape[:2], ancestral.shape[:2]
            corners.append(((max(m_s, n_t), max(m_t, n_s), 1, 1), 2))
        chosen = [i for i, c in enumerate(corners) if c is not None]
        if not chosen:
            return [None] * len(corners)
        factors = self.decoder_pq(x[[rows[i] for i in chosen]])
        products = iter(lora_blocks(factors, self.l2_pq, self.cfg.lora_r, [corners[i] for i in chosen]))
        return [None if c is None else next(products) for c in corners]

    def source_key(self, key: str) -> str:
        """The ancestry's key for a descendant's ``key``: the same name and layer, a layer past the ancestry's last
        read at its last (their ``_map_student_layer_to_teacher``)."""
        if not key.startswith("blocks."):
            return key
        layer, name = key.removeprefix("blocks.").split(".", 1)
        return block_key(min(int(layer), self.ancestry.depth - 1), name)

    def ancestral(self, key: str, shape: tuple[int, int, int, int]) -> Tensor | None:
        """The ancestry's tensor for ``key`` as a 4-D block whose kernel sides are ``shape``'s (their
        ``_apply_map_net_params_transform``): a matrix as ``(m, n, 1, 1)``, the patch kernel as it is (resampled to
        another patch size as FlexiViT does), the position table's patch rows as a ``(1, D, g, g)`` grid (resampled
        to another grid); None when the ancestry has no such tensor."""
        source = self.source_key(key)
        try:
            tensor = self.inherited.get_buffer(source)
        except AttributeError:
            return None
        if tensor.dim() == 2:
            return tensor[:, :, None, None]
        if tensor.dim() == 4:
            if tuple(tensor.shape[2:]) == shape[2:]:
                return tensor
            from timm.layers import resample_patch_embed  # timm takes seconds to import: on use only

            return resample_patch_embed(tensor, list(shape[2:]), verbose=False)
        grid = self.ancestry.grid_size
        patches = tensor[:, self.ancestry.family.pos_prefix_tokens :]
        if grid != shape[2]:
            from timm.layers import resample_abs_pos_embed

            patches = resample_abs_pos_embed(
                patches, new_size=list(shape[2:]), old_size=[grid, grid], num_prefix_tokens=0, verbose=False
            )
        return patches.transpose(1, 2).reshape(1, tensor.shape[2], shape[2], shape[3])
