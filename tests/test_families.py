"""The ViT families users hold (DeiT, DeiT III, DINOv2 (+registers), CLIP, SigLIP, distilled DeiT, GAP
ViTs, AIMv2, timm's Eva: EVA-02, EVA-02 CLIP, Perception Encoder, and timm's NaFlexVit: SigLIP 2 NaFlex,
RADIO) go in as ancestries and come out as descendants of the same family (DINOv3 and the RoPE ViTs without
absolute position embeddings: tests/test_rope_families.py).

Every ancestry is random and tiny (depth 2, width 32, 2 heads, 28 px), built through the family's own timm
name with size arguments, as a user's checkpoint would be.
"""

from __future__ import annotations

import functools

import pytest
import timm
import torch
from packaging.version import Version
from safetensors.torch import load_file
from torch.utils.flop_counter import FlopCounterMode

from learngene.ancestry import load_ancestry
from learngene.binding import bind_gene
from learngene.cli import main
from learngene.descendant import GeneNet, make_descendant
from learngene.errors import LearngeneError, SpecError
from learngene.gene import Learngene
from learngene.method import Ancestry, CondenseInputs
from learngene.methods.cluster import tokens_before_blocks
from learngene.registry import get_method, list_methods
from learngene.training.distill import FeatureDistillation
from learngene.training.loop import TrainConfig, seed_everything
from learngene.vit.model_spec import spec_from_model
from learngene.vit.spec import ViTFamily, ViTSpec
from learngene.vit.transfer import block_axes, block_state, mapped, move_state, non_block_axes
from tests.bounds import assert_same_forward, order_bound
from tests.conftest import SMALL_OPTIONS, cli_ok, make_images, timm_vit

SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=28, patch_size=4)
FORWARD = dict(depth=2, widest=128)  # SIZE's forward pass: its widest sum is the MLP's 4 x 32 (tests/bounds.py)

# family -> (timm name, num_classes); DINOv2 and CLIP image towers come without a classifier
FAMILIES = {
    "deit_tiny": ("deit_tiny_patch16_224", 10),
    "deit3_small": ("deit3_small_patch16_224", 10),
    "dinov2": ("vit_small_patch14_dinov2", 0),
    "dinov2_reg4": ("vit_small_patch14_reg4_dinov2", 10),
    "clip": ("vit_base_patch16_clip_224", 0),
    "siglip": ("vit_base_patch16_siglip_224", 10),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", 10),
    "gap": ("vit_medium_patch16_gap_256", 10),
    "aimv2": ("aimv2_large_patch14_224", 0),  # RmsNorm, unpacked SwiGLU, no projection or MLP biases, embed norm
    # timm's Eva: RoPE, packed SwiGLU, separate q/v biases, avg pool + fc_norm (EVA-02); RoPE, pre-norm, MAP (PE)
    "eva02": ("eva02_tiny_patch14_224", 10),
    "pe_core": ("vit_pe_core_tiny_patch16_384", 0),
    # EVA-02 CLIP B: sub-LayerNorms in attention and MLP, unpacked SwiGLU; q/k/v fused (as load_ancestry fuses them)
    "eva02_clip": ("eva02_base_patch16_clip_224", 0),
    # timm's NaFlexVit (SigLIP 2 NaFlex): embeddings in ``embeds``, a Linear patch embedding, a (1, g, g, D) grid
    "naflex_siglip": ("naflexvit_base_patch16_siglip", 0),
    # RADIO's NaFlexVit: a class token and 7 registers (its other teachers' summary tokens), token pooling, no final norm
    "naflex_radio": ("naflexvit_base_patch16_radio_v3", 0),
}
# described too, outside the method matrix: DINOv2 ViT-g's SwiGLU MLP, OpenAI CLIP's QuickGELU, registers + MAP
MORE = {
    "dinov2_giant": "vit_giant_patch14_dinov2",
    "clip_quickgelu": "vit_base_patch16_clip_quickgelu_224",
    "so150m_reg4_map": "vit_so150m_patch16_reg4_map_256",
    # NaFlexVit: layer scale, 4 registers, average pooling and fc_norm
    "naflex_gap": "naflexvit_base_patch16_gap",
}


# EVA-02's MLP ratio (4·2/3) gives 85 hidden channels at width 32, which no WAVE template tiles; at its real
# widths (192: 512 channels) it does. The tests give it 3 (96 per half), a size, not a family, change.
# A NaFlexVit's position grid is its own argument (16 x 16 for SigLIP 2 NaFlex, 128 x 128 for RADIO; any image size
# runs): the tests give it the 7 x 7 grid of 28 px images.
NAFLEX_GRID = dict(pos_embed_grid_size=[7, 7])
NAME_SIZE = {
    "eva02_tiny_patch14_224": dict(mlp_ratio=3.0),
    "eva02_base_patch16_clip_224": dict(mlp_ratio=3.0, qkv_fused=True),
    **{
        name: NAFLEX_GRID
        for name in ("naflexvit_base_patch16_siglip", "naflexvit_base_patch16_radio_v3", "naflexvit_base_patch16_gap")
    },
}


# architectures newer than pyproject's lowest timm, with the release that added them: on an older timm their tests
# skip, saying so; from that release on they run
NEWER_TIMM = {"naflexvit_base_patch16_radio_v3": "1.0.31"}


