"""ViT specs: the sizes a learngene expands into.

A :class:`ViTSpec` maps one-to-one onto the keyword arguments of ``timm.create_model`` for a plain
``VisionTransformer``; it also knows the shape of every tensor in that model's state_dict, and so its
parameter count, and its forward FLOPs. Every other module asks the spec, never timm's model, for
key names and shapes. What a ViT is apart from its size, its family, is :class:`~learngene.vit.family.ViTFamily`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import LearngeneError, Remedy, SpecError, assigned, first_line
from ..host.memory import require_free_memory
from ..settings import field, flagged
from . import naflex
from .activation_memory import training_activation_bytes
from .family import FAMILY_FIELDS, ViTFamily, check_fields
from .timm_keys import (
    HEAD_DIM,
    HEADS,
    HEADS_IN,
    HIDDEN,
    HIDDEN_IN,
    NON_BLOCK_TENSORS,
    ROPE_FREQS,
    WIDTH,
    WIDTH_IN,
    family_axes,
)

if TYPE_CHECKING:
    from torch import Tensor

# FLOP convention: a multiply-add is 2 FLOPs, and only the matmuls and convolutions count (patch
# embedding, projections, attention scores and weighted sums, MLPs, pooling head, classifiers); norms,
# activations, softmax, biases and residual adds are left out. Tables that count multiply-adds under
# the name FLOPs (DeiT's 1.3 G for DeiT-Ti) are half of ours: get_preset("deit_tiny").flops is 2,507,366,400.
FLOPS_PER_MULTIPLY_ADD = 2

# The timm architecture a spec is built from when it names none (and every spec written before families).
TIMM_ARCH = "vit_tiny_patch16_224"

MAX_TOKENS = 2**16 + 1  # a 256 x 256 patch grid and a class token


def block_key(layer: int, name: str) -> str:
    """timm's state_dict key of tensor ``name`` (a row of :data:`~learngene.vit.timm_keys.BLOCK_TENSORS`) in block ``layer``."""
    return f"blocks.{layer}.{name}"


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

    # Sizes beyond the ``at_most`` are refused before anything is built. They lie far past any ViT trained today; a
    # typo or a forged header (depth 10^8, width 10^6) would otherwise exhaust memory long before an error could say
    # why. A ``flag`` makes a size flag of expand, adapt and ancestry (learngene.cli.flags.add_spec_args).
    depth: int = field(12, flag="--depth", help="number of blocks", at_least=1, at_most=4096)
    embed_dim: int = field(192, flag="--embed-dim", help="width D", at_least=1, at_most=65536)
    num_heads: int = field(
        3, flag="--num-heads", help="attention heads (must divide the width)", at_least=1, at_most=65536
    )
    mlp_ratio: float = field(
        4.0,
        flag="--mlp-ratio",
        help="MLP hidden width / D",
        above=0,
        at_most=64,
        fix=f"use e.g. {assigned('mlp_ratio', 4.0)}",
    )
    img_size: int = field(
        224, flag="--img-size", help="input resolution (data are resized to it)", at_least=1, at_most=16384
    )
    patch_size: int = field(
        16, flag="--patch-size", help="patch size (must divide the image size)", at_least=1, at_most=16384
    )
    in_chans: int = field(
        3,
        flag="--in-chans",
        help="input channels (grey data are repeated to 3; colour data for 1 are refused)",
        at_least=1,
        at_most=1024,
    )
    num_classes: int = field(1000, flag="--num-classes", help="classifier outputs", at_least=0, at_most=10_000_000)
    arch: str = field(TIMM_ARCH, nonempty=True, fix="give a timm architecture name")
    family: ViTFamily = field(ViTFamily())

    def __post_init__(self) -> None:
        check_fields(self)
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
            raise SpecError(
                f"img_size={self.img_size} with patch_size={self.patch_size} gives {self.num_tokens:,} tokens, "
                f"more than the {MAX_TOKENS:,} this library builds; choose a smaller img_size or a larger "
                f"patch_size"
            )
        if self.family.rope_mixed and self.head_dim % 4:
            raise SpecError(
                f"mixed RoPE rotates each head's channels in x and y pairs, so its head size must be a multiple of 4, "
                f"but embed_dim={self.embed_dim} / num_heads={self.num_heads} is {self.head_dim}; choose a width and "
                f"head count whose quotient is"
            )
        if self.family.mlp_layer == "swiglu_packed" and self.mlp_hidden % 2:
            even = [Remedy(size={"mlp_ratio": r}) for r in self._even_ratios()[:1]]
            raise SpecError(
                f"a SwiGLU MLP splits fc1 in two halves, but mlp_ratio={self.mlp_ratio} gives "
                f"{self.mlp_hidden} outputs at embed_dim={self.embed_dim}; choose an even hidden width"
                + (f": {even[0].text}" if even else ""),
                advice=even,
            )

    def _even_ratios(self) -> list[float]:
        """The MLP ratios nearest to this spec's that give a packed SwiGLU an even hidden width at its width (the
        next even width above, then below), as a message can write them (the float's shortest repr)."""
        odd = int(self.embed_dim * self.mlp_ratio)
        return [
            r
            for r in ((odd + 1) / self.embed_dim, (odd - 1) / self.embed_dim)
            if int(self.embed_dim * r) % 2 == 0 and r > 0
        ]

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
        """fc2's inputs: the MLP's hidden channels (half of fc1's outputs for a packed SwiGLU MLP)."""
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
        family = (
            naflex.naflex_kwargs(self.family, self.grid_size)
            if self.family.model_class == "naflex"
            else self.family.timm_kwargs()
        )
        return dict(
            depth=self.depth,
            embed_dim=self.embed_dim,
            num_heads=self.num_heads,
            mlp_ratio=self.mlp_ratio,
            img_size=self.img_size,
            patch_size=self.patch_size,
            in_chans=self.in_chans,
            num_classes=self.num_classes,
            **family,
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
            raise SpecError(f"cannot build timm {self.arch}: {first_line(exc, 200)}") from None
        blocks: Any = model.blocks
        mlp = blocks[0].mlp if len(blocks) else None
        built = mlp_layer_of(mlp) if mlp is not None else self.family.mlp_layer
        if built != self.family.mlp_layer or is_distilled(model) != self.family.distilled:
            raise SpecError(
                f"timm {self.arch} builds a {'distilled ' if is_distilled(model) else ''}ViT with a "
                f"{built} MLP, but this spec's family says {self.family.short()}; use the ancestry's "
                f"architecture name"
            )
        return model

    # ---- tensors, parameters, FLOPs -------------------------------------------------------------
    def block_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every tensor in one block, keyed by in-block names, in timm's order (the rows of
        :data:`~learngene.vit.timm_keys.BLOCK_TENSORS` this family has, each axis at this size)."""
        D = self.embed_dim
        size = {
            WIDTH: D,
            WIDTH_IN: D,
            HIDDEN: self.mlp_hidden,
            HIDDEN_IN: self.mlp_inner,
            HEADS_IN: D,
            HEAD_DIM: self.head_dim,
        }
        # a head axis is segments x heads x head_dim (qkv: 3·D); fc1's hidden axis already counts SwiGLU's two halves
        return {
            name: tuple(D * a.segments if a.role == HEADS else size[a.role] for a in axes)
            for name, axes in family_axes(self.family).items()
        }

    def non_block_shapes(self, vit_layout: bool = False) -> dict[str, tuple[int, ...]]:
        """Shapes of the tensors outside the blocks (tokens, embeddings, norms, pooling head, classifiers: the rows
        of :data:`~learngene.vit.timm_keys.NON_BLOCK_TENSORS` this model has); a NaFlexVit's embeddings under its own
        keys unless ``vit_layout`` (:mod:`learngene.vit.naflex`)."""
        shapes = {key: row.shape(self) for key, row in NON_BLOCK_TENSORS.items() if row.present(self)}
        return naflex.model_shapes(shapes) if self.family.model_class == "naflex" and not vit_layout else shapes

    def model_layout(self, state: dict[str, Any]) -> dict[str, Any]:
        """Tensors given under a plain ViT's keys and shapes (``pos_embed``, ``patch_embed.*``, tokens) under this
        model's own: a NaFlexVit's ``embeds.*`` (:func:`learngene.vit.naflex.to_model_layout`); the same otherwise."""
        return naflex.to_model_layout(state) if self.family.model_class == "naflex" else state

    def vit_layout(self, state: dict[str, Any]) -> dict[str, Any]:
        """The inverse of :meth:`model_layout`: this model's tensors under a plain ViT's keys and shapes."""
        return naflex.to_vit_layout(state, self.in_chans) if self.family.model_class == "naflex" else state

    def key(self, vit_key: str) -> str:
        """This model's key of the tensor a plain ViT names ``vit_key`` (``pos_embed`` -> ``embeds.pos_embed``)."""
        return naflex.MODEL_KEYS.get(vit_key, vit_key) if self.family.model_class == "naflex" else vit_key

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every key of the timm model's state_dict and its shape (mixed RoPE's frequencies stacked, as timm holds
        them; :meth:`block_shapes` gives a layer's)."""
        shapes = self.non_block_shapes()
        for layer in range(self.depth):
            for name, shape in self.block_shapes().items():
                if name != ROPE_FREQS:
                    shapes[block_key(layer, name)] = shape
        if self.family.rope_mixed:
            shapes[ROPE_FREQS] = (2, self.depth, self.num_heads, self.head_dim // 2)
        return shapes

    @property
    def stacked_keys(self) -> tuple[str, ...]:
        """The keys of the tensors timm stacks across layers and a spec holds per block (:meth:`split_layers`)."""
        return (ROPE_FREQS,) if self.family.rope_mixed else ()

    def split_layers(self, state: dict[str, Any]) -> dict[str, Any]:
        """A timm state_dict of this model with what timm stacks across layers held per block, as methods read it:
        mixed RoPE's ``rope.freqs`` (2, depth, heads, head_dim/2) as ``blocks.{l}.rope.freqs``, each head's x then
        y frequencies (heads x head_dim values, a head axis like the q rows they rotate). The same otherwise."""
        freqs = state.get(ROPE_FREQS) if self.family.rope_mixed else None
        if freqs is None:
            return state
        out = {k: v for k, v in state.items() if k != ROPE_FREQS}
        for layer in range(freqs.shape[1]):
            out[block_key(layer, ROPE_FREQS)] = freqs[:, layer].transpose(0, 1).reshape(-1)
        return out

    def join_layers(self, state: dict[str, Any], own: dict[str, Any] | None = None) -> dict[str, Any]:
        """The inverse of :meth:`split_layers`: the per-block rows stacked under timm's key. A layer whose row
        ``state`` lacks (a method that gives some layers only) takes the model's own, from ``own`` (its state_dict:
        timm's initialization); without ``own``, zeros (for shapes and keys alone: a check on ``meta``)."""
        keys = [block_key(layer, ROPE_FREQS) for layer in range(self.depth)]
        given = [k for k in keys if k in state]
        if not self.family.rope_mixed or not given:
            return state
        import torch

        per_head = (self.num_heads, 2, self.head_dim // 2)
        like = state[given[0]].reshape(per_head).transpose(0, 1)
        stacked = own.get(ROPE_FREQS) if own is not None else None
        layers = [
            state[k].reshape(per_head).transpose(0, 1)
            if k in state
            else (stacked[:, layer].to(like) if stacked is not None else torch.zeros_like(like))
            for layer, k in enumerate(keys)
        ]
        out = {k: v for k, v in state.items() if k not in keys}
        out[ROPE_FREQS] = torch.stack(layers, dim=1)
        return out

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
            hidden, P = (
                int(D * self.mlp_ratio),
                self.num_tokens if self.family.model_class == "eva" else self.num_patches,
            )
            pool = D * D + P * D * 2 * D + 2 * P * D + D * D + 2 * D * hidden
        heads = 1 + int(self.family.distilled)
        return FLOPS_PER_MULTIPLY_ADD * (patch + self.depth * (attn + mlp) + pool + heads * D * C)

    def activation_bytes(self, batch: int, bytes_per_value: int = 4) -> int:
        """A lower bound of what one training step of ``batch`` images keeps for backward (see
        :func:`training_activation_bytes`)."""
        return training_activation_bytes(
            self.num_tokens, self.embed_dim, self.num_heads, self.mlp_hidden, self.depth, batch, bytes_per_value
        )

    def require_memory(self, copies: int = 1) -> None:
        """Refuse, before allocating, a size whose fp32 parameters (× ``copies``) exceed the free memory."""
        require_free_memory(
            4 * self.num_params * copies,
            f"a {self.short()} ViT of {self.num_params:,} parameters",
            "choose a smaller depth, width or image size",
        )

    # ---- (de)serialization ----------------------------------------------------------------------
    def replace(self, **changes: Any) -> ViTSpec:
        """A copy with ``changes``; family fields (``global_pool=...``) change the family."""
        family = {k: changes.pop(k) for k in list(changes) if k in FAMILY_FIELDS}
        if family:
            changes["family"] = dataclasses.replace(changes.get("family", self.family), **family)
        return dataclasses.replace(self, **changes)

    def advisable(self, size: dict[str, Any]) -> dict[str, Any] | None:
        """``size`` (fields to replace) as advice may give it: where the size is no ViT of the family, completed by
        what its refusal advises (an MLP ratio that splits a SwiGLU evenly); None where it still is none."""
        for _ in range(2):
            try:
                self.replace(**size)
                return size
            except SpecError as exc:
                if not exc.advice or exc.advice[0].method or exc.advice[0].options:
                    return None
                size = {**size, **exc.advice[0].size}
        return None

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain JSON values (what a gene's header stores)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The spec as a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTSpec:
        """Read a spec; family fields may also sit at the top level (specs written before families did)."""
        if not isinstance(data, dict):
            raise SpecError(
                f"a spec must be a JSON object of fields (depth, embed_dim, ...), got "
                f'{type(data).__name__} {str(data)[:60]}; give an object such as {{"depth": 6}}'
            )
        data = dict(data)
        family = data.pop("family", None) or {}
        if isinstance(family, ViTFamily):
            family = dataclasses.asdict(family)
        if not isinstance(family, dict):
            raise SpecError(
                f"the spec's family must be a JSON object of fields (class_token, global_pool, ...), got "
                f"{family!r}; give an object or leave it out"
            )
        family = {**family, **{k: data.pop(k) for k in list(data) if k in FAMILY_FIELDS}}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = (set(data) - known) | {f"family.{k}" for k in set(family) - set(FAMILY_FIELDS)}
        if unknown:
            raise SpecError(
                f"unknown spec field(s) {sorted(unknown)}; remove them (known fields: "
                f"{', '.join(sorted(known - {'family'}) + sorted(FAMILY_FIELDS))})"
            )
        return cls(**data, family=ViTFamily(**family))

    @classmethod
    def from_json(cls, text: str) -> ViTSpec:
        return cls.from_dict(json.loads(text))

    def short(self) -> str:
        """Compact human-readable size, e.g. ``L6-D96-H3``."""
        return f"L{self.depth}-D{self.embed_dim}-H{self.num_heads}"

    def arch_label(self) -> str:
        """What this model is, for people: the timm name (``vit_tiny_patch16_224``) only when the spec is that
        model's size, patch, resolution and 3 channels; else the size first and the timm builder it overrides, e.g.
        ``ViT L2-D32-H2, 28 px, patch 4, 1 channel (timm's vit_tiny_patch16_224 builder with these sizes)``."""
        if _names_its_size(self):
            return self.arch
        channels = f"{self.in_chans} channel{'s' if self.in_chans != 1 else ''}"
        return (
            f"ViT {self.short()}, {self.img_size} px, patch {self.patch_size}, {channels} "
            f"(timm's {self.arch} builder with these sizes)"
        )


# the fields with a command-line flag: the size flags of ancestry, expand and adapt (learngene.cli.parser)
SIZE_FLAG_FIELDS: tuple[dataclasses.Field, ...] = tuple(flagged(ViTSpec, ViTFamily))


# the sizes timm's plain ViT names mean: (depth, width, heads)
_TIMM_SIZE_WORDS = {"tiny": (12, 192, 3), "small": (12, 384, 6), "base": (12, 768, 12), "large": (24, 1024, 16)}


def _names_its_size(spec: ViTSpec) -> bool:
    """Whether ``spec.arch`` (e.g. ``vit_small_patch16_224``) says the spec's size, patch, resolution and channels."""
    import re

    match = re.fullmatch(r"(?:vit|deit)_(tiny|small|base|large)_(?:distilled_)?patch(\d+)_(\d+)", spec.arch)
    if match is None:
        return spec.arch != TIMM_ARCH  # another timm name (eva02_..., a user's): as the model file records it
    word, patch, img = match.group(1), int(match.group(2)), int(match.group(3))
    return (spec.depth, spec.embed_dim, spec.num_heads) == _TIMM_SIZE_WORDS[word] and (
        spec.patch_size,
        spec.img_size,
        spec.in_chans,
    ) == (patch, img, 3)


# ---- what timm built ------------------------------------------------------------------------------
def is_distilled(model) -> bool:
    from timm.models.deit import VisionTransformerDistilled

    return isinstance(model, VisionTransformerDistilled)


def mlp_layer_of(mlp) -> str:
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


def fit_to_budget(
    base: ViTSpec,
    max_params: int | None = None,
    max_flops: int | None = None,
    supports: Callable[[ViTSpec], bool] | None = None,
    depth: int | None = None,
    num_heads: int | None = None,
    max_depth: int | None = None,
    max_heads: int | None = None,
) -> ViTSpec:
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
    hint = (
        f"; the smallest size it supports here, {smallest.short()}, has {smallest.num_params:,} params and "
        f"{smallest.flops:,} FLOPs"
        if smallest
        else "; it supports none of the sizes searched"
    )
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
    """The preset spec ``name`` (``PRESETS``); a one-line error naming the presets for another name."""
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def check_state_shapes(state: dict[str, Tensor], spec: ViTSpec, source: str, require_all: bool = False) -> None:
    """Every key of ``state`` exists in ``spec``'s timm model with the same shape (and all present)."""
    expected = spec.state_shapes()
    unknown = sorted(set(state) - set(expected))
    if unknown:
        raise LearngeneError(
            f"{source} gives key {unknown[0]!r} that a {spec.short()} timm ViT does not have"
            + (f" (+{len(unknown) - 1} more)" if len(unknown) > 1 else "")
        )
    for key, tensor in state.items():
        if tuple(tensor.shape) != expected[key]:
            raise LearngeneError(
                f"{source} gives {key} of shape {tuple(tensor.shape)} but the target "
                f"{spec.short()} needs {expected[key]}; the sizes are incompatible"
            )
    if require_all:
        missing = sorted(set(expected) - set(state))
        if missing:
            raise LearngeneError(
                f"{source} lacks {missing[0]!r}" + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else "")
            )


def parse_size(text: str) -> tuple[int, int, int]:
    """``L4-D192-H3`` → ``(4, 192, 3)`` (depth, embed_dim, num_heads): the size
    :meth:`ViTSpec.short` writes, as ``compare --sizes`` and ``methods --for`` read it."""
    match = re.fullmatch(r"L(\d+)-D(\d+)-H(\d+)", text.strip())
    if not match:
        raise LearngeneError(f"size {text!r} is not of the form L<depth>-D<width>-H<heads>, e.g. L4-D192-H3")
    depth, width, heads = map(int, match.groups())
    return depth, width, heads
