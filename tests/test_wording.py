"""A message names a setting as its reader gives it: the flag to the command line, the argument to Python.

Both wordings travel together in the message (``learngene.errors.setting``) and one is picked where the message
is shown (``learngene.errors.render``); these tests check the pick on each side and that the tags carrying the
two wordings never reach a reader.
"""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

import learngene.cli.dispatch as dispatch
from learngene.cli import main
from learngene.errors import LearngeneError, LearngeneWarning, message_of, render, setting
from learngene.formats.model_file import save_model
from learngene.method import Ancestry
from learngene.registry import get_method
from learngene.vit.spec import ViTSpec

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
TAGS = ("\ue000", "\ue001", "\ue002")  # what errors.setting marks the two wordings with


def _untagged(text: str) -> bool:
    return not any(tag in text for tag in TAGS)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("wording")
    torch.manual_seed(0)
    model = SPEC.create_model()
    save_model(root / "anc.safetensors", model, SPEC)
    get_method("pretrained")().condense(Ancestry(model, SPEC)).save(root / "gene.safetensors")
    return root


def _cli_error(capsys, argv: list) -> str:
    """The one line the command line prints for ``argv``, which must fail with exit code 2."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == 2, (code, captured.err)
    assert _untagged(captured.err) and _untagged(captured.out), ascii(captured.err)
    return captured.err.strip()


def _python_error(call) -> str:
    with pytest.raises(LearngeneError) as raised:
        call()
    shown = (str(raised.value), repr(raised.value), raised.exconly())
    assert all(_untagged(text) for text in shown), ascii(shown)
    return str(raised.value)


def test_a_bad_learning_rate_is_named_as_each_caller_gives_it(files, capsys):
    from learngene.pipeline.compare import compare_profile
    from learngene.training.config import TrainConfig

    err = _cli_error(capsys, ["train", files / "anc.safetensors", "--data", "digits", "--lr", "-1", "-o", "o"])
    assert err == "learngene train: error: argument --lr: learning rate must be positive, got -1 (see --help)"
    said = _python_error(lambda: TrainConfig(lr=-1))
    assert said == "learning rate must be positive, got -1; pass e.g. lr=0.001"
    # a setting refused by the library (not the parser): the same check, the flag's words on the command line
    argv = ["compare", "--ancestry", files / "anc.safetensors", "--data", "digits", "--sizes", "L1-D32-H2"]
    err = _cli_error(capsys, [*argv, "--epochs", "0", "--out", files / "cmp"])
    assert err == "learngene compare: error: epochs must be at least 1, got 0; pass --epochs 1 or more"
    said = _python_error(lambda: compare_profile(SPEC, "anc", "digits", ["L1-D32-H2"], {"epochs": 0}))
    assert said == "epochs must be at least 1, got 0; pass epochs=1 or more"


def test_options_are_named_as_each_caller_gives_them(files, capsys):
    argv = ["condense", "--ancestry", files / "anc.safetensors", "-o", files / "g.safetensors"]
    err = _cli_error(capsys, [*argv, "--method", "structured", "--opt", "kernel_size=2"])
    tail = "structured option kernel_size must be an odd number, got 2; pass "
    assert err == (
        f"learngene condense: error: {tail}--opt kernel_size=VALUE with a value of that kind (see `learngene methods`)"
    )
    said = _python_error(lambda: get_method("structured")(kernel_size=2))
    assert (
        said
        == f"{tail}kernel_size=VALUE with a value of that kind (see help(learngene.get_method('structured').Config))"
    )
    # an unknown option: the same words on both sides (the command line's name for it is the text given)
    err = _cli_error(capsys, [*argv, "--method", "tleg", "--opt", "nope=1"])
    assert err.startswith("learngene condense: error: option 'nope=1' is not KEY=VALUE with a known KEY; use one of: ")
    said = _python_error(lambda: get_method("tleg")(nope=1))
    assert said.startswith("tleg: ") and "unexpected keyword argument 'nope'" in said, said
    # pool's option of the other design
    err = _cli_error(capsys, [*argv, "--method", "pool", "--opt", "widths=16,32"])
    design = "pool option widths applies to design=authors, not equal_width; leave it out, or pass "
    assert err == f"learngene condense: error: {design}--opt design=authors"
    assert _python_error(lambda: get_method("pool")(widths=(16, 32))) == f"{design}design=authors"
    assert not (files / "g.safetensors").exists()


def test_resume_without_a_run_directory_is_named_as_each_caller_gives_it(capsys, tmp_path):
    from learngene.pipeline import train_ancestry

    argv = ["ancestry", "--data", "digits", "--preset", "cpu_tiny", "--resume", "-o", tmp_path / "a.safetensors"]
    err = _cli_error(capsys, argv)
    said = "resume (--resume) continues from RUN_DIR/checkpoint.pt; pass run_dir (--run-dir) too"  # both callers'
    assert err == f"learngene ancestry: error: {said}"
    assert _python_error(lambda: train_ancestry("digits", "cpu_tiny", resume=True)) == said


def test_a_note_names_the_setting_as_each_caller_gives_it(files, capsys):
    from learngene.pipeline import expand

    out = files / "d.safetensors"
    assert main(["expand", str(files / "gene.safetensors"), "--max-params", "5M", "--depth", "1", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    kept = "(budget: params 5,000,000; depth (--depth) 1 kept (it wins over the budget)"  # both callers' words
    assert kept in captured.out, captured.out
    assert _untagged(captured.out) and _untagged(captured.err)
    said: list[str] = []
    expand(files / "gene.safetensors", {"depth": 1}, max_params=5_000_000, say=lambda text, **how: said.append(text))
    assert len(said) == 1 and kept in said[0], said
    assert _untagged(said[0])


def test_a_warning_is_worded_for_its_reader(files, capsys, monkeypatch):
    """A warning raised inside a command shows the flag; the same warning caught from Python, the argument."""
    text = f"a warning about {setting('lr=0.01', '--lr 0.01')}"

    def warn_and_fail(args):
        warnings.warn(LearngeneWarning(text), stacklevel=1)
        raise LearngeneError(f"then fail with {setting('lr', '--lr')}")

    # pytest records warnings; showwarning as Python's default prints them, through warnings.formatwarning
    def show(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    monkeypatch.setattr(warnings, "showwarning", show)
    monkeypatch.setattr(dispatch, "handler", lambda args: warn_and_fail)
    shown_before = warnings.formatwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        code = main(["inspect", str(files / "gene.safetensors")])
    captured = capsys.readouterr()
    assert code == 2 and _untagged(captured.err), ascii(captured.err)
    assert "LearngeneWarning: a warning about --lr 0.01\n" in captured.err, captured.err
    assert captured.err.strip().endswith("learngene inspect: error: then fail with --lr"), captured.err
    assert warnings.formatwarning is shown_before  # the command line's display is its own while it runs
    with pytest.warns(LearngeneWarning) as caught:
        warnings.warn(LearngeneWarning(text), stacklevel=1)
    assert str(caught[0].message) == "a warning about lr=0.01"


def test_render_picks_one_wording_and_leaves_no_tag():
    named = setting("lr=0.01", "--lr 0.01")
    nested = setting(f"pass {named} to train", f"give {named} to `learngene train`")
    assert render(f"x {nested} y", cli=True) == "x give --lr 0.01 to `learngene train` y"
    assert render(f"x {nested} y", cli=False) == "x pass lr=0.01 to train y"
    assert render(named[:4], cli=True) == "lr="  # a message cut short: what is left of the span, no tag
    assert setting("seed", "seed") == "seed"  # one wording needs no tags
    err = LearngeneError(f"bad {named}")
    assert str(err) == "bad lr=0.01" and repr(err) == "LearngeneError('bad lr=0.01')"
    assert render(message_of(err), cli=True) == "bad --lr 0.01"
    wrapped = LearngeneError(f"wrapped: {message_of(err)}")  # re-raised with another's message: both wordings kept
    assert render(message_of(wrapped), cli=True) == "wrapped: bad --lr 0.01" and str(wrapped) == "wrapped: bad lr=0.01"


def test_a_usage_error_names_the_flag(capsys):
    """A flag's type check may reuse a library message (e.g. a licence's): argparse's one line shows the flag's words."""
    import argparse

    from learngene.cli.parser import EXIT_USAGE, _Parser

    def refuse(text: str):
        raise argparse.ArgumentTypeError(f"{text!r} is no rate; pass {setting('lr=0.001', '--lr 0.001')}")

    parser = _Parser(prog="learngene train")
    parser.add_argument("--lr", type=refuse)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--lr", "fast"])
    err = capsys.readouterr().err
    assert exited.value.code == EXIT_USAGE
    assert err == "learngene train: error: argument --lr: 'fast' is no rate; pass --lr 0.001 (see --help)\n", ascii(err)
