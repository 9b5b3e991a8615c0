"""Checkpoint formats (timm files and hub folders, transformers folders), hub-folder export, lazy loading."""

from __future__ import annotations

import json
import os

import pytest
import torch

from learngene.ancestry import load_ancestry
from learngene.errors import LearngeneError
from learngene.formats.model_file import save_model
from learngene.vit.spec import ViTSpec
from tests.bounds import assert_same_forward
from tests.conftest import cli_ok, timm_vit

TINY = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, image_size=28, patch_size=4)
# transformers' ViT/DeiT default eps is 1e-12 (BERT's); the published checkpoints were trained with timm's 1e-6,
# which the conversion keeps (test_hf_vit_default_eps_becomes_timms); exact comparisons use 1e-6 on both sides
EPS = dict(layer_norm_eps=1e-6)
# transformers' and timm's forward passes of one ViT: the same sums in other orders (q, k, v apart or fused); the
# widest sum is an MLP's (Dinov2's default 4 x 32), over 2 layers (tests/bounds.py)
HF_VS_TIMM = dict(depth=2, widest=128)


def _hf_folder(tmp_path, model):
    folder = tmp_path / "hf"
    model.eval().save_pretrained(folder)
    return folder


def _image(channels=3, size=28, seed=0):
    return torch.randn(2, channels, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


def test_hf_vit_model_last_hidden_state(tmp_path, transformers):
    torch.manual_seed(0)
    hf = transformers.ViTModel(transformers.ViTConfig(**TINY, **EPS, intermediate_size=64))
    ancestry = load_ancestry(_hf_folder(tmp_path, hf))
    x = _image()
    with torch.no_grad():
        expected = hf(pixel_values=x).last_hidden_state
        got = ancestry.model.forward_features(x)
    assert ancestry.model.num_classes == 0
    assert_same_forward(got, expected, **HF_VS_TIMM)


def test_hf_vit_classifier_logits(tmp_path, transformers):
    torch.manual_seed(1)
    cfg = transformers.ViTConfig(**TINY, **EPS, intermediate_size=48, num_labels=5, qkv_bias=False, num_channels=1)
    hf = transformers.ViTForImageClassification(cfg)
    ancestry = load_ancestry(_hf_folder(tmp_path, hf))
    x = _image(channels=1)
    with torch.no_grad():
        assert_same_forward(ancestry.model(x), hf(pixel_values=x).logits, **HF_VS_TIMM)
    assert ancestry.spec is not None and ancestry.spec.mlp_ratio == 1.5 and ancestry.spec.in_chans == 1


def test_hf_vit_default_eps_becomes_timms(tmp_path, transformers):
    """A 1e-12 LayerNorm eps is read and replaced by timm's 1e-6, so the ancestry stays a describable ViT family."""
    hf = transformers.ViTForImageClassification(transformers.ViTConfig(**TINY, intermediate_size=64, num_labels=3))
    assert hf.config.layer_norm_eps == 1e-12
    ancestry = load_ancestry(_hf_folder(tmp_path, hf))
    assert ancestry.spec is not None and ancestry.model.norm.eps == 1e-6


def test_hf_deit_with_teacher_logits(tmp_path, transformers):
    torch.manual_seed(2)
    hf = transformers.DeiTForImageClassificationWithTeacher(
        transformers.DeiTConfig(**TINY, **EPS, intermediate_size=64, num_labels=4)
    )
    ancestry = load_ancestry(_hf_folder(tmp_path, hf))
    assert "dist_token" in ancestry.model.state_dict()
    x = _image(seed=1)
    with torch.no_grad():
        assert_same_forward(ancestry.model(x), hf(pixel_values=x).logits, **HF_VS_TIMM)


@pytest.mark.parametrize("swiglu", [False, True])
def test_hf_dinov2_pooled_and_tokens(tmp_path, transformers, swiglu):
    torch.manual_seed(3)
    hf = transformers.Dinov2Model(
        transformers.Dinov2Config(
            **TINY, layerscale_value=0.5, use_swiglu_ffn=swiglu, hidden_act="silu" if swiglu else "gelu"
        )
    )
    with torch.no_grad():  # layer scale away from its init value, so a dropped gamma would show
        for name, p in hf.named_parameters():
            if "lambda1" in name:
                p.uniform_(0.5, 1.5)
    ancestry = load_ancestry(_hf_folder(tmp_path, hf))
    x = _image(seed=2)
    with torch.no_grad():
        out = hf(pixel_values=x)
        tokens = ancestry.model.forward_features(x)
    assert_same_forward(tokens, out.last_hidden_state, **HF_VS_TIMM)
    assert_same_forward(tokens[:, 0], out.pooler_output, **HF_VS_TIMM)
    assert ancestry.spec is not None and ancestry.spec.arch == (
        "vit_giant_patch14_dinov2" if swiglu else "vit_base_patch14_dinov2"
    )


def test_hf_dinov2_swiglu_runs_silu_whatever_its_config_says(tmp_path, transformers):
    """facebook/dinov2-giant's config says hidden_act "gelu"; transformers' SwiGLU FFN runs SiLU regardless."""
    torch.manual_seed(5)
    hf = transformers.Dinov2Model(transformers.Dinov2Config(**TINY, use_swiglu_ffn=True, hidden_act="gelu"))
    ancestry = load_ancestry(_hf_folder(tmp_path, hf))
    x = _image(seed=3)
    with torch.no_grad():
        assert_same_forward(ancestry.model.forward_features(x), hf(pixel_values=x).last_hidden_state, **HF_VS_TIMM)
    assert ancestry.spec.family.mlp_layer == "swiglu_packed" and ancestry.spec.family.act_layer == "silu"


@pytest.mark.parametrize("registers", [False, True])
def test_hf_dinov2_classifier_is_refused_in_one_line_or_dropped(tmp_path, transformers, registers):
    """Dinov2ForImageClassification reads [class token, mean patch token] (2D inputs), which timm's ViT cannot
    express: refused naming --drop-head; with it, the backbone loads headless and outputs the class token."""
    torch.manual_seed(6)
    if registers:
        cfg = transformers.Dinov2WithRegistersConfig(**TINY, num_register_tokens=2, num_labels=3)
        hf = transformers.Dinov2WithRegistersForImageClassification(cfg)
        backbone = hf.dinov2_with_registers
    else:
        hf = transformers.Dinov2ForImageClassification(transformers.Dinov2Config(**TINY, num_labels=3))
        backbone = hf.dinov2
    folder = _hf_folder(tmp_path, hf)
    with pytest.raises(LearngeneError) as info:
        load_ancestry(folder)
    assert "pass drop_head=True (--drop-head)" in str(info.value) and "\n" not in str(info.value)
    ancestry = load_ancestry(folder, drop_head=True)
    x = _image(seed=4)
    with torch.no_grad():
        assert_same_forward(ancestry.model(x), backbone(pixel_values=x).pooler_output, **HF_VS_TIMM)
    assert ancestry.spec.num_classes == 0


def test_cli_drop_head_loads_a_dinov2_classifier_folder_headless(tmp_path, transformers, capsys):
    from learngene.cli import main

    hf = transformers.Dinov2ForImageClassification(transformers.Dinov2Config(**TINY, num_labels=3))
    folder = _hf_folder(tmp_path, hf)
    capsys.readouterr()  # transformers' own progress bar
    args = ["condense", "--method", "weight_selection", "--ancestry", str(folder), "--quiet"]
    assert main([*args, "--out", str(tmp_path / "a.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "pass drop_head=True (--drop-head)" in err and err.count("\n") == 1
    assert main([*args, "--drop-head", "--out", str(tmp_path / "b.safetensors")]) == 0


def test_hf_dinov2_with_registers_tokens(tmp_path, transformers):
    torch.manual_seed(7)
    hf = transformers.Dinov2WithRegistersModel(transformers.Dinov2WithRegistersConfig(**TINY, num_register_tokens=4))
    with torch.no_grad():  # the class token and position table away from zero, so a dropped row would show
        hf.embeddings.cls_token.normal_()
        hf.embeddings.position_embeddings.normal_()
    ancestry = load_ancestry(_hf_folder(tmp_path, hf))
    x = _image(seed=5)
    with torch.no_grad():
        out = hf(pixel_values=x)
        assert_same_forward(ancestry.model.forward_features(x), out.last_hidden_state, **HF_VS_TIMM)
        assert_same_forward(ancestry.model(x), out.pooler_output, **HF_VS_TIMM)
    assert ancestry.spec.arch == "vit_base_patch14_reg4_dinov2" and ancestry.spec.family.reg_tokens == 4


def _tower(transformers, kind, whole, act):
    vision = dict(**TINY, intermediate_size=48, hidden_act=act)
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48)
    if kind == "clip":
        if whole:
            model = transformers.CLIPModel(
                transformers.CLIPConfig(vision_config=vision, text_config=text, projection_dim=16)
            )
            return model, lambda x: model.get_image_features(pixel_values=x)
        model = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**vision))
    elif whole:
        model = transformers.SiglipModel(transformers.SiglipConfig(vision_config=vision, text_config=text))
        return model, lambda x: model.get_image_features(pixel_values=x)
    else:
        model = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**vision))
    return model, lambda x: model(pixel_values=x).pooler_output


