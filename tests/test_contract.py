"""The command line's guarantees at the Python boundary (issue 44 item 4), generated: every public pipeline function, every
result's ``save`` and every request object, each parameter (read with :func:`inspect.signature`, and the fields of the
request a ``**choices`` stands for) against a table of hostile values. Each case must raise one
:class:`~learngene.errors.LearngeneError` line, write nothing and change no input.

Which hostile values a parameter gets follows from its annotation (None where None is not accepted, a text where a list
or mapping is, a count below its declared range, paths where a path is), so a new parameter is covered without a new
test; a new public function or ``**choices`` without a baseline here fails :func:`test_every_public_entry_is_covered`.
The baseline of each entry is a cheap valid call (:func:`test_the_baselines_are_valid` runs them), so that a case
passes only when its one hostile value is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import learngene as lg
from learngene.comparison.choices import CompareChoices
from learngene.comparison.launching import Launcher
from learngene.data import digits, label_space, preprocessing_cfg
from learngene.errors import LearngeneError
from learngene.formats.model_file import save_model
from learngene.pipeline.requests import (
    AdaptChoices,
    AncestryChoices,
    AncestryRequest,
    CondenseChoices,
    DataRequest,
    ExpandChoices,
    TrainChoices,
)
from learngene.validate import limits_of
from learngene.vit.spec import ViTSpec

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
DATA = DataRequest("digits", train_images=16)
TINY = {"max_steps": 1, "batch_size": 8, "eval_images": 8, "progress": False}
# the parameters that name a place a call writes (every path parameter of a save method is one too)
WRITTEN = {"run_dir", "out", "gene_path"}
# what a ``**choices`` parameter stands for: the request whose fields it takes by name
CHOICES = {
    "expand": ExpandChoices,
    "compare": CompareChoices,
    "condense": CondenseChoices,
    "adapt": AdaptChoices,
    "train": TrainChoices,
    "train_ancestry": AncestryChoices,
}


@dataclass(frozen=True)
class Parameter:
    """One parameter as its annotation and default describe it."""

    name: str
    arms: tuple[Any, ...]  # the types of its union
    optional: bool  # None is accepted
    limits: dict[str, Any]  # a declared field's range
    writes: bool  # a place the call writes
    lazy: bool = False  # a request's field: a path is read when the request is used, not when it is made
    empty_ok: bool = False  # its default is an empty list or mapping: one given empty means the same

    def takes(self, *kinds: Any) -> bool:
        def is_kind(arm: Any, kind: Any) -> bool:
            origin = typing.get_origin(arm) or arm
            return isinstance(origin, type) and isinstance(kind, type) and issubclass(origin, kind)

        return any(is_kind(arm, kind) for arm in self.arms for kind in kinds)

    @property
    def any(self) -> bool:
        return Any in self.arms

    @property
    def collection(self) -> bool:
        return self.takes(Mapping, list, tuple) or any(typing.get_origin(a) is Sequence for a in self.arms)

    @property
    def number(self) -> bool:
        return self.takes(int, float) and not self.arms == (bool,)

    @property
    def below_zero_refused(self) -> bool:
        low = [self.limits[k] for k in ("at_least", "above") if self.limits.get(k) is not None]
        return not self.number or (bool(low) and min(low) >= 0)


def _arms(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(a for arm in typing.get_args(tp) for a in _arms(arm))
    return (tp,)


def _parameter(name: str, tp: Any, default: Any, limits: dict[str, Any], writes: bool, lazy: bool = False) -> Parameter:
    arms = _arms(tp)
    empty = isinstance(default, (list, tuple, dict)) and not default
    return Parameter(name, arms, type(None) in arms or default is None, limits, writes, lazy, empty)


@dataclass(frozen=True)
class Places:
    """The files a hostile path names: inputs that must not change, and the odd places beside them."""

    ancestry: Path
    gene: Path
    wave_gene: Path
    model: Path
    missing: Path
    folder: Path
    fifo: Path
    dangling: Path
    link: Path  # a symbolic link to the input of the call tried (its result's, for a save)

    def inputs(self) -> list[Path]:
        return [self.ancestry, self.gene, self.wave_gene, self.model]


# (label, the hostile value, whether it applies to a parameter): a value a parameter accepts is no hostile value for it
HOSTILE: list[tuple[str, Callable[[Places], Any], Callable[[Parameter], bool]]] = [
    ("None", lambda p: None, lambda q: not q.optional),
    ("a wrong kind", lambda p: object(), lambda q: not q.any),
    ("a text for a list", lambda p: "aux_depth=2", lambda q: q.collection and not q.takes(str)),
    ("NaN", lambda p: math.nan, lambda q: not q.any),
    ("inf", lambda p: math.inf, lambda q: not q.any),
    ("negative", lambda p: -1, lambda q: not q.any and q.below_zero_refused),
    ("huge", lambda p: 2**70, lambda q: not q.any and not q.takes(float)),
    ("empty", lambda p: "", lambda q: not q.any),
    ("an empty list", lambda p: [], lambda q: not q.any and not q.optional and not q.empty_ok),
    ("a missing path", lambda p: p.missing, lambda q: q.takes(os.PathLike) and not q.writes and not q.lazy),
    (
        "a directory",
        lambda p: p.folder,
        lambda q: q.takes(os.PathLike) and not q.lazy and q.name not in ("run_dir", "out"),
    ),
    ("a FIFO", lambda p: p.fifo, lambda q: q.takes(os.PathLike) and not q.lazy),
    ("a dangling symlink", lambda p: p.dangling, lambda q: q.takes(os.PathLike) and not q.writes and not q.lazy),
    ("output = input", lambda p: p.link.resolve(), lambda q: q.writes),
    ("a symlink to an input", lambda p: p.link, lambda q: q.writes),
]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The inputs (an ancestry, a gene, an adaptable gene, a model file) and the results whose save is tried."""
    root = tmp_path_factory.mktemp("contract")
    inputs = root / "inputs"
    inputs.mkdir()
    ancestry = inputs / "anc.safetensors"
    train = digits("train", img_size=16)
    torch.manual_seed(0)
    origin = {"kind": "ancestry", "label_space": label_space(train), "license": "MIT"}
    save_model(ancestry, SPEC.create_model(), SPEC, origin=origin, preprocessing=preprocessing_cfg(train))
    condensed = lg.condense("pretrained", ancestry)
    condensed.save(inputs / "gene.safetensors")
    wave = lg.condense("wave", ancestry, data=DATA, train_cfg=TINY)
    wave.save(inputs / "wave.safetensors")
    descendant = lg.expand(inputs / "gene.safetensors", {"depth": 1})
    descendant.save(inputs / "model.safetensors")
    results = {
        "Condensed": condensed,
        "Descendant": descendant,
        "Adapted": lg.adapt(inputs / "wave.safetensors", DATA, {"depth": 1}, train_cfg=TINY),
        "Trained": lg.train(inputs / "model.safetensors", DATA, train_cfg=TINY),
        "Comparison": lg.compare(ancestry, DATA, ["L1-D32-H2"], train_cfg=TINY, **COMPARED),
    }
    return inputs, results


