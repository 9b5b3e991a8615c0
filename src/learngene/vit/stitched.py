"""A stitched ViT: the first blocks of one timm ViT, a linear stitch layer, the last blocks of a wider one.

Learngene Pool's descendants as its authors build them (:mod:`learngene.methods.pool`, ``design=authors``):
instance ``front`` embeds the image and runs its blocks ``0..cut_front``; a learned ``Linear`` maps its
tokens to the width of instance ``end``, whose blocks ``cut_end..`` run next, then its final norm, pooling
and head. Its width changes once, midway, so it is not a timm ``VisionTransformer`` and no ``ViTSpec``
describes it: it is this small module of two timm ViTs' parts, saved to and loaded from one safetensors
file whose metadata holds both specs and the cut, and trained like any model by the one training loop.
"""

from __future__ import annotations

import json
import os

from torch import Tensor, nn

from ..errors import LearngeneError
from ..formats.weights import read_safetensors, save_safetensors
from .eva import block_inputs
from .spec import ViTSpec

FORMAT = "learngene.stitched_vit"


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
        front, end = self.front, self.end
        x, _ = block_inputs(front, x)  # no block arguments: RoPE families are refused
        x = end.blocks(self.stitch(front.blocks(x)))
        return end.forward_head(end.norm(x))

    def config(self) -> dict:
        return {
            "format": FORMAT,
            "front": self.specs[0].to_dict(),
            "end": self.specs[1].to_dict(),
            "cut_front": self.cut_front,
            "cut_end": self.cut_end,
        }

    def save(self, path: str | os.PathLike) -> None:
        save_safetensors(path, self.state_dict(), {"stitched_vit": json.dumps(self.config())})

    @classmethod
    def load(cls, path: str | os.PathLike) -> StitchedViT:
        tensors, metadata = read_safetensors(path)
        try:
            config = json.loads(metadata["stitched_vit"])
        except (KeyError, ValueError):
            raise LearngeneError(
                f"{path} is not a stitched ViT (no stitched_vit metadata); load it as a model file"
            ) from None
        model = cls(
            ViTSpec.from_dict(config["front"]), ViTSpec.from_dict(config["end"]), config["cut_front"], config["cut_end"]
        )
        model.load_state_dict(tensors, strict=True)
        return model
