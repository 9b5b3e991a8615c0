"""How every setting is declared: a dataclass field made by :func:`field`, whose metadata says all about it.

Training settings (:class:`~learngene.training.config.TrainConfig`), method options (each method's ``Config``),
a ViT's sizes and family (:class:`~learngene.vit.spec.ViTSpec`, :class:`~learngene.vit.family.ViTFamily`) and a
learngene's fields (:class:`~learngene.gene.Learngene`) are all declared with it, and everything else is read
from the declaration: the command-line flags and their help (:mod:`learngene.cli.flags`), the checks of type,
choices and range (:func:`learngene.validate.refusal`, run by each class's ``__post_init__``), the run
fingerprint's settings (``kind``), the steps that read a method option (``phase``), and the option listings of
``learngene methods`` and the docs (:func:`learngene.validate.describe_options`).

Torch-free, so that ``learngene --help`` builds its flags from the declarations without importing torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict, Unpack

# the steps of a method that read an option (its field's ``phase``): expand and adapt refuse an option they do not
# read, so a descendant's header never records an option that changed nothing
CONDENSE, EXPAND, ADAPT = "condense", "expand", "adapt"
PHASES = (CONDENSE, EXPAND, ADAPT)
PHASE_WORDS = {CONDENSE: "condensing", EXPAND: "expanding", ADAPT: "adapting"}

# what a training setting changes (its ``kind``): the result (part of the run fingerprint, so a resumed run must
# agree), only the speed (the same math up to float rounding), or only what is measured and shown
KINDS = ("result", "speed", "report")

# the metadata key every declaration carries: tests/test_settings.py checks that each setting has it
DECLARED = "declared"


class Declaration(TypedDict, total=False):
    """What :func:`field` declares about a setting, besides its default; each key left out (or empty) is left out of
    the field's metadata, so that a reader asks ``"phase" in f.metadata`` or ``.get("help", "")``.

    Its range (checked by :func:`learngene.validate.refusal`, in this order, as ``limits_of`` lists it):
    ``at_least`` and ``at_most`` (inclusive), ``above`` and ``below`` (exclusive), ``multiple_of``, ``nonempty`` (a
    non-empty list or name), ``odd`` (an odd integer). Then:

    - ``phase``: the steps that read a method option: ``condense``, ``expand``, ``adapt`` or a tuple of them.
    - ``help``: one line saying what it does: its flag's help, its line in ``learngene methods`` and the docs.
    - ``speed_only``: a method option that changes how fast a result comes, not the result.
    - ``kind``: a training setting's ``result``, ``speed`` or ``report`` (:data:`KINDS`).
    - ``flag``: its command-line flag (e.g. ``"--lr"``); None: set from Python (or ``--opt``) only.
    - ``group``: the flag's group in ``--help`` (training settings: ``training``, ``speed``, ``distill``, ``common``).
    - ``flag_choices``: the values the flag offers, where the command line offers fewer than the type allows.
    - ``metavar``: the flag's value placeholder in ``--help``.
    - ``label``: how messages name it (default: its name in words).
    - ``none_means``: the flag defaults to "not given", and its help says what that means.
    - ``zero_means_none``: the flag's 0 turns the setting off (None).
    - ``fix``: what a refused value's message tells to do, in plain words that serve both callers (a setting named
      with :func:`learngene.errors.assigned`: ``f"pass e.g. {assigned('lr', 0.001)}"`` says
      ``pass e.g. lr=0.001 (--lr 0.001)``).
    - ``output``: an expand choice that asks for an output the gene's method declares (of the field's name) instead
      of a timm ViT (:class:`~learngene.pipeline.requests.ExpandChoices`).
    - ``any_output``: an expand choice that applies to a declared output too (the others are refused beside one).
    - ``counts``: an integer its flag also reads as a count with a suffix (``5M``, ``2G``).
    - ``const``: the value of the flag given without one (``--kd`` alone is ``--kd 0.5``).
    - ``none_word``: the flag's word for None (``--methods all``).

    A tuple field's flag takes its items separated by commas (``--classes 5,6,7``).
    """

    at_least: float | None
    at_most: float | None
    above: float | None
    below: float | None
    multiple_of: int | None
    nonempty: bool
    odd: bool
    phase: str | tuple[str, ...] | None
    help: str
    speed_only: bool
    kind: str | None
    flag: str | None
    group: str | None
    flag_choices: tuple[Any, ...] | None
    metavar: str | None
    label: str | None
    none_means: str | None
    zero_means_none: bool
    fix: str | None
    output: bool
    any_output: bool
    counts: bool
    const: Any
    none_word: str | None


# the random seed, a training setting (TrainConfig.seed) and an expand choice (ExpandChoices.seed): declared once
SEED: dict[str, Any] = {"flag": "--seed", "at_least": 0, "help": "random seed, 0 or more"}


def field(
    default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, **declared: Unpack[Declaration]
) -> Any:
    """A setting, declared once, as a dataclass field (its type, with ``Literal[...]`` for a choice, is the field's
    annotation); ``default`` and ``default_factory`` as :func:`dataclasses.field`'s, the rest as
    :class:`Declaration` says.

    Raises:
        ValueError: for a ``phase`` or ``kind`` that does not exist (a mistake in the declaration, not the input).
    """
    unknown_keys = [k for k in declared if k not in Declaration.__annotations__]
    if unknown_keys:  # as Python words it for a keyword the signature does not have
        raise TypeError(f"field() got an unexpected keyword argument {unknown_keys[0]!r}")
    phase = declared.get("phase")
    phases = (phase,) if isinstance(phase, str) else tuple(phase or ())
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise ValueError(f"unknown phase {unknown[0]!r}; use {', '.join(PHASES)}")
    kind = declared.get("kind")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; use {', '.join(KINDS)}")
    given: dict[str, Any] = {**declared, "phase": phases}
    meta = {
        k: v
        for k in Declaration.__annotations__
        if (v := given.get(k)) is not None and v is not False and v not in ("", ())
    }
    meta[DECLARED] = True
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def same_as(cls: type, name: str, **shown: Unpack[Declaration]) -> Any:
    """A field of another class that is the setting ``cls.name``, declared there once: its default and declaration
    (range, help, flag), ``shown`` adding how this class's flag shows it (e.g. its ``metavar``)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    meta = {**f.metadata, **{k: v for k, v in shown.items() if v is not None}}
    if f.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=f.default_factory, metadata=meta)
    return dataclasses.field(default=f.default, metadata=meta)


def declared(f: dataclasses.Field) -> bool:
    """Whether dataclass field ``f`` was declared with :func:`field`."""
    return f.metadata.get(DECLARED) is True


def flagged(*classes: type) -> list[dataclasses.Field]:
    """The fields of ``classes`` that have a command-line flag, in declaration order."""
    return [f for cls in classes for f in dataclasses.fields(cls) if f.metadata.get("flag")]
