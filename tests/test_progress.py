"""Progress in a log file: a line at most once a minute, not a redraw per step."""

import io
import sys

from learngene.training.progress import progress_bar


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
    """Inside one long stage the bar does not move; its line still comes once an interval (here 0.2 s)."""
    import time

    from learngene.training import progress

    out = _File()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.2)
    bar = progress_bar(total=3, desc="stage")
    time.sleep(1.3)  # no update at all: one long step
    lines = out.getvalue().splitlines()
    assert 4 <= len(lines) <= 8 and all(line.startswith("stage:   0%") for line in lines), lines
    bar.close()
    closed = len(out.getvalue().splitlines())
    time.sleep(0.4)
    assert len(out.getvalue().splitlines()) == closed, "the heartbeat stops with its bar"


def test_a_redraw_by_the_caller_counts_as_the_line_of_its_interval(monkeypatch):
    """A caller that redraws the bar itself (the benchmark's own heartbeat) gets no second line per interval."""
    import time

    from learngene.training import progress

    out = _File()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.4)
    bar = progress_bar(total=3, desc="stage")
    for _ in range(8):  # the caller redraws every 0.2 s, twice per interval
        time.sleep(0.2)
        bar.refresh()
    bar.close()
    lines = out.getvalue().splitlines()
    assert 9 <= len(lines) <= 11, lines  # the first line, the caller's 8 redraws, the close: no heartbeat lines
