"""Issue 32, the front door: threads that fit the machine, progress a person can trust, reports that say what they
mean, one overwrite rule, project files."""

from __future__ import annotations

import inspect
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learngene.bench import plots, report, tables
from learngene.bench.rows import Row
from learngene.cli import main
from learngene.cli.parser import build_parser
from learngene.errors import LearngeneError
from learngene.host import threads
from learngene.training import progress
from learngene.training.loop import TrainConfig, train
from learngene.training.progress import RunProgress

from .bounds import U64, order_bound
from .clock import VirtualClock
from .conftest import make_images

ROOT = Path(__file__).resolve().parents[1]
COMPUTING = ("ancestry", "condense", "expand", "adapt", "train", "export", "bench", "compare", "demo")


# ---- threads ------------------------------------------------------------------------------------------------
def test_the_default_is_the_idle_cpus_and_omp_num_threads_wins(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.default_threads(cpus=2, load=0.0) == 2
    assert threads.default_threads(cpus=2, load=1.8) == 1  # a busy 2-core machine: one thread
    assert threads.default_threads(cpus=2, load=9.0) == 1  # never below one
    assert threads.default_threads(cpus=16, load=4.2) == 12
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr(threads, "usable_cpus", lambda: 4)  # 3 threads are a valid setting on 4 usable CPUs
    assert threads.default_threads(cpus=2, load=9.0) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "two")
    with pytest.raises(LearngeneError, match="OMP_NUM_THREADS='two' is not one whole number"):
        threads.default_threads()


def test_the_machine_load_counts_busy_cpus():
    """A process spinning on one of this process's CPUs for the whole sample keeps that CPU busy (or, while the
    scheduler runs another process there, another one), so the load counts at least one CPU less the ticks' rounding:
    /proc/stat counts in ticks of 10 ms, at most one lost at each end of the 0.3 s sample per CPU. A CPU is never
    more than wholly busy, so the load is at most the CPUs."""
    if threads._cpu_times() is None:
        pytest.skip("no /proc/stat: the load is the 1-minute average, which does not follow one sample")
    spinner = subprocess.Popen(
        [sys.executable, "-c", "import time\nprint(flush=True)\nend = time.time() + 30\nwhile time.time() < end: pass"],
        stdout=subprocess.PIPE,
    )
    try:
        assert spinner.stdout is not None and spinner.stdout.readline() == b"\n"  # spinning from here on
        load = threads.machine_load(sample_seconds=0.3)
    finally:
        spinner.kill()
        spinner.wait()
    cpus = len(threads._cpu_times() or {})
    assert 1.0 - cpus * 2 * 0.01 / 0.3 <= load <= threads.usable_cpus(), (load, cpus)


