"""The docs cannot drift from the code: their runnable snippets run, every flag and option has help text, the
generated pages cover the registry and the parser, the README stays short and lists every method.

A code block is runnable when its first line is ``# runnable``. The blocks of one file run in order in one
temporary folder, the ``learngene`` commands in this process (``learngene.cli.main``), at tiny sizes: the
rules of ``TINY`` below, then the block's own ``# tiny: OLD => NEW`` lines. Fashion-MNIST is replaced by tiny
IDX files (``$LEARNGENE_DATA``); the Hub guide's models and dataset by tiny ones in an offline Hugging Face cache.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.conftest import own_methods, write_fashion

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# tiny sizes for the documented commands: (pattern, replacement), applied in order to every runnable block
TINY = [
    (r"--preset cpu_tiny", "--depth 3 --embed-dim 32 --num-heads 2 --img-size 16 --patch-size 4"),
    (r"--epochs \d+", "--epochs 1"),
    (r"--max-steps \d+", "--max-steps 2"),
    (r"--train-images \d+", "--train-images 64"),
    (r"--seeds \d+", "--seeds 2"),
    (r"--embed-dim 128 --num-heads 8", "--embed-dim 64 --num-heads 4"),
    (r"--embed-dim 192 --num-heads 3", "--embed-dim 24 --num-heads 3"),  # half of the hub guide's tiny ViT-S
    (r"TrainConfig\(epochs=\d+\)", "TrainConfig(epochs=1)"),
    (r'\{"epochs": \d+\}', '{"epochs": 1}'),
]
# the guides whose blocks read a Hugging Face cache the test fills (tests/hub_fixtures.py), with what they need
HUB_GUIDES = {"hub.md": ("datasets", "tensorboard", "wandb", "transformers")}
# the other guides that run optional packages (test extras), skipped without them
NEEDS = {"after-learngene.md": ("transformers", "accelerate")}
# flags added to every command that accepts them, unless the block sets them
TINY_FLAGS = {"--train-images": "64", "--eval-images": "32", "--batch-size": "16"}


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, text) of every fenced block of a Markdown file."""
    return re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), flags=re.M | re.S)


def runnable_blocks(path: Path) -> list[tuple[str, str]]:
    out = []
    for lang, text in code_blocks(path):
        if text.startswith("# runnable"):
            for line in text.splitlines():
                rule = re.match(r"#\s*tiny:\s*(.*?)\s*=>\s*(.*)$", line.strip())
                if rule:
                    text = text.replace(rule.group(1), rule.group(2))
            for pattern, new in TINY:
                text = re.sub(pattern, new, text)
            out.append((lang, text))
    return out


def _flags_of(command: str) -> set[str]:
    from learngene.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices.get(command)
    return {s for a in parser._actions for s in a.option_strings} if parser else set()


def shell_commands(text: str) -> list[list[str]]:
    """The commands of a bash block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if shlex.split(line, comments=True)]


def run_learngene(argv: list[str]) -> None:
    from learngene.cli import main

    command = argv[0]
    accepted = _flags_of(command)
    for flag, value in TINY_FLAGS.items():
        if flag in accepted and flag not in argv:
            argv += [flag, value]
    if "--quiet" in accepted:
        argv.append("--quiet")
    code = main(argv)
    assert code == 0, f"`learngene {shlex.join(argv)}` exited with {code}"


@pytest.fixture
def tiny_data(tmp_path, monkeypatch):
    folder = write_fashion(tmp_path / "fashion", train=64, test=32)
    monkeypatch.setenv("LEARNGENE_DATA", str(folder))
    monkeypatch.setenv("LEARNGENE_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


FILES_WITH_SNIPPETS = [p for p in DOC_FILES if runnable_blocks(p)]


@pytest.mark.parametrize("path", FILES_WITH_SNIPPETS, ids=[str(p.relative_to(ROOT)) for p in FILES_WITH_SNIPPETS])
def test_runnable_snippets_run(path, tiny_data, capsys, tmp_path, monkeypatch):
    if path.name in HUB_GUIDES:
        from tests.hub_fixtures import fill_docs_cache

        for module in HUB_GUIDES[path.name]:
            pytest.importorskip(module, reason=f"{path.name} needs {module} (an optional extra or the test extra)")
        fill_docs_cache(tmp_path, monkeypatch, tiny_data)
    for module in NEEDS.get(path.name, ()):
        pytest.importorskip(module, reason=f"{path.name} needs {module} (the test extra)")
    for lang, text in runnable_blocks(path):
        if lang == "bash":
            for argv in shell_commands(text):
                assert argv[0] == "learngene", f"{path.name}: a runnable block may only run learngene, got {argv}"
                run_learngene(argv[1:])
        elif lang == "python":
            with contextlib.redirect_stdout(sys.stderr):
                exec(compile(text, f"{path.name}:snippet", "exec"), {"__name__": "__snippet__"})
        else:
            pytest.fail(f"{path.name}: a runnable block must be bash or python, got {lang!r}")


def test_the_readmes_python_path_exports_the_ancestrys_preprocessing(tiny_data):
    """The README's Python block, run after the ancestry its command-line block trains, writes a hub folder whose
    config.json has the ancestry's normalization, interpolation and crop, not timm's defaults (0.5/0.5, bicubic, 0.9):
    the gene carries the ancestry's preprocessing because ``lg.condense`` records it."""
    import json

    from learngene.formats.model_file import model_preprocessing

    (_, commands), (_, python) = runnable_blocks(ROOT / "README.md")
    run_learngene(shell_commands(commands)[0][1:])  # learngene ancestry ...
    with contextlib.redirect_stdout(sys.stderr):
        exec(compile(python, "README.md:python", "exec"), {"__name__": "__snippet__"})
    ancestry = model_preprocessing("ancestry.safetensors")
    written = json.loads((tiny_data / "small-hub" / "config.json").read_text())["pretrained_cfg"]
    assert ancestry is not None and ancestry["mean"] != (0.5,) and ancestry["interpolation"] == "bilinear"
    for key in ("mean", "std", "interpolation", "crop_pct"):
        assert tuple(written[key]) == tuple(ancestry[key]) if key in ("mean", "std") else written[key] == ancestry[key]


