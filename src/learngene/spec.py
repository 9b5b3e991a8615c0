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

# FLOP convention: a multiply-add is 2 FLOPs, and only the matmuls and convolutions count (patch
# embedding, projections, attention scores and weighted sums, MLPs, pooling head, classifiers); norms,
# activations, softmax, biases and residual adds are left out. Tables that count multiply-adds under
# the name FLOPs (DeiT's 1.3 G for DeiT-Ti) are half of ours: get_preset("deit_tiny").flops is 2,507,366,400.
FLOPS_PER_MULTIPLY_ADD = 2

# The timm architecture a spec is built from when it names none (and every spec written before families).
TIMM_ARCH = "vit_tiny_patch16_224"

# Per-block tensors of the plain layout, in timm's naming, in the order timm's state_dict lists them
# (a family adds or drops some: see :meth:`ViTSpec.block_shapes`).
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

POOLS = ("token", "avg", "map")
# timm's Mlp; SwiGLUPacked (GluMlp, SiLU gate first: DINOv2 ViT-g); SwiGLU (separate fc1_g, fc1_x: AIMv2)
MLP_LAYERS = ("mlp", "swiglu_packed", "swiglu")
NORM_LAYERS = ("layernorm", "rmsnorm")
MODEL_CLASSES = ("vit", "eva")  # timm's VisionTransformer; timm's Eva (learngene.eva)  # timm's LayerNorm (weight, bias); RmsNorm (weight only: AIMv2)


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
    """timm's state_dict key of tensor ``name`` (e.g. one of :data:`BLOCK_PARAMS`) in block ``layer``."""
    return f"blocks.{layer}.{name}"


