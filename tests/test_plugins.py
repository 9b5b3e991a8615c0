"""Extension without editing learngene: a method and a data source of another installed package.

``tests/plugin`` holds such a package with its ``.dist-info`` (entry points ``learngene.methods`` and
``learngene.data_sources``), put on the path of a fresh interpreter: what ``pip install`` of a plugin gives.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "plugin"
SRC = Path(__file__).parents[1] / "src"


def run(*argv: str, code: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(PLUGIN)]), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "learngene", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_a_plugins_method_and_data_source_are_listed_without_torch_for_help():
    methods = run("methods")
    assert methods.returncode == 0, methods.stderr
    assert "toy_first_block" in methods.stdout and "scale=1.0" in methods.stdout
    helped = run("train", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "toy_stripes (stripes of a period per class" in " ".join(helped.stdout.split())
    probe = run(
        code="import sys\nfrom learngene.cli.parser import build_parser\n"
        "sub = next(a for a in build_parser()._actions if a.dest == 'command')\n"
        "print('toy_stripes' in sub.choices['train'].format_help(), 'torch' in sys.modules)"
    )
    assert probe.stdout.split() == ["True", "False"], probe.stderr


def test_a_plugins_method_condenses_and_expands_and_its_data_source_trains(tmp_path):
    anc, gene, out = (str(tmp_path / n) for n in ("anc.safetensors", "gene.safetensors", "d.safetensors"))
    size = ["--depth", "2", "--embed-dim", "32", "--num-heads", "2", "--img-size", "16", "--patch-size", "4"]
    made = run("ancestry", *size, "--data", "toy_stripes", "--epochs", "1", "--batch-size", "8", "--quiet", "-o", anc)
    assert made.returncode == 0, made.stderr
    condensed = run("condense", "--method", "toy_first_block", "--ancestry", anc, "--quiet", "-o", gene)
    assert condensed.returncode == 0, condensed.stderr
    expanded = run("expand", gene, "--depth", "3", "--opt", "scale=0.5", "--quiet", "-o", out)
    assert expanded.returncode == 0, expanded.stderr
    check = run(
        code="import torch\nfrom safetensors.torch import load_file\n"
        f"d, a = load_file({out!r}), load_file({anc!r})\n"
        "print(all(torch.equal(d[f'blocks.{l}.mlp.fc1.weight'], a['blocks.0.mlp.fc1.weight'] * 0.5) for l in range(3)))"
    )
    assert check.stdout.strip() == "True", check.stderr


@pytest.mark.parametrize(
    "filters, member, outsider",
    [
        ({"needs_data": True}, "cluster", "pretrained"),
        ({"adaptable": True}, "peg", "tleg"),
        ({"aux_net": True}, "tleg", "peg"),
        ({"aux_net": True, "adaptable": True}, "wave", "tleg"),
    ],
)
def test_list_methods_filters_by_capability(filters, member, outsider):
    from learngene.registry import get_method, list_methods

    chosen = list_methods(**filters)
    assert member in chosen and outsider not in chosen
    assert all(getattr(get_method(n), k) == v for n in chosen for k, v in filters.items())


def test_list_methods_refuses_an_unknown_capability():
    from learngene.errors import LearngeneError
    from learngene.registry import list_methods

    with pytest.raises(LearngeneError, match="no method has a capability 'flies'"):
        list_methods(flies=True)
