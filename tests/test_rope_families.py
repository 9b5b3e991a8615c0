"""DINOv3 and the RoPE ViTs (issue 46 item 1 and its "Done when"): timm's Eva without learned absolute positions
(DINOv3 S, S with q/v biases, S+ with SwiGLU; the RoPE-Axial ViT-B; the SBB betwixt with registers and average
pooling) and with mixed RoPE (per-layer learned frequencies, beside absolute positions), and transformers'
``DINOv3ViTModel`` folders, go in as ancestries and come out as descendants of their own architecture, for every
registered method at four sizes; a size or method that cannot serve is refused in one line whose advice, followed
by the test, works.

Every ancestry is random and tiny (depth 2, width 32, 2 heads, 16-px images of 8-px patches: a 2 x 2 grid), built
through the family's own timm name with size arguments, its weights moved away from timm's initialization (layer
scale starts at 1e-5, which would hide a wrong block behind near-zero residuals).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file
from torch.utils.flop_counter import FlopCounterMode

from learngene.ancestry import load_ancestry
from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.gene import Learngene
from learngene.method import Ancestry, CondenseInputs
from learngene.registry import get_method, list_methods
from learngene.training.loop import TrainConfig, seed_everything
from learngene.vit.model_spec import spec_from_model
from learngene.vit.spec import ViTSpec
from tests.bounds import assert_same_forward
from tests.conftest import SMALL_OPTIONS, cli_ok, make_images

SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=8)
PIXELS = SIZE["img_size"]

# family -> timm name
FAMILIES = {
    "dinov3": "vit_small_patch16_dinov3",
    "dinov3_qkvb": "vit_small_patch16_dinov3_qkvb",  # EVA-style q and v biases (k has none)
    "dinov3_plus": "vit_small_plus_patch16_dinov3",  # an unpacked SwiGLU whose width timm rounds to 8
    "rope_axial": "vit_base_patch16_rope_224",  # RoPE attention (timm's AttentionRope), class token
    "rope_reg4_gap": "vit_betwixt_patch16_rope_reg4_gap_256",  # 4 registers, no class token, average pooling
    "rope_mixed_ape": "vit_base_patch16_rope_mixed_ape_224",  # per-layer learned RoPE frequencies and positions
}
HF_DINOV3 = "hf_dinov3"  # a transformers DINOv3ViTModel folder (q/v biases, registers, headless)
ANCESTRIES = [*FAMILIES, HF_DINOV3]

METHODS = list_methods()
DATA = make_images(8, num_classes=10, size=PIXELS, chans=3)
QUICK = TrainConfig(epochs=1, max_steps=1, batch_size=8, distill_lambda=0.5, progress=False)
SIZES = {
    "smaller": dict(depth=1, embed_dim=16, num_heads=1),
    "same": {},
    "deeper": dict(depth=3),
    "wider": dict(embed_dim=64, num_heads=4),
}
# the methods whose descendant at the ancestry's own size is the ancestry, tensor for tensor
SAME_SIZE_COPIES = ("pretrained", "weight_selection", "grow")


def moved_from_init(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """``model`` with every parameter moved by N(0, 0.1²): gammas no longer 1e-5, biases and registers not zero,
    mixed RoPE's frequencies no longer timm's draw, so that a tensor dropped, misplaced or taken from timm's
    initialization changes what the model computes."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model.eval()


def timm_ancestry(name: str, num_classes: int = 10) -> torch.nn.Module:
    torch.manual_seed(0)
    return moved_from_init(timm.create_model(name, pretrained=False, num_classes=num_classes, **SIZE))


