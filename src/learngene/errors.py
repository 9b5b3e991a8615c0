"""The one exception type users see, and how its messages name a setting.

Every failure caused by the user's input (a missing file, an impossible spec, data that does not
fit the model) is raised as a :class:`LearngeneError` whose message is one line that says what to
do. The CLI prints it and exits with code 2; anything else is a bug and keeps its traceback.

A message is plain text for both of its readers: it names a setting as a Python caller passes it, then as the command
line's flag in parentheses (:func:`named`, :func:`assigned`), so ``str(err)`` is the whole message wherever it shows.
"""

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def named(name: str, flag: str | None = None) -> str:
    """How a message names a setting, in plain words that serve a Python caller and the command line alike:
    ``lr (--lr)``. ``flag`` defaults to the name with dashes (``max_params`` -> ``--max-params``); ``""``: the setting
    has no flag, so it is named alone."""
    flag = "--" + name.replace("_", "-") if flag is None else flag
    return f"{name} ({flag})" if flag and flag != name else name


def assigned(name: str, value: object, flag_value: object = None, flag: str | None = None) -> str:
    """A setting given a value, for both callers in plain words: ``lr=0.001 (--lr 0.001)``; ``flag_value`` where the
    command line writes the value otherwise (``grad_clip=None (--grad-clip 0)``; ``""`` for a switch:
    ``resume=True (--resume)``), ``flag`` as in :func:`named`. A method option (``flag="--opt"``) is ``KEY=VALUE`` on
    the command line: ``assigned("design", "authors", flag="--opt")`` is ``design='authors' (--opt design=authors)``."""
    flag = "--" + name.replace("_", "-") if flag is None else flag
    python = f"{name}={value!r}" if isinstance(value, str) else f"{name}={value}"
    if not flag:
        return python
    shown = value if flag_value is None else flag_value
    if shown == "":
        return f"{python} ({flag})"
    if flag == "--opt":
        return f"{python} (--opt {name}={_as_text(shown)})"
    return f"{python} ({flag} {shown})"


def _as_text(value: object) -> str:
    """A value as ``--opt KEY=VALUE`` writes it (JSON's words, a list comma-separated)."""
    if isinstance(value, tuple | list):
        return ",".join(map(str, value))
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def shown(value: object, limit: int = 40) -> str:
    """How a message quotes a value it refuses: its repr on one line (a torch module's spans many), cut to ``limit``
    characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_line(exc: BaseException, limit: int = 160) -> str:
    """What a one-line message quotes of another error: the first line of ``exc``'s message, cut to ``limit``
    characters (its type's name when it says nothing). A first line that ends in a colon announces what follows (torch's
    "Error(s) in loading state_dict for Net:"), so the lines after it are joined on until one does not."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines.pop(0)
    while text.endswith(":") and lines:
        text += " " + lines.pop(0)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Remedy:
    """One thing a refusal advises, as data: condense ``method`` (None: the refused method itself) with ``options``,
    and ask the size asked with the spec fields ``size`` replaced. The message says it in :attr:`text`, so that the
    words and what a caller (or a test) can follow are one fact.

    Attributes:
        method: the method to condense instead; None where the refused method is kept.
        size: spec fields to give instead of the ones asked (``{"embed_dim": 32}``).
        options: method options to condense with (``{"head_aware": False}``).
    """

    method: str | None = None
    size: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The advice in a message's words: ``use grow``, ``use weight_selection with head_aware=False (--opt
        head_aware=false)``, ``pass embed_dim=32 (--embed-dim 32) and num_heads=2 (--num-heads 2)``."""
        options = " and ".join(assigned(k, v, flag="--opt") for k, v in self.options.items())
        size = " and ".join(assigned(k, v) for k, v in self.size.items())
        if self.method is not None:
            words = f"use {self.method}" + (f" with {options}" if options else "")
        else:
            words = f"condense again with {options}" if options else ""
        return " ".join(w for w in (words, "at" if words and size else "", size if words else f"pass {size}") if w)


def either(remedies: Sequence[Remedy]) -> str:
    """The remedies as one clause of a message: ``use grow, or pass depth=2 (--depth 2)``."""
    return ", or ".join(r.text for r in remedies)


class LearngeneError(Exception):
    """A user-facing error: one line, says what went wrong and what to do, naming each setting in both callers'
    words (``str(err)`` is that line; the command line prints it after ``learngene CMD: error:``).

    ``advice``: the :class:`Remedy` items the message advises (empty where it advises none, or has not been given
    them yet), each said in the message by its :attr:`Remedy.text`."""

    advice: tuple[Remedy, ...] = ()

    def __init__(self, *args: object, advice: Sequence[Remedy] = ()) -> None:
        # one line whatever a message quotes (a name or a text holding a line break): the break written as \n
        if args and isinstance(args[0], str):
            args = (args[0].replace("\r", "\\r").replace("\n", "\\n"), *args[1:])
        super().__init__(*args)
        if advice:  # an instance attribute: pickling (a compare worker's refusal) carries it in __dict__
            self.advice = tuple(advice)


class LearngeneWarning(UserWarning):
    """A warning about the user's input, worded like :class:`LearngeneError`; shown as Python shows warnings."""


