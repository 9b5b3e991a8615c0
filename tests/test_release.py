"""The release (issue 53 item 1): a distribution name of its own, ``learngene-vit``, whose version pyproject.toml,
``learngene.__version__`` and CITATION.cff agree on; no install line in the docs, the README or a message that
installs the unrelated ``learngene`` on PyPI; ``learngene --version`` prints the distribution's name and version, and
a line on another distribution named ``learngene`` installed beside it."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml

import learngene
from learngene.cli import main
from learngene.cli import version as version_module

ROOT = Path(__file__).resolve().parents[1]
# an install of the bare name, or an extra of it: the other project's (`pip install learngene`, "learngene[datasets]")
OTHER_INSTALL = re.compile(r"pip3? install\s+(?:-U\s+|--upgrade\s+)?['\"]?learngene(?![-\w])|['\"`]learngene\[")
# a line may name the other project's install only to warn about it
WARNS = ("that project", "the other project", "the other one", "by mistake")


def _texts():
    """Every file a user reads an install line in: the README, the docs, the sources (messages, docstrings), the
    tests' skip reasons, the Makefile and CI."""
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").rglob("*.md"))
    for folder in ("src", "tests", "tools", "benchmarks"):
        yield from sorted(p for p in (ROOT / folder).rglob("*.py") if p != Path(__file__).resolve())
    yield from (ROOT / name for name in ("Makefile", ".ci/run", "CITATION.cff", "pyproject.toml"))


def test_the_distribution_is_learngene_vit_at_the_version_the_package_and_the_citation_carry():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "learngene-vit"
    assert project["version"] == learngene.__version__
    assert yaml.safe_load((ROOT / "CITATION.cff").read_text())["version"] == learngene.__version__
    assert project["scripts"] == {"learngene": "learngene.cli:main"}  # the command keeps its name
    assert set(project["optional-dependencies"]) >= {"datasets", "tensorboard", "wandb", "test", "dev", "docs"}
    assert any(dep.startswith("twine") for dep in project["optional-dependencies"]["dev"])  # make dist's check
    assert version_module.SUMMARY == project["description"]  # how --version tells this project's old install


def test_no_line_installs_the_other_learngene():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _texts()
        if path.is_file()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OTHER_INSTALL.search(line) and not any(w in line for w in WARNS)
    ]
    assert not found, "these install the unrelated PyPI project 'learngene'; write learngene-vit:\n" + "\n".join(found)
    # the pattern finds what it is for (else the test above could not fail)
    assert OTHER_INSTALL.search('pip install "learngene[datasets]"') and OTHER_INSTALL.search("pip install learngene")
    assert not OTHER_INSTALL.search('pip install "learngene-vit[datasets]"')


class _Dist:
    def __init__(self, version: str, summary: str) -> None:
        self.version, self.metadata = version, type("Meta", (), {"json": {"summary": summary}})()


@pytest.mark.parametrize(
    "other, note",
    [
        (None, None),
        (
            _Dist("1.0.0", "some methods for learngene"),
            r"learngene 1\.0\.0 \(some methods for learngene\), an unrelated",
        ),
        (_Dist("0.1.0", version_module.SUMMARY), r"this project's pre-release learngene 0\.1\.0"),
    ],
    ids=["alone", "the other project beside it", "its own pre-release"],
)
def test_version_prints_the_distribution_and_a_line_on_another_learngene(other, note, monkeypatch, capsys):
    def distribution(name: str):
        assert name == "learngene"
        if other is None:
            raise metadata.PackageNotFoundError(name)
        return other

    monkeypatch.setattr(metadata, "distribution", distribution)
    assert main(["--version"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"learngene-vit {learngene.__version__}"
    if note is None:
        assert len(lines) == 1
    else:
        assert len(lines) == 2 and re.search(note, lines[1]) and "pip uninstall learngene" in lines[1], lines
