"""What a ViT is apart from its size (:class:`ViTFamily`): the non-size arguments of its timm architecture, the
choices they take, and the one-line refusal of a spec's or family's field value (:func:`refused`).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import SpecError, assigned
from ..settings import field
from ..validate import Refusal, refusal

GlobalPool = Literal["token", "avg", "map"]
# timm's Mlp; SwiGLUPacked (GluMlp, SiLU gate first: DINOv2 ViT-g); SwiGLU (separate fc1_g, fc1_x: AIMv2, EVA-02 B/L)
MlpLayer = Literal["mlp", "swiglu_packed", "swiglu"]
NormLayer = Literal["layernorm", "rmsnorm"]  # timm's LayerNorm (weight, bias); RmsNorm (weight only: AIMv2)
# timm's VisionTransformer; Eva (learngene.vit.eva); NaFlexVit (learngene.vit.naflex)
ModelClass = Literal["vit", "eva", "naflex"]
POOLS, MLP_LAYERS = typing.get_args(GlobalPool), typing.get_args(MlpLayer)


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
            ``"swiglu"`` (gate ``fc1_g`` and value ``fc1_x`` apart: AIMv2, EVA-02 B/L).
        dynamic_img_size: the model accepts other image sizes (position embeddings resampled on the fly).
        norm_layer: ``"layernorm"`` or ``"rmsnorm"`` (no bias), every norm of the model (fixed by the architecture).
        proj_bias: biases on attention's output projection and the MLP's linears (AIMv2 has none).
        embed_norm: a norm after the patch embedding, ``patch_embed.norm`` (AIMv2).
        model_class: ``"vit"`` (timm's VisionTransformer), ``"eva"`` (timm's Eva: EVA-02, Perception
            Encoder; see :mod:`learngene.vit.eva`) or ``"naflex"`` (timm's NaFlexVit: SigLIP 2 NaFlex, RADIO; see
            :mod:`learngene.vit.naflex`), fixed by the architecture.
        qv_bias: Eva's separate q and v biases ``attn.q_bias``/``attn.v_bias`` (k has none; EVA-02).
        attn_norm: Eva's sub-LayerNorm on the heads' outputs before W_O, ``attn.norm``.
        mlp_norm: Eva's sub-LayerNorm on the MLP's hidden channels before fc2, ``mlp.norm``.
        rope: rotary position embeddings (Eva; no weights: fixed by the architecture, recorded).
        abs_pos_embed: learned absolute position embeddings ``pos_embed``; False: none, the positions are RoPE's alone
            (timm's Eva with ``use_abs_pos_emb=False``: DINOv3, the RoPE ViTs).
        rope_mixed: RoPE with learned frequencies per layer and head (Heo et al., "Rotary Position Embedding for
            Vision Transformer", arXiv 2403.13298; timm's ``rope_type='mixed'``): timm stacks them across layers in
            ``rope.freqs``, a spec holds them per block (:data:`~learngene.vit.timm_keys.ROPE_FREQS`).
    """

    class_token: bool = field(True)
    reg_tokens: int = field(0, at_least=0)
    distilled: bool = field(False)
    no_embed_class: bool = field(False)
    pre_norm: bool = field(False)
    final_norm: bool = field(True)
    fc_norm: bool | None = field(None)
    global_pool: GlobalPool = field(
        "token", flag="--global-pool", flag_choices=("token", "avg"), help="class-token or average pooling"
    )
    init_values: float | None = field(None, above=0)
    qkv_bias: bool = field(True)
    qk_norm: bool = field(False)
    act_layer: str = field("gelu")
    mlp_layer: MlpLayer = field("mlp")
    dynamic_img_size: bool = field(False)
    norm_layer: NormLayer = field("layernorm")
    proj_bias: bool = field(True)
    embed_norm: bool = field(False)
    model_class: ModelClass = field("vit")
    qv_bias: bool = field(False)
    attn_norm: bool = field(False)
    mlp_norm: bool = field(False)
    rope: bool = field(False)
    abs_pos_embed: bool = field(True)
    rope_mixed: bool = field(False)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.global_pool == "token" and not self.class_token:
            raise SpecError("global_pool='token' needs class_token=True; use global_pool='avg' without one")
        if self.distilled and (self.global_pool != "token" or not self.class_token):
            raise SpecError(
                "a distilled ViT reads its class and distillation tokens: it needs class_token=True "
                "and global_pool='token'"
            )
        eva_only = [name for name in ("qv_bias", "attn_norm", "mlp_norm", "rope", "rope_mixed") if getattr(self, name)]
        eva_only += [] if self.abs_pos_embed else ["abs_pos_embed=False"]
        if self.model_class != "eva" and eva_only:
            raise SpecError(
                f"{', '.join(eva_only)} belong to timm's Eva, not its VisionTransformer; set model_class='eva'"
            )
        if self.rope_mixed and not self.rope:
            raise SpecError("rope_mixed=True is a kind of RoPE: set rope=True too")
        if self.model_class == "eva" and (self.distilled or self.embed_norm or not self.proj_bias):
            raise SpecError("timm's Eva has no distillation token, patch-embedding norm or bias-free projections")
        if self.model_class == "naflex" and (self.distilled or not self.no_embed_class):
            raise SpecError(
                "timm's NaFlexVit has no distillation token, and no position rows for its prefix tokens "
                "(no_embed_class=True)"
            )

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
        return tuple(
            k
            for k, present in (
                ("cls_token", self.class_token),
                ("reg_token", self.reg_tokens > 0),
                ("dist_token", self.distilled),
            )
            if present
        )

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
        ``embed_norm`` and ``distilled``, which the architecture fixes (``proj_bias`` only when off); an
        Eva's in its own names (:func:`learngene.vit.eva.eva_kwargs`)."""
        if self.model_class == "eva":
            from .eva import eva_kwargs

            return eva_kwargs(self)
        kwargs = dataclasses.asdict(self)
        for fixed in (
            "act_layer",
            "mlp_layer",
            "distilled",
            "norm_layer",
            "embed_norm",
            "model_class",
            "qv_bias",
            "attn_norm",
            "mlp_norm",
            "rope",
            "abs_pos_embed",
            "rope_mixed",
        ):
            kwargs.pop(fixed)
        if kwargs["proj_bias"]:
            kwargs.pop("proj_bias")  # timm's default; configs written before the field keep their exact kwargs
        return kwargs

    def short(self) -> str:
        """The ways this family differs from the plain ViT, e.g. ``reg4, no_embed_class, ls 1e-05``."""
        plain = ViTFamily()
        parts = [
            f"{f.name}={getattr(self, f.name)}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(plain, f.name)
        ]
        return ", ".join(parts) or "plain"


FAMILY_FIELDS = tuple(f.name for f in dataclasses.fields(ViTFamily))


def check_fields(spec_or_family: Any) -> None:
    """Raise :func:`refused`'s line for the first field of ``spec_or_family`` whose value its declaration refuses."""
    bad = refusal(spec_or_family)
    if bad is not None:
        raise refused(bad)


def refused(bad: Refusal) -> SpecError:
    """The one-line refusal of a spec's or family's field value that :func:`~learngene.validate.refusal` found: a
    size past the largest this library builds, or a value not of the field's type and range."""
    largest = bad.field.metadata.get("at_most")
    if not bad.of_type and largest is not None and bad.value > largest:
        given = assigned(bad.name, bad.value, flag=bad.field.metadata.get("flag") or "")
        return SpecError(f"{given} is beyond the largest this library builds ({largest:,}); choose a smaller one")
    fix = bad.field.metadata.get("fix", "give a value of that kind")
    return SpecError(f"{bad.named} must be {bad.expected}, got {bad.value!r}; {fix}")