@dataclass(frozen=True)
class ViTFamily:
    """What a ViT is apart from its size: the non-size arguments of its timm architecture.

    The defaults are timm's plain ViT (``vit_tiny_patch16_224``), the layout of every spec written
    before families existed. ``act_layer`` and ``mlp_layer`` are not passed to timm: they come with
    the architecture the spec names (:attr:`ViTSpec.arch`), and are recorded so that shapes and
    FLOPs are known without timm and a mismatch is caught when the model is built.

    Args:
        class_token: a class token (required by ``"token"`` pooling).
        reg_tokens: register tokens (DINOv2 with registers: 4).
        distilled: a distillation token and a second head ``head_dist`` (timm's VisionTransformerDistilled).
        no_embed_class: the prefix tokens get no position embedding (DeiT III, DINOv2 with registers).
        pre_norm: a LayerNorm ``norm_pre`` after the embeddings and no patch-embedding bias (CLIP).
        final_norm: a final LayerNorm at all.
        fc_norm: the final norm after pooling (``fc_norm``) instead of before (``norm``); None: timm's
            rule, after for ``"avg"`` pooling.
        global_pool: ``"token"`` (class token), ``"avg"`` (mean of patch tokens) or ``"map"`` (an
            attention-pool head ``attn_pool``, SigLIP).
        init_values: layer scale ``ls1``/``ls2`` with this initial value; None: no layer scale.
        qkv_bias: biases on the q, k, v projections.
        qk_norm: LayerNorms on each head's queries and keys.
        act_layer: the MLP's activation, timm's name (``gelu``, ``gelu_tanh``, ``quick_gelu``, ``silu``, ``relu``).
        mlp_layer: ``"mlp"`` (fc1, act, fc2), ``"swiglu_packed"`` (fc1 holds gate and value halves) or
            ``"swiglu"`` (gate ``fc1_g`` and value ``fc1_x`` apart, AIMv2).
        norm_layer: ``"layernorm"`` or ``"rmsnorm"`` (no bias), every norm of the model (fixed by the architecture).
        proj_bias: biases on attention's output projection and the MLP's linears (AIMv2 has none).
        embed_norm: a norm after the patch embedding, ``patch_embed.norm`` (AIMv2).
        model_class: ``"vit"`` (timm's VisionTransformer) or ``"eva"`` (timm's Eva: EVA-02, Perception
            Encoder; see :mod:`learngene.eva`), fixed by the architecture.
        qv_bias: Eva's separate q and v biases ``attn.q_bias``/``attn.v_bias`` (k has none; EVA-02).
        attn_norm: Eva's sub-LayerNorm on the heads' outputs before W_O, ``attn.norm``.
        mlp_norm: Eva's sub-LayerNorm on the MLP's hidden channels before fc2, ``mlp.norm``.
        rope: rotary position embeddings (Eva; no weights: fixed by the architecture, recorded).
        dynamic_img_size: the model accepts other image sizes (position embeddings resampled on the fly).
    """

    class_token: bool = True
    reg_tokens: int = 0
    distilled: bool = False
    no_embed_class: bool = False
    pre_norm: bool = False
    final_norm: bool = True
    fc_norm: bool | None = None
    global_pool: Literal["token", "avg", "map"] = "token"
    init_values: float | None = None
    qkv_bias: bool = True
    qk_norm: bool = False
    act_layer: str = "gelu"
    mlp_layer: Literal["mlp", "swiglu_packed", "swiglu"] = "mlp"
    dynamic_img_size: bool = False
    norm_layer: Literal["layernorm", "rmsnorm"] = "layernorm"
    proj_bias: bool = True
    embed_norm: bool = False
    model_class: Literal["vit", "eva"] = "vit"
    qv_bias: bool = False
    attn_norm: bool = False
    mlp_norm: bool = False
    rope: bool = False

    def __post_init__(self) -> None:
        if self.global_pool not in POOLS:
            raise SpecError(f"global_pool must be one of {', '.join(POOLS)}, got {self.global_pool!r}")
        if self.global_pool == "token" and not self.class_token:
            raise SpecError("global_pool='token' needs class_token=True; use global_pool='avg' without one")
        if self.distilled and (self.global_pool != "token" or not self.class_token):
            raise SpecError("a distilled ViT reads its class and distillation tokens: it needs class_token=True "
                            "and global_pool='token'")
        if not isinstance(self.reg_tokens, int) or isinstance(self.reg_tokens, bool) or self.reg_tokens < 0:
            raise SpecError(f"reg_tokens must be a non-negative integer, got {self.reg_tokens!r}")
        if self.init_values is not None and not (isinstance(self.init_values, (int, float)) and self.init_values > 0):
            raise SpecError(f"init_values (layer scale) must be positive or None, got {self.init_values!r}")
        if self.mlp_layer not in MLP_LAYERS:
            raise SpecError(f"mlp_layer must be one of {', '.join(MLP_LAYERS)}, got {self.mlp_layer!r}")
        if self.norm_layer not in NORM_LAYERS:
            raise SpecError(f"norm_layer must be one of {', '.join(NORM_LAYERS)}, got {self.norm_layer!r}")
        if self.model_class not in MODEL_CLASSES:
            raise SpecError(f"model_class must be one of {', '.join(MODEL_CLASSES)}, got {self.model_class!r}")
        eva_only = [name for name in ("qv_bias", "attn_norm", "mlp_norm", "rope") if getattr(self, name)]
        if self.model_class == "vit" and eva_only:
            raise SpecError(f"{', '.join(eva_only)} belong to timm's Eva, not its VisionTransformer; set model_class='eva'")
        if self.model_class == "eva" and (self.distilled or self.embed_norm or not self.proj_bias):
            raise SpecError("timm's Eva has no distillation token, patch-embedding norm or bias-free projections")

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: class, distillation and register tokens."""
        return int(self.class_token) + int(self.distilled) + self.reg_tokens

    @property
    def pos_prefix_tokens(self) -> int:
        """Prefix tokens that have a row in ``pos_embed`` (none with ``no_embed_class``)."""
        return 0 if self.no_embed_class else self.num_prefix_tokens

    @property
    def prefix_token_keys(self) -> tuple[str, ...]:
        """The state_dict keys of the prefix tokens, ``(1, n, D)`` each."""
        return tuple(k for k, present in (("cls_token", self.class_token), ("reg_token", self.reg_tokens > 0),
                                          ("dist_token", self.distilled)) if present)

    @property
    def use_fc_norm(self) -> bool:
        return self.global_pool == "avg" if self.fc_norm is None else self.fc_norm

    @property
    def final_norm_key(self) -> str | None:
        """timm's final LayerNorm: before pooling (``norm``), after it (``fc_norm``), or none."""
        if not self.final_norm:
            return None
        return "fc_norm" if self.use_fc_norm else "norm"

    def timm_kwargs(self) -> dict[str, Any]:
        """The arguments passed to timm (JSON values): all but ``act_layer``/``mlp_layer``/``norm_layer``,
        ``embed_norm`` and ``distilled``, which the architecture fixes (``proj_bias`` only when off)."""
        if self.model_class == "eva":
            from .eva import eva_kwargs

            return eva_kwargs(self)
        kwargs = dataclasses.asdict(self)
        for fixed in ("act_layer", "mlp_layer", "distilled", "norm_layer", "embed_norm", "model_class", "qv_bias",
                      "attn_norm", "mlp_norm", "rope"):
            kwargs.pop(fixed)
        if kwargs["proj_bias"]:
            kwargs.pop("proj_bias")  # timm's default; configs written before the field keep their exact kwargs
        return kwargs

    def norm_shapes(self, key: str, width: int) -> dict[str, tuple[int, ...]]:
        """The tensors of norm ``key`` over ``width`` channels: a LayerNorm's weight and bias, an RmsNorm's weight."""
        if self.norm_layer == "rmsnorm":
            return {f"{key}.weight": (width,)}
        return {f"{key}.weight": (width,), f"{key}.bias": (width,)}

    def short(self) -> str:
        """The ways this family differs from the plain ViT, e.g. ``reg4, no_embed_class, ls 1e-05``."""
        plain = ViTFamily()
        parts = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                 if getattr(self, f.name) != getattr(plain, f.name)]
        return ", ".join(parts) or "plain"