def hf_dinov3_folder(folder: Path, gated: bool = False):
    """A transformers DINOv3 backbone written by its own ``save_pretrained`` (q and v biases, 4 registers)."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "DINOv3ViTModel"):
        pytest.skip(f"transformers {transformers.__version__} has no DINOv3ViTModel")
    config = transformers.DINOv3ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        image_size=PIXELS,
        patch_size=8,
        num_register_tokens=4,
        use_gated_mlp=gated,
        hidden_act="silu" if gated else "gelu",
    )
    torch.manual_seed(0)
    model = moved_from_init(transformers.DINOv3ViTModel(config))
    model.save_pretrained(folder)
    return model


class Families:
    """The ancestries by family and their genes by method and options, each made once per module."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.genes: dict[tuple, Learngene] = {}

    @functools.cache  # noqa: B019  (the module's one instance lives as long as the module's tests)
    def ancestry(self, family: str) -> Ancestry:
        if family == HF_DINOV3:
            folder = self.tmp_path_factory.mktemp("hf-dinov3")
            hf_dinov3_folder(folder)
            return load_ancestry(folder)
        model = timm_ancestry(FAMILIES[family])
        return Ancestry(model, spec_from_model(model))

    def gene(self, family: str, method: str, options: tuple[tuple[str, object], ...] = ()) -> Learngene:
        key = (family, method, options)
        if key not in self.genes:
            cls = get_method(method)
            inputs = CondenseInputs(train=DATA, train_cfg=QUICK) if cls.needs_data else None
            seed_everything(0)
            method_options = {**SMALL_OPTIONS.get(method, {}), **dict(options)}
            self.genes[key] = cls(**method_options).condense(self.ancestry(family), inputs)
        return self.genes[key]


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> Families:
    return Families(tmp_path_factory)


def descendant(gene: Learngene, spec: ViTSpec, read_back: bool = False) -> torch.nn.Module:
    """The descendant as its user gets it: timm's own model of the spec's architecture, loaded strict, finite;
    ``read_back``: its spec read from the model is the one asked (the family kept; 70 ms a time, so once a method)."""
    model = make_descendant(gene, spec).eval()
    plain = timm.create_model(spec.arch, pretrained=False, **spec.timm_kwargs())
    plain.load_state_dict(model.state_dict(), strict=True)
    with torch.no_grad():
        out = plain.eval()(torch.randn(2, 3, PIXELS, PIXELS))
    assert out.shape == (2, spec.num_classes or spec.embed_dim) and torch.isfinite(out).all()
    if read_back:  # the ancestry's family at the size asked (a ratio read back may differ)
        read = spec_from_model(plain)
        assert read.replace(mlp_ratio=spec.mlp_ratio) == spec and read.state_shapes() == spec.state_shapes()
    return plain


# ---- following a refusal's advice ---------------------------------------------------------------------------------
# what advice may say, in the words a Python caller or the command line reads (errors.named / errors.assigned):
# a method to use instead, size fields to give, a method option to set
_SIZE_FIELD = re.compile(r"(?:--)?\b(depth|embed[-_]dim|num[-_]heads)\)?(?:=| )(\d+)\b")
_METHOD = re.compile(r"\buse (\w+)")
_OPTION = re.compile(r"\b([a-z_]+)=([\w.]+)")


def advice_of(message: str) -> list[tuple[str | None, dict[str, int], dict[str, str]]]:
    """The alternatives a refusal advises (after its first ``; ``, split at ``or``): each ``(method, size fields,
    options)``, None for the refused method itself; alternatives that name none of these are left out."""
    _, sep, advice = message.partition("; ")
    assert sep, f"the refusal gives no advice: {message}"
    out = []
    for clause in re.split(r",? or ", advice):
        named = [m for m in _METHOD.findall(clause) if m in METHODS]
        sizes = {name.replace("-", "_"): int(value) for name, value in _SIZE_FIELD.findall(clause)}
        method = named[0] if named else None
        options = {k: v for k, v in _OPTION.findall(clause) if k not in sizes and k not in ("embed_dim", "num_heads")}
        if method or sizes or options:
            out.append((method, sizes, options))
    assert out, f"no advice the test can follow: {message}"
    return out