def test_readme_is_short_and_has_the_runnable_quickstarts():
    readme = ROOT / "README.md"
    assert readme.stat().st_size <= 12 * 1024
    assert [lang for lang, _ in runnable_blocks(readme)] == ["bash", "python"]


def test_readme_method_table_is_the_one_generated_from_the_registry():
    """Regenerate it with ``python tools/gen_docs.py --readme``; an installed plugin's methods are not learngene's."""
    text = (ROOT / "README.md").read_text()
    table = _gen_docs().readme_method_table()
    assert table in text, "the README's method table is not the registry's: run python tools/gen_docs.py --readme"
    assert re.findall(r"^\| `(\w+)` \|", text, flags=re.M) == own_methods()


def test_every_cli_flag_has_help():
    from learngene.cli.parser import build_parser

    gen = _gen_docs()
    parser = build_parser()
    missing = []
    for name, sub in gen._subparsers(parser).items():
        for action in gen.cli_actions(sub):
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, f"flags without help text: {missing}"


def test_every_method_option_has_help_and_every_method_its_page_facts():
    from learngene.registry import get_method
    from learngene.validate import option_help

    missing = []
    for name in own_methods():
        cls = get_method(name)
        missing += [f"{name} option {k}" for k, v in option_help(cls.Config).items() if not v]
        missing += [f"{name}.{attr}" for attr in ("summary", "stores", "expands_to") if not getattr(cls, attr)]
    assert not missing, f"without help text: {missing}"


def test_generated_pages_cover_the_registry_and_the_parser():
    from learngene.cli.parser import build_parser
    from learngene.registry import get_method, list_methods

    gen = _gen_docs()
    index = gen.methods_index()
    for name in list_methods():
        page = gen.method_page(name)
        assert f"({name}.md)" in index
        for option in gen.method_options(get_method(name)):
            assert f"| `{option['option']}` |" in page
    cli = gen.cli_page()
    for name, sub in gen._subparsers(build_parser()).items():
        assert f"\n## {name}\n" in cli
        for action in gen.cli_actions(sub):
            for flag in action.option_strings:
                assert flag in cli


def test_option_help_reads_metadata_docstring_and_comments():
    import dataclasses

    from learngene.validate import option_help

    @dataclasses.dataclass(frozen=True)
    class Base:
        """Base.

        Attributes:
            a, b: shared text
                over two lines.
        """

        a: int = 0
        b: int = 1

    @dataclasses.dataclass(frozen=True)
    class Child(Base):
        c: float = 0.5  # from the comment
        d: int = dataclasses.field(default=2, metadata={"help": "from metadata"})
        e: int = 3

    assert option_help(Child) == {
        "a": "shared text over two lines.",
        "b": "shared text over two lines.",
        "c": "from the comment",
        "d": "from metadata",
        "e": "",
    }


def test_doc_files_exist_for_every_readme_link():
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / target).exists(), target
    assert os.path.isfile(ROOT / "mkdocs.yml")


def test_the_api_reference_shows_no_sphinx_role():
    """The API page renders docstrings with mkdocstrings, which shows a reST role (``:func:`x```) as raw text; the
    griffe extension of mkdocs.yml (tools/griffe_roles.py) writes each as code. Every docstring the page renders
    (learngene's names, the training loop, the modules listed) has no role left once converted."""
    import inspect as inspect_module

    spec = importlib.util.spec_from_file_location("griffe_roles", ROOT / "tools" / "griffe_roles.py")
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    assert roles.convert("see :func:`~learngene.pipeline.condense` and :mod:`learngene.data`") == (
        "see `condense` and `learngene.data`"
    )
    assert "griffe_roles.py:SphinxRoles" in (ROOT / "mkdocs.yml").read_text()
    import learngene

    gen = _gen_docs()
    objects = [getattr(learngene, n) for n in learngene.__all__ if n != "__version__"]
    objects += [importlib.import_module(m) for m in gen.API_MODULES]
    seen, left = 0, []
    for obj in objects:
        members = [
            obj,
            *(v for _, v in inspect_module.getmembers(obj) if inspect_module.isroutine(v) or isinstance(v, type)),
        ]
        for member in members:
            doc = inspect_module.getdoc(member) or ""
            seen += ":" in doc
            left += re.findall(r":(?:func|class|mod|meth|attr|data|exc|obj):`[^`]*`", roles.convert(doc))
    assert seen and not left, left[:5]