def timm_ancestry(name: str, num_classes: int = 10, seed: int = 0) -> torch.nn.Module:
    if name in NEWER_TIMM and Version(timm.__version__) < Version(NEWER_TIMM[name]):
        pytest.skip(f"{name} needs timm {NEWER_TIMM[name]} (this is timm {timm.__version__})")
    torch.manual_seed(seed)
    return timm.create_model(name, pretrained=False, num_classes=num_classes, **SIZE, **NAME_SIZE.get(name, {})).eval()


def _all_families():
    return [(f, n, c) for f, (n, c) in FAMILIES.items()] + [(f, n, 10) for f, n in MORE.items()]


# ---- item 1: the spec describes the family --------------------------------------------------------------
@pytest.mark.parametrize("family, name, classes", _all_families(), ids=lambda v: v if isinstance(v, str) else "")
def test_spec_matches_the_real_timm_model(family, name, classes):
    model = timm_ancestry(name, classes)
    spec = spec_from_model(model)
    assert spec.arch == name
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == spec.state_shapes()
    assert spec.num_params == sum(p.numel() for p in model.parameters())
    built = spec.create_model().eval()  # the descendant's way: timm.create_model(spec.arch, **spec.timm_kwargs())
    built.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(2, 3, 28, 28)
    assert torch.equal(built(x), model(x))
    assert spec_from_model(built) == spec
    assert ViTSpec.from_json(spec.to_json()) == spec
    for module in model.modules():  # the matmul form of attention, so that the counter sees its FLOPs
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, 28, 28))
    assert spec.flops == counter.get_total_flops()


def test_families_read_what_makes_them_different():
    def family(name):
        return spec_from_model(timm_ancestry(FAMILIES[name][0], FAMILIES[name][1])).family

    assert family("deit_tiny") == ViTFamily()
    assert family("deit3_small").init_values == 1e-6 and family("deit3_small").no_embed_class
    assert family("dinov2_reg4").reg_tokens == 4
    assert family("clip").pre_norm and family("siglip").global_pool == "map" and not family("siglip").class_token
    assert family("deit_distilled").distilled and family("deit_distilled").num_prefix_tokens == 2
    gap = family("gap")
    assert (gap.global_pool, gap.class_token, gap.qkv_bias, gap.final_norm_key) == ("avg", False, False, "norm")
    giant = spec_from_model(timm_ancestry(MORE["dinov2_giant"])).family
    assert (giant.mlp_layer, giant.act_layer) == ("swiglu_packed", "silu")


@pytest.mark.parametrize(
    "name, words",
    [
        (
            "eva02_base_patch14_224",
            "eva02_base_patch14_224: qkv_fused=False (fused q/k/v projections only; load_ancestry",
        ),
        ("vit_base_patch16_rpn_224", "vit_base_patch16_rpn_224: block_fn=ResPostBlock"),
        ("eva02_enormous_patch14_clip_224", "eva02_enormous_patch14_clip_224: block_fn=EvaBlockPostNorm"),
        # BEiT: a relative position table per block, (2g-1)^2 + 3 offsets of the 7 x 7 grid x 2 heads, and no absolute one
        (
            "beit_base_patch16_224",
            "beit_base_patch16_224: timm's Beit is not described: a relative position bias table in "
            "every block (172 offsets of the patch grid x 2 heads",
        ),
        ("beitv2_base_patch16_224", "use_abs_pos_emb=False (learned absolute position embeddings)"),
    ],
)
def test_what_cannot_be_described_is_named_in_one_line(name, words):
    with pytest.raises(SpecError) as info:
        spec_from_model(timm_ancestry(name))
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_model_built_with_other_arguments_than_its_architecture_is_refused():
    model = timm.create_model("vit_small_patch14_dinov2", pretrained=False, norm_layer=torch.nn.LayerNorm, **SIZE)
    with pytest.raises(SpecError, match="differs from timm's vit_small_patch14_dinov2 .* at blocks.0.norm1"):
        spec_from_model(model)


def test_specs_written_before_families_still_load():
    old = {
        "depth": 2,
        "embed_dim": 32,
        "num_heads": 2,
        "mlp_ratio": 4.0,
        "img_size": 16,
        "patch_size": 4,
        "in_chans": 1,
        "num_classes": 4,
        "global_pool": "avg",
        "class_token": False,
    }
    spec = ViTSpec.from_dict(old)
    assert spec.arch == "vit_tiny_patch16_224"
    assert spec.family == ViTFamily(global_pool="avg", class_token=False)
    assert spec.global_pool == "avg" and spec.final_norm_key == "fc_norm"
    assert {k: tuple(v.shape) for k, v in spec.create_model().state_dict().items()} == spec.state_shapes()


def test_family_fields_replace_through_the_spec_and_impossible_families_are_refused():
    spec = ViTSpec(**SIZE, num_classes=3)
    assert spec.replace(reg_tokens=2).family.reg_tokens == 2 and spec.replace(reg_tokens=2).num_tokens == 49 + 3
    with pytest.raises(SpecError, match="distilled"):
        spec.replace(distilled=True, global_pool="avg")
    with pytest.raises(SpecError, match="unknown spec field"):
        ViTSpec.from_dict({**spec.to_dict(), "family": {"registers": 4}})
    with pytest.raises(SpecError, match="timm vit_tiny_patch16_224 builds a ViT with a mlp MLP"):
        spec.replace(mlp_layer="swiglu_packed").create_model()


