"""Every tool in tools/ runs in the suite: the documented commands of each, on copies of what they rewrite."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"


def _run(*argv: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.mark.parametrize("folder", ["compare-heldout-classes-20shot", "bench-transfer"])
def test_rebuild_reports_rewrites_a_stored_report_from_its_results(folder, tmp_path):
    """The documented way to rebuild stored reports (docs/contributing.md) runs: a compare and a bench report, each
    copied, keep their header and get the line that says they were rebuilt."""
    copy = tmp_path / folder
    shutil.copytree(ROOT / "docs" / folder, copy)
    header = (copy / "report.md").read_text().splitlines()[:3]
    done = _run(TOOLS / "rebuild_reports.py", copy)
    assert done.returncode == 0, done.stderr
    text = (copy / "report.md").read_text()
    assert text.splitlines()[:3] == header and "tables rebuilt from this folder's results.csv" in text
    assert done.stdout.strip() == f"rebuilt {copy}/report.md"


def test_rebuild_reports_summary_prints_the_results_pages_tables():
    done = _run(TOOLS / "rebuild_reports.py", "--summary", ROOT / "docs" / "compare-heldout-classes-20shot")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| method | L2-D64-H4 | L4-D64-H4 | L6-D64-H4 |")
    assert "| size | strongest reference | method |" in done.stdout


def test_code_metrics_prints_its_figures():
    done = _run(TOOLS / "code_metrics.py")
    assert done.returncode == 0, done.stderr
    assert "functions" in done.stdout


def _call_walk():
    spec = importlib.util.spec_from_file_location("call_walk", TOOLS / "call_walk.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_call_walk_collapses_stays_and_counts_the_returns():
    """The rule of tools/call_walk.py on a walk written out: a, a, b, a, c, b is 5 stays (a a collapse), 3 modules,
    and 2 returns (the second a, the second b)."""
    walk = _call_walk().stays(["a", "a", "b", "a", "c", "b"])
    assert walk == [("a", False), ("b", False), ("a", True), ("c", False), ("b", True)]


@pytest.mark.integration
def test_call_walk_prints_its_figures_of_expands_argument_path():
    """The tool runs `learngene expand` on the tiny gene it makes; each stay is a first visit or a return, so returns
    are exactly stays minus modules, and --list prints one line a stay."""
    done = _run(TOOLS / "call_walk.py", "--list")
    assert done.returncode == 0, done.stderr
    *listed, stays, modules, returns = done.stdout.splitlines()
    figures = [int(line.split()[1]) for line in (stays, modules, returns)]
    assert figures[0] == len(listed) > 0 and figures[2] == figures[0] - figures[1]
    assert sum(line.startswith("*") for line in listed) == figures[2]
    # issue 55's goal, held: the figure depends on the call structure alone (the tool's docstring), so it is the same
    # on every machine; 8 when the goal was met (the process start one call, no pass-through for --out's kind)
    assert figures[2] < 10, done.stdout


def test_pinned_versions_says_which_installed_versions_are_not_the_pins(tmp_path):
    """make check-latest's question, asked of this environment: pinned at what it holds, exit 0 and no line; one
    version changed (the name written as pip freeze may spell it), exit 1 and that line; an unreadable file, exit 2."""
    import importlib.metadata

    tool = TOOLS / "pinned_versions.py"
    held = {
        d.metadata["Name"]: d.version
        for d in importlib.metadata.distributions()
        if d.metadata["Name"].lower() not in ("pip", "setuptools", "wheel", "learngene-vit")
    }
    pins = tmp_path / "constraints.txt"
    pins.write_text("# a comment\n" + "".join(f"{name}=={version}\n" for name, version in held.items()))
    same = _run(tool, pins)
    assert (same.returncode, same.stdout) == (0, f"every installed distribution is at its pin in {pins}\n"), same
    torch_version = importlib.metadata.version("torch")
    pins.write_text(pins.read_text().replace(f"torch=={torch_version}\n", "Torch==0.0.1\n"))
    changed = _run(tool, pins)
    assert (changed.returncode, changed.stdout) == (1, f"torch: pinned 0.0.1, installed {torch_version}\n"), changed
    missing = _run(tool, tmp_path / "none.txt")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "cannot read" in missing.stderr


# each tool and the test module that runs it
RUN_BY = {
    "advice_table.py": "test_advice.py",
    "call_walk.py": "test_tools.py",
    "code_metrics.py": "test_tools.py",
    "gen_docs.py": "test_docs.py",
    "griffe_roles.py": "test_docs.py",
    "pinned_versions.py": "test_tools.py",
    "rebuild_reports.py": "test_tools.py",
}


def test_every_tool_is_run_by_a_test():
    """A tool no test runs can break unseen (rebuild_reports.py did: an import of a renamed helper); a new tool
    needs its line in RUN_BY and a test there that runs it."""
    assert sorted(p.name for p in TOOLS.glob("*.py")) == sorted(RUN_BY)
    for tool, test in RUN_BY.items():
        assert tool.removesuffix(".py") in (ROOT / "tests" / test).read_text(), (tool, test)