def _readings(monkeypatch, samples, loadavg=2.0):
    """/proc/stat readings ``{cpu: (idle ticks, all ticks)}`` in turn, and a 1-minute load average; no sleeping."""
    samples = iter(samples)
    monkeypatch.setattr(threads, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(threads.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (loadavg, loadavg, loadavg))


def test_the_default_follows_the_present_load_not_the_last_minute(monkeypatch):
    """Right after a job ends the 1-minute average still says 2 busy cores; the CPUs are idle now, so an idle
    2-core machine gets 2 threads. One core kept busy gives 1."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _readings(monkeypatch, [{0: (0, 0), 1: (0, 0)}, {0: (100, 100), 1: (99, 100)}])
    idle = threads.machine_load()
    # a few float64 divisions and sums of tick counts: exact but for their last bits (tests/bounds.py)
    assert (
        idle == pytest.approx(0.01, rel=order_bound(4, 1.0, u=U64)) and threads.default_threads(cpus=2, load=idle) == 2
    )
    _readings(monkeypatch, [{0: (0, 0), 1: (0, 0)}, {0: (0, 100), 1: (95, 100)}], loadavg=0.0)
    busy = threads.machine_load()
    assert (
        busy == pytest.approx(1.05, rel=order_bound(4, 1.0, u=U64)) and threads.default_threads(cpus=2, load=busy) == 1
    )
    _readings(monkeypatch, [None], loadavg=1.6)  # no /proc/stat (not Linux): the load average is all there is
    assert threads.machine_load() == 1.6


def test_set_threads_sets_torch_and_names_the_python_argument():
    before = torch.get_num_threads()
    try:
        assert threads.set_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(LearngeneError, match=r"^threads \(--threads\) must be"):
        threads.set_threads(0)


def test_every_command_that_computes_has_threads_in_its_help():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, command in sub.choices.items():
        has = any("--threads" in a.option_strings for a in command._actions)
        assert has == (name in COMPUTING), name
        if has:
            assert "--threads N" in command.format_help() and "OMP_NUM_THREADS" in command.format_help()
    assert main(["train", "m", "--out", "o", "--threads", "0"]) == 2


def test_the_cli_sets_threads_once_at_start_up(monkeypatch, tmp_path):
    from learngene.training import distributed

    seen = []
    monkeypatch.setattr(distributed, "set_threads", seen.append)
    args = ["condense", "--method", "scratch", "--ancestry", str(tmp_path / "none"), "-o", str(tmp_path / "g")]
    main([*args, "--threads", "1"])
    main(args)
    assert seen == [1, None]  # None: the default (threads.default_threads)


# ---- progress ------------------------------------------------------------------------------------------------
class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class _File(io.StringIO):
    def isatty(self):
        return False


def test_the_eta_counts_only_this_runs_work_and_names_the_running_stage(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    run = RunProgress(100.0, desc="bench", disable=True)
    with run.stage("ancestry", 50.0):  # found in the cache: no training step
        clock.now += 30.0
    assert run.eta() is None and run.postfix() == "ETA ?"
    with run.stage("condense tleg", 20.0):
        progress.note_steps(0, 10)
        clock.now += 10.0
        progress.note_steps(5, 10)  # 10 units of work in 10 s: 40 units left take 40 s
        assert run.done() == 60.0 and run.eta() == pytest.approx(40.0, rel=order_bound(4, 1.0, u=U64))  # float64
        assert run.postfix() == "ETA 00:40, running: condense tleg (50%)"
        clock.now += 10.0
        progress.note_steps(10, 10)
    with run.stage("fine-tune", 20.0):
        progress.note_steps(8, 10)  # resumed at 80 %: that part is not this run's speed
        clock.now += 2.0
        progress.note_steps(9, 10)
        # this run: 20 units in 20 s, then 2 units in 2 s: 1 unit/s; 100 - (50 + 20 + 18) = 12 left
        assert run.eta() == pytest.approx(12.0, rel=order_bound(4, 1.0, u=U64))
    exact = order_bound(4, 1.0, u=U64)  # sums of a few float64 figures of work
    assert run.cached == pytest.approx(50.0 + 16.0, rel=exact) and run.computed == pytest.approx(24.0, rel=exact)
    progress.note_steps(3, 10)  # outside any stage: nobody listens
    run.close()


def test_the_training_loop_reports_its_steps_to_the_running_stage(tiny_spec):
    run = RunProgress(10.0, desc="t", disable=True)
    seen = []
    real_note = run.note
    run.note = lambda f: (seen.append(f), real_note(f))  # type: ignore[method-assign]
    with run.stage("train", 10.0):
        train(tiny_spec.create_model(), make_images(32), TrainConfig(epochs=2, batch_size=16, progress=False))
    assert seen == [0.0, 0.25, 0.5, 0.75, 1.0] and run.computed == 10.0


def test_a_run_in_a_file_writes_a_line_a_minute_with_the_running_stage_and_a_moving_eta(monkeypatch):
    """On the virtual clock (tests/clock.py: the count follows from the plan, whatever the machine's load): a step
    every 40 s, 8 of 10, then the stage ends at 330 s; the heartbeat writes a line at 60, 120, ..., 300 s."""
    out, clock = _File(), VirtualClock()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress, "time", clock)
    monkeypatch.setattr(progress, "threading", clock.threading())
    run = RunProgress(100.0, desc="bench demo", unit="GFLOP")
    stage = run.stage("ancestry", 100.0)
    stage.__enter__()
    for step in range(1, 9):
        clock.at(40 * step, lambda step=step: progress.note_steps(step, 10))
    clock.at(330, lambda: (stage.__exit__(None, None, None), run.close()))
    clock.run_threads()
    lines = out.getvalue().splitlines()
    running = [line for line in lines if "running: ancestry" in line]
    assert len(running) == 5, lines
    assert len(set(lines)) == len(lines), "no line twice"
    etas = [line.split("ETA ")[1].split(",")[0] for line in running]
    percents = [line.split("%")[0][-3:] for line in running]
    assert len(set(etas[1:])) == 4 and len(set(percents)) == 5, running  # the ETA and the bar move inside one stage
    assert lines[-1].startswith("bench demo: 100%") and "running" not in lines[-1]  # a finished stage is all done


def test_evaluation_shows_its_own_progress(monkeypatch, tiny_spec):
    out = _File()
    monkeypatch.setattr(sys, "stderr", out)
    train(
        tiny_spec.create_model(),
        make_images(32),
        TrainConfig(epochs=1, batch_size=16, desc="fit", eval_batch_size=8),
        eval_data=make_images(24, seed=1),
    )
    assert any(line.startswith("fit 1/1 evaluate (24 images)") for line in out.getvalue().splitlines())


# ---- reports -------------------------------------------------------------------------------------------------
def _row(method, size, seed, accs, task="t"):
    return Row(method=method, task=task, size=size, depth=1, embed_dim=8, num_heads=1, seed=seed, accs=accs)


def test_one_seed_gets_no_marks_and_the_rule_names_only_references_that_appear():
    rows = [_row("scratch", "S", 0, [0.5]), _row("tleg", "S", 0, [0.6])]
    table = tables.format_table(rows, "t", mark=True)
    assert "?" not in table and "S" not in table.split("tleg |")[1]
    assert tables.mark_rule(rows, ["t"], seeds=1) == tables.NO_MARKS
    rows += [_row("scratch", "S", 1, [0.52]), _row("tleg", "S", 1, [0.61])]
    rule = tables.mark_rule(rows, ["t"], seeds=2)
    assert "**S** scratch" in rule and "**M**" not in rule and "**X**" not in rule and "**I**" not in rule
    assert "S+" in tables.format_table(rows, "t", mark=True) or "S=" in tables.format_table(rows, "t", mark=True)


def test_counts_are_singular_for_one():
    assert report.plural(1, "epoch") == "1 epoch" and report.plural(3, "epoch") == "3 epochs"
    assert "1 thread)" in report.machine() or torch.get_num_threads() > 1 or torch.cuda.is_available()


def test_every_registered_method_has_its_own_colour_and_marker():
    from learngene.registry import list_methods

    methods = list(list_methods())
    styles = plots.style_per_method([*methods, "scratch ×10", "tleg +mimetic"])
    pairs = {(styles[m]["color"], styles[m]["marker"]) for m in methods}
    assert len(pairs) == len(methods)
    # a reference of its own (scratch ×10) is another grey and marker; a method's variant keeps its colour and marker,
    # drawn hollow, so that it reads as the same method
    assert (styles["scratch ×10"]["color"], styles["scratch ×10"]["marker"]) != (
        styles["scratch"]["color"],
        styles["scratch"]["marker"],
    )
    variant = styles["tleg +mimetic"]
    assert (variant["color"], variant["marker"]) == (styles["tleg"]["color"], styles["tleg"]["marker"])
    assert variant.get("mfc") == "white" and "mfc" not in styles["tleg"]
    # the same colour in every plot, whichever methods it shows
    assert plots.style_per_method(["tleg"])["tleg"] == styles["tleg"]


def test_the_legend_has_one_entry_per_method(monkeypatch, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    seen = {}
    real = matplotlib.figure.Figure.legend

    def legend(self, handles, labels, **kwargs):
        seen["labels"] = list(labels)
        return real(self, handles, labels, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "legend", legend)
    rows = [
        _row("pretrained", "S", 0, [0.5, 0.6]),
        _row("weight_selection", "S", 0, [0.5, 0.6]),  # the same results at S: drawn once, "a = b"
        _row("pretrained", "T", 0, [0.3, 0.4]),
        _row("weight_selection", "T", 0, [0.3, 0.45]),
        _row("scratch", "S", 0, [0.2, 0.3]),
        _row("scratch", "T", 0, [0.2, 0.3]),
    ]
    plots.plot_curves(rows, "t", tmp_path / "c.png")
    assert seen["labels"] == ["pretrained", "scratch", "weight_selection"]
    plots.plot_curves(rows[:2], "t", tmp_path / "c.png")  # identical everywhere: named beside the other's marker
    assert seen["labels"] == ["pretrained", "weight_selection (= pretrained)"]
    # the same as another method at each size: the legend says which, where
    twins = [
        _row("scratch", "T", 0, [0.1, 0.2]),
        _row("pretrained", "S", 0, [0.5, 0.6]),
        _row("weight_selection", "S", 0, [0.5, 0.6]),
        _row("weight_selection", "T", 0, [0.1, 0.2]),
    ]
    plots.plot_curves(twins, "t", tmp_path / "c.png")
    assert seen["labels"] == ["scratch", "pretrained", "weight_selection (= scratch at T; = pretrained at S)"]


def test_a_run_with_one_evaluation_point_has_no_curves_plot():
    assert not plots.has_curves([_row("a", "S", 0, [0.5])], "t")
    assert plots.has_curves([_row("a", "S", 0, [0.5]), _row("b", "S", 0, [0.4, 0.5])], "t")


def test_the_ancestry_of_the_first_upstream_is_the_reports_ancestry(tmp_path):
    """all_upstreams() builds new Upstream objects: the run recorded no ancestry (and no accuracy) in its meta."""
    from learngene.bench import BenchRun, get_profile

    profile = get_profile("quick")
    run = BenchRun(profile, tmp_path, progress=False)
    spec = run.ancestry_spec(profile.all_upstreams()[0])
    assert profile.all_upstreams()[0] is not profile.all_upstreams()[0]
    path = tmp_path / "ancestry"
    path.mkdir()
    # a cached ancestry: the stage reads it back and records its accuracy
    from learngene.bench.stages import stage_key
    from learngene.formats.model_file import save_model

    data = make_images(16, num_classes=10, size=28)
    key = stage_key(
        stage="ancestry",
        spec=spec.to_dict(),
        epochs=profile.ancestry_epochs,
        images=len(data),
        data="fashion_mnist",
        lr=profile.train.lr,
        batch_size=profile.train.batch_size,
    )
    save_model(path / f"ancestry-{key}.safetensors", spec.create_model(), spec, origin={"eval_acc": 0.42})
    run.ancestry(data, data)
    assert run.meta["ancestry"]["eval_acc"] == 0.42


# ---- one overwrite rule ---------------------------------------------------------------------------------------
def test_every_writer_refuses_to_overwrite_by_default():
    from learngene.formats.export import export_hub_folder
    from learngene.formats.model_file import save_model
    from learngene.formats.weights import save_safetensors
    from learngene.gene import Learngene
    from learngene.methods.cluster import plot_attention_distance

    for writer in (Learngene.save, save_model, save_safetensors, export_hub_folder, plot_attention_distance):
        assert inspect.signature(writer).parameters["overwrite"].default is False, writer.__qualname__


def test_an_existing_output_is_refused_naming_both_forms_of_overwrite(tmp_path, tiny_spec):
    from learngene.formats.model_file import save_model

    path = tmp_path / "m.safetensors"
    model = tiny_spec.create_model()
    save_model(path, model, tiny_spec)
    with pytest.raises(LearngeneError, match=r"already exists; pass overwrite=True \(--overwrite\) to replace it$"):
        save_model(path, model, tiny_spec)
    save_model(path, model, tiny_spec, overwrite=True)


def test_an_existing_output_is_refused_before_torch_loads(tmp_path):
    taken = tmp_path / "g.safetensors"
    taken.write_bytes(b"x")
    probe = (
        "import sys\nfrom learngene.cli import main\n"
        f"code = main(['condense', '--method', 'scratch', '--ancestry', 'a', '-o', {str(taken)!r}])\n"
        "print(code, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
    assert "already exists; pass overwrite=True (--overwrite) to replace it" in proc.stderr


# ---- names and project files ---------------------------------------------------------------------------------
def test_a_descendant_is_labelled_for_what_it_is():
    from learngene.vit.spec import get_preset

    small = get_preset("cpu_tiny").replace(depth=2, embed_dim=32, num_heads=2)
    assert small.arch == "vit_tiny_patch16_224"  # the timm builder its sizes override
    assert small.arch_label().startswith("ViT L2-D32-H2, 28 px, patch 4, 1 channel (")
    assert get_preset("deit_tiny").arch_label() == "vit_tiny_patch16_224"


def test_demo_takes_out_like_every_other_command():
    parse = build_parser().parse_args
    assert parse(["demo", "--out", "a"]).out == "a" == parse(["demo", "--out-dir", "a"]).out


def test_evaluation_is_thinned_by_default_and_all_can_be_asked_for():
    parse = build_parser().parse_args
    assert parse(["train", "m", "--out", "o"]).eval_images == 2000
    args = parse(["train", "m", "--out", "o", "--eval-images", "0"])
    from learngene.training.config import from_flags

    assert from_flags(vars(args)).eval_images == 0  # 0: all of them (None: not given, the use case's)
    assert parse(["train", "m", "--out", "o", "--eval-images", "500"]).eval_images == 500


def test_the_project_has_its_licence_and_citation():
    import yaml

    from learngene import __version__

    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == __version__ and cff["license"] == "Apache-2.0" and cff["cff-version"] == "1.2.0"
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text()


def test_the_model_card_cites_the_library(tiny_spec):
    from learngene.formats.export import model_card

    config = {"architecture": tiny_spec.arch, "pretrained_cfg": {}}
    card = model_card(config, tiny_spec, {"method": "tleg", "citation": "Wang et al."})
    assert "The tleg method: Wang et al." in card and "CITATION.cff" in card


def test_profile_help_is_torch_free_and_covers_every_profile():
    from learngene.bench.descriptions import PROFILE_DESCRIPTIONS
    from learngene.bench.profiles import PROFILES

    assert set(PROFILE_DESCRIPTIONS) == set(PROFILES)
    assert all(PROFILES[name].description == text for name, text in PROFILE_DESCRIPTIONS.items())
