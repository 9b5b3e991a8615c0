"""The one exception type users see.

Every failure caused by the user's input (a missing file, an impossible spec, data that does not
fit the model) is raised as a :class:`LearngeneError` whose message is one line that says what to
do. The CLI prints it and exits with code 2; anything else is a bug and keeps its traceback.
"""

_FROM_CLI = [False]  # set while the command line runs a command (learngene.cli.dispatch)


def called_from_cli(on: bool) -> None:
    """Whether errors name command-line flags (``--overwrite``) or Python arguments (``overwrite=True``)."""
    _FROM_CLI[0] = on


def setting(python: str, flag: str) -> str:
    """How an error names a setting to the one who gave it: ``flag`` from the command line, else ``python``."""
    return flag if _FROM_CLI[0] else python


class LearngeneError(Exception):
    """A user-facing error: one line, says what went wrong and what to do."""


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
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ArgumentTypeError(f"{argument} must be {what}, got {type(value).__name__} {shown}")
