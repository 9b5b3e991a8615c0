"""Every refusal that advises another method, a size or an option is followed, and the advice works (issue 56 item 6).

A generated grid: a tiny ancestry of every ViT family the project serves (depth 2, width 32, 2 heads of 16 dims,
16-px images of 8-px patches) x every registered method, condensed once per (family, method, options), then
expanded to a shallower, a deeper, a narrower, a wider size and one of fewer heads. Each refusal, at condense or at
expand, carries the advice its message was written from (``LearngeneError.advice``: :class:`~learngene.errors.Remedy`
items, each said in the message by its ``text``); every item is followed on the refusing case (the advised method
condensed from the same ancestry, the advised options condensed again, the advised size fields in place of the ones
asked) and must then make the descendant. A refusal at condense, or of a size that is no ViT of the family, is served
once its advice condenses (makes a spec): the case that then makes is checked in its own right, followed once more at
most. A refusal without advice passes only where it says that nothing can be done ("cannot") and words no advice of
its own (``use M``, ``pass k=v``) that a caller could not follow as data.

Two families (a plain ViT and DINOv3, RoPE's positions alone) run in the default tier; the rest of the grid in the
integration tier. Advice of sizes to a teacher no spec describes: tests/test_size_hint.py.
"""

from __future__ import annotations

import collections
import functools
import re

import pytest
import timm
import torch
from packaging.version import Version

import learngene as lg
from learngene.errors import LearngeneError, SpecError
from learngene.gene import Learngene
from learngene.method import Ancestry
from learngene.registry import get_method, list_methods
from learngene.training.loop import TrainConfig
from learngene.vit.model_spec import spec_from_model
from tests.conftest import SMALL_OPTIONS, make_images

SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=8)
GRID = [2, 2]  # a NaFlexVit's position grid: the 2 x 2 patches of SIZE
# family -> (timm name, its arguments beyond SIZE): tests/test_families.py's and tests/test_rope_families.py's
FAMILIES = {
    "plain": ("vit_tiny_patch16_224", {}),
    "dinov3": ("vit_small_patch16_dinov3", {}),
    "deit_tiny": ("deit_tiny_patch16_224", {}),
    "deit3_small": ("deit3_small_patch16_224", {}),
    "dinov2": ("vit_small_patch14_dinov2", {}),
    "dinov2_reg4": ("vit_small_patch14_reg4_dinov2", {}),
    "dinov2_giant": ("vit_giant_patch14_dinov2", {}),  # a packed SwiGLU MLP
    "clip": ("vit_base_patch16_clip_224", {}),
    "clip_quickgelu": ("vit_base_patch16_clip_quickgelu_224", {}),
    "siglip": ("vit_base_patch16_siglip_224", {}),
    "so150m_reg4_map": ("vit_so150m_patch16_reg4_map_256", {}),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {}),
    "gap": ("vit_medium_patch16_gap_256", {}),
    "aimv2": ("aimv2_large_patch14_224", {}),
    "eva02": ("eva02_tiny_patch14_224", dict(mlp_ratio=3.0)),  # EVA-02's 4·2/3 gives 85 channels at width 32
    "eva02_clip": ("eva02_base_patch16_clip_224", dict(mlp_ratio=3.0, qkv_fused=True)),
    "pe_core": ("vit_pe_core_tiny_patch16_384", {}),
    "naflex_siglip": ("naflexvit_base_patch16_siglip", dict(pos_embed_grid_size=GRID)),
    "naflex_radio": ("naflexvit_base_patch16_radio_v3", dict(pos_embed_grid_size=GRID)),
    "naflex_gap": ("naflexvit_base_patch16_gap", dict(pos_embed_grid_size=GRID)),
    "dinov3_qkvb": ("vit_small_patch16_dinov3_qkvb", {}),
    "dinov3_plus": ("vit_small_plus_patch16_dinov3", {}),
    "rope_axial": ("vit_base_patch16_rope_224", {}),
    "rope_reg4_gap": ("vit_betwixt_patch16_rope_reg4_gap_256", {}),
    "rope_mixed_ape": ("vit_base_patch16_rope_mixed_ape_224", {}),
}
DEFAULT_TIER = ("plain", "dinov3")
NEWER_TIMM = {"naflexvit_base_patch16_radio_v3": "1.0.31"}  # as tests/test_families.py: skipped on an older timm
SIZES = {
    "shallower": {"depth": 1},
    "deeper": {"depth": 3},
    "narrower": {"embed_dim": 16, "num_heads": 1},
    "wider": {"embed_dim": 64, "num_heads": 4},
    "fewer_heads": {"num_heads": 1},
}
METHODS = list_methods()
DATA = make_images(16, num_classes=10, size=16, chans=3)
QUICK = TrainConfig(epochs=1, max_steps=1, batch_size=8, distill_lambda=0.5, progress=False)
# wave's templates are "two per w x w block" by default: the template_size=1 that tiles the shrunken giant's MLP
# (170 x 32, beside fc2's 32 x 85) makes 10,880 per kind and an aux net of ~60 M coefficients, 30 s of CPU for one
# step. Two templates a kind follow the same advice (a template size that tiles every tensor) at a tiny cost; which
# sizes tile does not depend on how many templates there are
OPTIONS = {**SMALL_OPTIONS, "wave": {"n_qkv": 2, "n_proj": 2, "n_fc1": 2, "n_fc2": 2}}
# words of advice a message may give outside its Remedy items: a method to use, a setting to pass or set
UNFOLLOWABLE = re.compile(r"\buse [a-z_]+\b|\b(?:pass|set|give|ask)\b [a-z_]+=")
# the grid's count of cases, refusals and advice followed (printed at the module's end: pytest -s)
COUNTS: collections.Counter[str] = collections.Counter()