class SpecError(LearngeneError, ValueError):
    """An impossible model spec (heads not dividing width, image not divisible by patch, ...)."""


class GeneFormatError(LearngeneError):
    """A file that is not a learngene / learngene model, or one this version cannot read."""


class DataError(LearngeneError):
    """Data that is absent, empty, or does not fit the model."""


class TrainingError(LearngeneError):
    """Training cannot go on (e.g. the loss became non-finite)."""


class PlaceError(LearngeneError):
    """The place an output goes cannot take it (a full or read-only disk, no permission): every later write there
    fails too, so a command that goes on past a failed step (``bench``, ``compare``) stops at this one."""


class ArgumentTypeError(LearngeneError, TypeError):
    """A public function got an argument of the wrong kind (a string where a spec belongs, None for a gene)."""


def require_argument(value: object, kinds: type | tuple[type, ...], argument: str, what: str) -> None:
    """Refuse, naming ``argument``, a ``value`` that is none of ``kinds`` (``what`` says which, for the message):
    at a public entry point, before a wrong kind fails deep inside with an AttributeError."""
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):  # True is no count
        raise ArgumentTypeError(f"{argument} must be {what}, got {type(value).__name__} {shown(value)}")


@contextlib.contextmanager
def held_warnings(loggers: tuple[str, ...] = ("huggingface_hub",), say: bool = True) -> Iterator[None]:
    """Python's warnings and the log records of ``loggers`` raised inside, said only when the block succeeds (and
    ``say``: False for a try whose notes would mislead, such as a read from the cache alone).

    Around the reading of an input: a library's note about a file that then turns out unreadable (torch's
    pickle-protocol warning on a file that is no checkpoint, huggingface_hub's retries, PIL's pixel count) would come
    before or beside the one-line error that says all there is to say. On success they are said as they came."""
    import logging
    import sys
    import warnings

    records: list[logging.LogRecord] = []

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    # a library imported inside the block sets its logger up as it loads (huggingface_hub adds its handler): only
    # those already loaded are held, so that none loses its set-up
    held = [logging.getLogger(name) for name in loggers if name.partition(".")[0] in sys.modules]
    kept = [(logger.handlers[:], logger.propagate) for logger in held]
    for logger in held:
        logger.handlers, logger.propagate = [Hold()], False
    try:
        with warnings.catch_warnings(record=True) as caught:
            yield
    finally:
        for logger, (handlers, propagate) in zip(held, kept):
            logger.handlers, logger.propagate = handlers, propagate
    if not say:
        return
    for said in caught:  # the block succeeded (an exception leaves them unsaid)
        warnings.warn_explicit(said.message, said.category, said.filename, said.lineno, source=said.source)
    for record in records:
        logging.getLogger(record.name).handle(record)
