"""Several `learngene compare` workers on one --out: each cell once, the same results.csv as one worker, and a
grid that a rerun finishes after any worker is killed.

The workers are forked from this process (the imports are done, so they start at once, as `torchrun` ranks or
SLURM array tasks would after theirs): 2 workers on the machine's 2 cores.
"""

from __future__ import annotations

import csv
import fcntl
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from learngene.bench import protocol
from learngene.cli import main
from learngene.vit.spec import ViTSpec
from tests.conftest import saved_model

from .conftest import CUDA_PRESENT

# torch refuses a backward pass in a child forked after the parent ran one where CUDA is present (its autograd engine
# then has device threads; "Unable to handle autograd's threading in combination with fork-based multiprocessing",
# seen on an H200 machine): users' workers are separate processes (torchrun ranks, SLURM tasks), never forks, so the
# forked stand-ins run only where they can
pytestmark = [
    pytest.mark.integration,  # compare's workers in processes
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the workers are forked"),
    pytest.mark.skipif(CUDA_PRESENT, reason="torch cannot run autograd in a child forked on a machine with CUDA"),
]

TIMINGS = ("condense_seconds", "adapt_seconds", "train_seconds")  # measured wall times: never equal between runs


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    return saved_model(tmp_path_factory.mktemp("workers") / "anc.safetensors", spec)


def argv(ancestry: Path, out: Path) -> list[str]:
    # 5 labels (scratch, scratch ×10, mimetic, structured, pretrained) × 2 seeds: 10 cells, 2 of them 10× as long
    return [
        "compare", "--ancestry", str(ancestry), "--data", "digits", "--sizes", "L1-D32-H2", "--methods",
        "pretrained", "--seeds", "2", "--max-steps", "6", "--train-images", "64", "--eval-images", "64",
        "--batch-size", "16", "--out", str(out), "--quiet", "--no-plots",
    ]  # fmt: skip


def results(out: Path) -> list[dict[str, str]]:
    """results.csv without the measured seconds."""
    with open(out / "results.csv") as fh:
        return [{k: v for k, v in row.items() if k not in TIMINGS} for row in csv.DictReader(fh)]


@pytest.fixture
def fine_tunes(tmp_path, monkeypatch):
    """Every fine-tune any worker starts and finishes, as ``(pid, "start"|"end", cell)`` lines of one file."""
    log = tmp_path / "fine-tunes.log"
    real = protocol.BenchRun._fine_tune

    def logged(self, cell, path, *args, **kwargs):
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()} start {path.name}\n")
        done = real(self, cell, path, *args, **kwargs)
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()} end {path.name}\n")
        return done

    monkeypatch.setattr(protocol.BenchRun, "_fine_tune", logged)
    monkeypatch.setattr(protocol.BenchRun, "POLL_SECONDS", 0.2)

    def read() -> list[tuple[int, str, str]]:
        if not log.exists():
            return []
        lines = [line.split() for line in log.read_text().splitlines()]
        log.unlink()
        return [(int(pid), what, cell) for pid, what, cell in lines]

    return read


def _worker(args: list[str]) -> None:
    os._exit(main(args))


def start_workers(args: list[str], count: int = 2) -> list[multiprocessing.Process]:
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_worker, args=(args,)) for _ in range(count)]
    for worker in workers:
        worker.start()
    return workers


def finished_cells(out: Path) -> int:
    return len(list((out / "cells").rglob("*.json"))) if (out / "cells").exists() else 0