@pytest.mark.parametrize(
    "kind, whole, act, arch",
    [
        ("clip", False, "quick_gelu", "vit_base_patch16_clip_quickgelu_224"),
        ("clip", True, "gelu", "vit_base_patch16_clip_224"),
        ("siglip", False, "gelu_pytorch_tanh", "vit_base_patch32_siglip_256"),
        ("siglip", True, "gelu", "vit_base_patch16_siglip_224"),
    ],
)
def test_hf_clip_and_siglip_image_towers(tmp_path, transformers, kind, whole, act, arch):
    """CLIP / SigLIP image towers (alone, or the image half of the whole model) become timm's CLIP / SigLIP
    ViTs that output the same image embedding (CLIP's projection is timm's bias-free head)."""
    torch.manual_seed(8)
    hf, image_embedding = _tower(transformers, kind, whole, act)
    ancestry = load_ancestry(_hf_folder(tmp_path, hf.eval()))
    x = _image(seed=6)
    with torch.no_grad():
        expected = image_embedding(x)
        expected = getattr(expected, "pooler_output", expected)
        assert_same_forward(ancestry.model(x), expected, **HF_VS_TIMM)
    assert ancestry.spec is not None and ancestry.spec.arch == arch
    assert ancestry.spec.num_classes == (16 if kind == "clip" and whole else 0)