COMPARED = {"methods": ["mimetic"], "references": ["scratch"], "seeds": 1}
ANCESTRY_SIZE = {"depth": 1, "embed_dim": 32, "num_heads": 2, "patch_size": 4, "img_size": 16}


def _places(inputs: Path, tmp: Path, own_input: str = "anc.safetensors") -> Places:
    odd = tmp / "odd"
    odd.mkdir()
    (odd / "folder").mkdir()
    os.mkfifo(odd / "fifo")
    (odd / "dangling").symlink_to(odd / "nowhere")
    (odd / "link").symlink_to(inputs / own_input)
    return Places(
        inputs / "anc.safetensors",
        inputs / "gene.safetensors",
        inputs / "wave.safetensors",
        inputs / "model.safetensors",
        odd / "missing.safetensors",
        odd / "folder",
        odd / "fifo",
        odd / "dangling",
        odd / "link",
    )


def _baselines(places: Places, results: dict[str, Any], tmp: Path) -> dict[str, tuple[Callable[..., Any], dict]]:
    """Every entry tried: (the callable, a cheap valid call's arguments by name)."""
    entries: dict[str, tuple[Callable[..., Any], dict]] = {
        "load_ancestry": (lg.load_ancestry, {"path": places.ancestry}),
        "condense": (lg.condense, {"method": "pretrained", "ancestry": places.ancestry}),
        "expand": (lg.expand, {"gene": places.gene}),
        "adapt": (lg.adapt, {"gene": places.wave_gene, "data": DATA, "size": {"depth": 1}, "train_cfg": TINY}),
        "train": (lg.train, {"model": places.model, "data": DATA, "train_cfg": TINY}),
        "train_ancestry": (lg.train_ancestry, {"data": DATA, "size": ANCESTRY_SIZE, "train_cfg": TINY}),
        "compare": (
            lg.compare,
            {"ancestry": places.ancestry, "data": DATA, "sizes": ["L1-D32-H2"], "train_cfg": TINY, **COMPARED},
        ),
        "export": (lg.export, {"model": places.model, "out": tmp / "exported.safetensors"}),
        "DataRequest": (DataRequest, {"source": "digits"}),
        "AncestryRequest": (AncestryRequest, {"path": places.ancestry}),
        **{cls.__name__: (cls, {}) for cls in CHOICES.values() if cls is not CompareChoices},
        "Launcher": (Launcher, {}),
    }
    for name, result in results.items():
        path = tmp / (f"{name}-report" if name == "Comparison" else f"{name}.safetensors")
        entries[f"{name}.save"] = (result.save, {"path": path})
    return entries


