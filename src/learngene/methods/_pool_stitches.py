"""Learngene Pool's stitches, in the authors' design: which (front block, end block) pairs exist and the stitch
layer each shares, their keys in the gene, their least-squares start, the whole pool as one network for their
joint training, and the stitched ViT a stitched descendant is (:mod:`learngene.methods.pool` explains the design).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor, nn

from ..errors import LearngeneError
from ..training.loop import step_draw
from ..vit.eva import block_inputs
from ..vit.spec import ViTSpec

STITCHED_MODEL_FORMAT = "learngene-stitched-model"  # the header tag of a StitchedViT's file (not a timm ViT's)


def stitched_forward(
    front: Any, front_blocks: nn.Module, stitch: nn.Module, end_blocks: nn.Module, end: Any, x: Tensor
) -> Tensor:
    """``front``'s embeddings, ``front_blocks``, ``stitch``, ``end_blocks``, then ``end``'s final norm and head."""
    x, _ = block_inputs(front, x)  # no block arguments: RoPE families are refused
    x = end_blocks(stitch(front_blocks(x)))
    return end.forward_head(end.norm(x))


class StitchedViT(nn.Module):
    """A stitched ViT: ``front``'s embeddings and blocks ``0..cut_front``, a linear ``stitch`` to ``end``'s width,
    ``end``'s blocks ``cut_end..``, then its final norm, pooling and head.

    Learngene Pool's descendants as its authors build them (``design=authors``, :func:`stitched_descendant
    <learngene.methods.pool.stitched_descendant>`). Its width changes once, midway, so it is not a timm
    ``VisionTransformer`` and no ``ViTSpec`` describes it: it is this small module of two timm ViTs' parts, trained
    like any model by the one training loop (``learngene train`` reads it). Its file (both specs and the cut in the
    header, tagged ``file_format``) is pool's declared model format (``methods/_pool_stitched_file.py``).
    """

    file_format = STITCHED_MODEL_FORMAT  # how generic code finds the file format it is written in

    def __init__(self, front: ViTSpec, end: ViTSpec, cut_front: int, cut_end: int):
        super().__init__()
        if not (0 <= cut_front < front.depth and 0 <= cut_end < end.depth):
            raise LearngeneError(
                f"a stitch after block {cut_front} of a {front.depth}-block ViT into block {cut_end} of a "
                f"{end.depth}-block one does not exist; pick blocks within both"
            )
        if front.family.rope:
            raise LearngeneError(
                "a stitched ViT cannot carry a RoPE table across head widths; stitch a family without RoPE"
            )
        if front.family != end.family or front.img_size != end.img_size or front.patch_size != end.patch_size:
            raise LearngeneError(
                "stitched ViTs must share family, image size and patch size: they pass one token sequence"
            )
        self.specs, self.cut_front, self.cut_end = (front, end), cut_front, cut_end
        self.front = front.create_model()
        self.front.blocks = self.front.blocks[: cut_front + 1]
        for name in ("norm", "fc_norm", "head", "head_drop", "attn_pool"):  # front's tail is never run
            if getattr(self.front, name, None) is not None:
                setattr(self.front, name, nn.Identity())
        self.stitch = nn.Linear(front.embed_dim, end.embed_dim)
        self.end = end.create_model()
        self.end.blocks = self.end.blocks[cut_end:]
        self.end.patch_embed = nn.Identity()  # end's embeddings are never run
        for name in ("pos_embed", "cls_token", "reg_token", "dist_token"):
            if getattr(self.end, name, None) is not None:
                setattr(self.end, name, None)

    @property
    def depth(self) -> int:
        return len(self.front.blocks) + len(self.end.blocks)

    def forward(self, x: Tensor) -> Tensor:
        return stitched_forward(self.front, self.front.blocks, self.stitch, self.end.blocks, self.end, x)

    # what the training loop and distillation read from a timm ViT: its input, head and pooled width
    @property
    def patch_embed(self) -> nn.Module:
        return self.front.patch_embed

    @property
    def num_classes(self) -> int:
        return int(self.end.num_classes)

    @property
    def num_features(self) -> int:
        return int(self.end.num_features)

    def get_classifier(self) -> nn.Module:
        return self.end.get_classifier()

    @property
    def head_spec(self) -> ViTSpec:
        """The spec of its head side (``end``'s), whose scratch classifier a fresh head takes
        (:func:`learngene.pipeline.fine_tuning.fresh_head`)."""
        return self.specs[1]

    def reset_classifier(self, num_classes: int) -> None:
        """A fresh head of ``num_classes`` outputs (timm's initialization), as timm's ``reset_classifier``."""
        self.end.reset_classifier(num_classes)
        self.specs = (self.specs[0], self.specs[1].replace(num_classes=num_classes))

    def no_weight_decay(self) -> set[str]:
        return {n for m in (self.front, self.end) for n in getattr(m, "no_weight_decay", lambda: set())()}

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def short(self) -> str:
        front, end = self.specs
        return f"{front.short()}[..{self.cut_front}] -> {end.short()}[{self.cut_end}..]"


def paired_stitches(depth: int) -> list[tuple[int, int, int]]:
    """``(front block, end block, stitch layer)`` of every stitch between two ``depth``-block instances.

    Their ``paired_stitching`` (kernel 2, stride 1): a window over blocks ``i, i+1`` slides one block at a time;
    every (front, end) pair inside it not seen before is a stitch, and the window's pairs share one stitch layer.
    """
    out: list[tuple[int, int, int]] = []
    seen: set[tuple[int, int]] = set()
    layer = 0
    for i in range(depth):
        window = range(i, min(i + 2, depth))
        new = [(j, k) for j in window for k in window if (j, k) not in seen]
        seen.update(new)
        out += [(j, k, layer) for j, k in new]
        layer += bool(new)
    return out


def stitch_key(front: int, end: int, layer: int, name: str) -> str:
    return f"stitch{front}_{end}.{layer}.{name}"


def least_squares_stitch(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Weight and bias of the affine map closest to ``x -> y`` in least squares (their ``ps_inv``): ``[x 1]⁺ y``."""
    x, y = x.reshape(-1, x.shape[-1]).double(), y.reshape(-1, y.shape[-1]).double()
    solution = torch.linalg.pinv(torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)) @ y
    return solution[:-1].T.float(), solution[-1].float()


def fit_stitches(tokens: list[list[Tensor]], depth: int) -> dict[str, Tensor]:
    """The start of every stitch layer from each instance into every wider one (their ``snnet`` initialization): the
    least-squares fit from the front block's output ``tokens`` to those entering the end block (:func:`block_tokens`
    of each instance, narrowest first), the fits of a window's pairs averaged, as their layer is shared."""
    tensors: dict[str, Tensor] = {}
    for front in range(len(tokens)):
        for end in range(front + 1, len(tokens)):
            fits: dict[int, list[tuple[Tensor, Tensor]]] = {}
            for j, k, layer in paired_stitches(depth):
                fits.setdefault(layer, []).append(least_squares_stitch(tokens[front][j + 1], tokens[end][k]))
            for layer, pairs in fits.items():  # a layer shared by its window's stitches: their fits averaged
                tensors[stitch_key(front, end, layer, "weight")] = torch.stack([w for w, _ in pairs]).mean(0)
                tensors[stitch_key(front, end, layer, "bias")] = torch.stack([b for _, b in pairs]).mean(0)
    return tensors


def block_tokens(model: nn.Module, images: Tensor) -> list[Tensor]:
    """The tokens entering each block of a timm ViT, then those leaving the last."""
    x, kwargs = block_inputs(model, images)
    tokens = [x]
    for block, own in zip(cast(nn.Sequential, model.blocks), kwargs):
        x = block(x, **own)
        tokens.append(x)
    return tokens


def _linear(tensors: dict[str, Tensor], prefix: str) -> nn.Linear:
    """A stitch layer holding ``tensors``' ``{prefix}weight`` and ``{prefix}bias``."""
    weight = tensors[prefix + "weight"]
    linear = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(tensors[prefix + "bias"])
    return linear


class JointPool(nn.Module):
    """The whole pool as one network for their third step: each training forward runs one configuration drawn
    at random, an instance alone ``(i,)`` or a stitched one ``(front, end, cut_front, cut_end, layer)``.

    Their draws (``LearngenePool.forward``, configurations 0, 2 and 19–34 of 6-block instances): the narrowest
    instance, the widest, and every stitch from the narrowest into the widest, uniformly. The draw of the
    ``n``-th training forward depends only on the seed and ``n`` (a buffer, saved in the loop's checkpoints),
    so a run is the same bit for bit, resumed or not. In eval mode it is the widest instance.
    """

    def __init__(self, models: list[nn.Module], tensors: dict[str, Tensor], seed: int):
        """``models``: the instances, narrowest first; their stitches start from the gene's ``tensors``."""
        super().__init__()
        self.instances = nn.ModuleList(models)
        last = len(models) - 1
        depth = len(cast(nn.Sequential, cast(Any, models[0]).blocks))
        layers = sorted({layer for _, _, layer in paired_stitches(depth)})
        self.stitches = nn.ModuleDict(
            {
                f"{front}_{end}": nn.ModuleList(_linear(tensors, stitch_key(front, end, layer, "")) for layer in layers)
                for front in range(last + 1)
                for end in range(front + 1, last + 1)
            }
        )
        self.draws: list[tuple[int, ...]] = [(0,), (last,)] if last else [(0,)]
        if last:
            self.draws += [(0, last, j, k, layer) for j, k, layer in paired_stitches(depth)]
        self.seed = seed
        self.drawn: Tensor
        self.register_buffer("drawn", torch.zeros((), dtype=torch.long))

    def gene_tensors(self) -> dict[str, Tensor]:
        """The pool's weights under the gene's keys (``instance{i}.…``, ``stitch{f}_{e}.…``), on the CPU."""
        renamed = (("instances.", "instance"), ("stitches.", "stitch"))
        return {
            key.replace(old, new, 1): value.detach().cpu().clone()
            for key, value in self.state_dict().items()
            for old, new in renamed
            if key.startswith(old)
        }

    @property
    def skeleton(self) -> nn.Module:
        """The widest instance: what the loop checks the data and the activation memory against."""
        return self.instances[-1]

    def no_weight_decay(self) -> set[str]:
        return {name for m in self.instances for name in getattr(m, "no_weight_decay", lambda: set())()}

    def draw(self) -> tuple[int, ...]:
        choice = self.draws[step_draw(self.seed, int(self.drawn), len(self.draws))]
        self.drawn += 1
        return choice

    def forward(self, x: Tensor) -> Tensor:
        if not self.training:
            return self.instances[-1](x)
        choice = self.draw()
        if len(choice) == 1:
            return self.instances[choice[0]](x)
        front, end, j, k, layer = choice
        first, last = cast(Any, self.instances[front]), cast(Any, self.instances[end])
        stitch = cast(nn.ModuleList, self.stitches[f"{front}_{end}"])[layer]
        return stitched_forward(first, first.blocks[: j + 1], stitch, last.blocks[k:], last, x)