# ---- items 2 and 7: every registered method on every family --------------------------------------------
METHODS = list_methods()
DATA = make_images(16, num_classes=10, size=28, chans=3)
QUICK = TrainConfig(epochs=1, max_steps=2, batch_size=8, distill_lambda=0.5, progress=False)
# methods that change width say so here: they must make these sizes (the others may refuse them, in one line)
MUST_EXPAND = {
    "weight_selection": dict(depth=1, embed_dim=16, num_heads=1),
    "cluster": dict(depth=1, embed_dim=16, num_heads=1),
    "peg": dict(depth=3, embed_dim=64, num_heads=4),
    "wave": dict(depth=1, embed_dim=64, num_heads=4),
    "scratch": dict(depth=1, embed_dim=16, num_heads=1),
    "mimetic": dict(depth=3, embed_dim=64, num_heads=4),
}
SIZES = [
    dict(depth=3),
    dict(depth=1),
    dict(depth=1, embed_dim=16, num_heads=1),
    dict(depth=3, embed_dim=64, num_heads=4),
]


@functools.cache
def family_ancestry(family: str) -> Ancestry:
    name, classes = FAMILIES[family]
    model = timm_ancestry(name, classes)
    return Ancestry(model, spec_from_model(model))


def condense(method: str, ancestry: Ancestry, **options) -> Learngene:
    inputs = CondenseInputs(train=DATA, train_cfg=QUICK) if get_method(method).needs_data else None
    seed_everything(0)
    return get_method(method)(**{**METHOD_OPTIONS.get(method, {}), **options}).condense(ancestry, inputs)


def _descendant(gene: Learngene, spec: ViTSpec) -> torch.nn.Module:
    model = make_descendant(gene, spec).eval()
    plain = timm.create_model(spec.arch, pretrained=False, **spec.timm_kwargs())  # what a user of the descendant does
    plain.load_state_dict(model.state_dict(), strict=True)
    out = plain.eval()(torch.randn(2, 3, 28, 28))
    assert out.shape == (2, spec.num_classes or spec.embed_dim) and torch.isfinite(out).all()
    return plain


def _one_line(exc: Exception) -> bool:
    return isinstance(exc, LearngeneError) and "\n" not in str(exc) and len(str(exc)) < 400


# options a family needs for a method's rule to apply: WAVE tiles w×w templates, and AIMv2's MLP (ratio 2.75:
# 88 hidden channels at width 32) is a multiple of 8, not of the width (the default w)
FAMILY_OPTIONS = {("aimv2", "wave"): {"template_size": 8}}
METHOD_OPTIONS = SMALL_OPTIONS  # a method's options for every family


@pytest.mark.integration  # every method x every family, end to end
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_method_condenses_and_expands_every_family(family, method):
    ancestry = family_ancestry(family)
    gene = condense(method, ancestry, **FAMILY_OPTIONS.get((family, method), {}))
    made = []
    for size in SIZES:
        target = ancestry.spec.replace(**size, num_classes=10)  # headless ancestries: a fresh 10-class head
        try:
            model = _descendant(gene, target)
        except LearngeneError as exc:
            assert _one_line(exc), exc
            assert size != MUST_EXPAND.get(method), f"{method} must make {size}: {exc}"
            continue
        read = spec_from_model(model)  # the same family, other sizes (a ratio read back may differ, not the shapes)
        assert read.replace(mlp_ratio=target.mlp_ratio) == target and read.state_shapes() == target.state_shapes()
        made.append(size)
    assert len(made) >= 2, f"{method} made only {made} of {family}"


@pytest.mark.parametrize("method", ["pretrained", "weight_selection"])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_ancestrys_own_size_reproduces_its_outputs_exactly(family, method):
    ancestry = family_ancestry(family)
    model = make_descendant(condense(method, ancestry), ancestry.spec).eval()
    x = torch.randn(3, 3, 28, 28)
    with torch.no_grad():
        assert torch.equal(model(x), ancestry.model(x))


@pytest.mark.parametrize("family", FAMILIES)
def test_importance_at_the_ancestrys_size_outputs_the_ancestrys_embedding_in_its_order(family):
    """importance permutes the residual stream in its gene; a headless ancestry outputs that stream, so
    the descendant must undo the permutation (a probe tied to the embedding reads channel by channel)."""
    ancestry = family_ancestry(family)
    model = make_descendant(condense("importance", ancestry), ancestry.spec).eval()
    x = torch.randn(3, 3, 28, 28)
    with torch.no_grad():
        assert_same_forward(model(x), ancestry.model(x), **FORWARD)  # channels permuted and back: another order
        headless = Ancestry(ancestry.model, ancestry.spec)
        if ancestry.spec.num_classes:  # the same ancestry without its head: its pooled embedding, unpermuted
            headless = _without_head(ancestry)
        plain = make_descendant(condense("importance", headless), headless.spec).eval()
        assert_same_forward(plain(x), headless.model(x), **FORWARD)


def _without_head(ancestry: Ancestry) -> Ancestry:
    spec = ancestry.spec.replace(num_classes=0)
    model = spec.create_model().eval()
    model.load_state_dict({k: v for k, v in ancestry.model.state_dict().items() if not k.startswith("head")})
    return Ancestry(model, spec)


