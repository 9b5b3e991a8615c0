"""Properties of every registered method over random small specs (hypothesis), and determinism.

Every method condenses every drawn ancestry and expands its gene to the gene's own size; for other
target specs a method may refuse with a :class:`LearngeneError` (e.g. weight selection cannot grow a
width); anything else it does must hold: ``expand`` gives keys and shapes of
the target's timm model, which then loads them strictly and computes finite outputs, and the gene
survives a save/load round trip bit for bit. Same seed on CPU gives the same gene, bit for bit.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from learngene.binding import bind_gene
from learngene.descendant import GeneNet
from learngene.errors import LearngeneError
from learngene.gene import Learngene
from learngene.method import Ancestry, CondenseInputs
from learngene.registry import get_method, list_methods
from learngene.training.loop import TrainConfig, seed_everything, train
from learngene.vit.spec import ViTFamily, ViTSpec
from tests.conftest import SMALL_OPTIONS, make_images

METHODS = list_methods()


@st.composite
def specs(draw, img_size: int | None = None, in_chans: int | None = None) -> ViTSpec:
    """Small ViT specs: 1–3 blocks, 1–4 heads of 4–16 dims, 8 or 16 px, class token or average pooling."""
    heads = draw(st.sampled_from([1, 2, 3, 4]))
    pool = draw(st.sampled_from(["token", "avg"]))
    img = img_size or draw(st.sampled_from([8, 16]))
    return ViTSpec(
        depth=draw(st.integers(1, 3)),
        embed_dim=heads * draw(st.sampled_from([4, 8, 16])),
        num_heads=heads,
        mlp_ratio=draw(st.sampled_from([1.0, 2.0, 4.0])),
        img_size=img,
        patch_size=draw(st.sampled_from([p for p in (4, 8) if img % p == 0])),
        in_chans=in_chans or draw(st.sampled_from([1, 3])),
        num_classes=draw(st.sampled_from([2, 5])),
        family=ViTFamily(global_pool=pool, class_token=pool == "token" or draw(st.booleans())),
    )


def _condense(name: str, spec: ViTSpec, seed: int = 0, steps: int = 1) -> Learngene:
    """``name``'s gene of a seeded random ancestry of ``spec`` (trained methods: ``steps`` steps on toy data)."""
    seed_everything(seed)
    ancestry = Ancestry(spec.create_model().eval(), spec)
    inputs = None
    if get_method(name).needs_data:
        data = make_images(8, num_classes=spec.num_classes, size=spec.img_size, chans=spec.in_chans, seed=seed)
        inputs = CondenseInputs(
            train=data,
            train_cfg=TrainConfig(
                epochs=1, max_steps=steps, batch_size=4, distill_lambda=1.0, progress=False, seed=seed
            ),
        )
    seed_everything(seed)
    return get_method(name)(**SMALL_OPTIONS.get(name, {})).condense(ancestry, inputs)


def _check_expansion(name: str, gene: Learngene, target: ViTSpec, may_refuse: bool = True) -> None:
    method = bind_gene(gene, check=False).method
    try:
        with torch.no_grad():
            state = method.expand(gene, target)
    except LearngeneError:
        if not may_refuse:
            raise
        return  # a size this method cannot make: allowed, and said in one line
    expected = target.state_shapes()
    assert set(state) <= set(expected), sorted(set(state) - set(expected))
    for key, tensor in state.items():
        assert tuple(tensor.shape) == expected[key], (key, tuple(tensor.shape), expected[key])
        assert torch.isfinite(tensor).all(), key
    model = target.create_model().eval()
    full = model.state_dict()
    full.update(state)
    model.load_state_dict(full, strict=True)
    with torch.no_grad():
        out = model(torch.randn(2, target.in_chans, target.img_size, target.img_size))
    assert out.shape == (2, target.num_classes) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", METHODS)
@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_expand_loads_strictly_and_runs(name, data):
    ancestry = data.draw(specs(), label="ancestry")
    gene = _condense(name, ancestry)
    _check_expansion(name, gene, gene.layout or ancestry, may_refuse=False)  # its own size: never refused
    # the ancestry's blocks at another depth and label space (what depth-only methods make), the same
    # input with any blocks, and anything at all
    other_depth = ancestry.replace(
        depth=data.draw(st.integers(1, 4), label="depth"),
        num_classes=data.draw(st.sampled_from([2, 5]), label="classes"),
    )
    _check_expansion(name, gene, other_depth)
    _check_expansion(
        name, gene, data.draw(specs(img_size=ancestry.img_size, in_chans=ancestry.in_chans), label="target")
    )
    _check_expansion(name, gene, data.draw(specs(), label="any target"))


@pytest.mark.parametrize("name", METHODS)
@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs())
def test_gene_save_load_round_trips_exactly(name, spec):
    gene = _condense(name, spec)
    with tempfile.TemporaryDirectory() as tmp:
        gene.save(Path(tmp) / "g.safetensors")
        back = Learngene.load(Path(tmp) / "g.safetensors")
    assert back.tensors.keys() == gene.tensors.keys()
    for key, tensor in gene.tensors.items():
        assert back.tensors[key].dtype == tensor.dtype and torch.equal(back.tensors[key], tensor), key
    assert (back.method, back.layout, back.ancestry, back.cost, back.created, back.library_version) == (
        gene.method,
        gene.layout,
        gene.ancestry,
        gene.cost,
        gene.created,
        gene.library_version,
    )
    assert json.dumps(back.config, sort_keys=True) == json.dumps(gene.config, sort_keys=True)  # JSON: tuples → lists
    assert bind_gene(back, check=False).method.config == bind_gene(gene, check=False).method.config


SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)


@pytest.mark.parametrize("name", METHODS)
def test_same_seed_same_gene_bit_for_bit(name):
    """Every method, trained ones through a few steps of the loop: same seed, same gene."""
    first = _condense(name, SPEC, seed=5, steps=3)
    second = _condense(name, SPEC, seed=5, steps=3)
    assert first.tensors.keys() == second.tensors.keys()
    assert all(torch.equal(first.tensors[k], second.tensors[k]) for k in first.tensors)


def test_condensation_through_a_gene_net_is_deterministic():
    """The TLEG/WAVE path with the loop (a GeneNet over the ancestry's own layers): same seed, same gene."""

    def condense(seed: int) -> Learngene:
        seed_everything(0)
        ancestry = Ancestry(SPEC.create_model(), SPEC)
        method = get_method("pretrained")()
        net = GeneNet(method, method.condense(ancestry), SPEC)
        cfg = TrainConfig(epochs=2, batch_size=8, lr=3e-3, augment=True, progress=False, seed=seed)
        train(net, make_images(24), cfg)
        return net.gene()

    first, second, other = condense(1), condense(1), condense(2)
    assert all(torch.equal(first.tensors[k], second.tensors[k]) for k in first.tensors)
    assert not all(torch.equal(first.tensors[k], other.tensors[k]) for k in first.tensors)
    seed_everything(0)
    start = get_method("pretrained")().condense(Ancestry(SPEC.create_model(), SPEC))
    assert not all(torch.equal(first.tensors[k], start.tensors[k]) for k in start.tensors), "training changed nothing"