def _parameters(name: str, entry: Callable[..., Any]) -> list[Parameter]:
    """The parameters of ``entry``: its signature's (a request's: its fields), ``**choices`` as its request's fields."""
    if isinstance(entry, type) and dataclasses.is_dataclass(entry):
        hints = typing.get_type_hints(entry)
        return [
            _parameter(f.name, hints[f.name], _default(f), limits_of(f), False, lazy=True)
            for f in dataclasses.fields(entry)
        ]
    found = []
    for p in inspect.signature(entry, eval_str=True).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            if name == "load_ancestry":  # timm.create_model's own arguments: timm checks them
                continue
            request = CHOICES[name]
            hints = typing.get_type_hints(request)
            found += [
                _parameter(f.name, hints[f.name], _default(f), limits_of(f), f.name in WRITTEN)
                for f in dataclasses.fields(request)
            ]
            continue
        writes = p.name in WRITTEN or (name.endswith(".save") and p.name == "path")
        found.append(_parameter(p.name, p.annotation, p.default, {}, writes))
    return found


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


# every case: (entry, parameter, hostile label); collected without building anything (the names come from the code)
def _cases() -> list[tuple[str, str, str]]:
    dummy = Places(*(Path("/nonexistent") for _ in range(9)))
    entries = {
        **{n: f for n, (f, _) in _baselines(dummy, {}, Path("/nonexistent")).items()},
        **{f"{n}.save": getattr(lg, n).save for n in ("Condensed", "Descendant", "Adapted", "Trained")},
        "Comparison.save": lg.Comparison.save,
    }
    cases = []
    for name, entry in entries.items():
        for param in _parameters(name, entry):
            if param.name == "self":
                continue
            cases += [(name, param.name, label) for label, _, applies in HOSTILE if applies(param)]
    return cases


