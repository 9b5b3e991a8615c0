"""Progress bars that suit where the output goes: tqdm's live bar on a terminal; in a file or a pipe
(``make demo > log``, CI) a plain line once a minute, each with the elapsed time and the ETA, also while
the bar does not move (one long stage: a heartbeat thread writes the line then, and it alone: tqdm's own
redraws are off in a file, so no two lines come seconds apart).

:class:`RunProgress` is the bar of a run of many stages (``learngene bench``, ``demo``, ``compare``): it names
the stage that is running, moves inside a long stage as the training loop reports its steps
(:func:`note_steps`), and takes its ETA from the work this run did itself: a stage found in the cache, or the
part of a training resumed from its checkpoint, counts as done but not as speed."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

LINE_INTERVAL = 60.0  # seconds between two lines of a bar written to a file
TERMINAL_REDRAW = 2.0  # seconds between two redraws of a run's bar on a terminal, inside a stage


class _Lines:
    """A file for tqdm that turns its carriage-return redraws into whole lines."""

    def __init__(self, stream):
        self.stream = stream
        self.last_line = time.time()  # when a line was last written, whoever redrew the bar

    def write(self, text: str) -> None:
        text = text.strip("\r\n").rstrip()  # tqdm pads a shorter redraw with spaces
        if text.strip():
            self.stream.write(text + "\n")
            self.last_line = time.time()

    def flush(self) -> None:
        self.stream.flush()


def on_terminal(stream=None) -> bool:
    stream = sys.stderr if stream is None else stream
    return hasattr(stream, "isatty") and stream.isatty()


def progress_bar(bar_class: type[tqdm] = tqdm, log_format: str | None = None, **kwargs: Any) -> tqdm:
    """``tqdm(**kwargs)``, or, when stderr is not a terminal, the same bar as a line every LINE_INTERVAL s (in
    ``log_format`` if given: e.g. one without ``{bar}``, which tqdm would shorten to fit, cutting the line's end)."""
    if on_terminal() or kwargs.get("disable"):
        return bar_class(**kwargs)
    lines = _Lines(sys.stderr)
    if log_format is not None:
        kwargs["bar_format"] = log_format
    bar = bar_class(
        **{
            **kwargs,
            "file": lines,
            # tqdm redraws on an update after mininterval and from its monitor thread after maxinterval; in a file
            # the heartbeat below writes the lines, so tqdm's own would only repeat them seconds apart
            "mininterval": math.inf,
            "maxinterval": math.inf,
            "dynamic_ncols": False,
            "ncols": 110 if log_format is None else 1000,  # a line without a bar is not cut
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


# ---- a run of many stages -----------------------------------------------------------------------------------
_ACTIVE: list[RunProgress] = []  # the run whose stage the training loop's steps belong to


def note_steps(done: int, total: int) -> None:
    """The training loop's report: ``done`` of ``total`` steps of the running stage (a resumed run starts above
    0). Moves the bar of the run around it, if any; costs nothing otherwise."""
    if _ACTIVE and total > 0:
        _ACTIVE[-1].note(done / total)


def format_seconds(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


class _RunBar(tqdm):
    """A tqdm bar whose position and postfix are read from its :class:`RunProgress` at every redraw, so the
    heartbeat's line shows the running stage's progress and a fresh ETA."""

    run: RunProgress | None = None

    @property
    def format_dict(self) -> dict[str, Any]:
        values = super().format_dict
        if self.run is not None:
            values["n"] = min(self.run.done(), self.total or math.inf)
            values["postfix"] = self.run.postfix()
        return values


class RunProgress:
    """The progress of a run of stages of estimated ``total`` work (e.g. GFLOP).

    ``with run.stage(name, work):`` wraps each stage. A stage in which the training loop reported no step
    (:func:`note_steps`) was found done (in the cache): its work counts as done, its time not as speed. The ETA
    is the remaining work at the speed of the work this run computed."""

    def __init__(self, total: float, desc: str, unit: str = "", disable: bool = False) -> None:
        self.total = total
        self.cached = 0.0  # work found done before this run: cached stages, resumed parts of trainings
        self.computed = 0.0  # work this run did in finished stages
        self.compute_seconds = 0.0  # the time those stages took
        self.name: str | None = None
        self.work = 0.0
        self.started = 0.0
        self.first: float | None = None  # the running stage's fraction at its first report (above 0 when resumed)
        self.fraction: float | None = None
        self.bar = progress_bar(
            bar_class=type("_Bar", (_RunBar,), {"run": self}),  # known from the first line on
            total=total,
            desc=desc,
            unit=unit,
            unit_scale=True,
            disable=disable,
            dynamic_ncols=True,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]",
            log_format="{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]",
        )
        if on_terminal() and not disable:  # tqdm redraws on updates only: inside a long stage, the ETA would freeze
            threading.Thread(target=self._redraw, daemon=True, name="run-progress-redraw").start()

    def _redraw(self, interval: float = TERMINAL_REDRAW) -> None:
        while not self.bar.disable:  # tqdm sets it on close
            time.sleep(interval)
            if not self.bar.disable:
                self.bar.refresh()

    def note(self, fraction: float) -> None:
        fraction = min(max(fraction, 0.0), 1.0)
        if self.first is None:
            self.first = fraction
        self.fraction = max(fraction, self.fraction or 0.0)

    @contextmanager
    def stage(self, name: str, work: float) -> Iterator[None]:
        """Run a stage named ``name`` (shown while it runs) that weighs ``work`` of the total."""
        self.name, self.work, self.started, self.first, self.fraction = name, work, time.perf_counter(), None, None
        _ACTIVE.append(self)
        try:
            yield
        finally:
            _ACTIVE.remove(self)
            if self.first is None:  # no training step: found in the cache (or a stage without steps)
                self.cached += work
            else:
                self.cached += work * self.first
                self.computed += work * (1.0 - self.first)
                self.compute_seconds += time.perf_counter() - self.started
            self.name, self.first, self.fraction = None, None, None
            self.bar.update(0)  # tqdm redraws on a terminal at its own pace; in a file the heartbeat writes

    def _running(self) -> tuple[float, float]:
        """(work, seconds) the running stage has computed in this run so far."""
        if self.name is None or self.first is None or self.fraction is None:
            return 0.0, 0.0
        return self.work * (self.fraction - self.first), time.perf_counter() - self.started

    def done(self) -> float:
        running = self.work * self.fraction if self.name is not None and self.fraction is not None else 0.0
        return self.cached + self.computed + running

    def eta(self) -> float | None:
        """Seconds left at this run's own speed; None before this run computed anything."""
        work, seconds = self._running()
        work, seconds = work + self.computed, seconds + self.compute_seconds
        if work <= 0 or seconds <= 0:
            return None
        return max(self.total - self.done(), 0.0) * seconds / work

    def postfix(self) -> str:
        eta = self.eta()
        text = f"ETA {format_seconds(eta) if eta is not None else '?'}"
        if self.name is not None:
            text += f", running: {self.name}"
            if self.fraction is not None:
                text += f" ({self.fraction:.0%})"
        return text

    def close(self) -> None:
        self.bar.close()
