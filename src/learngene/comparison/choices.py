"""What ``learngene compare`` compares and on what, besides its training settings: :class:`CompareChoices`, each
field a flag of the command, and the names the profile, the tables and the report share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..bench.stats import MAX_SEEDS
from ..errors import ArgumentTypeError, LearngeneError, assigned, named
from ..pipeline.requests import AncestryRequest, DataRequest
from ..registry import list_methods
from ..settings import field, same_as
from ..training.config import MAX_EPOCHS, MAX_IMAGES, MAX_STEPS
from ..validate import refusal

TASK = "data"  # the one task of a compare profile: the user's data
LONG = 10  # scratch's long budget: ×10 the fine-tuning
LONG_LABEL = f"scratch ×{LONG}"
DEFAULT_REFERENCES = ("scratch", "scratch_x10", "mimetic", "structured")
KD = "+kd"


def refuse_repeats(values: list[Any], name: str, shown: list[str] | None = None) -> None:
    """A value given twice in list ``name`` would count its rows twice (a size's seeds doubled) or be dropped without a
    word: refused, as every repeat is (:func:`learngene.validate.refuse_repeat`)."""
    seen: set[Any] = set()
    for value, text in zip(values, shown or list(map(str, values)), strict=True):
        if value in seen:
            raise LearngeneError(f"{named(name)} names {text} twice; give each once")
        seen.add(value)


def reference_labels(names: Sequence[str]) -> tuple[str, ...]:
    """Report labels of ``--references`` names (``scratch_x10`` is scratch trained ×10 as long); a default
    reference whose method is not registered (``structured`` before it exists) is left out."""
    labels = []
    for name in names:
        if name in ("scratch_x10", LONG_LABEL, "scratchx10"):
            labels.append(LONG_LABEL)
        elif name in list_methods():
            labels.append(name)
        elif name not in DEFAULT_REFERENCES:
            raise LearngeneError(
                f"unknown reference {name!r}; choose from scratch_x10 or a method: {', '.join(list_methods())}"
            )
    return tuple(dict.fromkeys(labels))


@dataclass(frozen=True)
class CompareChoices:
    """What a comparison compares and on what, besides its training settings (a :class:`TrainConfig`): each is a flag
    of ``learngene compare``, checked as it is declared (a list given for a tuple is taken as one)."""

    methods: tuple[str, ...] | None = field(
        None,
        flag="--methods",
        metavar="LIST",
        none_word="all",
        help="the methods compared, by name, separated by commas",
    )
    seeds: int = field(3, flag="--seeds", at_least=1, at_most=MAX_SEEDS, help="seeds 0..N-1 per method and size")
    # the fine-tuning's images: a DataRequest's choices (compare also takes them from the data's request)
    few_shot: int | None = same_as(DataRequest, "few_shot", metavar="K")
    train_images: int | None = same_as(DataRequest, "train_images", metavar="N")
    classes: tuple[int, ...] | None = field(
        None,
        flag="--classes",
        metavar="LIST",
        help="only these classes of the data, by index, e.g. 5,6,7,8,9 (also the classes condensed on, unless the condensing data is other data)",
    )
    references: tuple[str, ...] = field(
        DEFAULT_REFERENCES,
        flag="--references",
        metavar="LIST",
        nonempty=True,
        help="what a recommendation must beat (paired over seeds, Holm-corrected); scratch_x10 = scratch fine-tuned "
        "10× as long; scratch_fix_init = scratch's draws with timm's fix_init; structured only where registered",
    )
    kd_lambda: float | None = field(
        None,
        flag="--kd",
        above=0,
        at_most=1,
        const=0.5,
        metavar="λ",
        fix=f"pass e.g. {assigned('kd_lambda', 0.5, flag='--kd')}",
        help="also fine-tune every method distilling the ancestry (rows '+kd') with weight λ: logits when its head "
        "knows the data's classes, else pooled features",
    )
    condense_data: str | None = field(
        None,
        flag="--condense-data",
        metavar="D",
        nonempty=True,
        help="data the methods that need data condense and adapt on (not given: the data compared on)",
    )
    condense_classes: tuple[int, ...] | None = field(
        None,
        flag="--condense-classes",
        metavar="LIST",
        help="only these classes of the condensing data, e.g. the ancestry's own 0,1,2,3,4, so that no method "
        "learns from the labels of the classes it is compared on (not given: the classes compared on)",
    )
    condense_epochs: int = field(
        2,
        flag="--condense-epochs",
        at_least=1,
        at_most=MAX_EPOCHS,
        label="condense epochs",
        help="aux-net epochs of the condensations (tleg, wave, share_init)",
    )
    condense_images: int | None = field(
        None,
        flag="--condense-images",
        metavar="N",
        at_least=1,
        at_most=MAX_IMAGES,
        help="condense and adapt on a fixed random subset of N images (not given: all)",
    )
    adapt_steps: int = field(
        50,
        flag="--adapt-steps",
        at_least=1,
        at_most=MAX_STEPS,
        label="adapt steps",
        help="steps of wave's and peg's adaptation per size and seed",
    )
    # the ancestry's: an AncestryRequest's choices (compare also takes them from the ancestry's request)
    timm_model: str | None = same_as(AncestryRequest, "timm_model")
    drop_head: bool = same_as(AncestryRequest, "drop_head")

    @classmethod
    def of_call(cls, choices: dict[str, Any], ancestry: AncestryRequest, data: DataRequest) -> CompareChoices:
        """The choices of a :func:`learngene.compare` call: its keyword ``choices`` (a name that is no field is
        refused), with what its ``ancestry``'s and ``data``'s requests choose where a keyword does not."""
        unknown = [k for k in choices if k not in cls.__dataclass_fields__]
        if unknown:
            raise ArgumentTypeError(
                f"compare() got an unexpected keyword argument {unknown[0]!r}; its choices are "
                f"{', '.join(cls.__dataclass_fields__)}"
            )
        from_requests = {
            "few_shot": data.few_shot,
            "train_images": data.train_images,
            "timm_model": ancestry.timm_model,
            "drop_head": ancestry.drop_head,
        }
        return cls(**{**{k: v for k, v in from_requests.items() if v is not None}, **choices})

    @classmethod
    def refuse(cls, name: str, value: Any) -> None:
        """Refuse ``value`` for field ``name`` as making the choices with it would (its flag's check, so that the
        command line and Python refuse it in the same line)."""
        cls(**{name: value})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        bad = refusal(self)
        if bad is not None:
            fix = bad.field.metadata.get("fix", "give a count in that range (0 compares nothing)")
            if bad.of_type:
                fix = "see help(learngene.comparison.CompareChoices) (learngene compare --help)"
            raise LearngeneError(f"{bad.named} must be {bad.wanted}, got {bad.value!r}; {fix}")
        if self.methods is not None and not self.methods:
            raise LearngeneError(
                "methods (--methods) names no method; give some, e.g. methods=('tleg', 'wave') (--methods tleg,wave), "
                "or None (--methods all) for every one"
            )
        for name in ("methods", "references"):  # a list naming one twice: refused, as every repeat (validate.py)
            refuse_repeats(list(getattr(self, name) or ()), name)
        for name in ("classes", "condense_classes"):
            given = getattr(self, name)
            refuse_repeats(list(given or ()), name)
            if given is not None and len(given) < 2:  # a classifier of one class (or none) learns nothing
                shown = ",".join(map(str, given))
                said = f"{assigned(name, given, shown)} keeps one class" if given else f"{named(name)} names no class"
                raise LearngeneError(f"{said}; give 2 or more class indices, e.g. 0,1,2")
