"""The package's shape: who may import whom, and how methods are found.

The import graph of ``learngene`` has no cycle (imports inside functions count; ``TYPE_CHECKING``
blocks do not). A module that looks a method up by name (``get_method``) runs every method's code,
so it counts as importing every module in ``methods/``: the registry hides that edge, this test
does not. The file format (``gene.py``) imports no method and no registry; no module reaches
a helper through the method registry by name; every module in ``learngene/methods/`` registers a
method, and each registered method is found without a hand-kept list.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest
import torch

import learngene
import learngene.methods
from learngene.registry import get_method, list_methods

PACKAGE = Path(learngene.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, child.end_lineno + 1))
    return lines


def imports_of(path: Path, types: bool = False) -> set[str]:
    """The ``learngene`` modules ``path`` imports anywhere (module level or in functions), besides its own packages;
    with ``types``, those of its ``TYPE_CHECKING`` blocks too."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = set() if types else _type_checking_lines(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
            for alias in node.names:  # `from . import methods` imports a module, `from .x import y` a name of x
                sub = f"{target}.{alias.name}"
                found.add(
                    sub
                    if (PACKAGE.parent / sub.replace(".", "/")).with_suffix(".py").exists()
                    or (PACKAGE.parent / sub.replace(".", "/")).is_dir()
                    else target
                )
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    own = set()
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        own.add(".".join(parts[:i]))
    return {m for m in found if m.startswith("learngene") and m not in own}


