"""What the use cases take besides a gene, a size and training settings, each declared once as a request object that
travels whole: the data (:class:`DataRequest`), the ancestry (:class:`AncestryRequest`) and each use case's choices
(:class:`ExpandChoices`, :class:`CondenseChoices`, :class:`AdaptChoices`, :class:`TrainChoices`,
:class:`AncestryChoices`), which its function takes as keyword arguments (``**choices``, made a request by
:meth:`Choices.of`).

Every field is declared with :func:`learngene.settings.field`: its type, range, flag and help. Made from Python or
from the command line's flags, a request checks itself when it is made (one :class:`~learngene.errors.LearngeneError`
line naming the field, :class:`~learngene.errors.ArgumentTypeError` for a value of the wrong kind), so that a bad
value fails before anything is loaded. Adding an expand option is adding one field to :class:`ExpandChoices`: its
keyword argument of :func:`learngene.pipeline.expand`, its flag, its check and its refusal beside a declared output
follow from the declaration.

Torch-free (what they load is imported when they load it), so that ``learngene --help`` builds flags from them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..errors import ArgumentTypeError, LearngeneError, named, shown
from ..settings import SEED, field
from ..training.config import MAX_IMAGES, TrainConfig
from ..validate import Refusal, parse_assignment, refusal, refuse_repeat

if TYPE_CHECKING:
    from ..data import Data
    from ..method import Ancestry
    from .fine_tuning import FineTuning

MAX_WORKERS = 1024  # DataLoader processes: more than a machine has CPUs (512 on the largest nodes) only wait


def check_request(request: Any) -> None:
    """Refuse the first field of ``request`` (a dataclass declared with :func:`~learngene.settings.field`) whose value
    its declaration refuses: :class:`~learngene.errors.ArgumentTypeError` for the wrong kind, else
    :class:`~learngene.errors.LearngeneError`; one line naming the field as both callers write it."""
    bad = refusal(request)
    if bad is None:
        return
    error = ArgumentTypeError if bad.of_type else LearngeneError
    raise error(refused_line(type(request), bad))


def refused_line(owner: type, bad: Refusal) -> str:
    """The one line that refuses ``bad``, a value of a field of dataclass ``owner``: the same from Python (when the
    request is made) and on the command line (when its flag is read, :func:`learngene.cli.flags.add_declared`)."""
    return f"{owner.__name__} {bad.named} must be {bad.wanted}, got {shown(bad.value, 60)}; give {bad.expected}"


@dataclass(frozen=True)
class DataRequest:
    """Which data a use case trains on, loaded at the input size the use case decides (the ancestry's, the gene's, the
    model's) unless ``img_size`` / ``in_chans`` are given. Nothing is read until :meth:`load`.

    Attributes:
        source: a registered data source (``digits``, ``fashion_mnist``, ``folder:PATH``, ...).
        data_dir: where the data lie (default: ``$LEARNGENE_DATA``, then system locations).
        img_size: the images' size, instead of the model's.
        in_chans: the images' channels, instead of the model's.
        aug: training augmentation of an RGB image folder (``none`` or ``deit``: DeiT's recipe, whose mixup the run's
            settings turn on unless they say otherwise).
        workers: DataLoader processes decoding an image folder (None: automatic).
        few_shot: keep this many training images per class, chosen with the run's seed.
        train_images: keep a random subset of this many training images, chosen with the run's seed.
    """

    # img_size and in_chans have no flag of their own: on the command line they are the model's size flags
    source: str = field("fashion_mnist", flag="--data", nonempty=True, help="a registered data source")
    data_dir: str | os.PathLike | None = field(
        None,
        flag="--data-dir",
        nonempty=True,
        help="where the data lie (default: $LEARNGENE_DATA, then system locations)",
    )
    img_size: int | None = field(None, at_least=1, help="the images' size, instead of the model's")
    in_chans: int | None = field(None, at_least=1, help="the images' channels, not the model's")
    aug: Literal["none", "deit"] = field(
        "none",
        flag="--aug",
        help="training augmentation of an RGB image folder: deit = timm's random-resized crop, flip, RandAugment "
        "rand-m9-mstd0.5-inc1 and random erasing 0.25 per image, then mixup 0.8 / cutmix 1.0 per batch with soft "
        "targets (DeiT's recipe; DeiT also uses --label-smoothing 0.1)",
    )
    workers: int | None = field(
        None,
        flag="--workers",
        metavar="N",
        at_least=0,
        at_most=MAX_WORKERS,
        help="DataLoader processes decoding an image folder (default: auto, min(8, CPUs per process - 1); 0: in the "
        "main process)",
    )
    few_shot: int | None = field(
        None,
        flag="--few-shot",
        metavar="K",
        at_least=1,
        at_most=MAX_IMAGES,
        help="use K labelled training images per class",
    )
    train_images: int | None = field(
        None,
        flag="--train-images",
        metavar="N",
        at_least=1,
        at_most=MAX_IMAGES,
        help="use a random subset of N training images",
    )

    def __post_init__(self) -> None:
        check_request(self)

    @classmethod
    def refuse(cls, name: str, value: Any) -> None:
        """Refuse ``value`` for field ``name`` as making the request with it would (its flag's check)."""
        cls(**{name: value})

    def load(
        self,
        img_size: int | None = None,
        in_chans: int | None = None,
        preprocessing: dict[str, Any] | None = None,
        seed: int = 0,
    ) -> tuple[Data, Data]:
        """``(train, test)``, resized/converted to the model input; an image folder read with ``preprocessing`` (the
        model's) when given; the subsets drawn with ``seed``."""
        from ..data import default_workers, few_shot, fraction, load_splits
        from ..training import distributed as dist

        size, chans = self.img_size or img_size, self.in_chans or in_chans
        workers = self.workers if self.workers is not None else default_workers()

        def load() -> tuple[Any, Any]:
            return load_splits(self.source, size, self.data_dir, chans, preprocessing, self.aug, workers)

        # under torchrun rank 0 loads first, so a one-time cache (Fashion-MNIST ungzipped) is written once
        # and a bad source stops every rank with rank 0's message
        loaded = dist.on_main(load)  # None on the other ranks, which then read what rank 0 cached
        train, test = loaded if loaded is not None else load()
        if self.few_shot is not None:
            train = few_shot(train, self.few_shot, seed=seed)
        if self.train_images is not None:
            train = fraction(train, min(1.0, self.train_images / len(train)), seed=seed)
        return train, test


@dataclass(frozen=True)
class AncestryRequest:
    """The ancestry a use case reads, as :func:`learngene.load_ancestry` reads it; nothing is read until :meth:`load`.

    Attributes:
        path: a learngene model file; a checkpoint (``.safetensors``, ``.pth``, ``.bin``) with ``timm_model``; a folder
            with a ``config.json`` (a timm hub folder, a transformers ViT); or a Hub name (``hf-hub:ORG/NAME``,
            ``timm:NAME[.TAG]``).
        timm_model: the timm architecture of a plain checkpoint (read from a folder's ``config.json`` when not given).
        drop_head: load a model folder without its classifier: the ancestry outputs its pooled embedding.
        timm_kwargs: other ``timm.create_model`` arguments of a checkpoint's model, by name, or as ``KEY=VALUE`` texts
            (each value read as JSON); they need ``timm_model``.
    """

    path: str | os.PathLike = field(
        flag="--ancestry",
        nonempty=True,
        help="ancestry model: a learngene model file; a checkpoint (.safetensors/.pth/.bin) with --timm-model; a "
        "folder with config.json: a timm hub folder or a transformers ViT/DeiT/DINOv2/CLIP/SigLIP; or such a model "
        "on the Hugging Face Hub, hf-hub:ORG/NAME[@REVISION], or a timm pretrained tag, timm:NAME[.TAG] (read from "
        "the Hugging Face cache; HF_HUB_OFFLINE=1 keeps it offline)",
    )
    timm_model: str | None = field(
        None,
        flag="--timm-model",
        nonempty=True,
        help="timm architecture of a plain checkpoint, e.g. deit_tiny_patch16_224 (read from a folder's config.json "
        "when not given)",
    )
    drop_head: bool = field(
        False,
        flag="--drop-head",
        help="load a model folder without its classifier (the ancestry outputs its pooled embedding)",
    )
    timm_kwargs: dict[str, Any] = field(
        default_factory=dict,
        flag="--timm-arg",
        metavar="KEY=VALUE",
        help="another timm.create_model argument of the checkpoint's model, e.g. depth=6 or dynamic_img_size=true "
        "(value read as JSON; repeatable; architecture arguments only: the weights are the --ancestry file's)",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "timm_kwargs", timm_arguments(self.timm_kwargs))
        check_request(self)
        if self.timm_kwargs and not self.timm_model:
            raise LearngeneError(
                f"{named('timm_kwargs', '--timm-arg')} need {named('timm_model')}: they are passed to "
                f"timm.create_model for the checkpoint; give both, or neither"
            )

    def load(self) -> Ancestry:
        """The ancestry (:func:`learngene.ancestry.load_ancestry`)."""
        from ..ancestry import load_ancestry

        return load_ancestry(self.path, self.timm_model, drop_head=self.drop_head, **self.timm_kwargs)


def timm_arguments(items: Any) -> Any:
    """``timm.create_model`` arguments by name: a mapping as it is, or a list of ``KEY=VALUE`` texts each read as JSON;
    anything else (a single text among them) is left for the type check to refuse."""
    if isinstance(items, Mapping):
        return dict(items)
    if isinstance(items, (list, tuple)) and all(isinstance(item, str) for item in items):
        usage = f"{named('timm_kwargs', '--timm-arg')} {{item}} is not KEY=VALUE; give e.g. depth=6"
        given: dict[str, Any] = {}
        for item in items:
            key, value = parse_assignment(item, None, usage)
            refuse_repeat(given, key, value, "timm argument", "--timm-arg")
            given[key] = value
        return given
    return items


# expand's ``layers`` by rule (:func:`learngene.vit.transfer.kept_layers` says which layers each keeps)
LAYER_RULES = ("first", "last", "spread")


def layer_rule(value: Any) -> Any:
    """``layers`` as :class:`ExpandChoices` holds it: a rule's name, or the indices as a tuple (from ``"0,2,3"``, a
    list or a tuple); anything else is left for the type check, a text that is neither refused here."""
    if isinstance(value, list):
        return tuple(value)
    if not isinstance(value, str) or value.strip() in LAYER_RULES:
        return value.strip() if isinstance(value, str) else value
    parts = [part.strip() for part in value.split(",")]
    if not all(part.isascii() and part.isdigit() for part in parts):
        raise LearngeneError(
            f"{named('layers')} must be {', '.join(LAYER_RULES)} or ancestry layer indices I,J,K (0-based), got "
            f"{value!r}; give e.g. spread or 0,2,3"
        )
    return tuple(int(part) for part in parts)


class Choices:
    """What a use case's ``**choices`` become: a dataclass whose fields are its keyword arguments (and its command's
    flags, :func:`learngene.cli.flags.add_declared`); ``CALL`` names the function, as Python's refusal of an unknown
    keyword names it."""

    CALL: ClassVar[str] = ""

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> Any:
        """The choices ``given`` by name (the use case's keyword arguments); a name that is no field is refused as
        Python refuses an unexpected keyword argument, naming the fields."""
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = [k for k in given if k not in names]
        if unknown:
            raise ArgumentTypeError(
                f"{cls.CALL}() got an unexpected keyword argument {unknown[0]!r}; its choices are {', '.join(names)}"
            )
        return cls(**given)

    def given(self) -> list[dataclasses.Field]:
        """The fields set to something else than their default, in declaration order."""
        return [f for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]  # type: ignore[arg-type]

    @classmethod
    def refuse(cls, name: str, value: Any) -> None:
        """Refuse ``value`` for field ``name`` as making the choices with it would (its flag's check, so that the
        command line and Python refuse it in the same line)."""
        cls(**{name: value})


@dataclass(frozen=True)
class Licensed(Choices):
    """The licence a use case records on what it writes instead of its input's (every use case's first choice).

    Attributes:
        license: an SPDX identifier (default: the input's, where it records one).
    """

    license: str | None = field(
        None,
        flag="--license",
        metavar="SPDX",
        nonempty=True,
        any_output=True,
        help="licence of the weights written (an SPDX identifier, e.g. Apache-2.0); overrides the one the input "
        "records (default: the input's, if it records one)",
    )

    def __post_init__(self) -> None:
        check_request(self)
        if self.license is not None:
            from ..formats.licenses import check_license

            object.__setattr__(self, "license", check_license(self.license, named("license")))


RUN = ("run", "where a run checkpoints, to continue it")  # the run directory's flags' group in --help


@dataclass(frozen=True)
class RunChoices(Licensed):
    """The choices of a use case that trains: where its run checkpoints, and whether it continues from there.

    Attributes:
        run_dir: where the run writes ``log.jsonl`` and ``checkpoint.pt`` (locked while a run uses it).
        resume: continue from ``run_dir``'s checkpoint.
    """

    run_dir: str | os.PathLike | None = field(
        None,
        flag="--run-dir",
        nonempty=True,
        group="run",
        help="folder for log.jsonl and checkpoint.pt (locked while a run uses it)",
    )
    resume: bool = field(False, flag="--resume", group="run", help="continue from RUN_DIR/checkpoint.pt")

    @property
    def checkpointing(self) -> dict[str, Any]:
        """The training loop's ``run_dir`` and ``resume`` (:func:`learngene.training.loop.train`), as these choose."""
        return {"run_dir": self.run_dir, "resume": self.resume}

    def check_config(self, cfg: TrainConfig) -> None:
        """Refuse what these choices cannot run with settings ``cfg`` (:func:`~learngene.pipeline.inputs.open_run_dir`
        asks before it opens the run directory): nothing here, a use case's choices may."""


@dataclass(frozen=True)
class CondenseChoices(RunChoices):
    """:func:`learngene.pipeline.condense`'s choices: its keyword arguments besides the method's options, the data and
    the training settings."""

    CALL: ClassVar[str] = "condense"


@dataclass(frozen=True)
class AdaptChoices(RunChoices):
    """:func:`learngene.pipeline.adapt`'s choices: its keyword arguments besides the method's options and the training
    settings."""

    CALL: ClassVar[str] = "adapt"


@dataclass(frozen=True)
class AncestryChoices(RunChoices):
    """:func:`learngene.pipeline.train_ancestry`'s choices: its keyword arguments besides the training settings."""

    CALL: ClassVar[str] = "train_ancestry"


@dataclass(frozen=True)
class TrainChoices(RunChoices):
    """:func:`learngene.pipeline.train`'s choices: its keyword arguments besides the training settings.

    Attributes:
        teacher: an ancestry to distil (a path or Hub name, or an :class:`AncestryRequest` for a checkpoint's
            ``timm_model``; not a loaded one: its outputs are cached by file).
        new_head: a fresh head whatever the model's label space.
        inplace: for a result given as the model, train its own module instead of a copy (no second copy of the
            weights in memory): the returned result then holds that module, trained, and the result given can no
            longer be saved (its ``save`` refuses, since its file would label fine-tuned weights as what it was). By
            default a result is left as it was: the call trains a deep copy (``tuned.model is not model.model``).
    """

    CALL: ClassVar[str] = "train"

    teacher: str | os.PathLike | AncestryRequest | None = field(
        None,
        flag="--teacher",
        metavar="ANCESTRY",
        nonempty=True,
        help="distil from this model while training (what --ancestry accepts): on its logits when its head was "
        "trained on the data's classes, else on its pooled embedding (cosine, through a learned projection when the "
        "widths differ; the projection is not saved)",
    )
    new_head: bool = field(
        False,
        flag="--new-head",
        help="always start from a fresh classifier head (default: fresh only when the data's classes differ from "
        "those the model's head was trained on)",
    )
    inplace: bool = field(False, help="train a result's own module instead of a copy")

    def __post_init__(self) -> None:
        if isinstance(self.teacher, (str, os.PathLike)) and str(self.teacher).strip():
            object.__setattr__(self, "teacher", AncestryRequest(self.teacher))
        super().__post_init__()

    def teacher_request(self) -> AncestryRequest | None:
        """The teacher as an :class:`AncestryRequest` (a path given is made one when the choices are made)."""
        assert not isinstance(self.teacher, (str, os.PathLike))  # __post_init__ made it a request
        return self.teacher

    @property
    def distill_lambda(self) -> float:
        """The distillation weight where the training settings give none: 0.5 with a teacher, else 0."""
        return 0.5 if self.teacher else 0.0

    def check_config(self, cfg: TrainConfig) -> None:
        """A distillation weight needs a teacher to distil from."""
        if cfg.distill_lambda and not self.teacher:
            raise LearngeneError(
                f"{named('distill_lambda', '--distill-lambda')} needs a teacher to distil from; pass "
                f"{named('teacher')} ANCESTRY, or leave the distillation weight out"
            )

    def run_config(
        self, cfg: TrainConfig, origin: Mapping[str, Any], weights: str | None, tuned: FineTuning, say: Any
    ) -> TrainConfig:
        """``cfg`` as the fine-tune ``tuned`` of a model of ``origin`` records it: named by what it fine-tunes (the
        loggers' run name, e.g. "train tleg descendant"), its identity (what a resumed run must match) the ``weights``
        read, whether the head is new and the teacher distilled, whose distillation ``say`` names."""
        if cfg.desc == "train":
            what = " ".join(str(origin[k]) for k in ("method", "kind") if origin.get(k))
            cfg = cfg.replace(desc=f"train {what}".strip())
        identity = {"command": "train", "model weights": weights, "new head": tuned.head.fresh}
        teacher = self.teacher_request()
        if teacher is not None and tuned.distillation is not None:
            say(f"distilling from {teacher.path} with λ = {cfg.distill_lambda:g}: {tuned.distillation.why}")
            identity.update(teacher=str(teacher.path), distilled=tuned.distillation.kind)
        return cfg.replace(identity=identity)


@dataclass(frozen=True)
class ExpandChoices(Licensed):
    """What :func:`learngene.pipeline.expand` makes of a gene besides its size and the method's options: each field
    is a keyword argument of ``expand`` and a flag of ``learngene expand``.

    A field declared ``output`` asks for something the gene's method declares instead of a timm ViT
    (:attr:`learngene.method.Method.expand_outputs`, found by the field's name), which has sizes of its own: beside
    it, a size, the method's options and every field not declared ``any_output`` are refused.

    Attributes:
        seed: draws everything random (timm's initialization of what the gene leaves out, a method's draws).
        top_up: a method without a learngene (e.g. ``"mimetic"``) that fills what the gene leaves out.
        max_params: a parameter budget: the deepest, then widest size near the size asked for, within it and
            ``max_flops``, that the method expands to (the size's ``depth`` or ``num_heads`` pin that axis).
        max_flops: a budget of forward FLOPs per image, taken as ``max_params`` is.
        license: the descendant's licence (default: the gene's), an SPDX identifier.
        layers: which ancestry layers the descendant keeps, one per layer: ``first``, ``last``, ``spread`` or
            their 0-based indices (``"0,2,3"`` or ``(0, 2, 3)``, increasing, as many as the descendant's depth),
            for a method that picks layers (:attr:`learngene.method.Method.selects_layers`).
        verify: the ancestry the gene was condensed from (a path or Hub name, or an :class:`AncestryRequest`),
            run beside the descendant on a probe batch where the method promises the ancestry's function
            (:attr:`learngene.method.Method.preserves`): the largest difference of their outputs is said and
            recorded.
        stitch: a pool gene of design=authors only: a stitched descendant ``F:J-E:K`` instead of a timm ViT.
    """

    CALL: ClassVar[str] = "expand"

    seed: int = field(0, any_output=True, **SEED)
    top_up: str | None = field(
        None,
        flag="--top-up",
        metavar="METHOD",
        nonempty=True,
        help="fill what the gene leaves to timm from a method without a learngene, e.g. mimetic (attention weights, "
        "sin-cos positions)",
    )
    max_params: int | None = field(
        None,
        flag="--max-params",
        metavar="N",
        at_least=1,
        counts=True,
        group="budget",
        help="at most N parameters (e.g. 5e6 or 5M)",
    )
    max_flops: int | None = field(
        None,
        flag="--max-flops",
        metavar="N",
        at_least=1,
        counts=True,
        group="budget",
        help="at most N forward FLOPs per image (e.g. 2G)",
    )
    layers: str | tuple[int, ...] | None = field(
        None,
        flag="--layers",
        metavar="RULE",
        nonempty=True,
        help="which ancestry layers the descendant keeps: first, last, spread (evenly spaced with the first and last: "
        "layer i of d keeps round(i*(D-1)/(d-1)) of the ancestry's D, halves up; 12 -> 6 keeps 0,2,4,7,9,11 as "
        "DistilBERT did) or their 0-based indices I,J,K (as many as the descendant's depth); for pretrained, "
        "weight_selection, importance, front and grow",
    )
    verify: str | os.PathLike | AncestryRequest | None = field(
        None,
        flag="--verify",
        metavar="ANCESTRY",
        nonempty=True,
        help="where the gene's method promises the ancestry's function (a same-size copy, grow's HyperCloning), run "
        "the ancestry and the descendant on a probe batch of 4 random images (seed 0) and print and record the "
        "largest absolute difference of their outputs. The gene holds no runnable ancestry: give the one it was "
        "condensed from (a model file, folder or Hub name, as condense's --ancestry reads it)",
    )
    stitch: str | None = field(
        None,
        flag="--stitch",
        metavar="F:J-E:K",
        nonempty=True,
        output=True,
        help="a pool gene of design=authors only: write a stitched descendant instead of a timm ViT: instance F's "
        "embeddings and blocks 0..J, a learned stitch layer, instance E's blocks K.. and head (F < E, |J-K| <= 1; "
        "e.g. 0:1-2:0). Its size is the instances'; no size, budget, method options, top-up or hub folder. "
        "`learngene inspect GENE` lists the instances; `learngene train` fine-tunes the file",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", layer_rule(self.layers))
        outputs = [f.name for f in self.given() if f.metadata.get("output")]  # before the values' checks: by name
        if len(outputs) > 1:
            raise LearngeneError(f"{named(outputs[0])} and {named(outputs[1])} are two outputs; ask for one")
        super().__post_init__()
        if isinstance(self.layers, tuple) and (
            self.layers[0] < 0 or any(b <= a for a, b in zip(self.layers, self.layers[1:], strict=False))
        ):
            raise LearngeneError(
                f"{named('layers')} {','.join(map(str, self.layers))}: give 0-based ancestry layers, each once, in "
                f"increasing order (a descendant's layers keep the ancestry's order)"
            )

    def output(self) -> tuple[str, Any] | None:
        """``(name, value)`` of the declared output asked for, or None for a timm ViT."""
        return next(((f.name, getattr(self, f.name)) for f in self.given() if f.metadata.get("output")), None)

    def beside_output(self) -> list[str]:
        """The fields given that a declared output refuses (every field given but the output and ``any_output``
        ones)."""
        return [f.name for f in self.given() if not f.metadata.get("output") and not f.metadata.get("any_output")]
