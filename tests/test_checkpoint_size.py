"""A plain checkpoint's input size is read, not guessed (issue 53 item 5): from its position table (grid x patch),
from what its source records (a ``timm:`` tag's pretrained config, a learngene file's spec), and where nothing records
it (a RoPE ViT: no position table) it is required, in one line naming ``img_size`` and ``--img-size``. A checkpoint
that does not fit the named architecture is refused in one line naming ``--timm-arg``, the flag that gives its sizes.

Every model is random and tiny (depth 2, width 32, 2 heads, 8-px patches), trained at a size other than its timm
name's default, so that a size taken from the name shows."""

from __future__ import annotations

import pytest
import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

from learngene.ancestry import load_ancestry
from learngene.errors import LearngeneError
from learngene.formats.model_file import save_model
from learngene.gene import Learngene
from learngene.vit.model_spec import spec_from_model
from tests.conftest import cli_error, cli_ok

DINOV3 = "vit_small_patch16_dinov3"  # RoPE, no position table; timm's default input: 256 px
SIZES = dict(depth=2, embed_dim=32, num_heads=2, patch_size=8, num_classes=10)
PIXELS = 64  # an 8 x 8 grid of 8-px patches


def _model(name: str, pixels: int = PIXELS) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, img_size=pixels, **SIZES).eval()


def _measured_flops(model: torch.nn.Module, pixels: int) -> int:
    """The forward FLOPs of one image as torch counts them (the matmul form of attention, so that it sees them)."""
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randn(1, 3, pixels, pixels))
    return counter.get_total_flops()


def test_a_rope_checkpoint_without_a_size_is_refused_and_with_one_has_its_flops(tmp_path):
    path = tmp_path / "dinov3.pth"
    model = _model(DINOV3)
    torch.save(model.state_dict(), path)
    with pytest.raises(LearngeneError, match=r"no position table.*img_size=N \(--img-size N\)") as info:
        load_ancestry(path, DINOV3, **SIZES)
    assert "\n" not in str(info.value)
    ancestry = load_ancestry(path, DINOV3, img_size=PIXELS, **SIZES)
    assert ancestry.spec is not None and ancestry.spec.img_size == PIXELS
    # the spec's FLOPs are the model's as torch counts them at 64 px (RoPE's rotations are elementwise, not counted)
    assert ancestry.spec.flops == _measured_flops(model, PIXELS)
    guessed = spec_from_model(timm.create_model(DINOV3, pretrained=False, **SIZES, device="meta"))
    assert guessed.img_size == 256 and guessed.flops > ancestry.spec.flops  # what was recorded before


def test_the_cli_refuses_a_rope_checkpoint_without_img_size_in_one_line_and_takes_it_with(tmp_path, capsys):
    path = tmp_path / "dinov3.pth"
    torch.save(_model(DINOV3).state_dict(), path)
    sizes = [a for k, v in SIZES.items() if k != "num_classes" for a in ("--timm-arg", f"{k}={v}")]
    argv = ["condense", "--method", "weight_selection", "--ancestry", path, "--timm-model", DINOV3, *sizes, "--quiet"]
    err = cli_error(capsys, [*argv, "--out", tmp_path / "g.safetensors"])
    assert "--img-size N" in err and "img_size=N" in err, err
    assert not (tmp_path / "g.safetensors").exists()
    cli_ok(*argv, "--img-size", PIXELS, "--out", tmp_path / "g.safetensors")
    gene = Learngene.load(tmp_path / "g.safetensors")
    assert gene.ancestry is not None and gene.ancestry.img_size == PIXELS


@pytest.mark.parametrize(
    "name",
    [
        "vit_tiny_patch16_224",  # a class token, then the grid
        "deit_tiny_distilled_patch16_224",  # two prefix rows: class and distillation tokens
        "vit_base_patch16_rope_mixed_ape_224",  # a table of the grid alone (no class row), beside mixed RoPE
    ],
)
def test_a_checkpoint_with_a_position_table_is_read_at_the_size_it_was_trained_at(name, tmp_path):
    model = _model(name, pixels=32)
    torch.save(model.state_dict(), tmp_path / "ancestry.pth")
    ancestry = load_ancestry(tmp_path / "ancestry.pth", name, **SIZES)
    assert ancestry.spec is not None and ancestry.spec.img_size == 32
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the same model, not one whose table was resampled to the name's 224 px
        assert torch.equal(ancestry.model(x), model(x))


def test_a_rope_checkpoint_takes_the_size_a_learngene_file_or_a_timm_tag_records(tmp_path, monkeypatch):
    from safetensors.torch import save

    from tests.hub_fixtures import cache_repo, offline_hub

    model = _model(DINOV3)
    save_model(tmp_path / "anc.safetensors", model, spec_from_model(model), origin={"kind": "ancestry"})
    ancestry = load_ancestry(tmp_path / "anc.safetensors", DINOV3, **SIZES)  # a timm name over the file's spec
    assert ancestry.spec is not None and ancestry.spec.img_size == PIXELS

    tag = f"{DINOV3}.lvd1689m"
    weights = save({k: v.contiguous() for k, v in model.state_dict().items()})
    cache_repo(offline_hub(monkeypatch, tmp_path / "hf-cache"), f"timm/{tag}", {"model.safetensors": weights})
    ancestry = load_ancestry(f"timm:{tag}", **SIZES)
    expected = timm.models.get_pretrained_cfg(tag).input_size[-1]  # the tag's weights were trained at it: 256
    assert ancestry.spec is not None and ancestry.spec.img_size == expected


def test_a_checkpoint_of_other_sizes_is_refused_naming_timm_arg(tmp_path, capsys):
    path = tmp_path / "ancestry.pth"
    torch.save(_model("vit_tiny_patch16_224", pixels=32).state_dict(), path)
    with pytest.raises(LearngeneError, match=r"pick the matching timm_model \(--timm-model\).*--timm-arg KEY=VALUE"):
        load_ancestry(path, "vit_tiny_patch16_224")  # depth 12, width 192: not the checkpoint's
    argv = ["condense", "--method", "pretrained", "--ancestry", path, "--timm-model", "vit_tiny_patch16_224"]
    err = cli_error(capsys, [*argv, "--timm-arg", "depth=2", "--out", tmp_path / "g.safetensors"])
    assert "--timm-arg" in err and "embed_dim" in err, err