def calls_get_method(path: Path) -> bool:
    """Whether ``path`` calls ``get_method`` (a call, not the name in a string such as a help text)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id == "get_method") or (
                isinstance(func, ast.Attribute) and func.attr == "get_method"
            ):
                return True
    return False


def import_graph(types: bool = False) -> dict[str, set[str]]:
    graph = {module_name(p): imports_of(p, types) for p in PACKAGE.rglob("*.py")}
    methods = {f"learngene.methods.{m}" for m in learngene.methods.MODULES}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "registry.py" and calls_get_method(path):  # dispatches to any method at run time
            graph[module_name(path)] |= methods - {module_name(path)}
    # methods register into the registry; its loading them on first use is that same dispatch edge, counted above at
    # every caller of get_method
    graph["learngene.registry"] -= {"learngene.methods", *methods}
    for name, deps in graph.items():  # importing a.b.c runs the packages a and a.b first
        for dep in list(deps):
            parts = dep.split(".")
            deps.update(".".join(parts[:i]) for i in range(2, len(parts)) if not name.startswith(".".join(parts[:i])))
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert "learngene.registry" in graph["learngene.descendant"]  # the walk sees imports,
    assert "learngene.methods.wave" in graph["learngene.descendant"]  # and dispatch by name
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_registry_is_a_leaf_for_the_type_checker_too():
    """The registry reads methods and data by their parts (``Protocol``s), so no import of it closes a cycle, not even
    one for type checking only (``registry -> method -> training -> data -> registry`` was one of 11 modules)."""
    tree = ast.parse((PACKAGE / "registry.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level and node.module
    }
    assert imported <= {"errors"}, imported
    assert "TYPE_CHECKING" not in (PACKAGE / "registry.py").read_text()


# the layers, top down: the command line (and ``python -m learngene``) over compare, over the benchmark, over the use
# cases, over everything else; an arrow may only run down (or stay within a layer)
LAYERS = (
    ("learngene.cli", "learngene.__main__"),
    ("learngene.comparison",),
    ("learngene.bench",),
    ("learngene.pipeline",),
)


def layer_of(module: str) -> int:
    """0 for the command line, 1 for compare, ... ``len(LAYERS)`` for the rest (a larger number: lower)."""
    return next(
        (i for i, names in enumerate(LAYERS) if any(module == n or module.startswith(n + ".") for n in names)),
        len(LAYERS),
    )


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps if layer_of(d) < layer_of(m))


def test_no_import_runs_up_the_layers_and_the_layers_form_no_cycle():
    """compare sits above the benchmark, which sits above the use cases (issue 55): nothing under ``pipeline/``
    imports ``bench`` or ``comparison``, ``bench`` imports nothing from ``comparison``, and the rest none of them;
    imports for type checking only count too, since they tie the packages together just the same. With every arrow
    running down, no cycle can pass through two layers (the modules' own cycles: the test above)."""
    graph = import_graph(types=True)
    assert "learngene.bench.profiles" in graph["learngene.comparison.profile"]  # the walk sees the downward arrows
    assert "learngene.pipeline" in graph["learngene.bench.cells"]
    assert upward_arrows(graph) == []


def test_an_arrow_up_the_layers_is_found():
    graph = {"learngene.pipeline.training": {"learngene.bench.cells"}, "learngene.bench.cells": {"learngene.pipeline"}}
    assert upward_arrows(graph) == ["learngene.pipeline.training -> learngene.bench.cells"]
    assert layer_of("learngene.comparison") == 1 and layer_of("learngene.vit.spec") == len(LAYERS)


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_file_format_imports_no_method_and_no_registry():
    deps = import_graph()["learngene.gene"]
    assert deps <= {
        "learngene.errors",
        "learngene.formats",
        "learngene.formats.atomic",
        "learngene.formats.weights",
        "learngene.formats.licenses",
        "learngene.formats.preprocessing",
        "learngene.vit",
        "learngene.vit.spec",
        "learngene._version",
        "learngene.settings",  # its fields' declarations and their checker
        "learngene.validate",
    }, deps


def test_a_methods_own_model_and_file_live_beside_it_and_generic_code_reaches_them_through_its_declaration():
    """Pool's stitched ViT is a module of pool's (its file format another, which the method declares): nothing in
    ``vit/`` or ``formats/`` knows it, the model imports no file format, and reading, writing, describing or training
    such a file goes through the method's declared format (``Method.model_formats``), found by the file's header."""
    assert not (PACKAGE / "vit" / "stitched.py").exists() and not (PACKAGE / "formats" / "stitched.py").exists()
    assert not {m for m in imports_of(PACKAGE / "methods" / "_pool_stitches.py") if m.startswith("learngene.formats")}
    for module in ("formats/model_file.py", "cli/describe.py", "pipeline/training.py", "pipeline/results.py"):
        assert not {m for m in imports_of(PACKAGE / module) if m.startswith("learngene.methods")}, module
    assert [f.tag for f in get_method("pool").model_formats] == ["learngene-stitched-model"]


def private_names_taken(path: Path) -> list[str]:
    """The ``_private`` names of other ``learngene`` modules that the module at ``path`` uses: imported
    (``from .rows import _groups``) or read off an imported module (``stopping._pending_stop``). A private module
    (``methods/_calibration.py``) is imported by name: its public names are its package's to share."""
    tree = ast.parse(path.read_text())
    modules: set[str] = set()  # the names that stand for imported learngene modules here
    taken = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("learngene")):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    taken.append(f"{node.module}.{alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name.startswith("learngene"))
    for node in ast.walk(tree):
        private = isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
        if private and isinstance(node.value, ast.Name) and node.value.id in modules:
            taken.append(f"{node.value.id}.{node.attr}")
    return taken


def test_no_module_uses_another_modules_private_name():
    """A name shared between modules is public (no leading underscore) in the module that owns it."""
    taken = {str(p.relative_to(PACKAGE)): names for p in PACKAGE.rglob("*.py") if (names := private_names_taken(p))}
    assert taken == {}


def test_a_private_name_taken_is_found(tmp_path):
    (tmp_path / "m.py").write_text(
        "from .rows import _groups, mean_curve\nfrom . import stopping\nprint(stopping._pending, stopping.__doc__)\n"
    )
    assert private_names_taken(tmp_path / "m.py") == ["rows._groups", "stopping._pending"]


def test_no_module_reaches_a_method_by_a_literal_name():
    """A helper is imported, never fetched as ``get_method("mimetic").helper``: imports show the edge, the registry hides it.
    Only the command line (a user's ``--top-up``) and the benchmark's method lists name methods as data."""
    literal = re.compile(r"get_method\(\s*['\"]")
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if literal.search(p.read_text())]
    assert offenders == []


