"""What ``learngene compare`` compares and on what, besides its training settings: :class:`CompareChoices`, each
field a flag of the command, and the names the profile, the tables and the report share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..bench.stats import MAX_SEEDS
from ..errors import LearngeneError, assigned, named
from ..registry import list_methods
from ..settings import field
from ..training.config import MAX_EPOCHS, MAX_IMAGES, MAX_STEPS
from ..validate import refusal

TASK = "data"  # the one task of a compare profile: the user's data
LONG = 10  # scratch's long budget: ×10 the fine-tuning
LONG_LABEL = f"scratch ×{LONG}"
DEFAULT_REFERENCES = ("scratch", "scratch_x10", "mimetic", "structured")
KD = "+kd"


def parse_classes(text: str, flag: str = "--classes") -> list[int]:
    """``5,6,7`` → ``[5, 6, 7]``."""
    try:
        return [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        name = named(flag.lstrip("-").replace("-", "_"), flag)
        raise LearngeneError(f"{name} takes class indices separated by commas, e.g. 5,6,7,8,9; got {text!r}") from None


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

    methods: tuple[str, ...] | None = field(None, flag="--methods", help="the methods compared (None: every one)")
    seeds: int = field(3, flag="--seeds", at_least=1, at_most=MAX_SEEDS, help="seeds 0..N-1 per method and size")
    few_shot: int | None = field(
        None, flag="--few-shot", at_least=1, at_most=MAX_IMAGES, help="fine-tune on K labelled images per class"
    )
    train_images: int | None = field(
        None, flag="--train-images", at_least=1, at_most=MAX_IMAGES, help="fine-tune on a subset of N images"
    )
    classes: tuple[int, ...] | None = field(None, flag="--classes", help="only these classes of the data, by index")
    references: tuple[str, ...] = field(
        DEFAULT_REFERENCES, flag="--references", nonempty=True, help="what a recommendation must beat"
    )
    kd_lambda: float | None = field(
        None,
        flag="--kd",
        above=0,
        at_most=1,
        fix=f"pass e.g. {assigned('kd_lambda', 0.5, flag='--kd')}",
        help="also fine-tune distilling the ancestry (λ)",
    )
    condense_data: str | None = field(
        None, flag="--condense-data", nonempty=True, help="the data condensed and adapted on"
    )
    condense_classes: tuple[int, ...] | None = field(None, flag="--condense-classes", help="the classes condensed on")
    condense_epochs: int = field(
        2, flag="--condense-epochs", at_least=1, at_most=MAX_EPOCHS, help="aux-net epochs of the condensations"
    )
    condense_images: int | None = field(
        None, flag="--condense-images", at_least=1, at_most=MAX_IMAGES, help="condense on N images"
    )
    adapt_steps: int = field(
        50, flag="--adapt-steps", at_least=1, at_most=MAX_STEPS, help="steps of wave's and peg's adaptation"
    )
    timm_model: str | None = field(
        None, flag="--timm-model", nonempty=True, help="timm architecture of a plain ancestry checkpoint"
    )
    drop_head: bool = field(False, flag="--drop-head", help="load the ancestry folder without its classifier")

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
