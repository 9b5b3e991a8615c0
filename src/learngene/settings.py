"""How every setting is declared: a dataclass field made by :func:`field`, whose metadata says all about it.

Training settings (:class:`~learngene.training.config.TrainConfig`), method options (each method's ``Config``),
a ViT's sizes and family (:class:`~learngene.vit.spec.ViTSpec`, :class:`~learngene.vit.family.ViTFamily`) and a
learngene's fields (:class:`~learngene.gene.Learngene`) are all declared with it, and everything else is read
from the declaration: the command-line flags and their help (:mod:`learngene.cli.parser`), the checks of type,
choices and range (:func:`learngene.validate.refusal`, run by each class's ``__post_init__``), the run
fingerprint's settings (``kind``), the steps that read a method option (``phase``), and the option listings of
``learngene methods`` and the docs (:func:`learngene.validate.describe_options`).

Torch-free, so that ``learngene --help`` builds its flags from the declarations without importing torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

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


def field(
    default: Any = dataclasses.MISSING,
    *,
    help: str = "",
    flag: str | None = None,
    group: str | None = None,
    flag_choices: tuple[Any, ...] | None = None,
    metavar: str | None = None,
    label: str | None = None,
    fix: str | None = None,
    none_means: str | None = None,
    zero_means_none: bool = False,
    kind: str | None = None,
    phase: str | tuple[str, ...] | None = None,
    speed_only: bool = False,
    at_least: float | None = None,
    at_most: float | None = None,
    above: float | None = None,
    below: float | None = None,
    multiple_of: int | None = None,
    nonempty: bool = False,
    odd: bool = False,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A setting, declared once, as a dataclass field (its type, with ``Literal[...]`` for a choice, is the field's
    annotation).

    Args:
        default, default_factory: as :func:`dataclasses.field`'s.
        help: one line saying what it does: its flag's help, its line in ``learngene methods`` and the docs.
        flag: its command-line flag (e.g. ``"--lr"``); None: set from Python (or ``--opt``) only.
        group: the flag's group in ``--help`` (training settings: ``training``, ``speed``, ``distill``, ``common``).
        flag_choices: the values the flag offers, where the command line offers fewer than the type allows.
        metavar: the flag's value placeholder in ``--help``.
        label: how messages name it (default: its name in words).
        fix: what a refused value's message tells to do; ``{}`` names the setting as its giver writes it
            (:func:`~learngene.validate.caller_fix`: ``"pass e.g. {=0.001}"`` is ``--lr 0.001`` to the command line
            and ``lr=0.001`` to Python).
        none_means: the flag defaults to "not given", and its help says what that means.
        zero_means_none: the flag's 0 turns the setting off (None).
        kind: a training setting's ``result``, ``speed`` or ``report`` (:data:`KINDS`).
        phase: the steps that read a method option: ``condense``, ``expand``, ``adapt`` or a tuple of them.
        speed_only: a method option that changes how fast a result comes, not the result.
        at_least, at_most, above, below, multiple_of, nonempty, odd: its range (``at_least``/``at_most``
            inclusive, ``above``/``below`` exclusive, a non-empty list or name, an odd integer), checked by
            :func:`learngene.validate.refusal`.

    Raises:
        ValueError: for a ``phase`` or ``kind`` that does not exist (a mistake in the declaration, not the input).
    """
    phases = (phase,) if isinstance(phase, str) else tuple(phase or ())
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise ValueError(f"unknown phase {unknown[0]!r}; use {', '.join(PHASES)}")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; use {', '.join(KINDS)}")
    declared = {
        # the range first, in this order (as limits_of lists it)
        "at_least": at_least,
        "at_most": at_most,
        "above": above,
        "below": below,
        "multiple_of": multiple_of,
        "nonempty": nonempty,
        "odd": odd,
        "phase": phases,
        "help": help,
        "speed_only": speed_only,
        "kind": kind,
        "flag": flag,
        "group": group,
        "flag_choices": flag_choices,
        "metavar": metavar,
        "label": label,
        "none_means": none_means,
        "zero_means_none": zero_means_none,
        "fix": fix,
    }
    # what is not declared is left out: a reader asks ``"phase" in f.metadata`` or ``.get("help", "")``
    meta = {k: v for k, v in declared.items() if v is not None and v is not False and v != "" and v != ()}
    meta[DECLARED] = True
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def declared(f: dataclasses.Field) -> bool:
    """Whether dataclass field ``f`` was declared with :func:`field`."""
    return f.metadata.get(DECLARED) is True


def flagged(*classes: type) -> list[dataclasses.Field]:
    """The fields of ``classes`` that have a command-line flag, in declaration order."""
    return [f for cls in classes for f in dataclasses.fields(cls) if f.metadata.get("flag")]