FAMILY_FIELDS = tuple(f.name for f in dataclasses.fields(ViTFamily))


@dataclass(frozen=True)
class ViTSpec:
    """A timm Vision Transformer: its architecture, family and size.

    Args:
        depth: number of transformer blocks.
        embed_dim: token width D.
        num_heads: attention heads per block; must divide ``embed_dim``.
        mlp_ratio: MLP hidden width = ``int(embed_dim * mlp_ratio)`` (fc1's outputs).
        img_size: square input resolution in pixels.
        patch_size: square patch size; must divide ``img_size``.
        in_chans: input channels.
        num_classes: classifier outputs (0 = no head: the model outputs its pooled embedding).
        arch: the timm architecture the model is built from (its sizes are overridden by the above).
        family: the non-size arguments (tokens, norms, pooling, layer scale, ...).

    ``spec.class_token``, ``spec.global_pool`` etc. read the family; ``spec.replace(global_pool="avg")``
    replaces in it.
    """

    depth: int = 12
    embed_dim: int = 192
    num_heads: int = 3
    mlp_ratio: float = 4.0
    img_size: int = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    arch: str = TIMM_ARCH
    family: ViTFamily = ViTFamily()

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
        if not isinstance(self.family, ViTFamily):
            raise SpecError(f"family must be a ViTFamily, got {type(self.family).__name__}")
        if not isinstance(self.arch, str) or not self.arch:
            raise SpecError(f"arch must be a timm architecture name, got {self.arch!r}")
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
        if self.mlp_hidden < 1:
            raise SpecError(f"mlp_ratio={self.mlp_ratio} gives an empty MLP at embed_dim={self.embed_dim}")
        if self.num_tokens > MAX_TOKENS:
            raise SpecError(f"img_size={self.img_size} with patch_size={self.patch_size} gives {self.num_tokens:,} tokens, "
                            f"more than the {MAX_TOKENS:,} this library builds; choose a smaller img_size or a larger "
                            f"patch_size")
        if self.family.mlp_layer == "swiglu_packed" and self.mlp_hidden % 2:
            raise SpecError(f"a SwiGLU MLP splits fc1 in two halves, but mlp_ratio={self.mlp_ratio} gives "
                            f"{self.mlp_hidden} outputs at embed_dim={self.embed_dim}; choose an even hidden width")

    # ---- the family's fields, read through the spec ----------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in FAMILY_FIELDS:
            return getattr(self.family, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ---- derived sizes ---------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        """fc1's outputs (for a packed SwiGLU MLP: both halves; for an unpacked one, fc1_g's = fc1_x's).
        timm's ViT reads ``mlp_ratio`` as fc1's outputs, Eva as each half's."""
        hidden = int(self.embed_dim * self.mlp_ratio)
        packed_halves = self.family.model_class == "eva" and self.family.mlp_layer == "swiglu_packed"
        return 2 * hidden if packed_halves else hidden

    @property
    def mlp_inner(self) -> int:
        """fc2's inputs: the MLP's hidden channels (half of fc1's outputs for a packed SwiGLU MLP; fc1_g's for AIMv2's)."""
        return self.mlp_hidden // 2 if self.family.mlp_layer == "swiglu_packed" else self.mlp_hidden

    @property
    def grid_size(self) -> int:
        return self.img_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid_size**2

    @property
    def num_prefix_tokens(self) -> int:
        return self.family.num_prefix_tokens

    @property
    def num_tokens(self) -> int:
        """Tokens every block sees: the prefix tokens and the patches."""
        return self.num_patches + self.family.num_prefix_tokens

    @property
    def final_norm_key(self) -> str | None:
        return self.family.final_norm_key

    # ---- timm ------------------------------------------------------------------------------------
    def timm_kwargs(self) -> dict[str, Any]:
        """``timm.create_model(spec.arch, pretrained=False, **spec.timm_kwargs())`` builds this model (JSON values)."""
        return dict(
            depth=self.depth,
            embed_dim=self.embed_dim,
            num_heads=self.num_heads,
            mlp_ratio=self.mlp_ratio,
            img_size=self.img_size,
            patch_size=self.patch_size,
            in_chans=self.in_chans,
            num_classes=self.num_classes,
            **self.family.timm_kwargs(),
        )

    def create_model(self, **overrides: Any):
        """A freshly initialized timm model of this spec (never downloads).

        Raises:
            SpecError: if its parameters alone would not fit in the memory this machine has free.
        """
        import timm

        self.require_memory()
        try:
            model = timm.create_model(self.arch, pretrained=False, **{**self.timm_kwargs(), **overrides})
        except RuntimeError as exc:  # timm's "Unknown model"
            raise SpecError(f"cannot build timm {self.arch}: {str(exc).splitlines()[0][:200]}") from None
        mlp = model.blocks[0].mlp if len(model.blocks) else None
        built = _mlp_layer(mlp) if mlp is not None else self.family.mlp_layer
        if built != self.family.mlp_layer or _is_distilled(model) != self.family.distilled:
            raise SpecError(f"timm {self.arch} builds a {'distilled ' if _is_distilled(model) else ''}ViT with a "
                            f"{built} MLP, but this spec's family says {self.family.short()}; use the ancestry's "
                            f"architecture name")
        return model

    # ---- tensors, parameters, FLOPs -------------------------------------------------------------
    def block_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every tensor in one block, keyed by in-block names, in timm's order."""
        D, H, d, f = self.embed_dim, self.mlp_hidden, self.head_dim, self.family
        shapes: dict[str, tuple[int, ...]] = {**f.norm_shapes("norm1", D), "attn.qkv.weight": (3 * D, D)}
        if f.qv_bias:
            shapes.update({"attn.q_bias": (D,), "attn.v_bias": (D,)})
        if f.qkv_bias:
            shapes["attn.qkv.bias"] = (3 * D,)
        if f.qk_norm:
            shapes.update({**f.norm_shapes("attn.q_norm", d), **f.norm_shapes("attn.k_norm", d)})
        if f.attn_norm:
            shapes.update(f.norm_shapes("attn.norm", D))
        shapes["attn.proj.weight"] = (D, D)
        if f.proj_bias:
            shapes["attn.proj.bias"] = (D,)
        scales = ("gamma_1", "gamma_2") if f.model_class == "eva" else ("ls1.gamma", "ls2.gamma")
        if f.init_values is not None:
            shapes[scales[0]] = (D,)
        shapes.update(f.norm_shapes("norm2", D))
        for fc in ("fc1_g", "fc1_x") if f.mlp_layer == "swiglu" else ("fc1",):
            shapes[f"mlp.{fc}.weight"] = (H, D)
            if f.proj_bias:
                shapes[f"mlp.{fc}.bias"] = (H,)
        if f.mlp_norm:
            shapes.update(f.norm_shapes("mlp.norm", self.mlp_inner))
        shapes["mlp.fc2.weight"] = (D, self.mlp_inner)
        if f.proj_bias:
            shapes["mlp.fc2.bias"] = (D,)
        if f.init_values is not None:
            shapes[scales[1]] = (D,)
        return shapes

    def non_block_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of the tensors outside the blocks: tokens, embeddings, norms, pooling head, classifiers."""
        D, f = self.embed_dim, self.family
        shapes: dict[str, tuple[int, ...]] = {}
        if f.class_token:
            shapes["cls_token"] = (1, 1, D)
        if f.reg_tokens:
            shapes["reg_token"] = (1, f.reg_tokens, D)
        if f.distilled:
            shapes["dist_token"] = (1, 1, D)
        shapes["pos_embed"] = (1, self.num_patches + f.pos_prefix_tokens, D)
        shapes["patch_embed.proj.weight"] = (D, self.in_chans, self.patch_size, self.patch_size)
        if not f.pre_norm:  # timm drops the patch bias when a norm follows the embeddings
            shapes["patch_embed.proj.bias"] = (D,)
        if f.embed_norm:
            shapes.update(f.norm_shapes("patch_embed.norm", D))
        if f.pre_norm:
            shapes.update(f.norm_shapes("norm_pre", D))
        if f.final_norm_key == "norm":
            shapes.update(f.norm_shapes("norm", D))
        if f.global_pool == "map":
            hidden = int(D * self.mlp_ratio)  # the pool's MLP is timm's plain Mlp whatever the blocks use
            shapes.update({"attn_pool.latent": (1, 1, D), "attn_pool.q.weight": (D, D), "attn_pool.q.bias": (D,),
                           "attn_pool.kv.weight": (2 * D, D), "attn_pool.kv.bias": (2 * D,),
                           "attn_pool.proj.weight": (D, D), "attn_pool.proj.bias": (D,),
                           **f.norm_shapes("attn_pool.norm", D),
                           "attn_pool.mlp.fc1.weight": (hidden, D), "attn_pool.mlp.fc1.bias": (hidden,),
                           "attn_pool.mlp.fc2.weight": (D, hidden), "attn_pool.mlp.fc2.bias": (D,)})
        if f.final_norm_key == "fc_norm":
            shapes.update(f.norm_shapes("fc_norm", D))
        if self.num_classes:
            shapes.update({"head.weight": (self.num_classes, D), "head.bias": (self.num_classes,)})
            if f.distilled:
                shapes.update({"head_dist.weight": (self.num_classes, D), "head_dist.bias": (self.num_classes,)})
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
        """Forward FLOPs of one image, counted as papers (and ``torch.utils.flop_counter``) count them:
        :data:`FLOPS_PER_MULTIPLY_ADD` per multiply-add of the matmuls and convolutions (see there)."""
        D, N, Hm, C = self.embed_dim, self.num_tokens, self.mlp_hidden, self.num_classes
        patch = self.num_patches * D * self.in_chans * self.patch_size**2
        attn = N * D * 3 * D + 2 * N * N * D + N * D * D
        mlp = N * D * Hm * (2 if self.family.mlp_layer == "swiglu" else 1) + N * self.mlp_inner * D
        pool = 0
        if self.family.global_pool == "map":  # one latent query over the patch tokens, then an MLP on it
            # timm's ViT pools the patch tokens, its Eva every token
            hidden, P = int(D * self.mlp_ratio), self.num_tokens if self.family.model_class == "eva" else self.num_patches
            pool = D * D + P * D * 2 * D + 2 * P * D + D * D + 2 * D * hidden
        heads = 1 + int(self.family.distilled)
        return FLOPS_PER_MULTIPLY_ADD * (patch + self.depth * (attn + mlp) + pool + heads * D * C)

    def require_memory(self, copies: int = 1) -> None:
        """Refuse, before allocating, a size whose fp32 parameters (× ``copies``) exceed the free memory."""
        free = available_memory()
        need = 4 * self.num_params * copies
        if free is not None and need > free:
            raise SpecError(f"a {self.short()} ViT needs {need / 2**30:,.1f} GiB for its {self.num_params:,} parameters "
                            f"but this machine has {free / 2**30:,.1f} GiB free; choose a smaller depth, width or image size")

    # ---- (de)serialization ----------------------------------------------------------------------
    def replace(self, **changes: Any) -> "ViTSpec":
        """A copy with ``changes``; family fields (``global_pool=...``) change the family."""
        family = {k: changes.pop(k) for k in list(changes) if k in FAMILY_FIELDS}
        if family:
            changes["family"] = dataclasses.replace(changes.get("family", self.family), **family)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ViTSpec":
        """Read a spec; family fields may also sit at the top level (specs written before families did)."""
        data = dict(data)
        family = data.pop("family", None) or {}
        if isinstance(family, ViTFamily):
            family = dataclasses.asdict(family)
        family = {**family, **{k: data.pop(k) for k in list(data) if k in FAMILY_FIELDS}}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = (set(data) - known) | {f"family.{k}" for k in set(family) - set(FAMILY_FIELDS)}
        if unknown:
            raise SpecError(f"unknown spec field(s) {sorted(unknown)}; remove them (known fields: "
                            f"{', '.join(sorted(known - {'family'}) + sorted(FAMILY_FIELDS))})")
        return cls(**data, family=ViTFamily(**family))

    @classmethod
    def from_json(cls, text: str) -> "ViTSpec":
        return cls.from_dict(json.loads(text))

    def short(self) -> str:
        """Compact human-readable size, e.g. ``L6-D96-H3``."""
        return f"L{self.depth}-D{self.embed_dim}-H{self.num_heads}"


# ---- reading a spec from a timm model ---------------------------------------------------------------
ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu", "silu", "relu")


def _is_distilled(model) -> bool:
    from timm.models.deit import VisionTransformerDistilled

    return isinstance(model, VisionTransformerDistilled)


def _mlp_layer(mlp) -> str:
    """Our name for a block's MLP module, or its class name when it is neither kind we describe."""
    from timm.layers import GluMlp, Mlp, SwiGLU
    from torch import nn

    if type(mlp) is Mlp:
        return "mlp"
    if type(mlp) is GluMlp and not mlp.gate_last and isinstance(mlp.act, nn.SiLU):
        return "swiglu_packed"
    if type(mlp) is SwiGLU and isinstance(mlp.act, nn.SiLU):
        return "swiglu"
    return type(mlp).__name__


def _norm_layer(norm) -> str | None:
    """Our name for a norm module (None: one a spec cannot name)."""
    from timm.layers import LayerNorm, RmsNorm
    from torch import nn

    if type(norm) in (nn.LayerNorm, LayerNorm):
        return "layernorm"
    if type(norm) is RmsNorm:
        return "rmsnorm"
    return None


def _activation(act) -> str | None:
    """timm's name of an activation module (None: one a spec cannot name)."""
    from timm.layers import get_act_layer
    from torch import nn

    if type(act) is nn.GELU:
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    for name in ACTIVATIONS:
        if type(act) is get_act_layer(name):
            return name
    return None


def _mlp_ratio(width: int, hidden: int) -> float:
    """A ratio that timm's ``int(width * ratio)`` turns back into ``hidden`` (a plain division can land just below)."""
    ratio = hidden / width
    while int(width * ratio) < hidden:
        ratio = math.nextafter(ratio, math.inf)
    return ratio


def _not_a_vit(model) -> str:
    """Why a timm model that is not a VisionTransformer cannot be described, naming its parts."""
    blocks = getattr(model, "blocks", None)
    block = blocks[0] if blocks is not None and len(blocks) else None
    parts = []
    if getattr(model, "rope", None) is not None or any("rope" in n for n, _ in model.named_modules()):
        parts.append("RoPE")
    mlp = getattr(block, "mlp", None)
    if mlp is not None and "glu" in type(mlp).__name__.lower():
        parts.append("SwiGLU")
    attn = getattr(block, "attn", None)
    if attn is not None and getattr(attn, "q_bias", None) is not None:
        parts.append("separate q/v biases")
    return f"{type(model).__name__} is not a timm VisionTransformer" + (f" ({', '.join(parts)})" if parts else "")


def spec_from_model(model, arch: str | None = None) -> ViTSpec:
    """Read the spec (architecture, family, size) of a timm ``VisionTransformer`` or ``VisionTransformerDistilled``.

    The architecture is the name timm built ``model`` from (``model.pretrained_cfg``), or ``arch``.
    The spec is checked by building that architecture with the read arguments on the meta device:
    same tensors and same modules, or the spec is refused.

    Raises:
        SpecError: naming, in one line, every part of ``model`` a spec cannot describe.
    """
    from timm.models.vision_transformer import VisionTransformer

    from .eva import eva_family_fields, eva_problems, is_eva

    arch = arch or (getattr(model, "pretrained_cfg", None) or {}).get("architecture")
    name = f"{arch}: " if arch else ""
    eva = is_eva(model)
    if not isinstance(model, VisionTransformer) and not eva:
        raise SpecError(f"{name}{_not_a_vit(model)}")
    distilled = _is_distilled(model)
    if arch is None and eva:
        raise SpecError("an Eva model without its timm architecture name; pass arch= (e.g. eva02_tiny_patch14_224)")
    arch = arch or ("deit_tiny_distilled_patch16_224" if distilled else TIMM_ARCH)
    name = f"{arch}: "
    embed, block = model.patch_embed, model.blocks[0] if len(model.blocks) else None
    problems = (eva_problems(model, block) if block is not None else ["depth=0 (at least one block)"]) if eva \
        else _undescribable(model, block)
    if eva and not problems:
        problems = _undescribable_parts(block)
    if problems:
        raise SpecError(name + "; ".join(problems))
    D = model.embed_dim
    norm = model.fc_norm if not isinstance(model.fc_norm, _identity()) else model.norm
    vit_fields = eva_family_fields(model, block) if eva else dict(
        class_token=model.cls_token is not None,
        reg_tokens=model.num_reg_tokens,
        no_embed_class=model.no_embed_class,
        pre_norm=not isinstance(model.norm_pre, _identity()),
        init_values=float(block.ls1.init_values) if hasattr(block.ls1, "gamma") else None,
        qkv_bias=block.attn.qkv.bias is not None,
        qk_norm=not isinstance(block.attn.q_norm, _identity()),
        dynamic_img_size=bool(model.dynamic_img_size),
        embed_norm=not isinstance(embed.norm, _identity()),
    )
    family = ViTFamily(
        distilled=distilled,
        final_norm=not isinstance(norm, _identity()),
        fc_norm=_fc_norm_arg(model),
        global_pool=model.global_pool,
        act_layer=_activation(block.mlp.act),
        mlp_layer=_mlp_layer(block.mlp),
        norm_layer=_norm_layer(block.norm1),
        proj_bias=block.attn.proj.bias is not None,
        **vit_fields,
    )
    spec = ViTSpec(
        depth=len(model.blocks),
        embed_dim=D,
        num_heads=block.attn.num_heads,
        mlp_ratio=_mlp_ratio(D, block.mlp.fc2.in_features * (2 if family.mlp_layer == "swiglu_packed" and not eva else 1)),
        img_size=embed.img_size[0],
        patch_size=embed.patch_size[0],
        in_chans=embed.proj.in_channels,
        num_classes=model.num_classes,
        arch=arch,
        family=family,
    )
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if have != spec.state_shapes():
        differ = sorted(set(have) ^ set(spec.state_shapes())) or sorted(k for k in have if have[k] != spec.state_shapes()[k])
        raise SpecError(f"{name}its tensors differ from the layout read from it at {differ[:3]}; "
                        f"learngene cannot describe this ViT")
    reference = _build_on_meta(spec)
    if reference is None:
        raise SpecError(f"{name}timm cannot build {arch} with the arguments read from this model "
                        f"({spec.family.short()}); pass the ancestry's own architecture name")
    mismatch = _first_module_difference(model, reference)
    if mismatch:
        raise SpecError(f"{name}this model differs from timm's {arch} built with the arguments read from it at "
                        f"{mismatch}; load the checkpoint with its own architecture name and no extra arguments")
    return spec


def _identity():
    from torch import nn

    return nn.Identity


def _fc_norm_arg(model) -> bool | None:
    """timm's ``fc_norm`` argument: None when the model follows timm's rule (after pooling for avg)."""
    has_fc_norm = not isinstance(model.fc_norm, _identity())
    has_norm = not isinstance(model.norm, _identity())
    if not (has_fc_norm or has_norm):
        return None
    return None if has_fc_norm == (model.global_pool == "avg") else has_fc_norm


def _undescribable(model, block) -> list[str]:
    """Every field of a VisionTransformer a spec cannot hold, as ``field=value (what is supported)``."""
    from timm.layers import Attention, PatchEmbed
    from timm.models.vision_transformer import Block
    from torch import nn

    problems = []
    if block is None:
        return ["depth=0 (at least one block)"]
    if model.global_pool not in POOLS:
        problems.append(f"global_pool={model.global_pool!r} ({', '.join(POOLS)})")
    if model.pos_embed is None:
        problems.append("pos_embed=none (learned absolute position embeddings only)")
    if getattr(model, "pool_include_prefix", False):
        problems.append("pool_include_prefix=True")
    embed = model.patch_embed
    if type(embed) is not PatchEmbed:
        problems.append(f"embed_layer={type(embed).__name__} (timm's PatchEmbed)")
    else:
        if embed.img_size is None or embed.img_size[0] != embed.img_size[1] or embed.patch_size[0] != embed.patch_size[1]:
            problems.append(f"img_size={embed.img_size}, patch_size={embed.patch_size} (square only)")
        if not isinstance(embed.norm, nn.Identity) and _norm_layer(embed.norm) != _norm_layer(block.norm1 if block else None):
            problems.append(f"embed_norm_layer={type(embed.norm).__name__} (none, or the blocks' norm)")
        if getattr(embed, "dynamic_img_pad", False):
            problems.append("dynamic_img_pad=True")
    if type(block) is not Block:
        problems.append(f"block_fn={type(block).__name__} (timm's Block)")
        return problems
    if type(block.attn) is not Attention:
        problems.append(f"attn_layer={type(block.attn).__name__} (timm's Attention)")
    elif not isinstance(getattr(block.attn, "norm", nn.Identity()), nn.Identity):
        problems.append("scale_attn_norm=True")
    return problems + _undescribable_parts(block, vit=True)


def _undescribable_parts(block, vit: bool = False) -> list[str]:
    """What a spec cannot hold of a block's MLP and norms (a ViT's or an Eva's)."""
    from torch import nn

    problems = []
    mlp_kind = _mlp_layer(block.mlp)
    if mlp_kind not in MLP_LAYERS:
        problems.append(f"mlp_layer={mlp_kind} (timm's Mlp, SwiGLUPacked or SwiGLU)")
    elif vit and not isinstance(getattr(block.mlp, "norm", nn.Identity()), nn.Identity):
        problems.append("scale_mlp_norm=True")
    elif _activation(block.mlp.act) is None:
        problems.append(f"act_layer={type(block.mlp.act).__name__} ({', '.join(ACTIVATIONS)})")
    if _norm_layer(block.norm1) is None:
        problems.append(f"norm_layer={type(block.norm1).__name__} (LayerNorm or RmsNorm)")
    return problems


def _build_on_meta(spec: ViTSpec):
    import torch

    try:
        with torch.device("meta"):
            return spec.create_model()
    except (SpecError, TypeError, ValueError, AssertionError, RuntimeError):
        return None


def _first_module_difference(model, reference) -> str | None:
    """The first module (ignoring dropout and stochastic depth) where two timm models differ, else None."""
    from timm.layers import DropPath
    from torch import nn

    skip = (nn.Dropout, DropPath, nn.Identity)

    def signature(m):
        return [(n, type(x).__name__, x.extra_repr()) for n, x in m.named_modules() if not isinstance(x, skip)]

    mine, theirs = signature(model), signature(reference)
    for a, b in zip(mine, theirs):
        if a != b:
            return f"{a[0] or 'the model'} ({a[1]}({a[2]}) vs {b[1]}({b[2]}))"
    if len(mine) != len(theirs):
        return f"{len(mine)} vs {len(theirs)} modules"
    return None


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
