"""The main job's pipeline on real Fashion-MNIST with the quick profile (skipped when the data are absent)."""

import csv
import re

import pytest

from learngene.cli import main
from learngene.data import DEBIAN_FASHION_MNIST
from learngene.registry import list_methods


@pytest.mark.skipif(not DEBIAN_FASHION_MNIST.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_quick_demo_runs_every_method(tmp_path, capsys):
    assert main(["demo", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert {r["method"] for r in rows} == set(list_methods())
    for method in list_methods():
        assert f"| {method} |" in out
    assert all(0.0 <= float(r["acc"]) <= 1.0 for r in rows if r["acc"])  # empty: a size the method cannot make
    assert (tmp_path / "report.md").exists() and list((tmp_path / "genes").glob("scratch-*.safetensors"))
    # the ancestry's own accuracy, in the printed table's header and in the report (issue 32)
    assert re.search(r"its own top-1: \d+\.\d%", out), out[:500]
    report = (tmp_path / "report.md").read_text()
    assert re.search(r"- ancestry L2-D32-H2 \(27,978 params\), 1 epoch on 1,000 Fashion-MNIST images: top-1 \d", report)
    # one seed: no marks, and no legend of marks nor references that appear nowhere
    assert "?" not in report.split("## fashion_mnist")[1].split("\n\n")[2] and "One seed: the cells carry no" in report
    assert "epoch(s)" not in report and "1 threads" not in report
    # one fine-tuning epoch: no learning-curve plot (a column of markers), the stored-parameters plot stays; where
    # scratch ×2 has two points, the curves show something
    assert "curves-digits" not in report and "stored-digits.png" in report and "curves-fashion_mnist.png" in report
