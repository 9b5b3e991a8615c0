"""The docs pages generated from the code at build time: one page per registered method, the CLI reference and
the API reference. ``mkdocs build`` runs this file through mkdocs-gen-files (``mkdocs.yml``); nothing it
writes is committed, so a new method, flag or public name gets its page with no edit to the docs.

``tests/test_docs.py`` imports it too (no mkdocs needed): every method and every flag must have help text.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing
from typing import Any

from learngene.validate import choices, option_help, range_text


# ---- methods --------------------------------------------------------------------------------------------------
def _md(text: str) -> str:
    """reST-flavoured docstring text as Markdown: ``code`` -> `code`, :mod:`x` -> `x`."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return "choice"
    if typing.get_origin(tp) is tuple:
        return "list of " + _type_name(typing.get_args(tp)[0])
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args and len(args) < len(typing.get_args(tp)):
        return _type_name(args[0]) + " or None"
    return getattr(tp, "__name__", str(tp))


def method_options(cls: type) -> list[dict[str, str]]:
    """One row per option of a method: name, type, default, range, choices, help, and the step that reads it
    (from the field's ``phase`` metadata, where the option declares one)."""
    config = cls.Config
    hints = typing.get_type_hints(config)
    helps = option_help(config)
    auto = getattr(config, "AUTO_OPTIONS", ())
    rows = []
    for f in dataclasses.fields(config):
        allowed = choices(hints.get(f.name))
        phase = f.metadata.get("phase", "")
        rows.append(
            {
                "option": f.name,
                "type": _type_name(hints.get(f.name)),
                "default": ("auto (" + repr(f.default) + ")") if f.name in auto else repr(f.default),
                "range": range_text(config, f.name),
                "choices": ", ".join(repr(c) for c in allowed),
                "help": helps[f.name],
                "read by": ", ".join(phase) if isinstance(phase, (tuple, list, set, frozenset)) else str(phase),
            }
        )
    return rows


def _expand_facts(cls) -> list[str]:
    """A method page's lines on expand's ``layers`` and ``verify``: whether the method picks the layers a descendant
    keeps, and where it keeps the ancestry's function."""
    facts = []
    if cls.selects_layers:
        facts.append("- **Layers kept:** `--layers first|last|spread|I,J,K` picks them ([guide](../guides/layers.md))")
    if cls.preserves:
        facts.append(f"- **Keeps the ancestry's function** {_cell(cls.preserves)}: `--verify ANCESTRY` checks it")
    return facts


def method_page(name: str) -> str:
    from learngene.method import citations
    from learngene.registry import get_method

    cls = get_method(name)
    out = [f"# `{name}`", "", _md(cls.summary), ""]
    for paper in citations(cls):
        link = f" [arXiv:{paper.arxiv}](https://arxiv.org/abs/{paper.arxiv})" if paper.arxiv else ""
        who = f"{paper.authors}, " if paper.authors else ""
        note = f" ({paper.note})" if paper.note else ""
        out.append(f"- **Paper:** {_cell(who)}*{_cell(paper.title)}*, {paper.venue} {paper.year}{link}{_cell(note)}")
    out.append(f"- **The learngene stores:** {_cell(cls.stores)}")
    out.append(f"- **Expands to:** {_cell(cls.expands_to)}")
    out += _expand_facts(cls)
    needs = [
        text
        for needed, text in (
            (cls.needs_data, "data (`--data`) to condense"),
            (cls.aux_net, f"an aux net trained by distillation (λ = {cls.distill_lambda:g} by default)"),
            (cls.adaptable, "an `adapt` step per descendant size"),
            (not cls.needs_vit_ancestry, "any classifier as ancestry (not only a ViT)"),
        )
        if needed
    ]
    if needs:
        out.append(f"- **Needs:** {'; '.join(needs)}")
    out += ["", "```bash", f"learngene condense --method {name} --ancestry ancestry.safetensors --out gene.safetensors"]
    out += ["```", "", "## Options", ""]
    rows = method_options(cls)
    if not rows:
        out.append("None.")
    else:
        cols = ["option", "type", "default", "range", "choices", "help"]
        if any(r["read by"] for r in rows):
            cols.append("read by")
        out += ["Set with `--opt KEY=VALUE` (repeatable) or `get_method(name)(KEY=VALUE)` in Python.", ""]
        out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            code = {"option", "default"}
            out.append("| " + " | ".join(f"`{r[c]}`" if c in code else _cell(r[c]) for c in cols) + " |")
    module_doc = inspect.getmodule(cls).__doc__ or ""
    class_doc = cls.__dict__.get("__doc__") or ""
    out += ["", "## How it works, and where it departs from the paper", ""]
    out.append(_md(inspect.cleandoc(module_doc)))
    if class_doc:
        out += ["", _md(inspect.cleandoc(class_doc))]
    source = inspect.getsourcefile(cls) or ""
    rel = source[source.index("src/learngene") :] if "src/learngene" in source else source
    out += ["", f"Source: `{rel}`, class `{cls.__name__}`.", ""]
    return "\n".join(out)


