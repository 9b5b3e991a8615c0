"""The main job's pipeline on real Fashion-MNIST with the quick profile (skipped when the data are absent)."""

import csv

import pytest

from learngene.cli import main
from learngene.data import DEBIAN_FASHION_MNIST
from learngene.registry import list_methods


@pytest.mark.skipif(not DEBIAN_FASHION_MNIST.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_quick_demo_runs_every_method(tmp_path, capsys):
    assert main(["demo", "--quick", "--quiet", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert {r["method"] for r in rows} == set(list_methods())
    for method in list_methods():
        assert f"| {method} |" in out
    assert all(0.0 <= float(r["acc"]) <= 1.0 for r in rows if r["acc"])  # empty: a size the method cannot make
    assert (tmp_path / "report.md").exists() and list((tmp_path / "genes").glob("scratch-*.safetensors"))
