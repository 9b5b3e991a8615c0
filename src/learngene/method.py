"""The method interface: what every learngene method implements, and the inputs it is given.

A :class:`Method` turns an ancestry into a :class:`~learngene.gene.Learngene` (``condense``), a
learngene into timm state_dict entries for any spec (``expand``, written in torch ops so it is
differentiable in the gene's tensors) and, for some methods, a learngene into one specialized to a
size on a little data (``adapt``). Its hyper-parameters are a frozen ``Config`` dataclass, stored in
the gene and overridable at expansion (:func:`config_from_dict`). An option's type says its values
(``Literal`` choices), its field metadata its range (:func:`~learngene.settings.field`), and
:func:`check_options` checks both, once, whenever a method is made.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from .data import Data
from .errors import LearngeneError, assigned, require_argument
from .gene import Learngene
from .training.loop import TrainConfig, TrainResult
from .validate import (
    ADAPT,
    CONDENSE,
    EXPAND,
    PHASE_WORDS,
    coerce,
    refusal,
)
from .vit.spec import ViTSpec
from .vit.transfer import StateDict, keep_blocks


@dataclass
class Ancestry:
    """The big pretrained model a learngene is condensed from.

    ``spec`` is None when the model is not a plain timm ViT (it can still teach TLEG/WAVE/Share-Init).
    ``label_space``: the classes its head was trained on, when its file records them.
    ``license``: the licence of its weights, when its folder or file records one (:mod:`learngene.formats.licenses`).
    ``source``: where it was read from when it came by name from the Hugging Face Hub (``hf-hub:``, ``timm:``):
    ``{"repo_id": ..., "revision": <commit>}`` (:mod:`learngene.formats.hub`); None for a local file or folder.
    ``preprocessing``: what its inputs expect (timm's data-config keys, :func:`learngene.data.preprocessing_cfg`), when
    known: a gene condensed from it without data records it.
    """

    model: nn.Module
    spec: ViTSpec | None
    label_space: dict[str, Any] | None = None
    unsupported: str = ""  # why ``spec`` is None: what ``spec_from_model`` could not describe
    license: str | None = None
    source: dict[str, str] | None = None
    preprocessing: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        require_argument(self.model, nn.Module, "Ancestry.model", "a torch module (learngene.load_ancestry(PATH))")
        if self.spec is not None:
            require_argument(self.spec, ViTSpec, "Ancestry.spec", "a ViTSpec or None")

    def require_vit(self, method: str) -> ViTSpec:
        """The ancestry's spec; a one-line error naming ``method`` when the ancestry is not a ViT a spec describes
        (:func:`learngene.pipeline.condense` names the methods that serve it before this is reached)."""
        if self.spec is None:
            raise LearngeneError(
                f"method {method} picks weights from a ViT ancestry, but {self.not_a_vit()}; use a method that "
                f"distils any classifier into an aux net (`learngene methods` lists them) or one that needs no ancestry"
            )
        return self.spec

    def not_a_vit(self) -> str:
        """Why no spec describes this ancestry, in words for a message."""
        return self.unsupported or f"this ancestry is {type(self.model).__name__}"

    def state(self) -> StateDict:
        """The model's tensors, not copied: a billion-parameter ancestry must not be held twice; what timm stacks
        across layers (mixed RoPE's frequencies) held per block, as methods read it (:meth:`ViTSpec.split_layers`)."""
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        return self.spec.split_layers(state) if self.spec is not None else state


@dataclass
class CondenseInputs:
    """What a data-driven condensation may use (trained methods, attention statistics)."""

    train: Data | None = None
    eval: Data | None = None
    train_cfg: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    run_dir: str | Path | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        _check_inputs(self, "CondenseInputs")

    def part(self, name: str) -> CondenseInputs:
        """These inputs for one of several trainings of a condensation (a pool's instance): its own run folder and
        logger folder, ``name`` under the condensation's, so each checkpoints and logs apart."""
        cfg = self.train_cfg
        if cfg.log_dir is not None:
            cfg = cfg.replace(log_dir=str(Path(cfg.log_dir) / name))
        run_dir = Path(self.run_dir) / name if self.run_dir is not None else None
        return dataclasses.replace(self, train_cfg=cfg, run_dir=run_dir)


def _check_inputs(inputs: CondenseInputs | AdaptInputs, kind: str) -> None:
    """The data and settings of a condensation's or adaptation's inputs are of their kinds (one line naming which)."""
    from .data import ImageData
    from .data.folder import FolderData

    for name in ("train", "eval"):
        value = getattr(inputs, name)
        if value is not None or (name == "train" and kind == "AdaptInputs"):
            require_argument(value, (ImageData, FolderData), f"{kind}.{name}", "image data (learngene.data)")
    require_argument(inputs.train_cfg, TrainConfig, f"{kind}.train_cfg", "a TrainConfig")


@dataclass
class AdaptInputs:
    """What ``adapt`` trains on: a little downstream data, the run's settings, where to checkpoint."""

    train: Data
    train_cfg: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: Data | None = None
    run_dir: str | Path | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        _check_inputs(self, "AdaptInputs")


@dataclass(frozen=True)
class Paper:
    """A citation: what ``learngene methods`` and model cards show for a method."""

    title: str
    authors: str  # "First et al." or every name; "" where the paper names none we could check
    venue: str  # "ICLR", "AAAI", ..., "arXiv preprint"
    year: int
    arxiv: str | None = None  # e.g. "2312.05614"; None: not on arXiv
    note: str = ""  # e.g. how a learngene paper uses it as a baseline

    def __str__(self) -> str:
        cite = ", ".join(x for x in (self.authors, f'"{self.title}"', f"{self.venue} {self.year}") if x)
        return cite + (f", arXiv:{self.arxiv}" if self.arxiv else "") + (f" ({self.note})" if self.note else "")


def citations(method: type[Method]) -> tuple[Paper, ...]:
    """The papers a method implements (one, or several for a method that combines techniques)."""
    return method.paper if isinstance(method.paper, tuple) else (method.paper,)


@dataclass
class OutputModel:
    """What a method's declared expand output (:class:`ExpandOutput`) builds: the model (saved in the file format of
    its kind, :func:`learngene.formats.model_file.save_model`), what its file's origin records besides the gene
    (its ``kind`` first), and one line on what it is."""

    model: nn.Module
    origin: dict[str, Any]
    summary: str


@dataclass(frozen=True)
class ExpandOutput:
    """Something other than a timm ViT that ``expand`` makes from a gene of one method, declared by that method
    (``Method.expand_outputs``) and asked for by name: ``learngene expand GENE --NAME VALUE``, or
    ``learngene.pipeline.expand(gene, output=(NAME, VALUE))``. Pool's stitched descendant is one (``stitch``).

    Attributes:
        name: the flag without its dashes, and the name in Python.
        what: what it is, for messages (``a stitched descendant``).
        sizes: where its sizes come from, for the message refusing size arguments (``its instances' sizes``).
        parse: the flag's text to the value ``build`` takes (one line for a text that is not one).
        build: ``(method, gene, value) -> OutputModel``: the method bound to ``gene`` (its options), built once.
    """

    name: str
    what: str
    sizes: str
    parse: Callable[[str], Any]
    build: Callable[[Any, Learngene, Any], OutputModel]


@dataclass(frozen=True)
class ModelFormat:
    """The file format of a model that only one method makes and that is no timm ViT (pool's stitched descendants),
    declared by that method (``Method.model_formats``). Generic code reaches it through the registry
    (:func:`learngene.formats.model_file.model_format`), never by importing the method: by the ``format`` tag of a
    file's header to read or describe one, by the model's ``file_format`` attribute to write one.

    Attributes:
        tag: the header's ``format`` (e.g. ``learngene-stitched-model``), which the model's ``file_format`` names too.
        what: what such a model is, for messages (``stitched descendant``).
        read: ``path -> (model, spec of its input side, origin)``, the weights loaded strictly; one line for a file
            that is not one.
        write: ``(path, model, origin, overwrite, preprocessing) -> None``, atomically.
        describe: ``model -> lines``: its parts, for ``learngene inspect`` (the file's own facts are added there).
    """

    tag: str
    what: str
    read: Callable[[str | os.PathLike], tuple[nn.Module, ViTSpec, dict[str, Any]]]
    write: Callable[[str | os.PathLike, Any, dict[str, Any] | None, bool, dict[str, Any] | None], None]
    describe: Callable[[Any], list[str]]


@dataclass(frozen=True)
class NoConfig:
    pass


class Method:
    """Base class of every learngene method; subclasses register with ``@register_method``.

    Class attributes:
        name: registry key (CLI ``--method``).
        summary: one line for listings.
        stores: what the learngene holds, in one line (the docs' method page and table).
        expands_to: which descendant sizes ``expand`` can make, in one line (the docs' method page and table).
        Config: frozen dataclass of hyper-parameters; stored in the gene, overridable at expand time.
        needs_data: ``condense`` trains or measures on data.
        needs_vit_ancestry: ``condense`` picks weights from a ViT (False: any classifier can teach).
        adaptable: descendants go through ``adapt`` (WAVE's scalers, PEG's φ) before fine-tuning.
        paper: the :class:`Paper` (or papers) it implements; ``learngene methods`` prints it.
        aux_net: ``condense`` distils the ancestry into an aux net whose tensors become the gene
            (subclasses of :class:`learngene.training.auxnet.AuxNetMethod`: TLEG, Share-Init, WAVE, SWS, LeTs, Pool):
            ``--distill-lambda`` and the aux net's size options apply.
        distill_lambda: λ of the paper's condensation loss ``(1−λ)·CE + λ·KL`` (methods that distil);
            ``learngene condense`` and the benchmark use it unless told otherwise.
        same_as_at_ancestry_width: the method whose descendants this one's equal, tensor for tensor, at the
            ancestry's own width (weight_selection: pretrained); benchmarks at that width leave it out.
        seed_option: the option that seeds what ``expand`` draws (e.g. mimetic's ``seed``), or None when
            expansion draws nothing; ``make_descendant`` sets it from the descendant's seed.
        record_tensors: names of gene tensors kept for the record (``inspect``, plots) that ``expand`` never
            reads; any other tensor ``expand`` does not use makes the gene invalid
            (:meth:`learngene.binding.BoundMethod.check`).
        expand_outputs: what else than a timm ViT ``expand`` makes from its genes (:class:`ExpandOutput`, e.g.
            pool's stitched descendant, ``learngene expand GENE --stitch F:J-E:K``); the generic expand step
            (:func:`learngene.pipeline.expand`) asks for one by name.
        selects_layers: expand's ``layers`` (``first``, ``last``, ``spread`` or indices) picks which ancestry
            layers a descendant keeps (:meth:`keep_layers`); False: the method's math fixes them and ``layers`` is
            refused (TLEG's linear expansion, WAVE's templates, mimetic's draws, ...).
        layers_option: the method's own option that also picks the layers (pretrained's ``variant``): given with
            ``layers``, the two must name the same rule.
        preserves: where ``expand`` promises the ancestry's function, in words (``verify`` checks the promise there,
            :meth:`preserves_function` says where); "" where it promises nothing.
        model_formats: the file formats of the models only it makes that are no timm ViT (:class:`ModelFormat`,
            e.g. pool's stitched descendants): ``learngene train`` and ``inspect`` read such a file, and a result
            writes one, through the format (found by the file's header or the model's ``file_format``).
        demo_budget: the share of ``learngene demo``'s condensation images this method condenses on (for as many
            epochs as the others): a condensation that costs more than one aux net's per image, or that cannot
            catch up on the demo's budget anyway, declares less so that the demo stays short; the demo's planned
            work counts it (tests/test_demo.py bounds that). Profiles that compare methods give every method
            the same budget.

    Hooks: what only some methods have is a method here that generic code calls, overridden where a method has it
    (no module outside ``methods/`` imports a method module):
        describe: its lines in ``learngene inspect`` (Cluster-Learngene's clusters).
        plot: the figure ``learngene inspect --plot`` writes (Cluster-Learngene's attention distances).
        bench_options: the options the benchmark and ``learngene compare`` give it for their descendant sizes
            (WAVE's template size).
        condense_note: a hint ``learngene condense`` prints after writing a gene.
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    stores: ClassVar[str] = ""
    expands_to: ClassVar[str] = ""
    paper: ClassVar[Paper | tuple[Paper, ...]]
    Config: ClassVar[type] = NoConfig
    needs_data: ClassVar[bool] = False
    needs_vit_ancestry: ClassVar[bool] = True
    adaptable: ClassVar[bool] = False  # has an ``adapt`` step that descendants should go through
    aux_net: ClassVar[bool] = False
    distill_lambda: ClassVar[float] = 1.0
    same_as_at_ancestry_width: ClassVar[str | None] = None
    seed_option: ClassVar[str | None] = None
    record_tensors: ClassVar[tuple[str, ...]] = ()
    expand_outputs: ClassVar[tuple[ExpandOutput, ...]] = ()
    model_formats: ClassVar[tuple[ModelFormat, ...]] = ()
    demo_budget: ClassVar[float] = 1.0
    selects_layers: ClassVar[bool] = False
    layers_option: ClassVar[str | None] = None
    preserves: ClassVar[str] = ""

    def __init__(self, config: Any = None, **overrides: Any):
        self.config = self.checked_config(config, **overrides)

    @classmethod
    def checked_config(cls, config: Any = None, **overrides: Any) -> Any:
        """``config`` (default: the ``Config``'s defaults) with ``overrides``, its values of their types and in
        their ranges (:func:`check_options`); one line naming the option that is not."""
        base = config if config is not None else cls.Config()
        try:
            replaced = dataclasses.replace(base, **overrides)
        except TypeError as exc:
            fields = ", ".join(f.name for f in dataclasses.fields(cls.Config)) or "none"
            raise LearngeneError(f"{cls.name}: {exc}; its options are: {fields}") from None
        typed = _typed(replaced)
        check_options(cls.name, typed)
        return typed

    # ---- the interface -----------------------------------------------------------------------------
    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        """The learngene of ``ancestry`` (``inputs``: data and training settings, for the methods that need them)."""
        raise NotImplementedError

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """timm state_dict entries for ``spec`` (a subset of its keys), differentiable in ``gene.tensors``."""
        raise NotImplementedError

    def provided_keys(self, gene: Learngene, spec: ViTSpec) -> list[str]:
        """The timm state_dict keys ``expand`` gives for ``spec`` (the rest keep timm's initialization)."""
        with torch.no_grad():
            return list(spec.join_layers(self.expand(gene, spec)))

    def keep_layers(self, gene: Learngene, layers: list[int]) -> Learngene:
        """``gene`` reduced to ancestry layers ``layers`` (0-based, increasing), as a gene of that depth whose
        descendant of that depth keeps exactly them (expand's ``layers``; only for a method that
        :attr:`selects_layers`). This default serves a gene holding every ancestry layer as timm's blocks."""
        layout = gene.require_layout()
        return dataclasses.replace(
            gene, tensors=keep_blocks(gene.tensors, layers), layout=layout.replace(depth=len(layers))
        )

    @classmethod
    def cannot_reach(cls, config: Any, ancestry: ViTSpec, target: ViTSpec) -> str:
        """Why a gene this method condenses with ``config`` (its Config) from an ancestry of ``ancestry``'s size
        could not expand to ``target``, in words; "" where it can. The method's own declaration of its reach, so
        that a size is refused before anything is condensed (``learngene methods --for``, ``compare`` leaving a
        method out); tests/test_advice.py holds it to what ``expand`` does with real genes. This default: any
        size of the ancestry's family."""
        return ""

    def timm_init(self, spec: ViTSpec) -> dict[str, Any]:
        """The keyword arguments timm's model of ``spec`` is built with, whose initialization fills the keys
        ``expand`` leaves out (:func:`learngene.descendant.build_descendant`): none by default, timm's own
        initialization; scratch_fix_init's ``fix_init=True``."""
        return {}

    def preserves_function(self, gene: Learngene, spec: ViTSpec) -> bool:
        """Whether the descendant of ``spec`` computes the ancestry's function (up to float rounding), as the
        method promises (:attr:`preserves`); ``verify`` runs both to check it."""
        return False

    def adapt(self, gene: Learngene, spec: ViTSpec, inputs: AdaptInputs) -> tuple[Learngene, TrainResult]:
        """Specialize ``gene`` to ``spec`` on a little downstream data (WAVE's scalers, PEG's φ)."""
        raise LearngeneError(f"method {self.name} has no adapt step; expand it directly")

    def condense_note(self, gene: Learngene) -> str | None:
        """A hint ``learngene condense`` prints after writing ``gene`` (e.g. an option its descendants may need)."""
        return None

    def kept_for_record(self, key: str) -> bool:
        """Whether gene tensor ``key`` may go unread by ``expand`` at the gene's layout: its ``record_tensors``
        (pool's authors' design also keeps what only its stitched descendants read)."""
        return key in type(self).record_tensors

    def describe(self, gene: Learngene) -> list[str]:
        """Method-specific lines for ``learngene inspect`` (e.g. Cluster-Learngene's clusters)."""
        return []

    def plot(self, gene: Learngene, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write a PNG of ``gene`` to ``path`` (``learngene inspect --plot``); refused for a method that draws none."""
        raise LearngeneError(f"method {self.name} draws no plot of its learngenes; inspect this one without a plot")

    @classmethod
    def bench_options(cls, sizes: Sequence[ViTSpec]) -> dict[str, Any]:
        """The options the benchmark and ``learngene compare`` condense this method with when its descendants are
        ``sizes`` (e.g. WAVE's templates as wide as the narrowest, so that one gene makes every size); a profile's
        own ``method_options`` come on top."""
        return {}

    # ---- helpers for subclasses ------------------------------------------------------------------
    def require_ancestry(self, ancestry: Ancestry | None) -> Ancestry:
        """``ancestry`` itself, or one line for a call of ``condense`` without one."""
        if not isinstance(ancestry, Ancestry):
            raise LearngeneError(
                f"method {self.name} condenses an ancestry: pass one (learngene.load_ancestry(PATH)), "
                f"got {type(ancestry).__name__}"
            )
        return ancestry

    def require_vit_ancestry(self, ancestry: Ancestry | None) -> tuple[Ancestry, ViTSpec]:
        """``ancestry`` and its spec, for a method that picks weights from a ViT: one line for a call of ``condense``
        without an ancestry, or with one that no spec describes."""
        ancestry = self.require_ancestry(ancestry)
        return ancestry, ancestry.require_vit(self.name)

    def new_gene(
        self, tensors: StateDict, layout: ViTSpec | None, ancestry: ViTSpec | None, cost: dict[str, Any] | None = None
    ) -> Learngene:
        """A gene of this method holding ``tensors`` shaped for ``layout``, condensed from ``ancestry``."""
        return Learngene(
            method=self.name,
            tensors={k: v.detach().cpu().contiguous() for k, v in tensors.items()},
            config=dataclasses.asdict(self.config),
            layout=layout,
            ancestry=ancestry,
            cost=cost or {},
        )


def same_size(gene: Learngene, spec: ViTSpec) -> bool:
    """Whether ``spec`` is the size of the ancestry ``gene`` was condensed from, in every field (a same-size copy)."""
    return gene.ancestry is not None and spec == gene.ancestry


def _typed(config: Any) -> Any:
    """``config`` with Python's and text's shapes of its values made its types' (:func:`~learngene.validate.coerce`:
    ``modules="msa,mlp"`` the tuple of its items)."""
    hints = typing.get_type_hints(type(config))
    fixed = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        typed = coerce(value, hints.get(f.name, Any))
        if typed is not value:
            fixed[f.name] = typed
    return dataclasses.replace(config, **fixed) if fixed else config


def option_phases(method: type[Method], name: str) -> tuple[str, ...]:
    """The steps of ``method`` that read its option ``name`` (its field's ``phase``); () for an unknown name."""
    field = next((f for f in dataclasses.fields(method.Config) if f.name == name), None)
    return tuple(field.metadata.get("phase", ())) if field is not None else ()


def refuse_unread(method: type[Method], options: dict[str, Any], step: str) -> None:
    """Refuse, in one line naming the step that reads it, an option given to ``step`` that ``step`` does not read:
    applied there it would change nothing, yet be recorded as applied."""
    known = {f.name for f in dataclasses.fields(method.Config)}
    for key, value in options.items():
        phases = option_phases(method, key)
        if key not in known or step in phases or not phases:
            continue  # an unknown key is refused by the constructor, with the list of options
        redo = next(p for p in (CONDENSE, ADAPT, EXPAND) if p in phases)
        fix = "condense again" if redo == CONDENSE else f"pass it to {redo} (learngene {redo})"
        raise LearngeneError(
            f"{key} is read when {' and '.join(PHASE_WORDS[p] for p in phases)}: "
            f"{fix} with {assigned(key, value, flag='--opt')}"
        )


def check_options(method: str, config: Any) -> None:
    """Every option has its declared type (a ``Literal``'s choices included) and lies in its range: the one
    its field declares (:func:`~learngene.settings.field`), else 0 or more for a number (a count, size,
    rate or seed)."""
    bad = refusal(config, default_limits={"at_least": 0})
    if bad is None:
        return
    raise LearngeneError(
        f"{method} option {bad.name} must be {bad.wanted}, got {bad.value!r}; pass {bad.name}=VALUE "
        f"(--opt {bad.name}=VALUE) with a value of that kind (see help(learngene.get_method({method!r}).Config), or "
        "learngene methods)"
    )


def config_from_dict(config_cls: type, values: dict[str, Any]) -> Any:
    """Rebuild a config dataclass from JSON values (lists back to tuples where the default is a tuple)."""
    kwargs = {}
    for f in dataclasses.fields(config_cls):
        if f.name in values:
            value = values[f.name]
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    return config_cls(**kwargs)


def refused_by(check: Callable[..., Any], *args: Any) -> str:
    """The one line ``check(*args)`` refuses with, "" where it passes: a method's :meth:`Method.cannot_reach` in the
    words of the check its ``expand`` runs."""
    try:
        check(*args)
    except LearngeneError as exc:
        return str(exc)
    return ""


def keeps_ancestry_heads(cls: type[Method], config: Any, ancestry: ViTSpec, target: ViTSpec) -> str:
    """:meth:`Method.cannot_reach` of a method whose descendants keep the ancestry's head width (cluster, peg): a
    size of another head width is out of its reach."""
    if target.head_dim == ancestry.head_dim:
        return ""
    return (
        f"{cls.name} keeps the ancestry's heads of {ancestry.head_dim} dims, so a {target.num_heads}-head "
        f"descendant is {target.num_heads * ancestry.head_dim} wide, not {target.embed_dim}"
    )
