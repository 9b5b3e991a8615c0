"""ViT specs: the sizes a learngene expands into.

A :class:`ViTSpec` maps one-to-one onto the keyword arguments of ``timm.create_model`` for a plain
``VisionTransformer``; it also knows the shape of every tensor in that model's state_dict, and so its
parameter count, and its forward FLOPs. Every other module asks the spec, never timm's model, for
key names and shapes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Literal

from .errors import SpecError

# The timm architecture every spec is built from; the kwargs below override all of its sizes.
TIMM_ARCH = "vit_tiny_patch16_224"

# Per-block tensors, in timm's naming, in the order timm's state_dict lists them.
BLOCK_PARAMS = (
    "norm1.weight",
    "norm1.bias",
    "attn.qkv.weight",
    "attn.qkv.bias",
    "attn.proj.weight",
    "attn.proj.bias",
    "norm2.weight",
    "norm2.bias",
    "mlp.fc1.weight",
    "mlp.fc1.bias",
    "mlp.fc2.weight",
    "mlp.fc2.bias",
)


# Sizes beyond these are refused before anything is built. They lie far past any ViT trained today; a typo or
# a forged header (depth 10^8, width 10^6) would otherwise exhaust memory long before an error could say why.
SIZE_LIMITS = {"depth": 4096, "embed_dim": 65536, "num_heads": 65536, "mlp_ratio": 64, "img_size": 16384,
               "patch_size": 16384, "in_chans": 1024, "num_classes": 10_000_000}
MAX_TOKENS = 2**16 + 1  # a 256 x 256 patch grid and a class token


def available_memory() -> int | None:
    """Bytes of memory free for new allocations (Linux ``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def block_key(layer: int, name: str) -> str:
    """timm's state_dict key of tensor ``name`` (one of :data:`BLOCK_PARAMS`) in block ``layer``."""
    return f"blocks.{layer}.{name}"


@dataclass(frozen=True)
class ViTSpec:
    """The size of a timm Vision Transformer.

    Args:
        depth: number of transformer blocks.
        embed_dim: token width D.
        num_heads: attention heads per block; must divide ``embed_dim``.
        mlp_ratio: MLP hidden width = ``int(embed_dim * mlp_ratio)``.
        img_size: square input resolution in pixels.
        patch_size: square patch size; must divide ``img_size``.
        in_chans: input channels.
        num_classes: classifier outputs (0 = no head).
        global_pool: ``"token"`` (class token) or ``"avg"`` (mean of patch tokens, timm's fc_norm).
        class_token: whether the model has a class token (required by ``"token"`` pooling).
    """

    depth: int = 12
    embed_dim: int = 192
    num_heads: int = 3
    mlp_ratio: float = 4.0
    img_size: int = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    global_pool: Literal["token", "avg"] = "token"
    class_token: bool = True

    def __post_init__(self) -> None:
        for name in ("depth", "embed_dim", "num_heads", "img_size", "patch_size", "in_chans"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.num_classes, int) or isinstance(self.num_classes, bool) or self.num_classes < 0:
            raise SpecError(f"num_classes must be a non-negative integer, got {self.num_classes!r}")
        if not (isinstance(self.mlp_ratio, (int, float)) and not isinstance(self.mlp_ratio, bool)
                and math.isfinite(self.mlp_ratio) and self.mlp_ratio > 0):
            raise SpecError(f"mlp_ratio must be a positive finite number, got {self.mlp_ratio!r}; use e.g. mlp_ratio 4")
        for name, limit in SIZE_LIMITS.items():
            if getattr(self, name) > limit:
                raise SpecError(f"{name}={getattr(self, name)!r} is beyond the largest this library builds ({limit:,}); "
                                f"choose a smaller {name}")
        if not isinstance(self.class_token, bool):
            raise SpecError(f"class_token must be true or false, got {self.class_token!r}")
        if self.embed_dim % self.num_heads:
            raise SpecError(
                f"num_heads={self.num_heads} does not divide embed_dim={self.embed_dim}; "
                f"choose a head count that divides the width"
            )
        if self.img_size % self.patch_size:
            raise SpecError(
                f"patch_size={self.patch_size} does not divide img_size={self.img_size}; "
                f"choose a patch size that divides the image size"
            )
        if self.global_pool not in ("token", "avg"):
            raise SpecError(f"global_pool must be 'token' or 'avg', got {self.global_pool!r}")
        if self.global_pool == "token" and not self.class_token:
            raise SpecError("global_pool='token' needs class_token=True; use global_pool='avg' without one")
        if self.mlp_hidden < 1:
            raise SpecError(f"mlp_ratio={self.mlp_ratio} gives an empty MLP at embed_dim={self.embed_dim}")
        if self.num_tokens > MAX_TOKENS:
            raise SpecError(f"img_size={self.img_size} with patch_size={self.patch_size} gives {self.num_tokens:,} tokens, "
                            f"more than the {MAX_TOKENS:,} this library builds; choose a smaller img_size or a larger "
                            f"patch_size")

    # ---- derived sizes ---------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        return int(self.embed_dim * self.mlp_ratio)

    @property
    def grid_size(self) -> int:
        return self.img_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid_size**2

    @property
    def num_tokens(self) -> int:
        return self.num_patches + int(self.class_token)

    @property
    def final_norm_key(self) -> str:
        """timm puts the final LayerNorm before pooling ("norm") or, for avg pooling, after ("fc_norm")."""
        return "fc_norm" if self.global_pool == "avg" else "norm"

    # ---- timm ------------------------------------------------------------------------------------
    def timm_kwargs(self) -> dict[str, Any]:
        return dict(
            depth=self.depth,
            embed_dim=self.embed_dim,
            num_heads=self.num_heads,
            mlp_ratio=self.mlp_ratio,
            img_size=self.img_size,
            patch_size=self.patch_size,
            in_chans=self.in_chans,
            num_classes=self.num_classes,
            global_pool=self.global_pool,
            class_token=self.class_token,
        )

    def create_model(self, **overrides: Any):
        """A freshly initialized timm ``VisionTransformer`` of this size (never downloads).

        Raises:
            SpecError: if its parameters alone would not fit in the memory this machine has free.
        """
        import timm

        self.require_memory()
        return timm.create_model(TIMM_ARCH, pretrained=False, **{**self.timm_kwargs(), **overrides})

    # ---- tensors, parameters, FLOPs -------------------------------------------------------------
    def block_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every tensor in one block, keyed by :data:`BLOCK_PARAMS` names."""
        D, H = self.embed_dim, self.mlp_hidden
        return {
            "norm1.weight": (D,),
            "norm1.bias": (D,),
            "attn.qkv.weight": (3 * D, D),
            "attn.qkv.bias": (3 * D,),
            "attn.proj.weight": (D, D),
            "attn.proj.bias": (D,),
            "norm2.weight": (D,),
            "norm2.bias": (D,),
            "mlp.fc1.weight": (H, D),
            "mlp.fc1.bias": (H,),
            "mlp.fc2.weight": (D, H),
            "mlp.fc2.bias": (D,),
        }

    def non_block_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of the tensors outside the blocks: embeddings, final norm, classifier."""
        D = self.embed_dim
        shapes: dict[str, tuple[int, ...]] = {}
        if self.class_token:
            shapes["cls_token"] = (1, 1, D)
        shapes["pos_embed"] = (1, self.num_tokens, D)
        shapes["patch_embed.proj.weight"] = (D, self.in_chans, self.patch_size, self.patch_size)
        shapes["patch_embed.proj.bias"] = (D,)
        shapes[f"{self.final_norm_key}.weight"] = (D,)
        shapes[f"{self.final_norm_key}.bias"] = (D,)
        if self.num_classes:
            shapes["head.weight"] = (self.num_classes, D)
            shapes["head.bias"] = (self.num_classes,)
        return shapes

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every key of the timm model's state_dict and its shape."""
        shapes = self.non_block_shapes()
        for layer in range(self.depth):
            for name, shape in self.block_shapes().items():
                shapes[block_key(layer, name)] = shape
        return shapes

    @property
    def num_params(self) -> int:
        return sum(math.prod(s) for s in self.state_shapes().values())

    @property
    def flops(self) -> int:
        """Forward FLOPs of one image (2 per multiply-add; matmuls only, as papers count them)."""
        D, N, Hm = self.embed_dim, self.num_tokens, self.mlp_hidden
        patch = self.num_patches * D * self.in_chans * self.patch_size**2
        attn = N * D * 3 * D + 2 * N * N * D + N * D * D
        mlp = 2 * N * D * Hm
        head = D * self.num_classes
        return 2 * (patch + self.depth * (attn + mlp) + head)

    def require_memory(self, copies: int = 1) -> None:
        """Refuse, before allocating, a size whose fp32 parameters (× ``copies``) exceed the free memory."""
        free = available_memory()
        need = 4 * self.num_params * copies
        if free is not None and need > free:
            raise SpecError(f"a {self.short()} ViT needs {need / 2**30:,.1f} GiB for its {self.num_params:,} parameters "
                            f"but this machine has {free / 2**30:,.1f} GiB free; choose a smaller depth, width or image size")

    # ---- (de)serialization ----------------------------------------------------------------------
    def replace(self, **changes: Any) -> "ViTSpec":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ViTSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"unknown spec field(s) {sorted(unknown)}; remove them (known fields: {', '.join(sorted(known))})")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "ViTSpec":
        return cls.from_dict(json.loads(text))

    def short(self) -> str:
        """Compact human-readable size, e.g. ``L6-D96-H3``."""
        return f"L{self.depth}-D{self.embed_dim}-H{self.num_heads}"


