"""The command line end to end on tiny sizes (digits at 16 px), and its one-line errors."""

import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from learngene.cli import build_parser, main
from learngene.method import citations
from learngene.registry import get_method, list_methods
from tests.conftest import TINY_ARGS, cli_error, cli_ok, timm_vit

DATA = ["--data", "digits", "--train-images", "200"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    anc, gene = d / "anc.safetensors", d / "gene.safetensors"
    cli_ok("ancestry", *TINY_ARGS, *DATA, "--epochs", "1", "--quiet", "--out", anc)
    cli_ok("condense", "--method", "pretrained", "--ancestry", anc, "--quiet", "--out", gene)
    return d


def test_every_subcommand_has_help(capsys):
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in sub.choices:
        assert main([name, "--help"]) == 0
        assert "usage: learngene " + name in capsys.readouterr().out


def test_expand_writes_a_descendant_timm_loads_strictly(workdir, capsys):
    out = workdir / "desc.safetensors"
    assert main(["expand", str(workdir / "gene.safetensors"), "--depth", "3", "--out", str(out), "--quiet"]) == 0
    model = timm_vit(depth=3, embed_dim=32, num_heads=2, patch_size=4, img_size=16, in_chans=1, num_classes=10)
    model.load_state_dict(load_file(str(out)), strict=True)
    assert model(torch.randn(1, 1, 16, 16)).shape == (1, 10)


def test_train_and_inspect(workdir, capsys):
    desc = workdir / "desc2.safetensors"
    assert main(["expand", str(workdir / "gene.safetensors"), "--depth", "1", "--out", str(desc), "--quiet"]) == 0
    tuned = workdir / "tuned.safetensors"
    assert (
        main(
            [
                "train",
                str(desc),
                *DATA,
                "--epochs",
                "1",
                "--quiet",
                "--out",
                str(tuned),
                "--run-dir",
                str(workdir / "run"),
            ]
        )
        == 0
    )
    assert (workdir / "run" / "log.jsonl").read_text().count("\n") == 1
    capsys.readouterr()
    assert main(["inspect", str(workdir / "gene.safetensors")]) == 0
    text = capsys.readouterr().out
    assert "method pretrained" in text and "stored parameters" in text
    assert main(["inspect", str(tuned), "--tensors"]) == 0
    text = capsys.readouterr().out
    assert "L1-D32-H2" in text and "finetuned_on" in text and "blocks.0.attn.qkv.weight" in text


def test_train_with_a_teacher_distils_logits_on_its_classes_and_features_on_others(workdir, capsys, fashion_data):
    desc = workdir / "desc-kd.safetensors"
    assert main(["expand", str(workdir / "gene.safetensors"), "--depth", "1", "--out", str(desc), "--quiet"]) == 0
    teacher = ["--teacher", str(workdir / "anc.safetensors"), "--epochs", "1", "--quiet"]
    capsys.readouterr()
    assert main(["train", str(desc), *DATA, *teacher, "--out", str(workdir / "kd-logits.safetensors")]) == 0
    assert (
        main(
            [
                "train",
                str(desc),
                "--data",
                "fashion_mnist",
                "--train-images",
                "100",
                *teacher,
                "--distill-lambda",
                "0.7",
                "--out",
                str(workdir / "kd-features.safetensors"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "λ = 0.5: logit distillation" in err and "λ = 0.7: feature distillation on pooled features" in err
    plain = timm_vit(depth=1, embed_dim=32, num_heads=2, patch_size=4, img_size=16, in_chans=1, num_classes=10)
    plain.load_state_dict(load_file(str(workdir / "kd-features.safetensors")), strict=True)  # no projection saved
    assert "needs a teacher" in cli_error(
        capsys, ["train", str(desc), *DATA, "--distill-lambda", "0.5", "--out", str(workdir / "x.safetensors")]
    )


def test_stitched_descendants_from_the_command_line(workdir, capsys, fashion_data):
    from learngene.methods.pool import read_stitched

    gene, stitched, tuned = (str(workdir / f"{n}.safetensors") for n in ("pool", "stitched", "stitched-tuned"))
    pool_opts = ["--opt", "design=authors", "--opt", "instance_depth=2", "--opt", "joint_epochs=1"]
    condense = ["condense", "--method", "pool", *pool_opts, "--ancestry", str(workdir / "anc.safetensors")]
    assert main([*condense, *DATA, "--max-steps", "2", "--batch-size", "32", "--quiet", "--out", gene]) == 0
    capsys.readouterr()
    assert main(["inspect", gene]) == 0
    assert (
        "(expand with output=('stitch', 'F:J-E:K') (learngene expand GENE --stitch F:J-E:K))"
        in (text := capsys.readouterr().out)
        and "e.g. 0:1-2:0" in text
    ), text
    assert main(["expand", gene, "--stitch", "0:1-2:0", "--out", stitched]) == 0
    assert "stitched descendant L2-D8-H1[..1] -> L2-D32-H2[0..], 4 blocks" in capsys.readouterr().out
    model, _ = read_stitched(stitched)
    assert model.depth == 4 and model.stitch.weight.shape == (32, 8)
    assert main(["inspect", stitched]) == 0
    text = capsys.readouterr().out
    assert "not a timm ViT" in text and "blocks 0..1 of L2-D8-H1" in text and '"stitch": "0:1-2:0"' in text
    assert main(["train", stitched, *DATA, "--epochs", "1", "--quiet", "--out", tuned]) == 0
    again, _ = read_stitched(tuned)
    assert not torch.equal(again.stitch.weight, model.stitch.weight)  # trained as a whole, stitch included
    x = torch.randn(2, 1, 16, 16)
    assert again.eval()(x).shape == (2, 10)
    other = ["--data", "fashion_mnist", "--train-images", "64", "--teacher", str(workdir / "anc.safetensors")]
    assert (
        main(["train", stitched, *other, "--epochs", "1", "--quiet", "--out", str(workdir / "st-kd.safetensors")]) == 0
    )
    assert "feature distillation on pooled features" in capsys.readouterr().err  # the teacher knows other classes
    assert main(["inspect", str(workdir / "st-kd.safetensors")]) == 0
    assert '"new_head": true' in capsys.readouterr().out
    out = str(workdir / "never.safetensors")
    assert "this gene is pretrained" in cli_error(
        capsys, ["expand", str(workdir / "gene.safetensors"), "--stitch", "0:1-2:0", "--out", out]
    )
    assert "no stitch from instance 0 block 0 into instance 2 block 3" in cli_error(
        capsys, ["expand", gene, "--stitch", "0:0-2:3", "--out", out]
    )
    assert "no stitch" in cli_error(capsys, ["expand", gene, "--stitch", "2:0-3:0", "--out", out])
    assert "FRONT:BLOCK-END:BLOCK" in cli_error(capsys, ["expand", gene, "--stitch", "0-2", "--out", out])
    assert "depth (--depth) does not apply with stitch (--stitch)" in cli_error(
        capsys, ["expand", gene, "--stitch", "0:1-2:0", "--depth", "3", "--out", out]
    )
    assert "hub folder" in cli_error(capsys, ["expand", gene, "--stitch", "0:1-2:0", "--out", str(workdir) + "/"])
    assert "is a stitched descendant" in cli_error(
        capsys, ["condense", "--method", "pretrained", "--ancestry", stitched, "--out", out]
    )
    assert not (workdir / "never.safetensors").exists()


def test_methods_lists_the_registry_with_citations(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in list_methods():
        assert ("\n" + out).count(f"\n{name} ") == 1, name
        assert all(f"paper: {paper}" in out for paper in citations(get_method(name))), name
    assert 'paper: Xia et al., "Transformer as Linear Expansion of Learngene", AAAI 2024, arXiv:2312.05614' in out


def test_argument_errors_are_one_line_too(capsys):
    assert "required" in cli_error(capsys, ["expand"])


@pytest.mark.integration  # the installed command in subprocesses
def test_the_installed_command_exits_2_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "learngene", "inspect", str(tmp_path / "nothing.safetensors")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_every_flag_has_help_text():
    """Walk the parser: every argument of every subcommand says what it is for."""
    import argparse

    from learngene.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, command in sub.choices.items():
        for action in command._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, f"flags without help: {missing}"
    # a 0 that means "chosen automatically" is shown as auto; an integer default of 0 is left only to seeds
    zero = [
        f"{name} {action.dest}"
        for name, command in sub.choices.items()
        for action in command._actions
        if action.default == 0 and type(action.default) is int and "seed" not in action.dest
    ]
    assert not zero, f"integer defaults of 0 (say auto or give the value): {zero}"
    assert "(default: auto, once per epoch)" in " ".join(sub.choices["train"].format_help().split())


def test_help_and_argument_errors_import_no_torch():
    """`learngene --help`, `SUB --help` (`bench --help` too, with its profiles) and a usage error answer without loading torch (benchmarks/cli_startup.py
    times them); the parser module itself imports no torch either."""
    probe = (
        "import sys\nfrom learngene.cli import main\nfrom learngene.cli.parser import build_parser\n"
        "codes = [main(['--help']), main(['expand', '--help']), main(['condense', '--help']), main(['expand']),\n"
        "  main(['bench', '--help'])]\nbuild_parser()\nprint(codes, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.stdout.strip().splitlines()[-1] == "[0, 0, 0, 2, 0] False", proc.stdout[-500:] + proc.stderr[-500:]


@pytest.mark.integration  # fresh interpreters in subprocesses
def test_the_package_names_load_on_first_use():
    """`import learngene` is light; its public names still resolve, and `learngene.train` stays the pipeline's
    function even after the module of the training loop is imported."""
    probe = (
        "import sys, learngene\nassert 'torch' not in sys.modules\nimport learngene.training.loop\n"
        "from learngene import train, ViTSpec, list_methods\n"
        "print(callable(train) and train.__module__ == 'learngene.pipeline.training', 'tleg' in list_methods())"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # this checkout's learngene
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert proc.stdout.strip() == "True True", proc.stdout[-500:] + proc.stderr[-500:]
