"""Every method option declares the steps that read it, and the declaration is true.

For every registered method and every option, set to a valid value other than its default: at ``condense``
it changes the condensed tensors exactly when the option declares ``condense`` (a speed-only option aside);
at ``expand`` (and ``adapt``, for methods that have it) it changes that step's output when declared, and is
refused in one line naming the step that reads it when not. So no descendant records an option it ignored.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
import torch

from learngene.binding import bind_gene
from learngene.errors import LearngeneError
from learngene.gene import Learngene
from learngene.method import AdaptInputs, Ancestry, CondenseInputs, Method
from learngene.registry import get_method, list_methods
from learngene.training.loop import TrainConfig, seed_everything
from learngene.validate import ADAPT, CONDENSE, EXPAND, PHASES, choices
from learngene.vit.spec import ViTSpec
from tests.conftest import make_images

ANCESTRY = ViTSpec(depth=4, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
DEEPER = ANCESTRY.replace(depth=5)  # expand's target: depths differ, so depth rules (variant, select_n, ...) matter
SMALLER = ANCESTRY.replace(depth=3, embed_dim=16, num_heads=1)
TARGETS: dict[tuple[str, str | None], ViTSpec] = {  # (method, option) or (method, None): all its options
    ("weight_selection", None): SMALLER,  # methods that only narrow
    ("importance", None): SMALLER,
    ("grow", None): ANCESTRY.replace(depth=5, embed_dim=64, num_heads=4),  # a method that only grows
    ("wave", "scaler_init"): ANCESTRY,  # the gene's own scalers fit only the aux net's (here the ancestry's) size
}

# a value for an option the generic rule (another choice, the other bool, a number off its default) cannot pick,
# per step where one value cannot suit both (a list with one entry per layer of the aux net, then of the target)
VALUES: dict[tuple[str, str], Any] = {
    ("front", "skip"): ("qkv",),
    ("tleg", "modules"): ("msa",),
    ("share_init", "modules"): ("msa",),
    ("tleg", "layers"): "1",
    ("share_init", "layers"): "1",
    ("sws", "stages"): "1,1,3",
    ("sws", "descendant_stages"): {CONDENSE: "1,2,2", EXPAND: "1,1,3"},
    ("lets", "mapping_layer"): {CONDENSE: "0,0,1,1", EXPAND: "0,0,1,1,1"},
    ("lets", "mapping_layer_coeff"): {CONDENSE: "0,0,1,1", EXPAND: "0,0,1,1,1"},
    ("pool", "instance_depths"): "1,3",
    ("pool", "widths"): "16,32",
    ("pool", "instance_depth"): 1,
    ("sws", "aux_pool"): "token",  # its default is avg
    ("grow", "snr_db"): 10.0,
    ("cluster", "eps"): 0.001,  # every head its own cluster
    ("cluster", "num_images"): 8,
    ("importance", "num_images"): 8,
    ("wave", "template_size"): 16,
    ("wave", "n_qkv"): 2,
    ("wave", "n_proj"): 4,
    ("wave", "n_fc1"): 2,
    ("wave", "n_fc2"): 2,
    ("wave", "adapt_steps"): 1,
    ("lets", "gene_depth"): 1,
    ("tal", "hid"): 32,
    ("tal", "heads"): 4,
    ("tal", "max_ck"): 1024,
    ("tal", "max_shape"): 16,
    ("tal", "ve_cutoff"): 1,
    ("tal", "min_depth"): 3,
    ("pith", "hid"): 32,
    ("pith", "heads"): 4,
    ("pith", "max_ck"): 1024,
    ("pith", "max_shape"): 16,
    ("pith", "ve_cutoff"): 1,
    ("pith", "min_depth"): 3,
    ("lets", "gene_embed_dim"): 8,
    ("peg", "gene_ffns"): 1,
    ("aux", "aux_pool"): "avg",
    ("lets", "gene_mlp_dim"): 32,
    ("aux", "aux_embed_dim"): 16,
    ("aux", "aux_num_heads"): 4,
    ("aux", "aux_patch_size"): 8,
}
# the other options an option needs to matter (e.g. a seed of draws another option turns on), set at condense
CONTEXT: dict[tuple[str, str], dict[str, Any]] = {
    ("front", "seed"): {"dct_mode": "random"},
    ("front", "use_ratio"): {"keep_ratio": 0.5},
    ("front", "depth_ratio"): {"variant": "orthonormal"},
    ("grow", "seed"): {"snr_db": 10.0},
    ("cluster", "min_heads"): {"eps": 0.001},
    ("pool", "widths"): {"design": "authors"},
    ("pool", "instance_depth"): {"design": "authors"},
    ("pool", "joint_epochs"): {"design": "authors"},
    ("pool", "stitch_init"): {"design": "authors"},
    ("sws", "descendant_stages"): {"stages": "2,2,1"},  # sws's aux net here: 5 layers
    ("cluster", "seed"): {"num_images": 8},
    ("importance", "seed"): {"num_images": 8},
    **{(m, "seed"): {"untrained_attention": "mimetic"} for m in ("pretrained", "heru_lg", "auto_lg")},
}
ALWAYS = {
    "wave": {"adapt_steps": 2},  # adapt trains 300 steps by default
    "tal": {"hid": 16, "heads": 2, "layers": 1, "lora_r": 4, "max_ck": 512},  # their hypernetwork has ~20M weights
    "pith": {"hid": 16, "heads": 2, "layers": 1, "lora_r": 4, "max_ck": 512},  # TAL's and two more decoders
}


def other_value(method: type[Method], field: dataclasses.Field, step: str) -> Any:
    """A valid value of ``field`` other than its default."""
    key = next(((m, field.name) for m in (method.name, "aux") if (m, field.name) in VALUES), None)
    if key is not None:
        value = VALUES[key]
        return value[step] if isinstance(value, dict) and not isinstance(field.default, dict) else value
    tp = typing.get_type_hints(method.Config)[field.name]
    default = field.default
    allowed = [c for c in choices(tp) if c != default]
    if allowed:
        return allowed[0]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        step_of = field.metadata.get("multiple_of", 2 if field.metadata.get("odd") else 1)  # an odd one stays odd
        return default + step_of if default else 2
    if isinstance(default, float):
        return default * 0.5 if default else 0.5
    raise AssertionError(f"{method.name}.{field.name}: give the test a value in VALUES")


CASES = [
    pytest.param(name, f.name, id=f"{name}-{f.name}")
    for name in list_methods()
    for f in dataclasses.fields(get_method(name).Config)
]

_genes: dict[tuple, Learngene] = {}


def data():
    return make_images(16, num_classes=4, size=16)


def condense(name: str, options: dict[str, Any]) -> Learngene:
    key = (name, tuple(sorted(options.items())))
    if key not in _genes:
        cls = get_method(name)
        seed_everything(0)
        ancestry = Ancestry(ANCESTRY.create_model().eval(), ANCESTRY)
        inputs = CondenseInputs(train=data(), train_cfg=TrainConfig(max_steps=2, batch_size=8, progress=False))
        _genes[key] = cls(**options).condense(ancestry, inputs if cls.needs_data else None)
    return _genes[key]


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)


def target(name: str, option: str) -> ViTSpec:
    return TARGETS.get((name, option)) or TARGETS.get((name, None)) or DEEPER


def expand(cls: type[Method], gene: Learngene, options: dict[str, Any], spec: ViTSpec) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    with torch.no_grad():
        return bind_gene(gene, EXPAND, method=cls, options=options, check=False).method.expand(gene, spec)


def adapt(cls: type[Method], gene: Learngene, options: dict[str, Any], spec: ViTSpec) -> dict[str, torch.Tensor]:
    seed_everything(0)
    inputs = AdaptInputs(train=data(), train_cfg=TrainConfig(epochs=1, batch_size=8, progress=False))
    adapted, _ = bind_gene(gene, ADAPT, method=cls, options=options, check=False).method.adapt(gene, spec, inputs)
    return adapted.tensors


@pytest.mark.parametrize("name", list_methods())
def test_every_option_declares_the_steps_that_read_it(name):
    cls = get_method(name)
    for f in dataclasses.fields(cls.Config):
        phases = f.metadata.get("phase", ())
        assert phases and set(phases) <= set(PHASES), f"{name} option {f.name}: declare phase= in its settings.field"
        assert ADAPT not in phases or cls.adaptable, f"{name} has no adapt step, yet {f.name} says adapt reads it"
    if cls.seed_option:  # make_descendant sets it at every expansion
        assert EXPAND in get_field(cls, cls.seed_option).metadata["phase"]


def get_field(cls: type[Method], name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(cls.Config) if f.name == name)


@pytest.mark.parametrize("name, option", CASES)
def test_an_option_changes_the_step_that_reads_it_and_is_refused_by_the_others(name, option):
    cls = get_method(name)
    f = get_field(cls, option)
    phases = f.metadata["phase"]
    context = {**ALWAYS.get(name, {}), **CONTEXT.get((name, option), {})}
    base = condense(name, context)

    options = {**context, option: other_value(cls, f, CONDENSE)}
    cls(**options)  # a valid value: any refusal below comes from condensing with it
    try:
        changed = condense(name, options)
    except LearngeneError:  # condense read it, and refuses it for this ancestry (e.g. no cluster that large)
        assert CONDENSE in phases, f"{name}: condense reads {option}: declare it"
        changed = None
    if changed is None or f.metadata.get("speed_only"):
        pass
    elif CONDENSE in phases:
        assert not same(base.tensors, changed.tensors), f"{name}: {option} is declared read by condense, but is not"
    else:
        assert same(base.tensors, changed.tensors), f"{name}: condense reads {option}: declare it"

    steps = [(EXPAND, expand)] + ([(ADAPT, adapt)] if cls.adaptable else [])
    for step, run in steps:
        value = other_value(cls, f, step)
        if step in phases:
            spec = target(name, option)
            assert not same(run(cls, base, {}, spec), run(cls, base, {option: value}, spec)), (
                f"{name}: {option} is declared read by {step}, but changes nothing there"
            )
        else:
            # both callers' words: the keyword argument, then the command line's --opt in parentheses
            with pytest.raises(LearngeneError, match=rf"^{option} is read when .* with {option}=.* \(--opt {option}="):
                run(cls, base, {option: value}, target(name, option))


def test_expanding_with_an_option_only_condense_reads_is_refused_and_writes_nothing(tmp_path):
    from learngene.cli.dispatch import main

    gene = condense("front", {})
    gene.save(tmp_path / "g.safetensors")
    out = tmp_path / "d.safetensors"
    code = main(["expand", str(tmp_path / "g.safetensors"), "--depth", "2", "--opt", "keep_ratio=0.1", "-o", str(out)])
    assert code == 2 and not out.exists()


EXPAND_CASES = [c for c in CASES if EXPAND in get_field(get_method(c.values[0]), c.values[1]).metadata["phase"]]


@pytest.mark.parametrize("name, option", EXPAND_CASES)
def test_every_option_expand_reads_can_be_given_to_learngene_expand(name, option, tmp_path):
    """``--opt`` on the command line, each option expand reads: e.g. tal's, front's or structured's ``seed`` beside
    ``--seed`` (issue 37: a TypeError)."""
    from learngene.cli.dispatch import main
    from learngene.validate import as_text

    cls = get_method(name)
    context = {**ALWAYS.get(name, {}), **CONTEXT.get((name, option), {})}
    condense(name, context).save(tmp_path / "g.safetensors")
    spec = target(name, option)
    value = as_text(other_value(cls, get_field(cls, option), EXPAND))
    size = ["--depth", str(spec.depth), "--embed-dim", str(spec.embed_dim), "--num-heads", str(spec.num_heads)]
    out = tmp_path / "d.safetensors"
    argv = ["expand", str(tmp_path / "g.safetensors"), *size, "--opt", f"{option}={value}", "--quiet", "-o", str(out)]
    assert main(argv) == 0 and out.exists()
