"""Progress bars that suit where the output goes: tqdm's live bar on a terminal; in a file or a pipe
(``make demo > log``, CI) a plain line once a minute, each with the elapsed time and the ETA, also while
the bar does not move (one long stage: a heartbeat thread writes the line then)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from tqdm.auto import tqdm

LINE_INTERVAL = 60.0  # seconds between two lines of a bar written to a file


class _Lines:
    """A file for tqdm that turns its carriage-return redraws into whole lines."""

    def __init__(self, stream):
        self.stream = stream
        self.last_line = time.time()  # when a line was last written, whoever redrew the bar

    def write(self, text: str) -> None:
        text = text.strip("\r\n")
        if text.strip():
            self.stream.write(text + "\n")
            self.last_line = time.time()

    def flush(self) -> None:
        self.stream.flush()


def on_terminal(stream=None) -> bool:
    stream = sys.stderr if stream is None else stream
    return hasattr(stream, "isatty") and stream.isatty()


def progress_bar(**kwargs: Any) -> tqdm:
    """``tqdm(**kwargs)``, or, when stderr is not a terminal, the same bar as a line every LINE_INTERVAL s."""
    if on_terminal() or kwargs.get("disable"):
        return tqdm(**kwargs)
    lines = _Lines(sys.stderr)
    bar = tqdm(
        **{
            **kwargs,
            "file": lines,
            "mininterval": LINE_INTERVAL,
            "maxinterval": LINE_INTERVAL,
            "dynamic_ncols": False,
            "ncols": 100,
        }
    )
    threading.Thread(
        target=_heartbeat, args=(bar, lines, LINE_INTERVAL), daemon=True, name="progress-heartbeat"
    ).start()
    return bar


def _heartbeat(bar: tqdm, lines: _Lines, interval: float) -> None:
    """Write ``bar``'s line when it has been silent for ``interval`` s (tqdm itself writes only on updates), until
    it closes: a log shows a line a minute even inside one long step of the bar. A line written otherwise (an
    update, or a caller's own redraw) counts, so the log gets no second line within the interval."""
    while not bar.disable:  # tqdm sets it on close
        time.sleep(min(interval / 4, 5.0))
        if not bar.disable and time.time() - lines.last_line >= interval:
            bar.refresh()  # takes tqdm's own lock, as an update from the training thread does