CASES = _cases()


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links not followed) with a digest of its kind and bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "link:" + os.readlink(path)
        elif path.is_fifo():
            out[str(path)] = "fifo"
        elif path.is_dir():
            out[str(path)] = "dir"
        else:
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_every_public_entry_is_covered():
    """Each function and result of :mod:`learngene.pipeline` that ``learngene`` exports has a baseline here, and a
    ``**choices`` the request it stands for: a new one cannot go untested."""
    tried = {case[0].split(".")[0] for case in CASES}
    public = {
        name
        for name in lg.__all__
        if lg._EXPORTS.get(name, "").startswith("pipeline") or name == "load_ancestry"  # type: ignore[attr-defined]
    }
    assert public <= tried, f"not tried: {sorted(public - tried)}"


def test_the_contract_counts_its_cases():
    """How many cases the table makes (printed with -s; the report quotes it): every entry has parameters tried."""
    per_entry: dict[str, int] = {}
    for name, _, _ in CASES:
        per_entry[name] = per_entry.get(name, 0) + 1
    print(f"\n{len(CASES)} contract cases: {per_entry}")
    assert all(per_entry.values()) and len(per_entry) >= 15


def test_the_baselines_are_valid(made, tmp_path, monkeypatch):
    """Each baseline call works: a case fails only because of its one hostile value (compare and the results were
    made by the fixture, with the same arguments)."""
    inputs, results = made
    monkeypatch.chdir(tmp_path)
    places = _places(inputs, tmp_path)
    for name, (entry, kwargs) in _baselines(places, results, tmp_path).items():
        if name in ("compare", "adapt", "train", "train_ancestry"):
            continue  # run by the fixture with these arguments (train_ancestry's: below, the cheapest)
        entry(**kwargs)
    lg.train_ancestry(DATA, ANCESTRY_SIZE, train_cfg=TINY)


# the input file of each entry that reads one (a result's: the one it was made from): what "output = input" names
OWN_INPUT = {
    "adapt": "wave.safetensors",
    "train": "model.safetensors",
    "export": "model.safetensors",
    "Descendant.save": "gene.safetensors",
    "Adapted.save": "wave.safetensors",
    "Trained.save": "model.safetensors",
}


@pytest.mark.parametrize("name, parameter, label", CASES, ids=["-".join(c) for c in CASES])
def test_a_hostile_argument_is_one_line_and_touches_nothing(made, name, parameter, label, tmp_path, monkeypatch):
    inputs, results = made
    monkeypatch.chdir(tmp_path)
    places = _places(inputs, tmp_path, OWN_INPUT.get(name, "anc.safetensors"))
    entry, kwargs = _baselines(places, results, tmp_path)[name]
    value = next(make for lab, make, _ in HOSTILE if lab == label)(places)
    kwargs = {**kwargs, parameter: value}
    if label in ("output = input", "a symlink to an input") and "overwrite" in inspect.signature(entry).parameters:
        kwargs["overwrite"] = True  # an input is never replaced, overwrite or not
    before_inputs, before_here = _snapshot(inputs), _snapshot(tmp_path)
    with pytest.raises(LearngeneError) as info:
        entry(**kwargs)
    message = str(info.value)
    assert message and "\n" not in message, message
    assert _snapshot(inputs) == before_inputs, "an input changed"
    assert _snapshot(tmp_path) == before_here, "something was written"


def test_the_internals_old_names_warn_and_the_loop_lives_in_training():
    """The internals that left the top level load with a DeprecationWarning naming their module; the training loop is
    ``learngene.training.train`` (``learngene.train`` is the pipeline's, and takes no torch module:
    tests/test_no_mutation.py)."""
    for name, module in (("make_descendant", "descendant"), ("GeneNet", "training.genenet")):
        with pytest.warns(DeprecationWarning, match=rf"import it from learngene\.{module}"):
            assert callable(getattr(lg, name))
    assert lg.training.train.__module__ == "learngene.training.loop" and "make_descendant" not in lg.__all__