def test_no_module_outside_methods_and_the_registry_imports_a_method_module():
    """What one method needs (cluster's plot, wave's bench options, pool's stitched descendant) is a hook on
    ``Method`` that generic code calls through the registry: a method's code lives in its module, and the rest of the
    package reaches it by name."""
    importers = {
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        if not module_name(path).startswith("learngene.methods")
        and module_name(path) != "learngene.registry"
        and any(m == "learngene.methods" or m.startswith("learngene.methods.") for m in imports_of(path))
    }
    assert importers == set(), f"{sorted(importers)} import a method module: declare a hook on Method instead"


@pytest.mark.parametrize("module", learngene.methods.MODULES)
def test_every_module_in_methods_registers_a_method(module):
    registered = {get_method(name).__module__ for name in list_methods()}
    assert f"learngene.methods.{module}" in registered, f"methods/{module}.py registers no method"


def test_every_file_in_methods_is_found():
    files = {p.stem for p in (PACKAGE / "methods").glob("*.py") if not p.stem.startswith("_")}
    assert set(learngene.methods.MODULES) == files
    for name in list_methods():
        assert inspect.getmodule(get_method(name)) is importlib.import_module(get_method(name).__module__)


def test_expand_command_expands_the_gene_once_on_meta_and_once_for_real(tmp_path, monkeypatch, tiny_spec):
    """`learngene expand` checks the gene on ``meta`` before allocating, builds it once, and counts the keys it filled
    from that one build (``build_descendant``), not from another expansion."""
    from learngene.cli import main
    from learngene.method import Ancestry
    from learngene.methods.baselines import Pretrained

    torch.manual_seed(0)
    Pretrained().condense(Ancestry(tiny_spec.create_model(), tiny_spec)).save(tmp_path / "g.safetensors")
    devices: list[str] = []
    original = Pretrained.expand

    def counted(self, gene, spec):
        devices.append(next(iter(gene.tensors.values())).device.type)
        return original(self, gene, spec)

    monkeypatch.setattr(Pretrained, "expand", counted)
    assert main(["expand", str(tmp_path / "g.safetensors"), "--depth", "3", "-o", str(tmp_path / "d.safetensors")]) == 0
    assert devices == ["meta", "cpu"]


def test_options_are_checked_in_one_place():
    """Choices are ``Literal`` types, ranges field metadata, both checked by ``check_options`` when any method is made:
    no method checks its options again in its own ``__init__``."""
    from learngene.method import Method

    own_init = [
        name
        for name in list_methods()
        if "__init__"
        in {k for c in get_method(name).__mro__ if c is not Method and issubclass(c, Method) for k in vars(c)}
    ]
    assert own_init == [], (
        f"{own_init} check options in __init__: type a choice as Literal[...], give a range "
        f"with learngene.settings.field(...), put a check across options in the Config's "
        f"__post_init__"
    )


@pytest.mark.parametrize(
    "method, options, words",
    [
        ("front", dict(keep_ratio=0.0), "keep_ratio must be above 0 and at most 1, got 0.0"),
        ("front", dict(depth_ratio=1.5), "depth_ratio must be in [0, 1], got 1.5"),
        ("wave", dict(n_qkv=3), "n_qkv must be a multiple of 2, got 3"),
        ("cluster", dict(min_heads=0), "min_heads must be at least 1, got 0"),
        ("cluster", dict(ffn="none"), "ffn must be one of 'inherit', 'random', got 'none'"),
        ("grow", dict(depth="copy"), "depth must be one of 'stack', 'identity', got 'copy'"),
        ("tleg", dict(modules=()), "modules must be a non-empty list"),
        ("tleg", dict(modules="msa,attn"), "modules must be a list whose every item is one of 'msa', 'mlp', 'ln'"),
        ("heru_lg", dict(layers=-1), "layers must be at least 1, got -1"),
        ("auto_lg", dict(untrained_attention="sometimes"), "untrained_attention must be one of 'keep', 'mimetic'"),
    ],
)
def test_a_bad_option_is_refused_with_its_range_or_choices(method, options, words):
    from learngene.errors import LearngeneError

    with pytest.raises(LearngeneError, match=re.escape(words)):
        get_method(method)(**options)


def test_methods_lists_each_options_choices(capsys):
    from learngene.cli import main

    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert "variant='first' {first,last,middle}" in out and "untrained_attention='keep' {keep,mimetic}" in out
    assert "modules=('msa', 'mlp', 'ln') {msa,mlp,ln}" in out and "aux_pool=auto {'',token,avg}" in out