def wait_for_cells(out: Path, count: int, workers: list[multiprocessing.Process], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while finished_cells(out) < count:
        assert any(w.is_alive() for w in workers), "the workers ended before the grid was half done"
        assert time.monotonic() < deadline, f"fewer than {count} cells after {timeout} s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def one_worker(ancestry):
    """results.csv of the grid computed by one worker alone."""
    out = ancestry.parent / "one"
    assert main(argv(ancestry, out)) == 0
    return results(out)


def test_two_workers_share_the_grid_and_write_what_one_worker_writes(ancestry, tmp_path, one_worker, fine_tunes):
    out = tmp_path / "two"
    workers = start_workers(argv(ancestry, out))
    for worker in workers:
        worker.join(timeout=300)
        assert worker.exitcode == 0
    events = fine_tunes()
    ended = [cell for _, what, cell in events if what == "end"]
    assert sorted(ended) == sorted(set(ended)) and len(ended) == 10  # every cell fine-tuned once, by one worker
    assert {pid for pid, _, _ in events} == {w.pid for w in workers}  # and both workers took some
    assert results(out) == one_worker
    report = (out / "report.md").read_text()
    assert "Holm over the m = 10 comparisons of this size" in report and "95 % t interval" in report


def _inside_a_fine_tune(log: Path, pid: int) -> bool:
    """Whether worker ``pid`` has started a fine-tune it has not finished (it holds that cell's claim)."""
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    started = {cell for p, what, cell in lines if int(p) == pid and what == "start"}
    return bool(started - {cell for p, what, cell in lines if int(p) == pid and what == "end"})


@pytest.mark.parametrize("killed", ["one", "both"])
def test_a_killed_worker_leaves_a_grid_that_the_others_or_a_rerun_finish(
    ancestry, tmp_path, one_worker, fine_tunes, killed
):
    out = tmp_path / "killed"
    workers = start_workers(argv(ancestry, out))
    wait_for_cells(out, 2, workers)
    deadline = time.monotonic() + 120
    while not _inside_a_fine_tune(tmp_path / "fine-tunes.log", workers[0].pid):  # kill it holding a claim
        assert time.monotonic() < deadline and workers[0].is_alive()
        time.sleep(0.005)
    victims = workers[:1] if killed == "one" else workers
    for worker in victims:
        os.kill(worker.pid, signal.SIGKILL)  # no clean-up of any kind: its claims go with the process
    workers[0].join(timeout=60)
    written = {path.name for path in (out / "cells").rglob("*.json")}  # what the killed worker got to write
    for worker in workers:
        worker.join(timeout=300)
    assert [w.exitcode for w in victims] == [-signal.SIGKILL] * len(victims)
    events = fine_tunes()
    if killed == "one":  # the survivor takes over the cell the killed worker held, and finishes the grid
        assert workers[1].exitcode == 0 and results(out) == one_worker
        victim = workers[0].pid
        held = {c for p, w, c in events if p == victim and w == "start"} - {
            c for p, w, c in events if p == victim and w == "end"
        }
        assert held and held - written <= {c for p, w, c in events if p != victim and w == "end"}
    before = finished_cells(out)
    assert main(argv(ancestry, out)) == 0  # the rerun finishes the grid, reusing every finished cell
    rerun = [cell for _, what, cell in fine_tunes() if what == "end"]
    assert len(rerun) == len(set(rerun)) == 10 - before
    assert results(out) == one_worker


def test_a_worker_with_other_settings_or_a_run_that_needs_the_folder_alone_is_refused(ancestry, tmp_path, capsys):
    from learngene.training.run_dirs import lock_run_dir, unlock_run_dir

    out = tmp_path / "cmp"
    (out / "claims").mkdir(parents=True)
    other = os.open(out / "claims" / "profile-000000000000.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(other, fcntl.LOCK_SH)  # a live worker of another profile (another process, as far as flock sees)
    try:
        assert main(argv(ancestry, out)) == 2
    finally:
        os.close(other)
    assert "a learngene compare with other settings is running on" in capsys.readouterr().err
    held = lock_run_dir(out)  # a run that holds the folder alone (bench, train --run-dir)
    try:
        assert main(argv(ancestry, out)) == 2
    finally:
        unlock_run_dir(held)
    assert "another learngene run is using the report folder" in capsys.readouterr().err


def test_under_torchrun_each_rank_is_a_worker_that_joins_no_process_group(ancestry, one_worker, monkeypatch):
    import torch.distributed as dist

    from learngene.bench.workers import worker_device

    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    assert main(argv(ancestry, ancestry.parent / "one")) == 0  # the grid is done: this rank reads it and reports
    assert not dist.is_initialized()
    assert results(ancestry.parent / "one") == one_worker
    assert worker_device("cpu") == "cpu"
    assert worker_device("auto") == ("cuda:1" if torch.cuda.is_available() else "auto")
    monkeypatch.setenv("LOCAL_RANK", "one")
    assert main(argv(ancestry, ancestry.parent / "one")) == 2


@pytest.mark.slow  # three interpreters import torch: about a minute on a loaded 2-core machine (--runslow)
def test_torchrun_with_two_ranks_fills_the_grid_of_one_worker(ancestry, one_worker, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "torchrun"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        [*torchrun, "-m", "learngene", *argv(ancestry, out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert results(out) == one_worker


def test_claims_exclude_each_other_and_failures_bind_the_workers_running_not_a_later_run(tmp_path):
    from learngene.bench.workers import Busy, SharedClaims

    first, second = SharedClaims(tmp_path, "p"), SharedClaims(tmp_path, "p")  # two workers (flock: two files)
    try:
        with first.hold("cells/data/tleg/L1-s0-key.json"):
            with pytest.raises(Busy):
                with second.hold("cells/data/tleg/L1-s0-key.json"):
                    pass
            with second.hold("cells/data/tleg/L1-s1-key.json"):  # another unit: free
                pass
        with second.hold("cells/data/tleg/L1-s0-key.json"):  # released with the first's block
            pass
        first.fail("genes/tleg-key.safetensors", "tleg refuses this ancestry")
        assert second.failure("genes/tleg-key.safetensors") == "tleg refuses this ancestry"
        time.sleep(0.05)  # file times tick in milliseconds: the record is older than the next worker
        later = SharedClaims(tmp_path, "p")
        assert later.failure("genes/tleg-key.safetensors") is None  # a rerun tries it again
        later.close()
    finally:
        first.close()
        second.close()


def test_a_cell_that_fails_is_recorded_for_the_workers_running_and_tried_again_by_a_rerun(
    ancestry, tmp_path, fine_tunes, capsys
):
    out = tmp_path / "na"
    args = argv(ancestry, out)
    args[args.index("L1-D32-H2")] = "L1-D32-H2,L1-D16-H1"  # pretrained copies blocks: it cannot make width 16
    assert main(args) == 0
    records = sorted((out / "claims" / "cells").rglob("*.failed"))
    assert [r.parent.name for r in records] == ["pretrained", "pretrained"]  # seeds 0 and 1 at L1-D16-H1
    assert "embed_dim" in records[0].read_text()
    assert "pretrained at L1-D16-H1:" in (out / "report.md").read_text()
    fine_tunes()
    assert main(args) == 0  # a later run: every finished cell is read, the two refusals tried again
    assert sorted(cell for _, what, cell in fine_tunes() if what == "start") == sorted(r.stem for r in records)
    assert "pretrained at L1-D16-H1:" in capsys.readouterr().out