Options = tuple[tuple[str, object], ...]


@functools.cache
def ancestry(family: str) -> Ancestry:
    name, extra = FAMILIES[family]
    if name in NEWER_TIMM and Version(timm.__version__) < Version(NEWER_TIMM[name]):
        pytest.skip(f"{name} needs timm {NEWER_TIMM[name]} (this is timm {timm.__version__})")
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **SIZE, **extra).eval()
    return Ancestry(model, spec_from_model(model))


@functools.cache
def condensed(family: str, method: str, options: Options = ()) -> Learngene | LearngeneError:
    """The gene of ``method`` with ``options`` from ``family``'s ancestry, or its refusal: made once per session."""
    extra = {"data": DATA, "train_cfg": QUICK} if get_method(method).needs_data else {}
    try:
        return lg.condense(method, ancestry(family), options={**OPTIONS.get(method, {}), **dict(options)}, **extra).gene
    except LearngeneError as exc:
        return exc


def outcome(family: str, method: str, options: Options, size: dict) -> LearngeneError | None:
    """None where the method's gene makes ``size`` (SIZE's fields replaced) of the family, else its refusal."""
    gene = condensed(family, method, options)
    if isinstance(gene, LearngeneError):
        return gene
    try:
        lg.expand(gene, ancestry(family).spec.replace(**size))
    except LearngeneError as exc:
        return exc
    return None


def check(family: str, method: str, options: Options, size: dict, followed: int = 0) -> None:
    """The case makes its descendant, or refuses with advice that, followed, does (:func:`follow`)."""
    refusal = outcome(family, method, options, size)
    if refusal is not None:
        follow(refusal, family, method, options, size, followed)


def follow(refusal: LearngeneError, family: str, method: str, options: Options, size: dict, followed: int) -> None:
    """Every remedy ``refusal`` carries, followed on its case, makes the descendant; without remedies the message
    says that nothing can be done. A refusal at condense is served once the followed advice condenses, one of the size
    once it makes a spec: that case is then checked in its own right (its refusal followed in turn, once)."""
    message = str(refusal)
    case = f"{family}: {method} {dict(options)} at {size}"
    COUNTS["refusals"] += 1
    if not refusal.advice:
        assert "cannot" in message and not UNFOLLOWABLE.search(message), f"{case}: advice not given as data: {message}"
        COUNTS["refusals without advice"] += 1
        return
    # a refusal at condense, or of the size asked (no ViT of the family), is served once its advice condenses or
    # makes a spec: what the method then does there is a case of its own
    chained = condensed(family, method, options) is refusal or isinstance(refusal, SpecError)
    for remedy in refusal.advice:
        assert remedy.text in message, f"{case}: {remedy} is not what the message says: {message}"
        if remedy.method is not None:
            assert remedy.method in METHODS and remedy.method != method, (remedy, message)
        instead = remedy.method or method
        given = tuple(sorted({**(dict(options) if remedy.method is None else {}), **remedy.options}.items()))
        asked = {**size, **remedy.size}
        COUNTS["advice followed"] += 1
        if chained:
            gene = condensed(family, instead, given)
            assert not isinstance(gene, LearngeneError), f"{case} advised {remedy.text!r}; followed, it refuses: {gene}"
            assert followed < 2, f"{case}: advice followed twice is still refused: {message}"
            check(family, instead, given, asked, followed + 1)
            continue
        again = outcome(family, instead, given, asked)
        assert again is None, f"{case} advised {remedy.text!r}; followed, it refuses: {again}"


def families():
    return [f if f in DEFAULT_TIER else pytest.param(f, marks=pytest.mark.integration) for f in FAMILIES]


@pytest.fixture(scope="module", autouse=True)
def grid_counts():
    yield
    if COUNTS["cases"]:
        print(f"\nadvice grid: {dict(COUNTS)}")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("family", families())
def test_every_refusal_in_the_grid_advises_what_then_serves_the_case(family, method):
    for size in SIZES.values():
        COUNTS["cases"] += 1
        check(family, method, (), size)


def test_structured_refuses_a_rope_family_at_condense_and_its_advice_works():
    """It wrote a gene of 0 parameters that every expand then refused (all 9 RoPE families of the family harness)."""
    with pytest.raises(LearngeneError, match="structured builds its attention on a learned absolute position table"):
        lg.condense("structured", ancestry("dinov3"))
    assert lg.expand(lg.condense("mimetic", ancestry("dinov3")).gene, {"depth": 3}).model is not None


def test_tlegs_width_advice_names_every_size_it_needs_and_works():
    gene = condensed("plain", "tleg")
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


def test_a_remedy_is_said_in_both_callers_words_and_survives_a_worker_process():
    """compare's workers send refusals back pickled: the advice goes with the message."""
    import pickle

    from learngene.errors import Remedy

    texts = [
        (Remedy("grow"), "use grow"),
        (
            Remedy("weight_selection", options={"head_aware": False}),
            "use weight_selection with head_aware=False (--opt head_aware=false)",
        ),
        (
            Remedy(size={"embed_dim": 32, "num_heads": 2}),
            "pass embed_dim=32 (--embed-dim 32) and num_heads=2 (--num-heads 2)",
        ),
        (Remedy(options={"max_ck": 768}), "condense again with max_ck=768 (--opt max_ck=768)"),
        (Remedy("grow", size={"depth": 3}), "use grow at depth=3 (--depth 3)"),
    ]
    for remedy, text in texts:
        assert remedy.text == text
    refusal = LearngeneError("tleg expands in depth only; use grow", advice=[Remedy("grow")])
    back = pickle.loads(pickle.dumps(refusal))
    assert str(back) == str(refusal) and back.advice == (Remedy("grow"),)
    assert LearngeneError("no advice").advice == ()
