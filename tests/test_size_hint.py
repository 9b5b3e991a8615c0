"""A gene that records no ancestry size (issue 46 item 2): condensed from a teacher no spec describes, it expands from
the size fields its refusal asks for (or over its own layout, an aux net's), and the hint that refuses such a teacher
names every method that serves it; each piece of advice is followed here and works.
"""

from __future__ import annotations

import re

import pytest
import timm
import torch

from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.pipeline import condense, expand
from learngene.pipeline.condensing import methods_for_any_teacher
from learngene.registry import get_method, list_methods
from learngene.training.loop import TrainConfig, seed_everything
from learngene.vit.model_spec import spec_from_model
from tests.conftest import SMALL_OPTIONS, cli_ok, make_images

SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=8)
DATA = make_images(8, num_classes=10, size=16, chans=3)
QUICK = TrainConfig(epochs=1, max_steps=1, batch_size=8, distill_lambda=0.5, progress=False)
# the values the test gives the size fields a refusal names (the refusal names the fields, the caller picks sizes)
TINY_VALUES = {"depth": 1, "embed_dim": 32, "num_heads": 2, "aux_depth": 2, "aux_embed_dim": 32, "aux_num_heads": 2}


@pytest.fixture(scope="module")
def beit() -> Ancestry:
    """A BEiT: a classifier no spec describes (a relative position table in every block), a teacher all the same."""
    torch.manual_seed(0)
    model = timm.create_model("beit_base_patch16_224", pretrained=False, num_classes=10, **SIZE).eval()
    with pytest.raises(LearngeneError):
        spec_from_model(model)
    return Ancestry(model, None, unsupported="beit_base_patch16_224: timm's Beit is not described")


def _condense(method: str, ancestry: Ancestry, **options):
    cls = get_method(method)
    seed_everything(0)
    inputs = CondenseInputs(train=DATA, train_cfg=QUICK) if cls.needs_data else None
    return cls(**{**SMALL_OPTIONS.get(method, {}), **options}).condense(ancestry, inputs)


def _named_fields(message: str) -> list[str]:
    """The settings a message names as errors.named writes them: ``depth (--depth)``, ``aux_depth (--opt ...)``."""
    return re.findall(r"\b(\w+) \(--", message)


def test_the_condense_hint_names_every_method_that_serves_a_teacher_no_spec_describes(beit):
    """Every registered method that needs no ViT is named (lets, pool and sws too), and each, given the aux net's
    size the hint names, condenses the BEiT and expands."""
    with pytest.raises(LearngeneError) as info:
        condense("pretrained", beit)  # the pipeline names the methods that serve; the method alone cannot dispatch
    message = str(info.value)
    assert "\n" not in message
    serving = [m for m in list_methods() if not get_method(m).needs_vit_ancestry]
    named = re.findall(r"\b(\w+)\b", message.partition("; ")[2])
    assert set(serving) <= set(named), set(serving) - set(named)
    assert {"lets", "pool", "sws"} <= set(named)
    distil, free = methods_for_any_teacher()
    assert sorted(distil + free) == sorted(serving)
    aux = {name: TINY_VALUES[name] for name in _named_fields(message)}
    assert set(aux) == {"aux_depth", "aux_embed_dim", "aux_num_heads"}
    for method in serving:
        gene = _condense(method, beit, **(aux if method in distil else {}))
        size = None if gene.layout is not None else {n: TINY_VALUES[n] for n in ("depth", "embed_dim", "num_heads")}
        model = expand(gene, size).model
        assert torch.isfinite(
            model.eval()(torch.randn(1, 3, model.patch_embed.img_size[0], model.patch_embed.img_size[1]))
        ).all()


@pytest.mark.parametrize("method", ["scratch", "mimetic", "structured"])
def test_a_gene_with_no_size_expands_from_the_fields_its_refusal_asks_for(method, beit, tmp_path):
    gene = _condense(method, beit)
    assert gene.ancestry is None and gene.layout is None
    with pytest.raises(LearngeneError) as info:
        expand(gene, {"depth": 1})  # a field over nothing: the others are asked for
    message = str(info.value)
    assert "\n" not in message and "records no ancestry size" in message
    asked = [n for n in _named_fields(message) if n != "preset"]
    assert asked == ["embed_dim", "num_heads"]  # depth was given
    descendant = expand(gene, {"depth": 1, **{n: TINY_VALUES[n] for n in asked}})
    assert (descendant.spec.depth, descendant.spec.embed_dim, descendant.spec.num_heads) == (1, 32, 2)
    assert expand(gene, {"preset": "cpu_tiny"}).spec.short() == "L4-D64-H4"  # the other alternative: a preset
    gene.save(tmp_path / "g.safetensors")  # and from the command line, the flags the message names
    cli_ok(
        "expand", tmp_path / "g.safetensors", "--depth", 1, "--embed-dim", 32, "--num-heads", 2, "--img-size", 16,
        "--quiet", "--out", tmp_path / "d.safetensors",
    )  # fmt: skip


def test_an_aux_net_gene_with_no_ancestry_size_expands_over_its_own_layout(beit):
    gene = _condense("tleg", beit, aux_depth=2, aux_embed_dim=32, aux_num_heads=2)
    assert gene.ancestry is None and gene.layout is not None
    assert expand(gene).spec == gene.layout
    deeper = expand(gene, {"depth": 4})
    assert deeper.spec == gene.layout.replace(depth=4)


@pytest.mark.parametrize("method", ["tleg", "scratch"])
def test_a_gene_condensed_from_dinov3_records_its_size_and_expands_from_any_size_field(method):
    """The issue's case: a DINOv3 ancestry was refused a spec, so its tleg and scratch genes had no size to expand
    over; now the spec describes it, and they do."""
    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_dinov3", pretrained=False, num_classes=10, **SIZE).eval()
    ancestry = Ancestry(model, spec_from_model(model))
    gene = _condense(method, ancestry)
    assert gene.ancestry == ancestry.spec
    descendant = expand(gene, {"depth": 3})
    assert descendant.spec == ancestry.spec.replace(depth=3) and descendant.spec.arch == "vit_small_patch16_dinov3"
