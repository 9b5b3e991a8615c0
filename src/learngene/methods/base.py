"""The method interface, descendants, and the auxiliary-net trick every trained method shares.

A :class:`Method` turns an ancestry into a :class:`~learngene.gene.Learngene` (``condense``) and a
learngene into a timm state_dict for any spec (``expand``). ``expand`` is written in torch ops, so it
is differentiable in the gene's tensors: :class:`GeneNet` is a timm ViT whose parameters are
``expand(gene, spec)`` recomputed on every forward, which is how TLEG/WAVE/Share-Init condense
(train the gene through an aux net) and how WAVE's scalers and PEG's φ adapt (train some gene
tensors on downstream data). :func:`make_descendant` builds the final plain timm model.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..data import Data
from ..errors import LearngeneError
from ..gene import Learngene
from ..io import check_state_shapes
from ..spec import ViTSpec, block_key
from ..train import TrainConfig, TrainResult
from ..validate import check_fields

StateDict = dict[str, Tensor]


@dataclass
class Ancestry:
    """The big pretrained model a learngene is condensed from.

    ``spec`` is None when the model is not a plain timm ViT (it can still teach TLEG/WAVE/Share-Init).
    """

    model: nn.Module
    spec: ViTSpec | None

    def require_vit(self, method: str) -> ViTSpec:
        if self.spec is None:
            raise LearngeneError(f"method {method} picks weights from a ViT ancestry, but this ancestry is "
                                 f"{type(self.model).__name__}; give a timm ViT")
        return self.spec

    def state(self) -> StateDict:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}


@dataclass
class CondenseInputs:
    """What a data-driven condensation may use (trained methods, attention statistics)."""

    train: Data | None = None
    eval: Data | None = None
    train_cfg: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    run_dir: str | Path | None = None
    resume: bool = False


@dataclass(frozen=True)
class NoConfig:
    pass


class Method:
    """Base class of every learngene method; subclasses register with ``@register_method``.

    Class attributes:
        name: registry key (CLI ``--method``).
        summary: one line for listings.
        Config: frozen dataclass of hyper-parameters; stored in the gene, overridable at expand time.
        needs_data: ``condense`` trains or measures on data.
        needs_vit_ancestry: ``condense`` picks weights from a ViT (False: any classifier can teach).
        adaptable: descendants go through ``adapt`` (WAVE's scalers, PEG's φ) before fine-tuning.
        paper: citation shown in listings.
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig
    needs_data: ClassVar[bool] = False
    needs_vit_ancestry: ClassVar[bool] = True
    adaptable: ClassVar[bool] = False  # has an ``adapt`` step that descendants should go through

    def __init__(self, config: Any = None, **overrides: Any):
        base = config if config is not None else self.Config()
        try:
            self.config = dataclasses.replace(base, **overrides)
        except TypeError as exc:
            fields = ", ".join(f.name for f in dataclasses.fields(self.Config)) or "none"
            raise LearngeneError(f"{self.name}: {exc}; its options are: {fields}") from None
        self.config = _lists_from_text(self.config)
        check_options(self.name, self.config)

    @classmethod
    def from_gene(cls, gene: Learngene, **overrides: Any) -> "Method":
        """The method with the hyper-parameters stored in ``gene`` (plus expand-time overrides)."""
        return cls(config_from_dict(cls.Config, gene.config), **overrides)

    # ---- the interface -----------------------------------------------------------------------------
    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        raise NotImplementedError

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """timm state_dict entries for ``spec`` (a subset of its keys), differentiable in ``gene.tensors``."""
        raise NotImplementedError

    def provided_keys(self, gene: Learngene, spec: ViTSpec) -> list[str]:
        with torch.no_grad():
            return list(self.expand(gene, spec))

    def adapt(self, gene: Learngene, spec: ViTSpec, data: Data, train_cfg: TrainConfig, eval_data: Data | None = None,
              run_dir: str | Path | None = None, resume: bool = False) -> tuple[Learngene, TrainResult]:
        """Specialize ``gene`` to ``spec`` on a little downstream data (WAVE's scalers, PEG's φ)."""
        raise LearngeneError(f"method {self.name} has no adapt step; expand it directly")

    def describe(self, gene: Learngene) -> list[str]:
        """Method-specific lines for ``learngene inspect`` (e.g. Cluster-Learngene's clusters)."""
        return []

    # ---- helpers for subclasses ------------------------------------------------------------------
    def new_gene(self, tensors: StateDict, ancestry: ViTSpec | None, cost: dict[str, Any] | None = None) -> Learngene:
        return Learngene(method=self.name, tensors={k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                         config=dataclasses.asdict(self.config), ancestry=ancestry, cost=cost or {})


def _lists_from_text(config: Any) -> Any:
    """A list option given as text (``--opt modules=msa,mlp``) becomes the tuple of its comma-separated items."""
    hints = typing.get_type_hints(type(config))
    lists = {f.name: tuple(part.strip() for part in getattr(config, f.name).split(","))
             for f in dataclasses.fields(config)
             if typing.get_origin(hints.get(f.name)) is tuple and isinstance(getattr(config, f.name), str)}
    return dataclasses.replace(config, **lists) if lists else config


def check_options(method: str, config: Any) -> None:
    """Every option has its declared type, and every numeric one (a count, size, rate or seed) is 0 or more."""
    fix = f"pass --opt KEY=VALUE with a value of that kind (see `learngene methods`)"
    check_fields(config, f"{method} option", fix)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise LearngeneError(f"{method} option {f.name} must be 0 or more, got {value!r}; {fix}")


def config_from_dict(config_cls: type, values: dict[str, Any]) -> Any:
    """Rebuild a config dataclass from JSON values (lists back to tuples where the default is a tuple)."""
    kwargs = {}
    for f in dataclasses.fields(config_cls):
        if f.name in values:
            value = values[f.name]
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    return config_cls(**kwargs)


def parse_options(config_cls: type, items: list[str]) -> dict[str, Any]:
    """``["key=value", ...]`` from the CLI, each value parsed as JSON, else kept as a string."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields:
            raise LearngeneError(f"option {item!r} is not KEY=VALUE with a known KEY; use one of: {', '.join(fields) or 'none'}")
        if hints.get(key) is str:  # e.g. layers=3 for a layer list written as text
            out[key] = raw
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key] = tuple(value) if isinstance(value, list) else value
    return out


# ---- non-block parts, shared by every weight-picking method -----------------------------------------
def non_block_keys(spec: ViTSpec) -> list[str]:
    return list(spec.non_block_shapes())


def inherit_non_block(state: StateDict, source: ViTSpec, target: ViTSpec,
                      parts: tuple[str, ...] = ("embed", "norm", "head")) -> StateDict:
    """Carry embeddings, final norm and classifier from ``source`` to ``target`` where they fit.

    Position embeddings are resampled to the target grid and patch embeddings to the target patch size
    (timm's resamplers, differentiable); the class token/prefix is kept only when both specs have one;
    the head only when the label spaces agree; the final norm moves between timm's ``norm`` and
    ``fc_norm`` with the pooling. Another width is left to the target's own initialization (methods
    that change width narrow these tensors first); another input channel count is an error.
    """
    from timm.layers import resample_abs_pos_embed, resample_patch_embed

    out: StateDict = {}
    if source.embed_dim != target.embed_dim:
        return out
    if "embed" in parts:
        if source.class_token and target.class_token and "cls_token" in state:
            out["cls_token"] = state["cls_token"]
        if "pos_embed" in state:
            pos = state["pos_embed"]
            src_prefix = int(source.class_token)
            patches = pos[:, src_prefix:]
            if source.grid_size != target.grid_size:
                patches = resample_abs_pos_embed(patches, new_size=[target.grid_size] * 2,
                                                 old_size=[source.grid_size] * 2, num_prefix_tokens=0, verbose=False)
            if target.class_token:
                prefix = pos[:, :1] if source.class_token else None
                if prefix is not None:
                    out["pos_embed"] = torch.cat([prefix, patches], dim=1)
            else:
                out["pos_embed"] = patches
        if "patch_embed.proj.weight" in state:
            if source.in_chans != target.in_chans:
                raise LearngeneError(f"the ancestry takes {source.in_chans}-channel images but the target asks for "
                                     f"{target.in_chans}; keep in_chans={source.in_chans} (data are converted to it)")
            weight = state["patch_embed.proj.weight"]
            if source.patch_size != target.patch_size:
                weight = resample_patch_embed(weight, [target.patch_size] * 2, verbose=False)
            out["patch_embed.proj.weight"] = weight
            out["patch_embed.proj.bias"] = state["patch_embed.proj.bias"]
    if "norm" in parts:
        for suffix in ("weight", "bias"):
            key = f"{source.final_norm_key}.{suffix}"
            if key in state:
                out[f"{target.final_norm_key}.{suffix}"] = state[key]
    if "head" in parts and source.num_classes == target.num_classes and target.num_classes:
        for key in ("head.weight", "head.bias"):
            if key in state:
                out[key] = state[key]
    return out


def block_state(state: StateDict, layer: int) -> StateDict:
    """The tensors of block ``layer`` of a timm state_dict, keyed by their in-block names."""
    prefix = block_key(layer, "")
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def place_blocks(state: StateDict, placement: dict[int, int]) -> StateDict:
    """``{target_layer: source_layer}`` → the target's block tensors copied from the source layers."""
    out: StateDict = {}
    for target, source in placement.items():
        for name, tensor in block_state(state, source).items():
            out[block_key(target, name)] = tensor
    return out


def require_block_shape(gene_spec: ViTSpec, spec: ViTSpec, method: str) -> None:
    """Methods that copy whole blocks need the target's blocks to have the ancestry's shapes."""
    for attr in ("embed_dim", "num_heads", "mlp_hidden"):
        if getattr(gene_spec, attr) != getattr(spec, attr):
            raise LearngeneError(f"{method} copies whole blocks, so the target's {attr} must be "
                                 f"{getattr(gene_spec, attr)} (asked {getattr(spec, attr)}); "
                                 f"use weight_selection for a narrower model")


# ---- descendants -------------------------------------------------------------------------------------
def make_descendant(gene: Learngene, spec: ViTSpec, seed: int = 0, top_up: str | None = None, **options: Any) -> nn.Module:
    """The plain timm ViT of ``spec`` initialized from ``gene``.

    Keys the method provides come from ``expand``; the keys it leaves out come from the ``top_up``
    method when one is named (e.g. ``"mimetic"`` for the attention weights), all others keep timm's
    default initialization (drawn with ``seed``). Every provided key must exist in the model with the
    same shape.
    """
    from ..gene import get_method

    method = get_method(gene.method).from_gene(gene, **options)
    spec.require_memory()
    check_state_shapes(expand_on_meta(method, gene, spec), spec, f"the {gene.method} gene")  # before allocating
    torch.manual_seed(seed)
    model = spec.create_model()
    with torch.no_grad():
        state = method.expand(gene, spec)
        if top_up:
            state = {**top_up_state(top_up, spec), **state}
    check_state_shapes(state, spec, f"the {gene.method} gene")
    result = model.load_state_dict(state, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    return model


def expand_on_meta(method: Method, gene: Learngene, spec: ViTSpec) -> StateDict:
    """``method.expand(gene, spec)`` on ``meta`` tensors: the shapes it gives, without allocating their memory.

    A method that must read the gene's values (e.g. Cluster-Learngene's centroids) is expanded for real.
    """
    on_meta = dataclasses.replace(gene, tensors={k: v.to("meta") for k, v in gene.tensors.items()})
    with torch.no_grad():
        try:
            state = method.expand(on_meta, spec)
        except (RuntimeError, NotImplementedError) as exc:
            if "meta" not in str(exc):
                raise
            spec.require_memory()
            state = method.expand(gene, spec)
    return state


def top_up_state(name: str, spec: ViTSpec) -> StateDict:
    """Everything the empty-gene method ``name`` (e.g. mimetic) gives a model of ``spec``."""
    from ..gene import get_method

    cls = get_method(name)
    if cls.needs_data or cls.needs_vit_ancestry:
        raise LearngeneError(f"a top-up must be a method without a learngene (e.g. mimetic), not {name}")
    filler = cls()
    return filler.expand(filler.condense(None), spec)


class GeneNet(nn.Module):
    """A timm ViT of ``spec`` whose provided parameters are ``method.expand(gene, spec)`` on every forward.

    Gradients flow into the gene's tensors (those selected by ``trainable``); keys the method does not
    provide are the skeleton's own ordinary parameters (trained too, e.g. a new classifier head).
    Every weight is materialized once per forward, then the stock timm forward runs on it.
    """

    def __init__(self, method: Method, gene: Learngene, spec: ViTSpec, trainable: Callable[[str], bool] | None = None):
        super().__init__()
        self.method, self.spec = method, spec
        self._meta = dataclasses.replace(gene, tensors={})
        self.gene_tensors = nn.ParameterDict({
            _param_name(k): nn.Parameter(v.detach().clone(), requires_grad=trainable(k) if trainable else True)
            for k, v in gene.tensors.items()
        })
        self.skeleton = spec.create_model()
        provided = set(method.provided_keys(gene, spec))
        for name, p in self.skeleton.named_parameters():
            if name in provided:
                p.requires_grad_(False)
        self.num_classes = spec.num_classes

    @property
    def patch_embed(self) -> nn.Module:
        """The skeleton's patch embedding (read by the training loop's data checks)."""
        return self.skeleton.patch_embed

    def gene(self) -> Learngene:
        """The current gene (tensors detached)."""
        return dataclasses.replace(self._meta, tensors={k: p.detach().cpu().clone() for k, p in self._tensors().items()})

    def _tensors(self) -> StateDict:
        return {_key_name(k): p for k, p in self.gene_tensors.items()}

    def expanded(self) -> StateDict:
        return self.method.expand(dataclasses.replace(self._meta, tensors=self._tensors()), self.spec)

    def forward(self, x: Tensor) -> Tensor:
        return functional_call(self.skeleton, self.expanded(), (x,), strict=False)

    def no_weight_decay(self) -> set[str]:
        return {f"skeleton.{k}" for k in getattr(self.skeleton, "no_weight_decay", lambda: set())()}

    @torch.no_grad()
    def materialize(self) -> nn.Module:
        """A plain timm model holding this net's current weights."""
        model = self.spec.create_model()
        state = {k: v.detach().clone() for k, v in self.skeleton.state_dict().items()}
        state.update({k: v.detach().clone() for k, v in self.expanded().items()})
        model.load_state_dict(state, strict=True)
        return model.to(next(self.parameters()).device)


def _param_name(key: str) -> str:
    return key.replace(".", "::")


def _key_name(param: str) -> str:
    return param.replace("::", ".")