def follow_advice(
    exc: LearngeneError, families: Families, family: str, method: str, spec: ViTSpec, depth: int = 0
) -> None:
    """Follow every alternative ``exc`` advises for a descendant of ``spec``: each must make a descendant (a refusal
    on the way is followed once more, by its own advice)."""
    message = str(exc)
    assert isinstance(exc, LearngeneError) and "\n" not in message and len(message) < 400, message
    # the advice as data where the refusal carries it (LearngeneError.advice), else as its words say it
    given = [(r.method, dict(r.size), dict(r.options)) for r in exc.advice] or advice_of(message)
    for instead, sizes, options in given:
        chosen = instead or method
        known = {f for f in get_method(chosen).Config.__dataclass_fields__}
        asked = spec.replace(**sizes)
        try:
            gene = families.gene(family, chosen, tuple(sorted((k, v) for k, v in options.items() if k in known)))
            descendant(gene, asked)
        except LearngeneError as again:
            assert depth == 0, f"{method}'s advice {message!r}, followed ({chosen} at {asked.short()}): {again}"
            follow_advice(again, families, family, chosen, asked, depth + 1)


# ---- the families: their spec --------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_the_spec_rebuilds_the_timm_model(family):
    model = timm_ancestry(FAMILIES[family])
    spec = spec_from_model(model)
    assert spec.arch == FAMILIES[family] and spec.family.rope and spec.family.model_class == "eva"
    assert (
        spec.family.abs_pos_embed == (family == "rope_mixed_ape")
        and spec.family.rope_mixed == spec.family.abs_pos_embed
    )
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == spec.state_shapes()
    assert spec.num_params == sum(p.numel() for p in model.parameters())
    built = spec.create_model().eval()  # the descendant's way: timm.create_model(spec.arch, **spec.timm_kwargs())
    built.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(2, 3, PIXELS, PIXELS)
    with torch.no_grad():
        assert torch.equal(built(x), model(x))
    assert spec_from_model(built) == spec and ViTSpec.from_json(spec.to_json()) == spec
    for module in model.modules():  # the matmul form of attention, so that the counter sees its FLOPs
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randn(1, 3, PIXELS, PIXELS))
    assert spec.flops == counter.get_total_flops()  # RoPE's rotations are elementwise: not counted, as norms are


def test_mixed_rope_frequencies_are_a_per_layer_row_and_stack_back_as_timm_holds_them():
    model = timm_ancestry(FAMILIES["rope_mixed_ape"])
    spec = spec_from_model(model)
    state = model.state_dict()
    split = spec.split_layers(state)
    freqs = state["rope.freqs"]  # (x and y, depth, heads, head_dim / 2)
    assert "rope.freqs" not in split and spec.block_shapes()["rope.freqs"] == (spec.embed_dim,)
    for layer in range(spec.depth):  # each head's x then y frequencies, heads in order
        row = split[f"blocks.{layer}.rope.freqs"].reshape(spec.num_heads, 2, -1)
        assert torch.equal(row[:, 0], freqs[0, layer]) and torch.equal(row[:, 1], freqs[1, layer])
    joined = spec.join_layers(split)
    assert joined.keys() == state.keys() and all(torch.equal(joined[k], state[k]) for k in state)


@pytest.mark.parametrize("method, depth, sources", [("pretrained", 3, {1: 0, 2: 1}), ("heru_lg", 3, {1: 0, 2: 1})])
def test_mixed_rope_frequencies_move_with_their_layer(families, method, depth, sources):
    """A descendant's layer takes the frequencies of the ancestry layer whose block it takes; a layer the gene leaves
    out keeps timm's own draw (seeded by the descendant's seed), as its block does."""
    ancestry = families.ancestry("rope_mixed_ape")
    options = (("variant", "last"),) if method == "pretrained" else ()
    spec = ancestry.spec.replace(depth=depth)
    model = make_descendant(families.gene("rope_mixed_ape", method, options), spec, seed=3)
    freqs, source = model.state_dict()["rope.freqs"], ancestry.model.state_dict()["rope.freqs"]
    for layer, taken in sources.items():
        assert torch.equal(freqs[:, layer], source[:, taken])
        assert torch.equal(model.blocks[layer].attn.qkv.weight, ancestry.model.blocks[taken].attn.qkv.weight)
    torch.manual_seed(3)
    timm_own = spec.create_model().state_dict()["rope.freqs"]
    for layer in set(range(depth)) - set(sources):
        assert torch.equal(freqs[:, layer], timm_own[:, layer])