def test_hf_folder_refusals_are_one_line(tmp_path, transformers):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "swin"}))
    torch.save({}, folder / "pytorch_model.bin")
    with pytest.raises(LearngeneError, match="converts vit, deit, dinov2"):
        load_ancestry(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(LearngeneError, match="not valid JSON"):
        load_ancestry(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(LearngeneError, match="has no model.safetensors"):
        load_ancestry(empty)


# ---- timm checkpoints and hub folders -------------------------------------------------------------------
DEIT3 = dict(depth=2, embed_dim=32, num_heads=2, img_size=28, patch_size=4, num_classes=5)


def test_timm_checkpoint_goes_through_its_modules_filter(tmp_path):
    """deit3's checkpoints name layer scale ``gamma_1``; timm's deit module renames it on load."""
    import timm

    torch.manual_seed(0)
    model = timm.create_model("deit3_small_patch16_224", pretrained=False, **DEIT3).eval()
    old_layout = {
        k.replace("ls1.gamma", "gamma_1").replace("ls2.gamma", "gamma_2"): v for k, v in model.state_dict().items()
    }
    assert any("gamma_1" in k for k in old_layout)
    torch.save(old_layout, tmp_path / "deit3.pth")
    ancestry = load_ancestry(tmp_path / "deit3.pth", "deit3_small_patch16_224", **DEIT3)
    x = _image()
    with torch.no_grad():
        assert torch.equal(ancestry.model(x), model(x))  # one timm model, one weights: the same operations


def _tiny_gene(tmp_path):
    from learngene.formats.model_file import save_model
    from learngene.registry import get_method
    from learngene.vit.spec import ViTSpec

    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=28, patch_size=4, in_chans=1, num_classes=10)
    torch.manual_seed(0)
    save_model(tmp_path / "anc.safetensors", spec.create_model(), spec)
    gene = get_method("weight_selection")().condense(load_ancestry(tmp_path / "anc.safetensors"))
    gene.save(tmp_path / "gene.safetensors")
    return tmp_path / "gene.safetensors"


def test_expand_writes_a_hub_folder_timm_and_transformers_load(tmp_path, capsys):
    import timm
    from safetensors.torch import load_file

    from learngene.cli import main

    gene = _tiny_gene(tmp_path)
    out = tmp_path / "desc"
    assert main(["expand", str(gene), "--embed-dim", "16", "--num-heads", "1", "--out", f"{out}/", "--quiet"]) == 0
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == "vit_tiny_patch16_224" and config["num_classes"] == 10
    assert config["model_args"]["embed_dim"] == 16 and config["pretrained_cfg"]["input_size"] == [1, 28, 28]
    card = (out / "README.md").read_text()
    for fact in (
        "weight_selection",
        'Larger Ones", ICLR 2024, arXiv:2311.18823',
        "L2-D32-H2",
        "gene.safetensors",
        "L2-D16-H1",
        "7,850",
    ):
        assert fact in card
    model = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    saved = load_file(out / "model.safetensors")
    assert model.embed_dim == 16 and all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    # the folder is also an ancestry
    again = load_ancestry(out)
    assert all(torch.equal(again.model.state_dict()[k], v) for k, v in saved.items())
    assert "crop_pct 0.9, crop_mode center" in card and "**licence**: unknown" in card
    assert "**classifier head**: the ancestry's, carried by the gene" in card
    assert "AutoModelForImageClassification.from_pretrained" in card
    # and inspect reads it: config, the model it builds, preprocessing, the card's facts
    capsys.readouterr()
    assert main(["inspect", str(out), "--tensors"]) == 0
    shown = capsys.readouterr().out
    for fact in (
        "timm hub folder, architecture vit_tiny_patch16_224",
        "spec:    L2-D16-H1",
        "7,850 params",
        "input:   1x28x28",
        "card:    method: weight_selection",
        "card:    learngene: `gene.safetensors`",
        "blocks.1.attn.qkv.weight",
    ):
        assert fact in shown, (fact, shown)
    transformers = pytest.importorskip("transformers")
    wrapped = transformers.AutoModelForImageClassification.from_pretrained(out).eval()
    x = _image(channels=1)
    with torch.no_grad():
        assert_same_forward(wrapped(pixel_values=x).logits, model(x), depth=2, widest=128)  # timm's, via transformers


@pytest.mark.parametrize("classes", [0, 7])
def test_hub_folders_of_headless_and_fresh_headed_descendants_load_in_transformers(tmp_path, classes):
    """A headless descendant (a DINOv2 backbone) loads with transformers' AutoModel, the loader its card
    names (the classifier wrapper refuses a checkpoint without a classifier); a fresh head says so."""
    import timm

    from learngene.formats.model_file import save_model
    from learngene.vit.model_spec import spec_from_model

    torch.manual_seed(0)
    ancestry = timm_vit(
        "vit_small_patch14_dinov2", num_classes=0, depth=2, embed_dim=32, num_heads=2, img_size=28, patch_size=4
    ).eval()
    save_model(tmp_path / "anc.safetensors", ancestry, spec_from_model(ancestry))
    anc, gene, out = tmp_path / "anc.safetensors", tmp_path / "gene.safetensors", tmp_path / "desc"
    cli_ok("condense", "--method", "weight_selection", "--ancestry", anc, "--out", gene, "--quiet")
    narrow = ["--embed-dim", "16", "--num-heads", "1", "--num-classes", classes]
    cli_ok("expand", gene, *narrow, "--out", f"{out}/", "--quiet")
    card = (out / "README.md").read_text()
    model = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    transformers = pytest.importorskip("transformers")
    x = _image()
    with torch.no_grad():
        if classes:
            assert "**classifier head**: fresh" in card and "AutoModelForImageClassification" in card
            wrapped = transformers.AutoModelForImageClassification.from_pretrained(out).eval()
            assert_same_forward(
                wrapped(pixel_values=x).logits, model(x), depth=2, widest=256
            )  # timm's, via transformers
        else:
            assert "**classifier head**: none" in card and "AutoModel.from_pretrained" in card
            wrapped = transformers.AutoModel.from_pretrained(out).eval()
            assert_same_forward(wrapped(pixel_values=x).pooler_output, model(x), depth=2, widest=256)


def test_hub_folder_is_refused_when_present_and_never_half_written(tmp_path, monkeypatch, capsys):
    import timm.models._hub

    from learngene.cli import main

    gene = _tiny_gene(tmp_path)
    out = tmp_path / "desc"
    out.mkdir()
    (out / "keep").write_text("x")
    args = ["expand", str(gene), "--out", str(out), "--quiet"]
    assert main(args) == 2 and "overwrite=True (--overwrite)" in capsys.readouterr().err
    # --overwrite replaces learngene's three files and never a file of the user's (issue 20)
    assert main([*args, "--overwrite"]) == 0 and (out / "keep").read_text() == "x"
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "keep", "model.safetensors"]

    def fail(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(timm.models._hub, "save_config_for_hf", fail)
    with pytest.raises(RuntimeError):
        main(["expand", str(gene), "--out", str(tmp_path / "new"), "--format", "hub", "--quiet"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["anc.safetensors", "desc", "gene.safetensors"]


# ---- lazy loading -------------------------------------------------------------------------------------
def test_ancestry_is_memory_mapped_not_copied(tmp_path):
    """Every weight of a loaded ancestry is a view of the file's one memory map, and ``state()`` copies none."""
    from learngene.formats.model_file import save_model
    from learngene.vit.spec import ViTSpec

    spec = ViTSpec(depth=2, embed_dim=64, num_heads=2, img_size=28, patch_size=4, num_classes=10)
    save_model(tmp_path / "anc.safetensors", spec.create_model(), spec)
    ancestry = load_ancestry(tmp_path / "anc.safetensors")
    storages = {t.untyped_storage().data_ptr() for t in ancestry.model.state_dict().values()}
    assert len(storages) == 1  # one map of the file, not one allocation per tensor
    model_ptrs = {k: v.data_ptr() for k, v in ancestry.model.state_dict().items()}
    assert {k: v.data_ptr() for k, v in ancestry.state().items()} == model_ptrs


def test_streamed_safetensors_read_back_by_safetensors(tmp_path):
    from safetensors.torch import load_file

    from learngene.formats.weights import read_safetensors, save_safetensors

    base = torch.randn(4, 6)
    tensors = {
        "a": base,
        "view": base[:, ::2],
        "same": base,
        "b16": torch.randn(3).bfloat16(),
        "ints": torch.arange(5),
        "empty": torch.zeros(0, 2),
        "flags": torch.tensor([True, False]),
    }
    save_safetensors(tmp_path / "t.safetensors", tensors, {"k": "v"})
    for read in (load_file(tmp_path / "t.safetensors"), read_safetensors(tmp_path / "t.safetensors", lazy=True)[0]):
        assert read.keys() == tensors.keys() and all(torch.equal(read[k], v) for k, v in tensors.items())


def _rss_bytes():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_release_pages_gives_back_a_mapped_tensor_and_keeps_its_values(tmp_path):
    from learngene.formats.weights import read_safetensors, save_safetensors
    from learngene.host.memory import release_pages

    values = torch.randn(16 * 1024 * 1024)  # 64 MiB
    save_safetensors(tmp_path / "big.safetensors", {"w": values}, {})
    mapped = read_safetensors(tmp_path / "big.safetensors", lazy=True)[0]["w"]
    before = _rss_bytes()
    assert torch.equal(mapped, values)  # touches every page
    touched = _rss_bytes()
    release_pages(mapped)
    released = _rss_bytes()
    assert touched - before > 48 * 2**20 and touched - released > 48 * 2**20
    assert torch.equal(mapped, values)  # read again from the file


def test_release_pages_advises_only_tensors_mapped_from_a_file(tmp_path, monkeypatch):
    """Tensors in ordinary memory (a fused copy, a gene being built) are never paged out: with swap they
    would be written to it and read back, for nothing."""
    from learngene.formats.weights import read_safetensors, save_safetensors
    from learngene.host import memory

    save_safetensors(tmp_path / "w.safetensors", {"w": torch.ones(4 * 1024 * 1024)}, {})
    mapped = read_safetensors(tmp_path / "w.safetensors", lazy=True)[0]["w"]
    advised = []
    monkeypatch.setattr(memory, "_libc", lambda: type("libc", (), {"madvise": lambda self, *a: advised.append(a)})())
    memory.release_pages(torch.ones(4 * 1024 * 1024))
    assert advised == []
    memory.release_pages(mapped)
    assert len(advised) == 1


def test_the_nan_check_reads_a_big_tensor_slice_by_slice_to_its_end():
    from learngene.formats.weights import _CHECK_ELEMENTS, nonfinite_tensor

    big = torch.zeros(_CHECK_ELEMENTS + 5)
    assert nonfinite_tensor({"a": torch.ones(3), "big": big}) is None
    big[-1] = float("inf")
    assert nonfinite_tensor({"a": torch.ones(3), "big": big.view(-1, 1)}) == "big"


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_loading_a_mapped_checkpoint_checks_it_without_keeping_it_resident(tmp_path):
    """The NaN check reads every page of the checkpoint; it gives them back, so a weight picker's peak is
    the process plus what the method touches, not the whole checkpoint on top (EVA-02 L: 2.1x -> 1.1x)."""
    import timm

    from learngene.formats.weights import save_safetensors

    kwargs = dict(img_size=32, patch_size=16, embed_dim=512, depth=4, num_heads=8, num_classes=0)
    save_safetensors(
        tmp_path / "ckpt.safetensors", timm.create_model("vit_base_patch16_224", **kwargs).state_dict(), {}
    )
    size = (tmp_path / "ckpt.safetensors").stat().st_size  # 50 MiB
    before = _rss_bytes()
    ancestry = load_ancestry(tmp_path / "ckpt.safetensors", "vit_base_patch16_224", **kwargs)
    assert _rss_bytes() - before < size / 2
    assert ancestry.spec.depth == 4 and torch.isfinite(ancestry.model.blocks[3].mlp.fc2.weight).all()


def test_tensors_in_a_temporary_file_are_mapped_hold_their_values_and_leave_no_file(tmp_path, monkeypatch):
    """Where EVA-02's fused q/k/v are kept: a file's map, whose pages release_pages can give back."""
    import tempfile

    from learngene.host import memory

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a": torch.randn(512, 1024), "b": torch.arange(7, dtype=torch.int64), "c": torch.zeros(0, 3)}
    made = memory.tensors_in_temporary_file([(k, lambda v=v: v * 1) for k, v in values.items()])
    assert all(torch.equal(made[k], v) and made[k].dtype == v.dtype for k, v in values.items())
    assert list(tmp_path.iterdir()) == []  # unlinked at once: the map alone holds the data
    advised = []
    monkeypatch.setattr(memory, "_libc", lambda: type("libc", (), {"madvise": lambda self, *a: advised.append(a)})())
    memory.release_pages(made["a"])
    assert len(advised) == 1 and torch.equal(made["a"], values["a"])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize("method", ["weight_selection", "peg"])
def test_expanding_a_mapped_gene_gives_its_pages_back(tmp_path, method):
    """A gene as big as its ancestry (weight_selection) or half of it (PEG) is read layer by layer and not kept
    resident: the peak of an expansion is the descendant, not the descendant plus the gene."""
    from learngene.descendant import load_gene, make_descendant
    from learngene.registry import get_method

    spec = ViTSpec(depth=4, embed_dim=512, num_heads=8, img_size=32, patch_size=16, num_classes=0)
    torch.manual_seed(0)
    save_model(tmp_path / "anc.safetensors", spec.create_model(), spec)
    get_method(method)().condense(load_ancestry(tmp_path / "anc.safetensors")).save(tmp_path / "g.safetensors")
    size = (tmp_path / "g.safetensors").stat().st_size  # 50 MiB (weight_selection), 33 MiB (PEG)
    gene = load_gene(tmp_path / "g.safetensors")
    model = make_descendant(gene, spec.replace(depth=2, embed_dim=128, num_heads=2))
    assert _resident_bytes_of(tmp_path / "g.safetensors") < size / 10  # the small tensors, and page rounding
    assert all(torch.isfinite(p).all() for p in model.parameters())


def _resident_bytes_of(path):
    """Resident memory of this process's mappings of the file ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def test_cli_hf_folder_to_hub_folder_keeps_its_preprocessing(tmp_path, transformers, capsys):
    """--ancestry DIR needs no --timm-model; the image processor's mean/std reach the descendant's config."""
    import timm

    from learngene.cli import main

    torch.manual_seed(4)
    hf = transformers.ViTForImageClassification(
        transformers.ViTConfig(**TINY, **EPS, intermediate_size=64, num_labels=10)
    )
    folder = _hf_folder(tmp_path, hf)
    (folder / "preprocessor_config.json").write_text(
        json.dumps({"image_mean": [0.1, 0.2, 0.3], "image_std": [0.4, 0.5, 0.6]})
    )
    gene, out = tmp_path / "g.safetensors", tmp_path / "desc"
    assert (
        main(["condense", "--method", "weight_selection", "--ancestry", str(folder), "--out", str(gene), "--quiet"])
        == 0
    )
    assert main(["expand", str(gene), "--embed-dim", "16", "--num-heads", "1", "--out", f"{out}/", "--quiet"]) == 0
    cfg = json.loads((out / "config.json").read_text())["pretrained_cfg"]
    assert cfg["mean"] == [0.1, 0.2, 0.3] and cfg["std"] == [0.4, 0.5, 0.6]
    assert timm.create_model(f"local-dir:{out}", pretrained=True).embed_dim == 16


def test_a_fine_tuned_export_records_its_data_ancestry_and_training(tmp_path):
    """The README's Python example: the card says fine-tuned, names the ancestry, and the config holds the
    normalization of the data the model was trained on (not the architecture's defaults)."""
    from learngene.data import preprocessing_cfg
    from learngene.formats.export import export_hub_folder
    from learngene.vit.spec import ViTSpec
    from tests.conftest import make_images

    spec = ViTSpec(depth=1, embed_dim=16, num_heads=1, img_size=16, patch_size=4, in_chans=1, num_classes=4)
    data = make_images(8)  # normalized with mean 0.3, std 0.3
    card = {
        "method": "pretrained",
        "gene": "gene.safetensors",
        "ancestry": "L2-D32-H2",
        "fine-tuned": "1 epoch on toy, test accuracy 0.250",
    }
    export_hub_folder(tmp_path / "tuned", spec.create_model(), spec, card, data_config=preprocessing_cfg(data))
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert config["pretrained_cfg"]["mean"] == [0.3] and config["pretrained_cfg"]["std"] == [0.3]
    text = (tmp_path / "tuned" / "README.md").read_text()
    assert "(pretrained), fine-tuned" in text and "then fine-tuned (1 epoch on toy" in text
    assert "**ancestry**: L2-D32-H2" in text and "defaults" not in text
    export_hub_folder(tmp_path / "plain", spec.create_model(), spec, {"method": "pretrained"})
    plain = (tmp_path / "plain" / "README.md").read_text()
    assert "has not been trained after expansion" in plain and "**ancestry**: not recorded" in plain
    assert "timm's defaults for the architecture" in plain


def test_a_descendant_is_not_held_twice_while_its_gene_expands(monkeypatch):
    """timm's initialization of what the gene then gives is given back before ``expand`` runs, so an expansion's
    peak holds the descendant once; the values, shapes and parameters are those of a plain load."""
    from learngene.descendant import make_descendant
    from learngene.method import Ancestry
    from learngene.registry import get_method

    spec = ViTSpec(depth=2, embed_dim=64, num_heads=2, img_size=16, patch_size=4, num_classes=5)
    torch.manual_seed(0)
    ancestry = spec.create_model()
    gene = get_method("pretrained")().condense(Ancestry(ancestry, spec))
    built, held = [], []
    create, expand = ViTSpec.create_model, get_method("pretrained").expand
    monkeypatch.setattr(ViTSpec, "create_model", lambda self, **kw: built.append(create(self, **kw)) or built[-1])
    monkeypatch.setattr(
        get_method("pretrained"),
        "expand",
        lambda self, gene, spec: (
            held.append(sum(p.numel() for p in built[-1].parameters()) if built else None) or expand(self, gene, spec)
        ),
    )
    model = make_descendant(gene, spec)
    # expanded on meta first (no model yet), then for real: the gene gives every tensor, so none of timm's
    # initialization is kept meanwhile
    assert held == [None, 0]
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in ancestry.state_dict().items()}
    for (key, p), q in zip(model.named_parameters(), ancestry.parameters()):
        assert torch.equal(p, q) and p.requires_grad and p.is_contiguous(), key
    assert len({p.untyped_storage().data_ptr() for p in model.parameters()}) == len(list(model.parameters()))
