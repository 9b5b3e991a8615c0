"""Messages are plain text that names a setting in both callers' words: the Python argument, then the command
line's flag in parentheses (``lr (--lr)``, ``lr=0.001 (--lr 0.001)``; :func:`learngene.errors.named` and
:func:`learngene.errors.assigned`). ``str(err)`` is the message; the command line prints it as it is.

These tests check the source (no private-use character, no flag a Python caller would read alone), the messages a
Python caller gets, and that the command line prints the same ``str(err)``.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

import learngene
from learngene.cli import main
from learngene.errors import LearngeneError, LearngeneWarning, assigned, named
from learngene.formats.model_file import save_model
from learngene.method import Ancestry
from learngene.registry import get_method
from learngene.vit.spec import ViTSpec

SRC = Path(learngene.__file__).parent
SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
FLAG = re.compile(r"--[a-z][a-z0-9-]*")
NAMERS = ("named", "assigned")  # errors' two helpers: a flag given to them goes into parentheses
# Unicode's private-use areas: characters with no meaning of their own, once used to tag settings inside messages
PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")


def bare_flags(text: str) -> list[str]:
    """The flags in ``text`` that a Python caller would read alone. A flag comes in parentheses after the Python words
    it stands for: first in them (``lr (--lr)``, ``lr=0.001 (--lr 0.001)``), after a Python name and a comma
    (``(data, --data)``), or in a learngene command line; a text that is a command line (``learngene demo --quick``)
    and a shell command in backticks hold none."""
    if text.lstrip().startswith("learngene "):
        return []
    text = re.sub(r"`[^`]*`", "``", text)
    bare, opened, read = [], [], 0
    for match in FLAG.finditer(text):
        for i in range(read, match.start()):  # the parentheses open where this flag stands
            if text[i] == "(":
                opened.append(i + 1)
            elif text[i] == ")" and opened:
                opened.pop()
        read = match.start()
        before = text[opened[-1] : match.start()] if opened else None  # the parenthesized words before the flag
        after_python = before is not None and (before == "" or before.startswith("--") or before.endswith(", "))
        if not (after_python or (before is not None and "learngene " in before)):
            bare.append(match.group())
    return bare


def test_bare_flags_finds_a_flag_a_python_caller_would_read_alone():
    assert bare_flags("lower --lr or check the data") == ["--lr"]
    assert bare_flags("pass e.g. lr=0.001 (--lr 0.001); then (x) --seed") == ["--seed"]
    assert bare_flags("no recommendation (the paired test needs --seeds 2 or more)") == ["--seeds"]
    assert bare_flags("give training data (data, --data); pass design='authors' (--opt design=authors)") == []
    assert bare_flags("stitch (expand with output=('stitch', ...), learngene expand GENE --stitch ...)") == []
    assert bare_flags("lower lr (--lr) or run `hf download x --revision main`") == []
    assert bare_flags("learngene demo --quick") == []


def test_named_and_assigned_name_both_forms():
    assert named("lr") == "lr (--lr)" and named("max_params") == "max_params (--max-params)"
    assert named("timm_kwargs", "--timm-arg") == "timm_kwargs (--timm-arg)" and named("x", "") == "x"
    assert assigned("lr", 0.001) == "lr=0.001 (--lr 0.001)"
    assert assigned("grad_clip", None, 0) == "grad_clip=None (--grad-clip 0)"
    assert assigned("resume", True, "") == "resume=True (--resume)"
    assert assigned("design", "authors", flag="--opt") == "design='authors' (--opt design=authors)"
    assert assigned("modules", ("msa", "mlp"), flag="--opt") == "modules=('msa', 'mlp') (--opt modules=msa,mlp)"
    assert assigned("head_aware", False, flag="--opt") == "head_aware=False (--opt head_aware=false)"


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_private_use_character_in_the_source():
    found = [
        f"{path.relative_to(SRC)}:{n}"
        for path in _sources()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PRIVATE_USE.search(line)
    ]
    assert not found, found


def _not_messages(node: ast.AST) -> list[ast.AST]:
    """The strings at ``node`` that are no message of their own: a docstring, a declaration's ``flag=``, ``help=`` and
    ``metavar=`` (the parser's words), the flag's words given to :func:`~learngene.errors.named` or
    :func:`~learngene.errors.assigned` (which put them in parentheses), an f-string's parts (read whole)."""
    body = getattr(node, "body", None)
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
        return [body[0].value] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else []
    if isinstance(node, ast.keyword) and node.arg in ("flag", "help", "metavar"):
        return list(ast.walk(node.value))
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in NAMERS:
        return [sub for arg in node.args[1:] for sub in ast.walk(arg)]
    return list(node.values) if isinstance(node, ast.JoinedStr) else []


def _message_texts(tree: ast.AST):
    """Every string the module's code holds that can reach a reader, as ``(line, text)``: constants and f-strings
    (a placeholder for each value), less :func:`_not_messages` and constants that are one flag (an argv item)."""
    left_out = {id(string) for node in ast.walk(tree) for string in _not_messages(node)}
    for node in ast.walk(tree):
        if id(node) in left_out:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and not FLAG.fullmatch(node.value):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(p.value if isinstance(p, ast.Constant) else "{}" for p in node.values)


def test_no_message_outside_the_command_line_names_a_flag_alone():
    """A Python caller reads every message of the library (the command line's own package aside, whose messages
    only its users read): a flag there comes in parentheses after the Python argument it stands for."""
    found = [
        f"{path.relative_to(SRC)}:{line}: {bare} in {text[:100]!r}"
        for path in _sources()
        if path.parent.name != "cli"
        for line, text in _message_texts(ast.parse(path.read_text(encoding="utf-8")))
        if (bare := bare_flags(text))
    ]
    assert not found, "\n".join(found)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("wording")
    torch.manual_seed(0)
    model = SPEC.create_model()
    save_model(root / "anc.safetensors", model, SPEC)
    get_method("pretrained")().condense(Ancestry(model, SPEC)).save(root / "gene.safetensors")
    return root


def _python_error(call) -> str:
    """The message ``call`` raises, checked to be plain (no private-use character, one line, no flag alone)."""
    with pytest.raises(LearngeneError) as raised:
        call()
    said = str(raised.value)
    assert not PRIVATE_USE.search(said) and "\n" not in said and not bare_flags(said), ascii(said)
    assert repr(raised.value) == f"{type(raised.value).__name__}({said!r})"
    return said


def _cli_error(capsys, argv: list) -> str:
    """The one line the command line prints for ``argv``, which must fail with exit code 2."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == 2, (code, captured.err)
    return captured.err.strip()


def test_a_python_caller_is_told_both_forms(tmp_path):
    from learngene.pipeline import train_ancestry
    from learngene.training.config import TrainConfig

    assert _python_error(lambda: TrainConfig(lr=-1)) == (
        "lr (--lr) must be positive, got -1; pass e.g. lr=0.001 (--lr 0.001)"
    )
    assert _python_error(lambda: TrainConfig(grad_clip=-1)).endswith(
        "; pass grad_clip=None (--grad-clip 0) for no clipping, or a positive maximum norm"
    )
    said = _python_error(lambda: get_method("structured")(kernel_size=2))
    assert said.startswith(
        "structured option kernel_size must be an odd number, got 2; pass kernel_size=VALUE (--opt kernel_size=VALUE)"
    ), said
    design = "pool option widths applies to design=authors, not equal_width; leave it out, or pass "
    assert _python_error(lambda: get_method("pool")(widths=(16, 32))) == (
        f"{design}design='authors' (--opt design=authors)"
    )
    assert _python_error(lambda: train_ancestry("digits", "cpu_tiny", resume=True)) == (
        "resume (--resume) continues from RUN_DIR/checkpoint.pt; pass run_dir (--run-dir) too"
    )


def test_the_command_line_prints_the_message_a_python_caller_gets(files, capsys):
    """One message for both: the command line's line is ``learngene CMD: error: {str(err)}``."""
    from learngene.comparison.profile import compare_profile

    said = _python_error(lambda: compare_profile(SPEC, "anc", "digits", ["L1-D32-H2"], {"epochs": 0}))
    assert said == "epochs (--epochs) must be at least 1, got 0; pass epochs=1 (--epochs 1) or more"
    argv = ["compare", "--ancestry", files / "anc.safetensors", "--data", "digits", "--sizes", "L1-D32-H2"]
    assert _cli_error(capsys, [*argv, "--epochs", "0", "--out", files / "cmp"]) == f"learngene compare: error: {said}"
    said = _python_error(lambda: get_method("pool")(widths=(16, 32)))
    argv = ["condense", "--ancestry", files / "anc.safetensors", "-o", files / "g.safetensors"]
    err = _cli_error(capsys, [*argv, "--method", "pool", "--opt", "widths=16,32"])
    assert err == f"learngene condense: error: {said}"
    assert not (files / "g.safetensors").exists() and not (files / "cmp").exists()


def test_a_note_names_the_setting_in_both_forms(files, capsys):
    from learngene.pipeline import expand

    out = files / "d.safetensors"
    assert main(["expand", str(files / "gene.safetensors"), "--max-params", "5M", "--depth", "1", "-o", str(out)]) == 0
    shown = capsys.readouterr().out
    said: list[str] = []
    expand(files / "gene.safetensors", {"depth": 1}, max_params=5_000_000, say=lambda text, **how: said.append(text))
    assert len(said) == 1 and "(budget: params 5,000,000; depth (--depth) 1 kept (it wins over" in said[0], said
    assert said[0] in shown and not bare_flags(said[0])  # the command line shows the very line a Python say gets


def test_a_warning_is_shown_as_python_shows_it(files, capsys, monkeypatch):
    """The command line leaves warnings to Python: a LearngeneWarning raised inside a command is printed by
    Python's own formatting, its text (both forms) unchanged."""
    import learngene.cli.dispatch as dispatch

    text = f"a warning about {assigned('lr', 0.01)}"

    def warn_and_fail(args):
        assert warnings.formatwarning is shown_before  # no display of the command line's own
        warnings.warn(LearngeneWarning(text), stacklevel=1)
        raise LearngeneError(f"then fail with {named('lr')}")

    def show(message, category, filename, lineno, file=None, line=None):  # as Python's default showwarning
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    monkeypatch.setattr(warnings, "showwarning", show)
    monkeypatch.setattr(dispatch, "handler", lambda args: warn_and_fail)
    shown_before = warnings.formatwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        code = main(["inspect", str(files / "gene.safetensors")])
    err = capsys.readouterr().err
    assert code == 2 and f"LearngeneWarning: {text}\n" in err, err
    assert err.strip().endswith("learngene inspect: error: then fail with lr (--lr)"), err
    assert str(LearngeneWarning(text)) == text and repr(LearngeneError("x")) == "LearngeneError('x')"