# ---- issue 46's "Done when": every method, every family, four sizes -------------------------------------------------
@pytest.mark.integration  # every method x every RoPE family
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("family", ANCESTRIES)
def test_every_method_condenses_and_expands_every_rope_family_at_four_sizes(family, method, families):
    """Each descendant loads strict into timm's own model of the ancestry's architecture with finite outputs; at the
    ancestry's own size, the methods that copy give the ancestry exactly; every refusal is one line whose advice
    the test follows (another method, other sizes, an option), and which then works."""
    ancestry = families.ancestry(family)
    try:
        gene = families.gene(family, method)
    except LearngeneError as exc:
        follow_advice(exc, families, family, method, ancestry.spec)
        return
    made = []
    for name, size in SIZES.items():
        spec = ancestry.spec.replace(**size)
        try:
            model = descendant(gene, spec, read_back=not made)
        except LearngeneError as exc:
            follow_advice(exc, families, family, method, spec)
            continue
        made.append(name)
        if name == "same" and method in SAME_SIZE_COPIES:
            x = torch.randn(3, 3, PIXELS, PIXELS)
            with torch.no_grad():
                assert (model(x) - ancestry.model(x)).abs().max() == 0
            own = ancestry.model.state_dict()
            assert all(torch.equal(v, own[k]) for k, v in model.state_dict().items())
    # structured solves its attention on the absolute position table, which the RoPE-only families lack: refused
    # at every size (its advice, mimetic, followed above); every other method makes some size of every family
    assert made or (method == "structured" and not ancestry.spec.family.abs_pos_embed), f"{method}: {family}"


# ---- the ancestry's other sources: transformers folders, checkpoints, hub folders, timm tags --------------------------
@pytest.mark.parametrize("gated", [False, True])
def test_a_transformers_dinov3_folder_is_timms_dinov3(gated, tmp_path):
    """DINOv3ViTModel's keys renamed (q/k/v fused, q and v biases Eva's own, a gated MLP's gate and value apart) and
    its config read as timm's DINOv3 architecture: the same tokens and the same pooled class token. transformers and
    timm compute the RoPE angles in other orders (2π·coords·inv_freq against timm's own product), so the sin and cos
    tables agree to rounding, as the rest does: the bound of two float orders of a 2-block forward."""
    hf = hf_dinov3_folder(tmp_path, gated)
    ancestry = load_ancestry(tmp_path)
    assert ancestry.spec is not None and ancestry.spec.arch == (
        "vit_small_plus_patch16_dinov3" if gated else "vit_small_patch16_dinov3_qkvb"
    )
    assert (ancestry.spec.global_pool, ancestry.spec.reg_tokens, ancestry.spec.num_classes) == ("token", 4, 0)
    x = torch.randn(2, 3, PIXELS, PIXELS)
    with torch.no_grad():
        expected = hf(pixel_values=x)
        assert_same_forward(ancestry.model.forward_features(x), expected.last_hidden_state, depth=2, widest=128)
        assert_same_forward(ancestry.model(x), expected.pooler_output, depth=2, widest=128)