def spec_from_model(model) -> ViTSpec:
    """Read the spec of a timm ``VisionTransformer`` instance.

    Raises:
        SpecError: if ``model`` is not a plain timm ViT this library can describe.
    """
    from timm.models.vision_transformer import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise SpecError(f"{type(model).__name__} is not a timm VisionTransformer; this method needs a ViT ancestry")
    embed = model.patch_embed
    img = embed.img_size
    patch = embed.patch_size
    if img[0] != img[1] or patch[0] != patch[1]:
        raise SpecError(f"only square images and patches are supported, got img {img} and patch {patch}")
    block = model.blocks[0]
    D = model.embed_dim
    spec = ViTSpec(
        depth=len(model.blocks),
        embed_dim=D,
        num_heads=block.attn.num_heads,
        mlp_ratio=block.mlp.fc1.out_features / D,
        img_size=img[0],
        patch_size=patch[0],
        in_chans=embed.proj.in_channels,
        num_classes=model.num_classes,
        global_pool=model.global_pool,
        class_token=model.cls_token is not None,
    )
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if have != spec.state_shapes():
        extra = sorted(set(have) ^ set(spec.state_shapes()))[:3]
        raise SpecError(f"this timm ViT has a layout learngene does not describe (differs at {extra}); use a plain ViT")
    return spec