def methods_index() -> str:
    from learngene.registry import get_method, list_methods

    out = [
        "# Methods",
        "",
        "Every registered method, generated from the registry (`learngene methods` prints the same).",
        "",
    ]
    out += ["| method | the learngene stores | expands to |", "|---|---|---|"]
    for name in list_methods():
        cls = get_method(name)
        out.append(f"| [`{name}`]({name}.md) | {_cell(cls.stores)} | {_cell(cls.expands_to)} |")
    return "\n".join(out) + "\n"


# ---- README ---------------------------------------------------------------------------------------------------
README_TABLE_HEAD = "| method | what the learngene is | expands to | paper |\n|---|---|---|---|\n"
README_TABLE_START = "| method | what the learngene is |"  # the table's first line, before and after a column was added


def reach_in_brief(text: str) -> str:
    """A method's ``expands_to`` without its parenthesised asides: the README's column (12 KiB in all); the
    method pages and their index (:func:`methods_index`) give it whole."""
    return re.sub(r" \([^()]*\)", "", text)


def own_methods() -> list[str]:
    """learngene's own registered methods: an installed plugin's are its package's to document."""
    from learngene.registry import get_method, list_methods

    return [name for name in list_methods() if get_method(name).__module__.startswith("learngene.")]


def short_citation(paper: Any) -> str:
    """``First et al., VENUE YEAR (note)`` (``A & B`` for two authors), or the acronym a title ends with where the
    paper names no author."""
    names = re.split(r", | & ", paper.authors.removesuffix(" et al."))
    if not paper.authors:
        who = ""
    elif len(names) == 2 and not paper.authors.endswith("et al."):
        who = " & ".join(names)
    else:
        who = names[0] + (" et al." if len(names) > 1 or paper.authors.endswith("et al.") else "")
    acronym = re.search(r"\((\w+)\)$", paper.title)
    who = who or (acronym.group(1) if acronym else paper.title)
    venue = paper.venue.removesuffix(" preprint")
    return f"{who}, {venue} {paper.year}" + (f" ({paper.note})" if paper.note else "")


def readme_method_table() -> str:
    """The README's method table: one row per method of :func:`own_methods`, from its ``stores``, ``expands_to``
    (:func:`reach_in_brief`) and papers."""
    from learngene.method import citations
    from learngene.registry import get_method

    rows = []
    for name in own_methods():
        cls = get_method(name)
        cites = "; ".join(short_citation(p) for p in citations(cls))
        rows.append(f"| `{name}` | {_cell(cls.stores)} | {_cell(reach_in_brief(cls.expands_to))} | {_cell(cites)} |\n")
    return README_TABLE_HEAD + "".join(rows)


def update_readme(path: str = "README.md") -> None:
    """Rewrite the README's method table from the registry (``python tools/gen_docs.py --readme``)."""
    with open(path) as fh:
        text = fh.read()
    start = text.index(README_TABLE_START)
    end = text.index("\n\n", start) + 1
    with open(path, "w") as fh:
        fh.write(text[:start] + readme_method_table() + text[end:])


# ---- CLI ------------------------------------------------------------------------------------------------------
def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]


