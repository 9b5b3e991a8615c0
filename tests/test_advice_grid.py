"""Every refusal that advises another method is followed, and the advice works (issue 56 item 6).

A generated grid: tiny ancestries of three families (a plain ViT, DINOv3 and RoPE, whose positions are RoPE's alone) ×
every method that condenses without training × a deeper, a wider and a narrower size. Each refusal, at condense or
at expand, must advise a method (``use M``) or be one this file lists as advising none; the advised method is then
condensed from the same ancestry and expanded to the same size, and must succeed. A refusal of a new form fails the
test until its advice is followed here too. Advice of sizes and flags is followed in tests/test_size_hint.py (a
teacher no spec describes) and below (tleg's, wave's, lets').
"""

from __future__ import annotations

import functools
import re

import pytest
import timm
import torch

import learngene as lg
from learngene.errors import LearngeneError
from learngene.method import Ancestry
from learngene.registry import get_method, list_methods
from learngene.vit.model_spec import spec_from_model
from learngene.vit.spec import SIZE_FLAG_FIELDS
from tests.conftest import make_images

SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=8)
FAMILIES = {"plain": "vit_tiny_patch16_224", "dinov3": "vit_small_patch16_dinov3", "rope": "vit_base_patch16_rope_224"}
SIZES = {"deeper": {"depth": 3}, "wider": {"embed_dim": 64, "num_heads": 4}, "narrower": {"depth": 1, "embed_dim": 16}}
UNTRAINED = [m for m in list_methods() if not get_method(m).needs_data]
# methods condensed by a short distillation whose expand refusals advise sizes (depth-only, tiled, widened ones)
TRAINED = ["tleg", "share_init", "wave", "lets"]
DATA = make_images(16, num_classes=10, size=16, chans=3)
QUICK = {"epochs": 1, "max_steps": 1, "batch_size": 8, "progress": False, "eval_images": 8}
ADVICE = re.compile(r"\buse (\w+)\b")
SIZE_FIELDS = {f.name for f in SIZE_FLAG_FIELDS}


@functools.cache
def ancestry(family: str) -> Ancestry:
    torch.manual_seed(0)
    model = timm.create_model(FAMILIES[family], pretrained=False, num_classes=10, **SIZE).eval()
    return Ancestry(model, spec_from_model(model))


@functools.cache
def condense(method: str, family: str):
    needs_data = get_method(method).needs_data
    extra = {"data": DATA, "train_cfg": QUICK} if needs_data else {}
    return lg.condense(method, ancestry(family), **extra).gene


