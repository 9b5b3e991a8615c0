"""How many CPU threads torch computes with: one default that fits the machine, set in one place.

torch's own default is one thread per core it sees, whatever else runs. On a shared machine that is the worst
choice: on a busy 2-core machine (1-minute load 7), 2 threads took 10x the CPU-seconds of 1 thread for the same
training (``benchmarks/threads.py``; threads spin waiting for a core that another process holds). The default here is the cores this process may use
(its CPU affinity), less the cores other processes keep busy (:func:`machine_load`), at least 1;
``OMP_NUM_THREADS``, when set, wins over it, and ``--threads N`` / :func:`set_threads` over both. Both are held to
one range, 1 to the usable CPUs (:func:`check_threads`), and the command line checks them before torch loads
(:func:`prepare_environment`), so a value libgomp cannot use never reaches it.
``benchmarks/threads.py`` measures the default against 1 and N threads side by side.

This module imports no torch until :func:`set_threads` applies a number.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator

from ..errors import LearngeneError, named
from .environment import parse_env_number

THREADS_HELP = (
    "CPU threads torch computes with, 1 to the CPUs this process may use (default: $OMP_NUM_THREADS if set, else "
    "the CPUs this process may use less those other processes keep busy, at least 1)"
)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. under taskset or a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


LOAD_SAMPLE_SECONDS = 0.3  # long enough to see a compute-bound process; short beside any command that computes


def machine_load(sample_seconds: float = LOAD_SAMPLE_SECONDS) -> float:
    """How many of this process's CPUs other processes keep busy now: the busy share of those CPUs over
    ``sample_seconds`` (/proc/stat, Linux). It misses a load that pauses for longer than the sample.

    Not the 1-minute load average: it follows the load of the last minute, so right after another job ends it
    still counts that job's cores as busy for about a minute, and a command started then took fewer threads than
    the idle machine gives it. Where /proc/stat cannot be read (not Linux) that average is all there is, and is
    used; 0 where the system reports neither."""
    before = _cpu_times()
    if before is not None:
        time.sleep(sample_seconds)
        after = _cpu_times()
        if after is not None:
            busy = 0.0
            for cpu, (idle0, total0) in before.items():
                idle1, total1 = after.get(cpu, (idle0, total0))
                if total1 > total0:
                    busy += 1.0 - (idle1 - idle0) / (total1 - total0)
            return busy
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def _cpu_times() -> dict[int, tuple[int, int]] | None:
    """``{cpu: (idle ticks, all ticks)}`` for the CPUs this process may use, from /proc/stat (Linux)."""
    try:
        allowed = os.sched_getaffinity(0)
        with open("/proc/stat") as fh:
            lines = fh.read().splitlines()
    except (AttributeError, OSError):
        return None
    times = {}
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in allowed:
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    return times or None


@functools.cache
def _load_at_start() -> float:
    """The machine's load when this process first asked: measured once (it takes :data:`LOAD_SAMPLE_SECONDS`),
    before it computes, so that its own threads never count as another process's load."""
    return machine_load()


def check_threads(
    value: int, shown: str, fix: str = "give a number in that range, or leave it out for the default"
) -> int:
    """``value`` if it is a thread count this process can use: 1 to :func:`usable_cpus` (more threads than CPUs
    only wait for each other, and a count past what the system can start fails deep inside torch or libgomp).
    ``shown`` names the setting in the one-line error (``threads (--threads)``, ``OMP_NUM_THREADS='8'``), ``fix`` says
    what to do."""
    cpus = usable_cpus()
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= cpus:
        raise LearngeneError(
            f"{shown} must be a whole number from 1 to {cpus} (the CPUs this process may use), got {value!r}; {fix}"
        )
    return value


# The variables torch's CPU threads are read from when it loads: OpenMP's (libgomp) and MKL's, whose value torch
# takes for its intra-op threads too (MKL_NUM_THREADS='abc' made torch compute on 1 thread without a word)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _env_threads(name: str = "OMP_NUM_THREADS") -> int | None:
    """``$name`` as one thread count: plain ASCII digits (OpenMP's per-level list '4,2' and other scripts' digits are
    refused: learngene nests no parallel regions, and libgomp warns at such a value), 1 to the usable CPUs."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    shown = f"{name}={text!r}"
    value = parse_env_number(text)
    if value is None:
        raise LearngeneError(
            f"{shown} is not one whole number in plain digits; set it to a number of threads or unset it"
        )
    return check_threads(int(value), shown, "set it to a number in that range, or unset it")


def prepare_environment(threads: int | None) -> None:
    """Before torch is imported (libgomp and MKL read their variables once, when torch loads, and libgomp warns
    about a value it cannot use): ``threads`` (``--threads``), when given, becomes every thread variable
    (:data:`THREAD_VARIABLES`) for this process and the processes it starts; else each one set is checked
    (:func:`check_threads`), refused in one line before anything reads it, and left as that one number (a blank one
    unset)."""
    given = check_threads(threads, named("threads")) if threads is not None else None
    for name in THREAD_VARIABLES:
        value = given if given is not None else _env_threads(name)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)


def default_threads(cpus: int | None = None, load: float | None = None) -> int:
    """``OMP_NUM_THREADS`` if set, else the usable CPUs less the busy ones (rounded), at least 1.

    ``load`` is measured before this process computes anything, so it counts only others."""
    env = _env_threads()
    if env is not None:
        return env
    cpus = usable_cpus() if cpus is None else cpus
    load = _load_at_start() if load is None else load
    return max(1, min(cpus, int(cpus - load + 0.5)))


def set_threads(threads: int | None = None) -> int:
    """Make torch compute with ``threads`` CPU threads (None: :func:`default_threads`); returns the number."""
    threads = default_threads() if threads is None else check_threads(threads, named("threads"))
    import torch

    torch.set_num_threads(threads)
    return threads


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one CPU thread inside, whatever ``--threads`` says, the count given back after. Where a result must be
    the same bytes at any thread count: LAPACK's SVD (MKL's) and matmuls split their sums by the thread count, so
    their last bits depend on it, and where singular values (nearly) tie, so do the singular vectors (ViT-S's
    structured q and k differed between 1 and 2 threads; pith's predicted weights did). PyTorch's
    reproducibility notes promise nothing across thread counts; one thread makes the result a function of the input
    alone. On a shared machine one thread is also the fastest: at load 8 on 2 cores, ViT-B's 2-layer structured
    expansion took 16 s on 1 thread and 233 s on 2."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
