"""``learngene methods`` shows options whose 0 means automatic as ``auto``, and ``--opt KEY=auto`` takes it."""

from __future__ import annotations

from learngene.cli import main
from learngene.methods.peg import PEGConfig
from learngene.validate import parse_options


def test_methods_prints_automatic_options_as_auto(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert "gene_heads=auto, gene_ffns=auto, seed=0" in out
    assert "depth_ratio=auto" in out and "aux_depth=auto" in out and "n_qkv=auto" in out
    assert "gene_heads=0" not in out and "aux_depth=0" not in out


def test_auto_option_value_means_the_default():
    assert parse_options(PEGConfig, ["gene_heads=auto", "seed=3"]) == {"gene_heads": 0, "seed": 3}