def outcome(method: str, family: str, size: dict) -> str | None:
    """None where the method serves the size, else its refusal (a refusal at condense too)."""
    try:
        lg.expand(condense(method, family), {**size, "num_heads": size.get("embed_dim", 32) // 16})
    except LearngeneError as exc:
        return str(exc)
    return None


# a setting a refusal advises, as errors.assigned writes it: ``embed_dim=32 (--embed-dim 32)``
ASSIGNED = re.compile(r"\b(\w+)=([\w.]+) \(--")


def test_every_size_advice_of_the_trained_methods_is_followed_and_works():
    """tleg, share_init, wave and lets, at every family and size of the grid: a refusal advises the sizes (or
    options) that work, or another method; each is followed."""
    followed = 0
    for method in TRAINED:
        for family in FAMILIES:
            for size in SIZES.values():
                refusal = outcome(method, family, size)
                if refusal is None:
                    continue
                advised = dict(ASSIGNED.findall(refusal))
                sizes = {k: float(v) if "." in v else int(v) for k, v in advised.items() if k in SIZE_FIELDS}
                assert sizes or ADVICE.findall(refusal), f"no advice to follow: {refusal}"
                if sizes:
                    asked = {**size, "num_heads": size.get("embed_dim", 32) // 16, **sizes}
                    lg.expand(condense(method, family), asked)  # raises if the advice does not work
                    followed += 1
                for other in [] if sizes else ADVICE.findall(refusal):
                    assert outcome(other, family, size) is None, f"{method} advised {other}, which refuses: {refusal}"
    assert followed  # the grid reaches refusals that advise sizes


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("method", UNTRAINED)
def test_every_refusal_advises_a_method_that_then_serves_the_case(method, family, size):
    refusal = outcome(method, family, SIZES[size])
    if refusal is None:
        return
    advised = ADVICE.findall(refusal)
    assert advised, f"a refusal without a method to use: {refusal}"
    for other in advised:
        assert other in list_methods(), (other, refusal)
        assert outcome(other, family, SIZES[size]) is None, f"{method} advised {other}, which refuses too: {refusal}"


def test_structured_refuses_a_rope_family_at_condense_and_its_advice_works():
    """It wrote a gene of 0 parameters that every expand then refused (all 9 RoPE families of the family harness)."""
    with pytest.raises(LearngeneError, match="structured builds its attention on a learned absolute position table"):
        lg.condense("structured", ancestry("dinov3"))
    assert lg.expand(lg.condense("mimetic", ancestry("dinov3")).gene, {"depth": 3}).model is not None


def test_tlegs_width_advice_names_every_size_it_needs_and_works():
    gene = condense("tleg", "plain")
    with pytest.raises(LearngeneError) as refused:
        lg.expand(gene, {"embed_dim": 64, "num_heads": 4, "mlp_ratio": 2.0})
    message = str(refused.value)
    assert "use wave" not in message  # wave refuses other widths as well: the advice did not work
    given = dict(re.findall(r"\b(embed_dim|num_heads|mlp_ratio)=([\d.]+) \(--", message))
    assert set(given) == {"embed_dim", "num_heads", "mlp_ratio"}, message
    sizes = {k: float(v) if k == "mlp_ratio" else int(v) for k, v in given.items()}
    assert lg.expand(gene, {"depth": 3, **sizes}).model is not None


def test_wave_names_the_mlp_as_the_obstacle_and_its_template_advice_works():
    """An ancestry 64 wide whose MLP (160) is no multiple of 64: the old advice, embed_dim=64, was the width it had."""
    from learngene.methods.wave import block_grid
    from learngene.vit.spec import ViTSpec

    spec = ViTSpec(
        depth=2, embed_dim=64, num_heads=2, img_size=16, patch_size=8, in_chans=3, num_classes=10, mlp_ratio=2.5
    )
    with pytest.raises(LearngeneError) as refused:
        block_grid(spec, "mlp.fc1.weight", 64)
    message = str(refused.value)
    assert "embed_dim=64" not in message and "MLP's 160 is no multiple of 64" in message, message
    (common,) = re.findall(r"template_size=(\d+) \(--opt template_size=\d+\)", message)
    torch.manual_seed(0)
    anc = Ancestry(spec.create_model().eval(), spec)
    gene = lg.condense("wave", anc, data=DATA, train_cfg=QUICK, options={"template_size": int(common)}).gene
    assert lg.expand(gene, {"depth": 3}).model is not None


def test_lets_range_refusal_names_the_flags_that_set_width_and_mlp():
    from learngene.methods.lets import widen

    with pytest.raises(LearngeneError, match=r"choose embed_dim \(--embed-dim\) and mlp_ratio \(--mlp-ratio\)"):
        widen(torch.zeros(4, 8), 1, 20, torch.zeros(4, 8))


def test_a_free_start_from_a_family_no_spec_describes_says_what_its_descendant_is():
    """mimetic, scratch and structured from a BEiT wrote a gene whose descendant was a plain ViT of 1000 classes
    without a word; condense now says which family and label space it has."""
    torch.manual_seed(0)
    model = timm.create_model("beit_base_patch16_224", pretrained=False, num_classes=10, **SIZE).eval()
    beit = Ancestry(model, None, unsupported="beit_base_patch16_224: timm's Beit is not described")
    for method in ("mimetic", "scratch", "structured"):
        note = lg.condense(method, beit).note or ""
        assert "plain timm ViTs, not that family" in note and "num_classes=10 (--num-classes 10)" in note, note