def cli_page() -> str:
    from learngene.cli.parser import build_parser

    parser = build_parser()
    out = ["# Command-line reference", "", "Generated from `learngene.cli.parser.build_parser()`.", ""]
    out += ["```text", parser.format_usage().strip(), "```", "", _md(parser.description or ""), ""]
    helps = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
    out += ["| command | what it does |", "|---|---|"]
    for name in _subparsers(parser):
        out.append(f"| [`{name}`](#{name}) | {_cell(helps.get(name) or '')} |")
    for name, sub in _subparsers(parser).items():
        out += ["", f"## {name}", "", _md(sub.description or helps.get(name) or ""), ""]
        out += ["```text", sub.format_usage().strip(), "```", ""]
        groups = [(g.title, g._group_actions) for g in sub._action_groups if g._group_actions]
        for title, actions in groups:
            out += [f"**{title}**", "", "| flag | help | default |", "|---|---|---|"]
            for a in actions:
                flag = ", ".join(a.option_strings) or a.metavar or a.dest
                if a.option_strings and a.nargs != 0:
                    flag += " " + (a.metavar if isinstance(a.metavar, str) else a.dest.upper())
                if a.choices and not isinstance(a.choices, dict):
                    flag += " {" + ",".join(map(str, a.choices)) + "}"
                default = "" if a.default in (None, argparse.SUPPRESS, False) or a.nargs == 0 else f"`{a.default}`"
                text = (a.help or "").replace("%(default)s", str(a.default)).replace("%%", "%")
                out.append(f"| `{_cell(flag)}` | {_cell(text)} | {default} |")
            out.append("")
        if sub.epilog:
            out += [_md(sub.epilog), ""]
    return "\n".join(out)


# ---- API ------------------------------------------------------------------------------------------------------
# below the use cases: what they take and return, the training loop, and the parts a Python user reaches for
API_MODULES = (
    "learngene.comparison.choices",
    "learngene.comparison.profile",
    "learngene.comparison.report",
    "learngene.pipeline.fine_tuning",
    "learngene.pipeline.inputs",
    "learngene.pipeline.results",
    "learngene.binding",
    "learngene.data",
    "learngene.formats.export",
    "learngene.formats.onnx_file",
)


def api_page() -> str:
    """The API reference: ``learngene``'s names first (the use cases, then what they take and return), then the
    training loop and the modules below them."""
    import learngene

    out = ["# Python API", "", "Generated from the docstrings (Google style).", ""]
    out += [
        "## `learngene`",
        "",
        "`import learngene as lg`: one call per command (`lg.condense`, `lg.expand`, `lg.adapt`, `lg.train`, "
        "`lg.train_ancestry`, `lg.compare`, `lg.export`), each with the command's defaults and checks and returning a result that "
        "saves itself; then the request objects they take, and the registry.",
        "",
    ]
    for name in learngene.__all__:
        if name == "__version__":
            continue
        module = learngene._EXPORTS[name]
        out += [f"::: learngene.{module}.{name}", "    options:", "      heading_level: 3", ""]
    out += ["## `learngene.training`", "", "The one training loop, on a torch module and loaded data.", ""]
    for target in ("learngene.training.loop.train", "learngene.training.evaluation.evaluate"):
        out += [f"::: {target}", "    options:", "      heading_level: 3", ""]
    for module in API_MODULES:
        out += [f"## `{module}`", "", f"::: {module}", "    options:", "      heading_level: 3", ""]
    return "\n".join(out)


def write_pages() -> None:
    import mkdocs_gen_files

    from learngene.registry import list_methods

    for name in list_methods():
        with mkdocs_gen_files.open(f"methods/{name}.md", "w") as f:
            f.write(method_page(name))
    with mkdocs_gen_files.open("methods/index.md", "w") as f:
        f.write(methods_index())
    with mkdocs_gen_files.open("reference/cli.md", "w") as f:
        f.write(cli_page())
    with mkdocs_gen_files.open("reference/api.md", "w") as f:
        f.write(api_page())


if __name__ == "__main__" and sys.argv[1:] == ["--readme"]:
    update_readme()
elif __name__ in ("__main__", "<run_path>") or __name__.startswith("mkdocs_gen_files"):
    write_pages()