def test_a_dinov3_folder_with_a_key_bias_is_refused_in_one_line_that_names_the_fix(tmp_path):
    import transformers

    config = transformers.DINOv3ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=16, patch_size=8,
        key_bias=True,
    )  # fmt: skip
    model = transformers.DINOv3ViTModel(config)
    with torch.no_grad():
        model.model.layer[0].attention.k_proj.bias.fill_(0.5)
    model.save_pretrained(tmp_path)
    with pytest.raises(LearngeneError, match=r"key bias .* not zero.*; give a checkpoint trained with key_bias=false"):
        load_ancestry(tmp_path)
    with torch.no_grad():  # a key bias of zeros is what timm's Eva holds: it loads
        model.model.layer[0].attention.k_proj.bias.zero_()
    model.save_pretrained(tmp_path)
    assert load_ancestry(tmp_path).spec is not None


@pytest.mark.integration  # the CLI end to end, every family
@pytest.mark.parametrize("family", FAMILIES)
def test_cli_condenses_a_checkpoint_of_each_family_and_expands_it(family, tmp_path):
    name = FAMILIES[family]
    checkpoint = tmp_path / "ancestry.pth"
    torch.save(timm_ancestry(name).state_dict(), checkpoint)
    sizes = [a for k, v in SIZE.items() if k != "img_size" for a in ("--timm-arg", f"{k}={v}")]
    cli_ok(
        "condense", "--method", "weight_selection", "--ancestry", checkpoint, "--timm-model", name, *sizes,
        "--img-size", PIXELS, "--num-classes", 10, "--quiet", "--out", tmp_path / "g.safetensors",
    )  # fmt: skip
    narrow = ["--depth", "1", "--embed-dim", "16", "--num-heads", "1"]
    cli_ok("expand", tmp_path / "g.safetensors", *narrow, "--quiet", "--out", tmp_path / "d.safetensors")
    model = timm.create_model(
        name, pretrained=False, **{**SIZE, "depth": 1, "embed_dim": 16, "num_heads": 1, "num_classes": 10}
    )
    model.load_state_dict(load_file(str(tmp_path / "d.safetensors")), strict=True)
    assert torch.isfinite(model.eval()(torch.randn(1, 3, PIXELS, PIXELS))).all()


@pytest.mark.parametrize("family", ["dinov3_plus", "rope_mixed_ape"])
def test_a_timm_hub_folder_and_its_hub_name_load_as_the_model(family, tmp_path, monkeypatch):
    """timm's own save_for_hf writes the folder; read as a folder and, from an offline Hugging Face cache, by name."""
    from tests.hub_fixtures import cache_repo, folder_files, offline_hub

    model = timm_ancestry(FAMILIES[family])
    timm.models.save_for_hf(model, str(tmp_path / "hub"), model_args={**SIZE, "num_classes": 10})
    cache = offline_hub(monkeypatch, tmp_path / "hf-cache")
    cache_repo(cache, f"learngene-tests/{family}", folder_files(tmp_path / "hub"))
    x = torch.randn(2, 3, PIXELS, PIXELS)
    for source in (tmp_path / "hub", f"hf-hub:learngene-tests/{family}"):
        ancestry = load_ancestry(source)
        assert ancestry.spec == spec_from_model(model)
        with torch.no_grad():
            assert torch.equal(ancestry.model(x), model(x))


@pytest.mark.parametrize("tag", ["vit_small_patch16_dinov3.lvd1689m", "vit_base_patch16_rope_mixed_ape_224.naver_in1k"])
def test_a_timm_pretrained_tag_loads_from_the_cache_at_the_sizes_given(tag, tmp_path, monkeypatch):
    from safetensors.torch import save

    from tests.hub_fixtures import cache_repo, offline_hub

    model = timm_ancestry(tag.split(".")[0])
    weights = save({k: v.contiguous() for k, v in model.state_dict().items()})
    cache_repo(offline_hub(monkeypatch, tmp_path / "hf-cache"), f"timm/{tag}", {"model.safetensors": weights})
    ancestry = load_ancestry(f"timm:{tag}", num_classes=10, **SIZE)
    assert ancestry.spec == spec_from_model(model)
    for key, value in ancestry.model.state_dict().items():
        assert torch.equal(value, model.state_dict()[key]), key
