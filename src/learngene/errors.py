"""The one exception type users see.

Every failure caused by the user's input (a missing file, an impossible spec, data that does not
fit the model) is raised as a :class:`LearngeneError` whose message is one line that says what to
do. The CLI prints it and exits with code 2; anything else is a bug and keeps its traceback.
"""


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
