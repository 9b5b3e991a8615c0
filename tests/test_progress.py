"""Progress in a log file: a line at most once a minute, not a redraw per step."""

import io
import sys

from learngene.training import progress
from learngene.training.progress import progress_bar
from tests.clock import VirtualClock


class _File(io.StringIO):
    def isatty(self):
        return False


def test_a_bar_in_a_file_writes_whole_lines_rarely(monkeypatch):
    out = _File()
    monkeypatch.setattr(sys, "stderr", out)
    bar = progress_bar(total=1000, desc="work")
    for _ in range(1000):
        bar.update(1)
        bar.set_postfix_str("stage", refresh=False)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert 1 <= len(lines) <= 3 and lines[-1].startswith("work: 100%"), lines


def test_a_bar_in_a_file_writes_a_line_while_it_waits(monkeypatch):
    """Inside one long stage the bar does not move; its line still comes once an interval (LINE_INTERVAL, 60 s of
    the virtual clock; the heartbeat looks every 5 s): the first line, then one at 60, 120, 180 and 240 s, and
    none after the bar closes at 270 s (the heartbeat returns)."""
    out, clock = _File(), VirtualClock()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress, "time", clock)
    monkeypatch.setattr(progress, "threading", clock.threading())
    bar = progress_bar(total=3, desc="stage")
    seen: list[list[str]] = []
    clock.at(270, lambda: (seen.append(out.getvalue().splitlines()), bar.close()))
    clock.run_threads()
    (lines,) = seen
    assert len(lines) == 5 and all(line.startswith("stage:   0%") for line in lines), lines
    assert len(out.getvalue().splitlines()) == 6, "the heartbeat stops with its bar; the close writes the last line"


def test_a_redraw_by_the_caller_counts_as_the_line_of_its_interval(monkeypatch):
    """A caller that redraws the bar itself (the benchmark's own heartbeat) gets no second line per interval: it
    redraws every 30 s of the virtual clock, twice per 60 s interval, 8 times, then closes the bar."""
    out, clock = _File(), VirtualClock()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress, "time", clock)
    monkeypatch.setattr(progress, "threading", clock.threading())
    bar = progress_bar(total=3, desc="stage")
    for redraw in range(1, 9):
        clock.at(30 * redraw, bar.refresh)
    clock.at(250, bar.close)
    clock.run_threads()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10, lines  # the first line, the caller's 8 redraws, the close: no heartbeat lines
