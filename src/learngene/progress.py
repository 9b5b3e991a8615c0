"""Progress bars that suit where the output goes: tqdm's live bar on a terminal; in a file or a pipe
(``make demo > log``, CI) a plain line at most once a minute, each with the elapsed time and the ETA."""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm

LINE_INTERVAL = 60.0  # seconds between two lines of a bar written to a file


class _Lines:
    """A file for tqdm that turns its carriage-return redraws into whole lines."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.strip("\r\n")
        if text.strip():
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def on_terminal(stream=None) -> bool:
    stream = sys.stderr if stream is None else stream
    return hasattr(stream, "isatty") and stream.isatty()


def progress_bar(**kwargs: Any) -> tqdm:
    """``tqdm(**kwargs)``, or, when stderr is not a terminal, the same bar as a line every LINE_INTERVAL s."""
    if on_terminal() or kwargs.get("disable"):
        return tqdm(**kwargs)
    return tqdm(**{**kwargs, "file": _Lines(sys.stderr), "mininterval": LINE_INTERVAL, "maxinterval": LINE_INTERVAL,
                   "dynamic_ncols": False, "ncols": 100})
