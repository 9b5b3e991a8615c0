"""The settings learngene reads from the environment and their command-line twins: one range, one line.

``--threads`` and ``OMP_NUM_THREADS`` are held to the same range (1 to the CPUs this process may use), checked
before torch loads, so that libgomp never reads a value it cannot use (it would print its own warning, and an
overflowing one a traceback); every other variable the CLI reads is a number in its range or a one-line error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learngene.cli import main
from learngene.errors import LearngeneError
from learngene.formats.model_file import save_model
from learngene.host import threads
from tests.conftest import TINY

SRC = Path(__file__).resolve().parents[1] / "src"
TOO_MANY = str(threads.usable_cpus() + 1)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("env") / "model.safetensors"
    torch.manual_seed(0)
    save_model(path, TINY.create_model(), TINY)
    return path


def learngene(*argv: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(SRC), **env}
    return subprocess.run(
        [sys.executable, "-m", "learngene", *argv], capture_output=True, text=True, env=environ, timeout=300
    )


# one plain ASCII integer (issue 47): OpenMP's per-level list, other scripts' digits, Python's underscores are refused
NOT_ONE_NUMBER = ["abc", "x,1", "1,1", "1,abc", "\u0661", "\uff11", "1_0", "1.0", "0x1"]


@pytest.mark.integration  # the CLI in subprocesses
@pytest.mark.parametrize("name", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
@pytest.mark.parametrize("value", [*NOT_ONE_NUMBER, "99999999999999999999", "0", "-3", TOO_MANY])
def test_a_bad_thread_variable_is_one_line_before_torch_loads(model_file, name, value):
    done = learngene("inspect", str(model_file), **{name: value})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "libgomp" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"learngene inspect: error: {name}={value!r}")
    assert "unset it" in done.stderr


@pytest.mark.parametrize("value", NOT_ONE_NUMBER)
@pytest.mark.parametrize("name", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_a_thread_variable_is_one_plain_number_from_python_too(monkeypatch, name, value):
    """The same rule in-process (each value above through prepare_environment, which the CLI calls first)."""
    monkeypatch.setenv(name, value)
    with pytest.raises(LearngeneError, match=f"^{name}=.* is not one whole number in plain digits; set it to"):
        threads.prepare_environment(None)


def test_every_other_variable_is_read_as_plain_digits_too(monkeypatch):
    from learngene.host.environment import env_number

    for value in ("\u0661", "1_0", "1,1"):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
        with pytest.raises(LearngeneError, match="is not a whole number"):
            env_number("LOCAL_WORLD_SIZE", 1, at_least=1)
    for value in ("1_800", "nan", "infinity", "\u0661\u0668\u0660\u0660"):
        monkeypatch.setenv("LEARNGENE_DIST_TIMEOUT", value)
        with pytest.raises(LearngeneError, match="is not a number"):
            env_number("LEARNGENE_DIST_TIMEOUT", 1800, float, at_least=1)
    monkeypatch.setenv("LEARNGENE_DIST_TIMEOUT", " 1.5e3 ")
    assert env_number("LEARNGENE_DIST_TIMEOUT", 1800, float, at_least=1) == 1500.0


@pytest.mark.integration  # the CLI in subprocesses
def test_threads_on_the_command_line_replace_a_bad_omp_num_threads(model_file, tmp_path):
    out = tmp_path / "d.safetensors"
    gene = tmp_path / "gene.safetensors"
    assert main(["condense", "--method", "pretrained", "--ancestry", str(model_file), "-o", str(gene), "--quiet"]) == 0
    done = learngene("expand", str(gene), "--threads", "1", "-o", str(out), "--quiet", OMP_NUM_THREADS="abc")
    assert done.returncode == 0 and out.exists() and "libgomp" not in done.stderr, done.stderr
    assert done.stderr.startswith("wrote ") and done.stderr.count("\n") == 1  # --quiet: the result line alone


@pytest.mark.integration  # the CLI in subprocesses
def test_a_blank_thread_variable_is_unset_and_a_plain_one_is_its_number(model_file):
    for value in (" ", "1", " 1 "):
        done = learngene("inspect", str(model_file), OMP_NUM_THREADS=value, MKL_NUM_THREADS=value)
        assert done.returncode == 0 and done.stderr == "", (value, done.stderr)


def test_threads_past_the_usable_cpus_are_refused_in_one_line(capsys, tmp_path):
    assert main(["train", "m", "--out", str(tmp_path / "o"), "--threads", TOO_MANY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"from 1 to {threads.usable_cpus()} (the CPUs this process may use), got {TOO_MANY}" in err
    with pytest.raises(
        LearngeneError, match=rf"^threads \(--threads\) must be a whole number from 1 to {threads.usable_cpus()}"
    ):
        threads.set_threads(int(TOO_MANY))


@pytest.mark.parametrize(
    "name, value, read",
    [
        ("WORLD_SIZE", "two", "launched"),
        ("WORLD_SIZE", "0", "launched"),
        ("LOCAL_WORLD_SIZE", "abc", "workers"),
        ("LOCAL_WORLD_SIZE", "0", "workers"),
    ],
)
def test_other_variables_are_numbers_in_their_range_or_one_line(monkeypatch, name, value, read):
    from learngene.data.folder import default_workers
    from learngene.training.distributed import launched_distributed

    monkeypatch.setenv(name, value)
    with pytest.raises(LearngeneError, match=f"^{name}='{value}' is (not a whole number|out of range); set it to"):
        launched_distributed() if read == "launched" else default_workers()


@pytest.mark.parametrize("value", ["soon", "nan", "-5", "1e300"])
def test_the_collective_timeout_is_a_number_of_seconds(monkeypatch, value):
    from learngene.host.environment import env_number

    monkeypatch.setenv("LEARNGENE_DIST_TIMEOUT", value)
    with pytest.raises(LearngeneError, match="^LEARNGENE_DIST_TIMEOUT="):
        env_number("LEARNGENE_DIST_TIMEOUT", 1800, float, at_least=1, at_most=86400)  # as init_from_env reads it


def test_a_garbage_world_size_is_one_line_from_the_cli(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "many")
    assert main(["inspect", str(tmp_path / "none.safetensors")]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "learngene inspect: error: WORLD_SIZE='many' is not a whole number; set it to a whole number of at least 1 or unset it\n"
    )


def test_a_learngene_data_that_is_no_folder_is_refused_not_passed_over(monkeypatch, tmp_path):
    """As a --data-dir with a typo: falling back to the system's copy would hide it."""
    from learngene.data import load_dataset

    monkeypatch.setenv("LEARNGENE_DATA", str(tmp_path / "typo"))
    with pytest.raises(LearngeneError, match=r"^LEARNGENE_DATA='.*typo' is not a folder; set it to the folder"):
        load_dataset("fashion_mnist")
