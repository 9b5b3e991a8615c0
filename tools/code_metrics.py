"""Size and shape figures of ``src/learngene`` from one AST scan (standard library only, no torch).

Usage: ``python tools/code_metrics.py [REPO] [--list]`` (REPO defaults to this checkout; ``--list`` names
the functions behind each count). The definitions are the ones the "simpler inside" round measured its
figures with at 829a9ac (its changelog entry), so a figure here compares with those:

- *functions*: every ``def`` (module level, method or nested); a function's length is
  ``end_lineno - lineno + 1`` (from the ``def`` line, decorators not counted).
- *once-called private helpers*: functions named ``_x`` (not dunder) whose name is read exactly once in the
  whole tree (a call or a reference, as ``Name`` or ``.attribute``; names are matched by spelling, so two
  helpers spelled alike share a count). Parameters are counted without ``self``/``cls``, with ``*args`` and
  ``**kwargs`` one each.
- *private cross-module imports*: each ``_x`` name (not a module) imported by ``from m import _x`` from
  another module.
- *private-use characters*: string constants holding a character of U+E000-U+F8FF, written as such or as an
  escape.
- *top-level modules*: the ``.py`` files directly in ``src/learngene/`` other than ``__init__.py``.
- *statement lines*: physical lines holding a code token, less docstrings, comments, blank lines, imports and
  def/class headers (decorators through the line before the body). At 829a9ac this gives 12,519 where the
  round counted 12,424 with a definition it did not spell out; compare figures from this tool with each other.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PRIVATE_USE = range(0xE000, 0xF8FF + 1)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def docstring_of(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr):
        value = body[0].value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return body[0]
    return None


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = function.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def statement_lines(source: str, tree: ast.Module) -> int:
    code: set[int] = set()
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            code.update(range(token.start[0], token.end[0] + 1))
    dropped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            dropped.update(range(node.lineno, node.end_lineno + 1))  # type: ignore[operator]
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = docstring_of(node)
            if doc is not None:
                dropped.update(range(doc.lineno, doc.end_lineno + 1))  # type: ignore[operator]
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            dropped.update(range(start, max(node.body[0].lineno, node.lineno + 1)))
    return len(code - dropped)


@dataclass
class Scan:
    """What one pass over the package's files found."""

    root: Path
    functions: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = field(default_factory=list)
    reads: Counter[str] = field(default_factory=Counter)
    private_imports: list[str] = field(default_factory=list)
    private_use: list[str] = field(default_factory=list)
    statement_lines: int = 0

    def module_name(self, path: Path) -> str:
        parts = path.relative_to(self.root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def is_module(self, dotted: str) -> bool:
        path = self.root.parent / dotted.replace(".", "/")
        return path.with_suffix(".py").exists() or path.is_dir()

    def add(self, path: Path) -> None:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        where = str(path.relative_to(self.root.parent))
        name = self.module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        self.statement_lines += statement_lines(source, tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions.append((f"{where}:{node.lineno}", node))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if any(ord(ch) in PRIVATE_USE for ch in node.value):  # written as such or as a \uE000 escape
                    self.private_use.append(f"{where}:{node.lineno}")
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                self.reads[node.id] += 1
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self.reads[node.attr] += 1
            elif isinstance(node, ast.ImportFrom):
                self.add_import(node, package, name, where)

    def add_import(self, node: ast.ImportFrom, package: str, name: str, where: str) -> None:
        """Note the ``_private`` names ``node`` takes from another module (a private module itself is no name)."""
        base = package
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
        for alias in node.names:
            if is_private(alias.name) and not self.is_module(f"{target}.{alias.name}") and target != name:
                self.private_imports.append(f"{where}:{node.lineno} {alias.name} from {target}")


def scan(repo: Path) -> Scan:
    root = repo / "src" / "learngene"
    result = Scan(root)
    for path in sorted(root.rglob("*.py")):
        result.add(path)
    return result


def report(repo: Path, listing: bool) -> list[str]:
    found = scan(repo)
    lengths = [(where, fn.name, fn.end_lineno - fn.lineno + 1) for where, fn in found.functions]  # type: ignore[operator]
    once = [(where, fn) for where, fn in found.functions if is_private(fn.name) and found.reads[fn.name] == 1]
    wide = [(where, fn.name, parameter_count(fn)) for where, fn in once if parameter_count(fn) >= 5]
    of_41_50 = [entry for entry in lengths if 41 <= entry[2] <= 50]
    over_50 = [entry for entry in lengths if entry[2] > 50]
    top = sorted(p.name for p in found.root.glob("*.py") if p.name != "__init__.py")
    lines = [
        f"functions: {len(lengths)}",
        f"functions of 41-50 lines: {len(of_41_50)}",
        f"functions over 50 lines: {len(over_50)}",
        f"once-called private helpers: {len(once)}",
        f"once-called private helpers with >= 5 parameters: {len(wide)}",
        f"_private names imported from another module: {len(found.private_imports)}",
        f"strings holding private-use characters (U+E000-U+F8FF): {len(found.private_use)}",
        f"top-level modules in src/learngene/: {len(top)}",
        f"statement lines: {found.statement_lines}",
    ]
    if listing:
        lines.append("\nonce-called private helpers with >= 5 parameters:")
        lines += [f"  {where} {name} ({count})" for where, name, count in sorted(wide)]
        lines.append("functions of 41-50 lines:")
        lines += [f"  {where} {name} ({count})" for where, name, count in sorted(of_41_50)]
        lines.append("functions over 50 lines:")
        lines += [f"  {where} {name} ({count})" for where, name, count in sorted(over_50)]
        lines.append("_private names imported from another module:")
        lines += [f"  {entry}" for entry in found.private_imports]
        lines.append("private-use characters:")
        lines += [f"  {entry}" for entry in found.private_use]
        lines.append("top-level modules: " + " ".join(top))
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--list", action="store_true", help="name the functions behind each count")
    args = parser.parse_args(argv)
    print("\n".join(report(args.repo, args.list)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
