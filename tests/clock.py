"""A virtual clock for the progress bars' heartbeat: time passes only when the code under test sleeps, and what
the main thread would do meanwhile (a step, a redraw, closing the bar) happens at the virtual time it is planned
for. A line count then follows from the plan alone, the same on an idle machine and on one whose cores are all busy
(with real sleeps the heartbeat thread woke late under load and wrote fewer or more lines)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace


class VirtualClock:
    """Stands in for the ``time`` module (``time``, ``perf_counter``, ``monotonic``, ``sleep``) and, through
    :meth:`threading`, for ``threading.Thread``: a started thread is kept, and :meth:`run_threads` runs it here."""

    def __init__(self, start: float = 1000.0):
        self.start = self.now = start  # a whole number of seconds: the sums below stay exact in binary floats
        self.plan: list[tuple[float, Callable[[], object]]] = []
        self.started: list[Callable[[], object]] = []

    def time(self) -> float:
        return self.now

    perf_counter = monotonic = time

    def sleep(self, seconds: float) -> None:
        assert self.plan, f"still sleeping at {self.now - self.start:g} s, after the last planned action"
        self.now += seconds
        while self.plan and self.plan[0][0] <= self.now:
            self.plan.pop(0)[1]()

    def at(self, seconds: float, action: Callable[[], object]) -> None:
        """Run ``action`` once the clock has reached ``seconds`` after its start."""
        self.plan.append((self.start + seconds, action))
        self.plan.sort(key=lambda planned: planned[0])

    def threading(self) -> SimpleNamespace:
        clock = self

        class Thread:
            def __init__(self, target, args=(), **_kwargs):
                self.run = lambda: target(*args)

            def start(self) -> None:
                clock.started.append(self.run)

        return SimpleNamespace(Thread=Thread)

    def run_threads(self) -> None:
        """Run the started threads one after the other, each until it returns (a heartbeat: until its bar closes)."""
        while self.started:
            self.started.pop(0)()
