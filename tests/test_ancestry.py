import pytest
import timm
import torch
from safetensors.torch import save_file

from learngene.ancestry import load_ancestry
from learngene.errors import LearngeneError
from learngene.formats.model_file import save_model

TIMM_KW = dict(depth=2, embed_dim=32, num_heads=2, patch_size=4, num_classes=5)


def _timm_vit(img_size=16):
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=img_size, **TIMM_KW)


def test_our_model_file_round_trips(tmp_path, tiny_ancestry, tiny_spec):
    save_model(tmp_path / "a.safetensors", tiny_ancestry.model, tiny_spec)
    anc = load_ancestry(tmp_path / "a.safetensors")
    assert anc.spec == tiny_spec
    assert all(torch.equal(v, tiny_ancestry.model.state_dict()[k]) for k, v in anc.model.state_dict().items())


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_timm_checkpoint_is_filtered_by_timm(tmp_path, suffix):
    source = _timm_vit(img_size=16)
    path = tmp_path / f"ckpt{suffix}"
    if suffix == ".pth":
        torch.save({"model": source.state_dict()}, path)
    else:
        save_file(source.state_dict(), str(path))
    # another image size: timm's filter resamples the position embedding; another label space drops the head
    anc = load_ancestry(
        path,
        "vit_tiny_patch16_224",
        img_size=24,
        num_classes=3,
        **{k: v for k, v in TIMM_KW.items() if k != "num_classes"},
    )
    assert anc.spec.img_size == 24 and anc.spec.num_classes == 3
    assert anc.model.pos_embed.shape == (1, 1 + 36, 32)
    assert torch.equal(anc.model.blocks[1].attn.qkv.weight, source.blocks[1].attn.qkv.weight)
    assert torch.equal(anc.model.cls_token, source.cls_token)


def test_pickled_code_is_never_executed(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    path = tmp_path / "evil.pth"
    torch.save({"model": Evil()}, path)
    with pytest.raises(LearngeneError, match="weights_only|could not be loaded"):
        load_ancestry(path, "vit_tiny_patch16_224", img_size=16, **TIMM_KW)


def test_mismatched_checkpoints_fail_clearly(tmp_path):
    path = tmp_path / "ckpt.pth"
    torch.save(_timm_vit().state_dict(), path)
    with pytest.raises(LearngeneError, match="needs|does not match"):
        load_ancestry(path, "vit_tiny_patch16_224", img_size=16, depth=2, embed_dim=64, num_heads=2, patch_size=4)
    with pytest.raises(LearngeneError, match="timm has no model"):
        load_ancestry(path, "vit_imaginary")
    with pytest.raises(LearngeneError, match="not a learngene model file"):
        load_ancestry(_plain_safetensors(tmp_path))
    with pytest.raises(LearngeneError, match="does not exist"):
        load_ancestry(tmp_path / "missing.safetensors")


def _plain_safetensors(tmp_path):
    path = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(1)}, str(path))
    return path


def test_a_non_vit_can_be_a_teacher(tmp_path):
    torch.manual_seed(0)
    net = timm.create_model("resnet10t", pretrained=False, num_classes=4, in_chans=1)
    path = tmp_path / "r.safetensors"
    save_file(net.state_dict(), str(path))
    anc = load_ancestry(path, "resnet10t", num_classes=4, in_chans=1)
    assert anc.spec is None
    with pytest.raises(LearngeneError, match="ViT ancestry"):
        anc.require_vit("pretrained")
