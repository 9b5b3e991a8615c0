"""Python = CLI, settings included (issue 44 item 3): for every method and step, the settings a run gets are the same
whether they come as flags, a dict or a TrainConfig, given or not (a step's own defaults, such as a method's
distillation λ, apply unless the caller sets that field); and expand's choices, as flags or keyword arguments.

Each call is stopped where its settings are final (the run directory is opened with them, before anything is loaded),
so the test reads the effective settings of every method × step without training anything.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

import learngene as lg
import learngene.pipeline.adapting
import learngene.pipeline.condensing
import learngene.pipeline.training
from learngene.cli import main
from learngene.gene import Learngene
from learngene.pipeline.requests import ExpandChoices
from learngene.registry import get_method, list_methods
from learngene.training.config import TrainConfig

from .conftest import SMALL_OPTIONS


class Stopped(Exception):
    """Raised where a use case opens its run with its settings resolved: the settings are what the test reads."""

    def __init__(self, cfg: TrainConfig):
        super().__init__()
        self.cfg = cfg


@pytest.fixture
def settings_of(monkeypatch):
    """``settings_of(call)``: the settings ``call`` (a Python call, or ``main(argv)``) runs with."""

    def stop(chosen: Any, cfg: TrainConfig | None = None) -> None:
        raise Stopped(cfg)  # type: ignore[arg-type]

    for module in (learngene.pipeline.condensing, learngene.pipeline.adapting, learngene.pipeline.training):
        monkeypatch.setattr(module, "open_run_dir", stop)

    def settings_of(call) -> dict[str, Any]:
        with pytest.raises(Stopped) as stopped:
            call()
        return {k: v for k, v in dataclasses.asdict(stopped.value.cfg).items() if k != "identity"}

    return settings_of


def flags(settings: dict[str, Any]) -> list[str]:
    return [a for k, v in settings.items() for a in (f"--{k.replace('_', '-')}", str(v))]


# what a caller gives: nothing; a budget and the optimizer; the distillation weight (where a step distils)
GIVEN = [{}, {"epochs": 1, "lr": 0.01, "batch_size": 16, "eval_images": 0}]
LAMBDA = {"distill_lambda": 0.3}
DATA = ["--data", "digits", "--train-images", "16"]


def same_three_ways(settings_of, cli: list[str], python, given: dict[str, Any]) -> dict[str, Any]:
    """The settings of the command line with ``given`` as flags, and of ``python(train_cfg)`` with ``given`` as a
    dict and as a TrainConfig (and, given nothing, None): all equal; returns them."""
    from_cli = settings_of(lambda: main([*cli, *flags(given)]))
    ways = {"dict": dict(given), "TrainConfig": TrainConfig(**given)} | ({"None": None} if not given else {})
    for way, train_cfg in ways.items():
        assert settings_of(lambda cfg=train_cfg: python(cfg)) == from_cli, f"{way} differs from the flags"
    return from_cli


@pytest.mark.parametrize("name", list_methods())
@pytest.mark.parametrize("given", [*GIVEN, LAMBDA], ids=["nothing", "budget", "lambda"])
def test_condense_takes_the_same_settings_every_way(name, given, settings_of, tmp_path):
    options = SMALL_OPTIONS.get(name, {})
    opts = [f"--opt={k}={v}" for k, v in options.items()]
    cli = ["condense", "--method", name, "--ancestry", "anc.safetensors", *DATA, *opts, "-o", str(tmp_path / "g")]
    data = lg.DataRequest("digits", train_images=16)

    def python(train_cfg):
        return lg.condense(name, "anc.safetensors", options=options, data=data, train_cfg=train_cfg)

    got = same_three_ways(settings_of, cli, python, given)
    assert got["distill_lambda"] == given.get("distill_lambda", get_method(name).distill_lambda)  # the method's
    assert got["eval_images"] == given.get("eval_images", 2000) and got["epochs"] == given.get("epochs", 10)


@pytest.fixture(scope="module")
def genes(tmp_path_factory) -> dict[str, Path]:
    """A gene file per adaptable method: its header is all that is read before the settings are final."""
    folder = tmp_path_factory.mktemp("genes")
    out = {}
    for name in list_methods():
        if get_method(name).adaptable:
            out[name] = folder / f"{name}.safetensors"
            Learngene(method=name, tensors={"unused": torch.zeros(1)}).save(out[name])
    return out


@pytest.mark.parametrize("name", [n for n in list_methods() if get_method(n).adaptable])
@pytest.mark.parametrize("given", GIVEN, ids=["nothing", "budget"])
def test_adapt_takes_the_same_settings_every_way(name, given, genes, settings_of, tmp_path):
    gene = genes[name]
    cli = ["adapt", str(gene), *DATA, "-o", str(tmp_path / "d")]
    data = lg.DataRequest("digits", train_images=16)
    got = same_three_ways(settings_of, cli, lambda cfg: lg.adapt(gene, data, train_cfg=cfg), given)
    assert got["epochs"] == given.get("epochs", 1) and got["distill_lambda"] == 0


@pytest.mark.parametrize("teacher", [None, "anc.safetensors"], ids=["alone", "with a teacher"])
@pytest.mark.parametrize("given", [*GIVEN, LAMBDA], ids=["nothing", "budget", "lambda"])
def test_train_takes_the_same_settings_every_way(teacher, given, settings_of, tmp_path):
    if given == LAMBDA and teacher is None:
        pytest.skip("a distillation weight without a teacher is refused (test_bad_inputs)")
    cli = ["train", "model.safetensors", *DATA, *(["--teacher", teacher] if teacher else []), "-o", str(tmp_path / "t")]
    data = lg.DataRequest("digits", train_images=16)
    got = same_three_ways(
        settings_of, cli, lambda cfg: lg.train("model.safetensors", data, train_cfg=cfg, teacher=teacher), given
    )
    assert got["distill_lambda"] == given.get("distill_lambda", 0.5 if teacher else 0.0)
    assert got["epochs"] == given.get("epochs", 5) and got["eval_images"] == given.get("eval_images", 2000)


@pytest.mark.parametrize("given", GIVEN, ids=["nothing", "budget"])
def test_ancestry_takes_the_same_settings_every_way(given, settings_of, tmp_path):
    cli = ["ancestry", *DATA, "--preset", "cpu_tiny", "-o", str(tmp_path / "a")]
    data = lg.DataRequest("digits", train_images=16)
    same_three_ways(settings_of, cli, lambda cfg: lg.train_ancestry(data, "cpu_tiny", train_cfg=cfg), given)


def test_deit_augmentation_turns_mixup_on_every_way(settings_of, tmp_path):
    """`--aug deit` and DataRequest(aug="deit") both mix up, unless the settings say otherwise."""
    cli = ["train", "model.safetensors", "--data", "digits", "--aug", "deit", "-o", str(tmp_path / "t")]
    data = lg.DataRequest("digits", aug="deit")
    got = same_three_ways(settings_of, cli, lambda cfg: lg.train("model.safetensors", data, train_cfg=cfg), {})
    assert got["mixup"] is True
    assert settings_of(lambda: lg.train("model.safetensors", data, train_cfg={"mixup": False}))["mixup"] is False


@pytest.mark.parametrize(
    "given",
    [{}, {"seed": 3, "top_up": "mimetic", "max_params": 5_000_000, "max_flops": 2_000_000_000, "license": "MIT"}],
    ids=["nothing", "all"],
)
def test_expand_takes_the_same_choices_as_flags_or_keywords(given, monkeypatch, tmp_path):
    """Every field of ExpandChoices, given as its flag or its keyword argument, is the same choice."""
    made: list[ExpandChoices] = []
    of = ExpandChoices.of.__func__  # type: ignore[attr-defined]

    def record(cls, choices):
        made.append(of(cls, choices))
        raise Stopped(TrainConfig())

    monkeypatch.setattr(ExpandChoices, "of", classmethod(record))
    shown = {"max_params": "5M", "max_flops": "2G"}
    argv = [a for k, v in given.items() for a in (f"--{k.replace('_', '-')}", shown.get(k, str(v)))]
    with pytest.raises(Stopped):
        main(["expand", "gene.safetensors", *argv, "-o", str(tmp_path / "d")])
    with pytest.raises(Stopped):
        lg.expand("gene.safetensors", **given)
    assert len(made) == 2 and made[0] == made[1] == ExpandChoices(**given)
    assert {f.name for f in dataclasses.fields(ExpandChoices) if f.metadata.get("output")} == {"stitch"}
