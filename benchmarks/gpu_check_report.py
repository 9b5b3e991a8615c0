"""A pytest plugin for benchmarks/gpu_check.py: every failure and error, as it happens, is appended to the file
``$GPU_CHECK_FAILURES`` names: a ``==== FAILED <test id>`` (or ``ERROR at setup``/``teardown``) line, then the last
lines of its report (the assertion or exception, pytest's ``E`` lines). A suite stopped at its time limit thus still
says what failed and why, which pytest itself prints only at its end. Under pytest-xdist the workers forward their
reports to the controller, which alone writes.

    PYTHONPATH=benchmarks GPU_CHECK_FAILURES=failures.log python -m pytest -p gpu_check_report ...
"""

from __future__ import annotations

import os

import pytest

TAIL = 15  # lines of each report kept


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("GPU_CHECK_FAILURES")
    if not path or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    kind = "FAILED" if report.when == "call" else f"ERROR at {report.when}"
    lines = report.longreprtext.rstrip().splitlines()[-TAIL:]
    with open(path, "a") as fh:
        fh.write(f"==== {kind} {report.nodeid}\n" + "\n".join(lines) + "\n")


def common_errors(path: str | os.PathLike, most: int = 3) -> list[tuple[str, int]]:
    """The ``most`` most frequent errors in a file this plugin wrote, with how many failures ended with each: each
    report's first ``E`` line naming an exception or an assertion (else its last ``E`` line, else its last line)."""
    counts: dict[str, int] = {}
    text = open(path, errors="replace").read() if os.path.exists(path) else ""
    for block in text.split("\n==== ") if text.startswith("==== ") else []:
        lines = block.rstrip().splitlines()[1:] or ["(no report)"]
        said = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
        named = [ln for ln in said if "Error" in ln or "Exception" in ln or ln.startswith("assert")]
        key = (named or said or [lines[-1].strip()])[0][:160]
        counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])[:most]