@pytest.mark.parametrize("family", FAMILIES)
def test_running_the_blocks_one_by_one_computes_timms_forward(family):
    """cluster measures attention block by block (a ViT-g's weights read once): the same tokens as timm's forward."""
    model = family_ancestry(family).model
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        tokens, kwargs = tokens_before_blocks(model, x)
        for block, own in zip(model.blocks, kwargs):
            tokens = block(tokens, **own)
        assert torch.equal(model.norm(tokens), model.forward_features(x))


@pytest.mark.parametrize("method", ["peg", "cluster"])
def test_the_load_time_check_expands_on_meta_and_allocates_nothing(method):
    """Every gene load expands the gene to its own layout on ``meta`` (bind_gene). A CPU operand (φ, a head
    mixing matrix) made that expansion real: loading a ViT-g gene built a ViT-g before the ViT-S asked for."""
    ancestry = family_ancestry("deit3_small")
    gene = condense(method, ancestry)
    bound = bind_gene(gene)
    for spec in (gene.layout, ancestry.spec.replace(depth=3, embed_dim=64, num_heads=4)):
        assert {t.device.type for t in bound.expand_on_meta(spec).values()} == {"meta"}


# ---- the rule table itself: every family's tensors carried by their axes -----------------------------------
@pytest.mark.parametrize("family, name, classes", _all_families(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_axis_rules_widen_every_family_without_changing_its_function(family, name, classes):
    """Net2Net at exactly twice the width and heads: every coordinate and head copied twice, every reader of
    a copy halved. If any tensor's axes were wrong (a token, gamma, norm, MAP head, second head), the wide
    net would compute something else."""
    model = timm_ancestry(name, classes)
    spec = spec_from_model(model)
    wide = spec.replace(embed_dim=64, num_heads=4)
    state = model.state_dict()
    heads = (spec.num_heads, wide.num_heads)
    moved = move_state(
        {k: v for k, v in state.items() if not k.startswith("blocks.")},
        non_block_axes(spec),
        wide.non_block_shapes(),
        heads,
        mapped,
    )
    for layer in range(spec.depth):
        block = move_state(block_state(state, layer), block_axes(spec), wide.block_shapes(), heads, mapped)
        moved.update({f"blocks.{layer}.{k}": v for k, v in block.items()})
    widened = wide.create_model().eval()
    widened.load_state_dict(moved, strict=True)
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        expected, got = model(x), widened(x)
        if family in POOL_OWN_HEADS:  # see there: the tokens are the same, not the pooled embedding
            expected, got = model.forward_features(x), widened.forward_features(x)
        if not classes or family in POOL_OWN_HEADS:  # an embedding: the wide one holds it twice
            expected = expected.repeat(*[1] * (expected.ndim - 1), 2)
        assert_same_forward(got, expected, depth=2, widest=256)  # each sum twice as long: the MLP's 4 x 64


# Perception Encoder's attention pool has its own head count (8 whatever the blocks have), so the width rule,
# which moves its heads as the blocks' (doubling them here), changes what it computes: widened, a PE outputs
# the same tokens, not the same pooled embedding
POOL_OWN_HEADS = {"pe_core"}


# ---- item 3: headless ancestries --------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["tleg", "share_init", "wave"])
def test_headless_ancestries_are_distilled_on_their_features(method, capsys):
    ancestry = family_ancestry("dinov2")  # num_classes=0: the model outputs its pooled embedding
    gene = get_method(method)(aux_embed_dim=64, aux_num_heads=4).condense(
        ancestry, CondenseInputs(train=DATA, train_cfg=QUICK.replace(progress=True))
    )
    assert "pooled features (cosine distance, through a learned projection 64→32" in gene.cost["distilled"]
    assert "distils the ancestry's pooled features" in capsys.readouterr().out
    assert not [k for k in gene.tensors if k.startswith("head")]  # descendants get a fresh head
    descendant = make_descendant(gene, ancestry.spec.replace(embed_dim=64, num_heads=4, depth=3, num_classes=7))
    assert descendant.head.weight.shape == (7, 64)


def test_the_feature_loss_is_one_minus_the_cosine_of_the_projected_embedding():
    spec = family_ancestry("clip").spec.replace(embed_dim=16, num_heads=1, num_classes=10)
    method = get_method("share_init")()
    seed_everything(0)
    net = GeneNet(method, method.new_gene(method.initial_tensors(spec), spec, None), spec)
    student = FeatureDistillation(net, teacher_width=32)
    x, y, teacher = torch.randn(4, 3, 28, 28), torch.arange(4), torch.randn(4, 32)
    plain = (
        spec.create_model().eval()
    )  # the aux net's weights in a plain model: its pooled embedding by timm's own code
    plain.load_state_dict({**net.skeleton.state_dict(), **net.expanded()})
    pooled = plain.forward_head(plain.forward_features(x), pre_logits=True)
    student.eval()
    logits = student(x)
    expected = 0.25 * torch.nn.functional.cross_entropy(logits, y, reduction="none") + 0.75 * (
        1 - torch.nn.functional.cosine_similarity(student.proj(pooled), teacher, dim=-1)
    )
    # a CE of 10 classes and the cosine of two 32-vectors, one a 16-term projection (a matmul here, a Linear there)
    bound = order_bound(32, max(1.0, float(expected.detach().abs().max())), steps=3)
    torch.testing.assert_close(student.distill_loss(logits, y, teacher, 0.75, 1.0), expected, rtol=0, atol=bound)


def test_a_headed_ancestry_is_still_distilled_on_logits():
    gene = condense("tleg", family_ancestry("siglip"))
    assert gene.cost["distilled"].startswith("logits") and "head.weight" in gene.tensors


@pytest.mark.integration  # every method x the new families
@pytest.mark.parametrize("family", ["eva02", "eva02_clip", "aimv2"])
def test_methods_carry_the_new_families_rows_not_timms_init(family):
    """Eva's q/v biases, sub-norms and gammas and the unpacked SwiGLU are rows of the axis table: a method that
    gives a plain ViT's descendant whole blocks gives this family's whole blocks too (mimetic and structured set
    some matrices only, by design; scratch gives none)."""

    def given_blocks(method: str, fam: str) -> tuple[set, set] | None:
        ancestry = family_ancestry(fam)
        gene = condense(method, ancestry, **FAMILY_OPTIONS.get((fam, method), {}))
        for size in SIZES:
            spec = ancestry.spec.replace(**size, num_classes=10)
            try:
                out = bind_gene(gene, check=False).method.expand(gene, spec)
            except LearngeneError:
                continue
            return {key.split(".", 2)[2] for key in out if key.startswith("blocks.")}, set(spec.block_shapes())
        return None

    for method in METHODS:
        plain, new = given_blocks(method, "deit3_small"), given_blocks(method, family)
        if plain and new and plain[0] == plain[1]:
            assert new[0] == new[1], (method, new[1] - new[0])


@pytest.mark.parametrize("family", ["eva02_clip", "aimv2", "naflex_siglip"])
def test_descendants_of_the_new_families_export_as_hub_folders_timm_and_transformers_load(family, tmp_path):
    from learngene.formats.export import export_hub_folder

    transformers = pytest.importorskip("transformers")
    ancestry = family_ancestry(family)
    spec = ancestry.spec.replace(depth=1, embed_dim=16, num_heads=1, num_classes=5)
    model = make_descendant(condense("weight_selection", ancestry), spec).eval()
    export_hub_folder(tmp_path / "hub", model, spec, {"method": "weight_selection"})
    x = torch.randn(1, 3, 28, 28)
    with torch.no_grad():
        assert torch.equal(timm.create_model(f"local-dir:{tmp_path / 'hub'}", pretrained=True).eval()(x), model(x))
        wrapped = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "hub").eval()
        # transformers runs the timm model itself, on its own copy of the input: other kernels at other thread counts
        assert_same_forward(wrapped(pixel_values=x).logits, model(x), depth=1, widest=64)


def test_an_eva_ancestry_takes_the_checkpoints_tensors_and_computes_its_rope_tables(tmp_path, monkeypatch):
    """Eva's RoPE tables and zero k bias are buffers no checkpoint holds: timm recomputes them on the model made on
    ``meta``, so the ancestry is never built a second time with random weights (3x the checkpoint in memory)."""
    import learngene.ancestry as ancestry_module
    from learngene.formats.weights import save_safetensors

    name = "vit_pe_core_tiny_patch16_384"
    model = timm_ancestry(name, 10)
    save_safetensors(tmp_path / "pe.safetensors", model.state_dict(), {"format": "pt"})
    built, create = [], ancestry_module._timm_model
    monkeypatch.setattr(
        ancestry_module, "_timm_model", lambda arch, kw: built.append(kw.get("device")) or create(arch, kw)
    )
    ancestry = load_ancestry(tmp_path / "pe.safetensors", name, num_classes=10, **SIZE)
    assert built == ["meta", "meta"]  # the checkpoint filter's probe and the model itself
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        assert torch.equal(ancestry.model(x), model(x))


@pytest.mark.parametrize("name", ["eva02_base_patch14_224", "eva02_base_patch16_clip_224"])
def test_an_unfused_eva_checkpoint_loads_fused_and_computes_the_same(name, tmp_path):
    """EVA-02 B/L keep q, k, v apart; loaded as an ancestry they are fused (one layout for every method),
    compute the same outputs, and their descendants build with qkv_fused=True."""
    torch.manual_seed(0)
    unfused = timm.create_model(name, pretrained=False, num_classes=10, **SIZE).eval()
    with torch.no_grad():  # biases and sub-norms away from their init, so a dropped or misplaced one would show
        for key, p in unfused.named_parameters():
            if "bias" in key or "norm" in key:
                p.normal_()
    torch.save(unfused.state_dict(), tmp_path / "eva.pth")
    ancestry = load_ancestry(tmp_path / "eva.pth", name, num_classes=10, **SIZE)
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        assert_same_forward(ancestry.model(x), unfused(x), **FORWARD)  # q, k, v in one matmul or three
    assert ancestry.spec is not None and ancestry.spec.timm_kwargs()["qkv_fused"] is True
    _descendant(condense("weight_selection", ancestry), ancestry.spec.replace(depth=1))


# ---- the command line: a user's checkpoint of each family in, a descendant of the same family out ----------
@pytest.mark.integration  # the CLI end to end, every family
@pytest.mark.parametrize("family", FAMILIES)
def test_cli_condenses_a_checkpoint_of_each_family_and_expands_it(family, tmp_path):
    name, classes = FAMILIES[family]
    checkpoint = tmp_path / "ancestry.pth"
    torch.save(timm_ancestry(name, classes).state_dict(), checkpoint)
    extra = NAME_SIZE.get(name, {})
    sizes = [a for k, v in {**SIZE, **extra}.items() if k != "img_size" for a in ("--timm-arg", f"{k}={v}")]
    cli_ok(
        "condense",
        "--method",
        "weight_selection",
        "--ancestry",
        checkpoint,
        "--timm-model",
        name,
        *sizes,
        "--img-size",
        "28",
        "--num-classes",
        classes,
        "--quiet",
        "--out",
        tmp_path / "g.safetensors",
    )
    narrow = ["--depth", "1", "--embed-dim", "16", "--num-heads", "1"]
    cli_ok("expand", tmp_path / "g.safetensors", *narrow, "--quiet", "--out", tmp_path / "d.safetensors")
    model = timm_vit(name, depth=1, embed_dim=16, num_heads=1, img_size=28, patch_size=4, num_classes=classes, **extra)
    model.load_state_dict(load_file(str(tmp_path / "d.safetensors")), strict=True)
    assert torch.isfinite(model.eval()(torch.randn(1, 3, 28, 28))).all()


# ---- timm's NaFlexVit: a ViT with its embeddings in another layout ----------------------------------------------
def _naflex_twin_of_a_vit() -> tuple[Ancestry, Ancestry]:
    """A SigLIP ViT and the NaFlexVit holding the same weights (timm's own checkpoint filter converts them)."""
    from timm.models.naflexvit import checkpoint_filter_fn

    vit = timm_ancestry("vit_base_patch16_siglip_224", 0)
    naflex = timm.create_model("naflexvit_base_patch16_siglip", pretrained=False, num_classes=0, **SIZE, **NAFLEX_GRID)
    naflex.load_state_dict(checkpoint_filter_fn(vit.state_dict(), naflex), strict=True)
    return Ancestry(vit, spec_from_model(vit)), Ancestry(naflex.eval(), spec_from_model(naflex))


@pytest.mark.integration  # every method, end to end
@pytest.mark.parametrize("method", [m for m in METHODS if not get_method(m).aux_net])
def test_a_naflexvit_gets_from_every_method_what_the_vit_it_equals_gets(method):
    """The same weights as a ViT or as a NaFlexVit: every method gives the NaFlexVit's descendants the ViT's
    descendants' tensors, its embeddings in NaFlexVit's layout (a Linear over flattened patches, a position grid),
    at every size it makes; so every rule of the axis table applies to NaFlexVit as it is. (Aux-net methods start
    their aux net from timm's init, which draws a NaFlexVit's tensors in another order: they run in the matrix above.)"""
    vit, naflex = _naflex_twin_of_a_vit()
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        assert_same_forward(naflex.model(x), vit.model(x), **FORWARD)  # patches by a Linear or a convolution
    genes = [condense(method, ancestry) for ancestry in (vit, naflex)]
    compared = 0
    for size in SIZES:
        specs = [ancestry.spec.replace(**size, num_classes=10) for ancestry in (vit, naflex)]
        try:
            expected = specs[1].model_layout(bind_gene(genes[0], check=False).method.expand(genes[0], specs[0]))
        except LearngeneError:
            with pytest.raises(LearngeneError):
                bind_gene(genes[1], check=False).method.expand(genes[1], specs[1])
            continue
        got = bind_gene(genes[1], check=False).method.expand(genes[1], specs[1])
        assert set(got) == set(expected)
        for key in got:
            # a method's expansion mixes at most 128 of the gene's values per output (an MLP's axis), in either layout;
            # tal's is its hypernetwork's forward pass on the two graphs: 8 sums per graph layer, a 3-layer decoder,
            # sums of up to max_ck terms
            tal = METHOD_OPTIONS.get("tal", {})
            terms, steps = (tal.get("max_ck", 32768), 2 + 8 * tal.get("layers", 5) + 3) if method == "tal" else (128, 2)
            bound = order_bound(terms, max(1.0, float(expected[key].abs().max())), steps=steps)
            torch.testing.assert_close(got[key], expected[key], rtol=0, atol=bound, msg=lambda m: f"{key}: {m}")
        compared += 1
    assert compared >= 2


@pytest.mark.parametrize(
    "name, kwargs, words",
    [
        ("naflexvit_base_patch16_parfac_gap", {}, "pos_embed='factorized' (a learned 2-D grid)"),
        ("naflexvit_base_patch16_gap", dict(rope_type="axial"), "block_fn=EvaBlock (timm's Block: no RoPE"),
        ("naflexvit_base_patch16_siglip", dict(swiglu_mlp=True), "block_fn=EvaBlock"),
        (
            "naflexvit_base_patch16_siglip",
            dict(embed_proj_type="conv"),
            "embed_proj_type='conv' (the linear patch embedding)",
        ),
        ("naflexvit_base_patch16_siglip", dict(pos_embed_grid_size=[7, 5]), "pos_embed_grid_size=(7, 5) (square)"),
        ("naflexvit_base_patch16_gap", dict(pool_include_prefix=True), "pool_include_prefix=True"),
        # a forward-time setting other than the architecture's: a descendant built from the name would compute
        # otherwise (one no timm version defaults to: the architecture's is bicubic in timm 1.0.29, bilinear in 1.0.31)
        (
            "naflexvit_base_patch16_siglip",
            dict(pos_embed_interp_mode="nearest"),
            "embeds.pos_embed_interp_mode ('nearest' vs 'bi",
        ),
    ],
)
def test_what_a_spec_cannot_hold_of_a_naflexvit_is_named_in_one_line(name, kwargs, words):
    model = timm.create_model(name, pretrained=False, **{**SIZE, **NAFLEX_GRID, **kwargs})
    with pytest.raises(SpecError) as info:
        spec_from_model(model)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_naflexvit_spec_records_its_position_grid_and_takes_any_image_size():
    """The spec's image size is the construction-time grid times the patch (SigLIP 2 NaFlex: 16 x 16 patches of 16 px);
    the descendant is built with that grid and, like its ancestry, runs on other image sizes."""
    from learngene.data.folder import preprocessing_cfg

    real = timm.create_model(
        "naflexvit_base_patch16_siglip", pretrained=False, depth=1, embed_dim=32, num_heads=2, num_classes=0
    )
    spec = spec_from_model(real)
    assert (spec.img_size, spec.patch_size, spec.grid_size) == (256, 16, 16)
    assert preprocessing_cfg(real)["input_size"] == (3, 256, 256)  # what data are loaded at (timm's cfg says 384)
    assert spec.state_shapes()["embeds.pos_embed"] == (1, 16, 16, 32) and spec.timm_kwargs()["pos_embed_grid_size"] == [
        16,
        16,
    ]
    ancestry = family_ancestry("naflex_siglip")
    small = ancestry.spec.replace(img_size=20, depth=1)  # a 5 x 5 grid: the position grid is resampled
    model = make_descendant(condense("weight_selection", ancestry), small).eval()
    grid = ancestry.model.embeds.pos_embed.reshape(1, 49, 32)  # timm's resampler, as for a ViT's table
    resampled = timm.layers.resample_abs_pos_embed(grid, new_size=[5, 5], old_size=[7, 7], num_prefix_tokens=0)
    assert torch.equal(model.embeds.pos_embed.data, resampled.reshape(1, 5, 5, 32))  # timm's resampler, both
    for pixels in (20, 28, 36):
        assert model(torch.randn(1, 3, pixels, pixels)).shape == (1, 32)  # SigLIP's tower: its pooled embedding


def test_a_beit_checkpoint_is_refused_in_one_line_by_the_weight_pickers(tmp_path, capsys):
    """BEiT stays out (see learngene.vit.model_spec._why_not_beit): the command line says why in one line, exit code 2."""
    checkpoint = tmp_path / "beit.pth"
    torch.save(timm_ancestry("beit_base_patch16_224").state_dict(), checkpoint)
    sizes = [a for k, v in SIZE.items() if k != "img_size" for a in ("--timm-arg", f"{k}={v}")]
    code = main(
        [
            "condense",
            "--method",
            "weight_selection",
            "--ancestry",
            str(checkpoint),
            "--timm-model",
            "beit_base_patch16_224",
            *sizes,
            "--img-size",
            "28",
            "--num-classes",
            "10",
            "--quiet",
            "--out",
            str(tmp_path / "g.safetensors"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "relative position bias table in every block" in err, err
    assert not (tmp_path / "g.safetensors").exists()


def test_a_naflexvit_refuses_data_of_other_channels_in_one_line_and_takes_other_image_sizes():
    from learngene.training.loop import train

    model = family_ancestry("naflex_siglip").spec.replace(depth=1, num_classes=10).create_model()
    cfg = QUICK.replace(max_steps=1, distill_lambda=0.0)
    with pytest.raises(LearngeneError, match="has 1-channel images but the model expects 3"):
        train(model, make_images(8, num_classes=10, size=28, chans=1), cfg)
    train(model, make_images(8, num_classes=10, size=20, chans=3), cfg)  # a 5 x 5 grid: the position grid resized


def test_a_naflexvit_batch_whose_activations_cannot_fit_is_refused_before_the_first_step(monkeypatch):
    import importlib

    loop = importlib.import_module("learngene.training.loop")
    model = family_ancestry("naflex_siglip").spec.replace(depth=1, num_classes=10).create_model()
    monkeypatch.setattr("learngene.host.memory.available_memory", lambda: 2**16)  # after the model is made
    with pytest.raises(LearngeneError, match=r"a training step of 8 images of 49 tokens through 1 blocks of width 32"):
        loop.train(model, DATA, QUICK.replace(distill_lambda=0.0))


@pytest.mark.integration  # every family, end to end
@pytest.mark.parametrize("family", FAMILIES)
def test_a_lets_gene_of_every_family_expands_at_its_own_size(family):
    """A G for every module and kind the family's blocks hold, no more: layer scale (one vector, no bias) and
    bias-free q/k/v/proj leave no stored tensor the expansion does not use."""
    ancestry = family_ancestry(family)
    gene = condense("lets", ancestry)
    bound, used = bind_gene(gene, source="the lets gene", check=False), set[str]()
    bound.expand_on_meta(gene.layout, used)  # the gene's tensors its expansion reads, at the gene's own size
    stored = {k for k, t in gene.tensors.items() if t.is_floating_point() and not bound.method.kept_for_record(k)}
    assert stored and used == stored, sorted(stored ^ used)
    _descendant(gene, gene.layout.replace(num_classes=10))


@pytest.mark.parametrize("depth", range(2, 17))
def test_lets_defaults_fit_every_ancestry_depth(depth):
    """The compact net is half the aux net's depth, rounded up to an even number where half is odd (6 -> 4)."""
    aux = ViTSpec(depth=depth, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
    small = get_method("lets")().small_spec(aux)
    assert small.depth == 1 or small.depth % 2 == 0
    assert depth // 2 <= small.depth <= depth
    assert get_method("lets")().initial_tensors(aux)  # the tensors of the defaults are made without a refusal


@pytest.mark.parametrize("method", ["importance", "cluster"])
def test_data_driven_methods_feed_a_radio_its_pretrained_input_size_not_its_grid(method):
    """RADIO records its position grid as its image size (2048 px); its pretrained input is 512 px. The data a
    data-driven method reads come at the pretrained size (here 16 px on a 28-px grid), and the method measures
    the ancestry there."""
    from learngene.ancestry import feed_size

    model = timm_ancestry(*FAMILIES["naflex_radio"])
    model.pretrained_cfg = {**model.pretrained_cfg, "input_size": (3, 16, 16)}
    ancestry = Ancestry(model, spec_from_model(model))
    size = feed_size(ancestry, {"input_size": (3, 16, 16)})
    assert (ancestry.spec.img_size, size) == (28, 16)
    data = make_images(8, num_classes=10, size=size, chans=3)
    gene = get_method(method)(num_images=8).condense(ancestry, CondenseInputs(train=data, train_cfg=QUICK))
    assert gene.layout == ancestry.spec  # the gene describes the ancestry, measured at the images' size
    assert feed_size(family_ancestry("deit_tiny"), {"input_size": (3, 16, 16)}) == 28  # a fixed-size ViT: its own


def test_compare_and_bench_load_a_radio_s_data_at_its_pretrained_input_size(tmp_path, monkeypatch, capsys):
    """compare (and bench, through the same run) feed a RADIO model file at the input size its preprocessing
    records (16 px here, on a 28-px grid), as condense does, and the descendants train and evaluate there."""
    import learngene.bench.tasks as tasks
    from learngene.formats.model_file import model_preprocessing, save_model

    model = timm_ancestry(*FAMILIES["naflex_radio"])
    spec = spec_from_model(model)
    path = tmp_path / "radio.safetensors"
    recipe = {"input_size": (3, 16, 16), "interpolation": "bilinear", "mean": (0.5,) * 3, "std": (0.5,) * 3}
    save_model(path, model, spec, preprocessing={**recipe, "crop_pct": 1.0, "crop_mode": "center"})
    assert model_preprocessing(path)["input_size"] == (3, 16, 16)  # a model of any size keeps what it is fed
    sizes = []
    load = tasks.load_dataset
    monkeypatch.setattr(
        tasks, "load_dataset", lambda name, split, size, *a: sizes.append(size) or load(name, split, size, *a)
    )
    argv = [
        "compare", "--ancestry", str(path), "--data", "digits", "--sizes", "L1-D32-H2", "--methods", "pretrained",
        "--references", "scratch", "--seeds", "1", "--max-steps", "1", "--train-images", "16", "--eval-images", "16",
        "--out", str(tmp_path / "cmp"), "--quiet", "--no-plots",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert sizes == [16, 16] and spec.img_size == 28


def test_memory_estimates_count_the_tokens_of_the_images_fed_not_the_grid(monkeypatch):
    """A training step's estimate for a model that takes any size counts the data's tokens: what fits at 16 px
    (16 patches + 8 prefix tokens) is refused at the 28-px grid (49 + 8), in one line with the estimate; evaluation
    and teacher logits make their batch smaller instead of refusing."""
    import learngene.host.memory as memory
    import learngene.training.loop as loop
    from learngene.vit.activation_memory import training_activation_bytes

    model = timm_ancestry(*FAMILIES["naflex_radio"])
    cfg = TrainConfig(batch_size=8)
    fed = training_activation_bytes(16 + 8, 32, 2, 128, 2, 8)
    assert fed < training_activation_bytes(49 + 8, 32, 2, 128, 2, 8)
    monkeypatch.setattr(memory, "available_memory", lambda: fed)
    loop.require_activation_memory(model, cfg, torch.device("cpu"), img_size=16)
    with pytest.raises(LearngeneError, match=r"a training step of 8 images of 57 tokens .* GiB free; choose a smaller"):
        loop.require_activation_memory(model, cfg, torch.device("cpu"), img_size=28)
    one = training_activation_bytes(57, 32, 2, 128, 1, 1)
    monkeypatch.setattr(memory, "available_memory", lambda: 3 * one)
    assert loop.inference_batch(model, 512, 28, torch.device("cpu")) == 3
    monkeypatch.setattr(memory, "available_memory", lambda: one - 1)
    with pytest.raises(LearngeneError, match="a forward pass of one image of 57 tokens"):
        loop.predict_logits(model, make_images(4, num_classes=2, size=28, chans=3))