def fit_to_budget(base: ViTSpec, max_params: int | None = None, max_flops: int | None = None,
                  supports: Callable[[ViTSpec], bool] | None = None, depth: int | None = None,
                  num_heads: int | None = None, max_depth: int | None = None, max_heads: int | None = None) -> ViTSpec:
    """The deepest, then widest, spec under a parameter and/or FLOP budget that ``supports`` accepts.

    Candidates keep ``base``'s head size, MLP ratio, input and classifier and vary depth
    (1..``max_depth``, default ``base.depth``) and head count (1..``max_heads``, default
    ``base.num_heads``; width = heads × head size). ``depth`` or ``num_heads`` pin that axis.

    Depth goes first because every learngene method inherits per-layer knowledge (the block-copying
    baselines and TLEG expand in depth only): at a given budget, the spec with the most inherited
    layers keeps the most of the gene. Capping depth at the ancestry's keeps "deepest" from
    degenerating into one-head towers. Candidates are tried in that order and the first one that
    ``supports`` accepts (e.g. the gene's method expands it without error) wins.

    Raises:
        SpecError: if no budget is given, or no candidate fits it.
    """
    if max_params is None and max_flops is None:
        raise SpecError("give a budget: a maximum number of parameters and/or of FLOPs")
    depths = [depth] if depth else range(max_depth or base.depth, 0, -1)
    heads = [num_heads] if num_heads else range(max_heads or base.num_heads, 0, -1)
    candidates = []
    for d in depths:
        for h in heads:
            try:
                candidates.append(base.replace(depth=d, num_heads=h, embed_dim=h * base.head_dim))
            except SpecError:
                continue
    accepted = supports or (lambda spec: True)
    for spec in candidates:  # deepest first, then widest
        fits = (max_params is None or spec.num_params <= max_params) and (max_flops is None or spec.flops <= max_flops)
        if fits and accepted(spec):
            return spec
    budget = " and ".join(f"{v:,} {k}" for k, v in (("params", max_params), ("FLOPs", max_flops)) if v is not None)
    smallest = next((s for s in sorted(candidates, key=lambda s: s.num_params) if accepted(s)), None)
    hint = (f"; the smallest size it supports here, {smallest.short()}, has {smallest.num_params:,} params and "
            f"{smallest.flops:,} FLOPs" if smallest else "; it supports none of the sizes searched")
    raise SpecError(f"no size this gene supports fits {budget}{hint}; raise the budget or change the pinned sizes")


def _cpu(depth: int, width: int, heads: int) -> ViTSpec:
    return ViTSpec(depth=depth, embed_dim=width, num_heads=heads, img_size=28, patch_size=4, in_chans=1, num_classes=10)


# DeiT sizes (Touvron et al. 2021) and the small sizes our CPU benchmark trains on 28x28 images.
PRESETS: dict[str, ViTSpec] = {
    "deit_tiny": ViTSpec(depth=12, embed_dim=192, num_heads=3),
    "deit_small": ViTSpec(depth=12, embed_dim=384, num_heads=6),
    "deit_base": ViTSpec(depth=12, embed_dim=768, num_heads=12),
    "cpu_tiny": _cpu(4, 64, 4),
    "cpu_small": _cpu(6, 96, 6),
    "cpu_base": _cpu(6, 192, 6),
}


def get_preset(name: str) -> ViTSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None
