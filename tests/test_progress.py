"""Progress in a log file: a line at most once a minute, not a redraw per step."""

import io
import sys

from learngene.progress import progress_bar


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
