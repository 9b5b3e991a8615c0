"""A stitched ViT: the first blocks of one timm ViT, a linear stitch layer, the last blocks of a wider one.

Learngene Pool's descendants as its authors build them (:mod:`learngene.methods.pool`, ``design=authors``):
instance ``front`` embeds the image and runs its blocks ``0..cut_front``; a learned ``Linear`` maps its
tokens to the width of instance ``end``, whose blocks ``cut_end..`` run next, then its final norm, pooling
and head. Its width changes once, midway, so it is not a timm ``VisionTransformer`` and no ``ViTSpec``
describes it: it is this small module of two timm ViTs' parts, trained like any model by the one training loop
(``learngene train`` reads it). Its file (both specs and the cut in the header) is :mod:`learngene.formats.stitched`.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ..errors import LearngeneError
from .eva import block_inputs
from .spec import ViTSpec


def stitched_forward(
    front: Any, front_blocks: nn.Module, stitch: nn.Module, end_blocks: nn.Module, end: Any, x: Tensor
) -> Tensor:
    """``front``'s embeddings, ``front_blocks``, ``stitch``, ``end_blocks``, then ``end``'s final norm and head."""
    x, _ = block_inputs(front, x)  # no block arguments: RoPE families are refused
    x = end_blocks(stitch(front_blocks(x)))
    return end.forward_head(end.norm(x))


class StitchedViT(nn.Module):
    """``front``'s embeddings and blocks ``0..cut_front``, ``stitch``, ``end``'s blocks ``cut_end..`` and head."""

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
