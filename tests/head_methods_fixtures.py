"""Tiny ancestries and data shared by the Mimetic, PEG and Cluster-Learngene tests."""

from __future__ import annotations

import torch

from learngene.data import ImageData
from learngene.method import Ancestry
from learngene.vit.spec import ViTSpec

TINY = ViTSpec(depth=3, embed_dim=32, num_heads=4, img_size=8, patch_size=4, in_chans=1, num_classes=3)


def tiny_ancestry(spec: ViTSpec = TINY, seed: int = 0) -> Ancestry:
    """A randomly initialized (untrained) timm ViT with non-zero biases, so that biases are tested too."""
    torch.manual_seed(seed)
    model = spec.create_model()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    return Ancestry(model.eval(), spec)


def tiny_data(n: int = 48, spec: ViTSpec = TINY, seed: int = 0) -> ImageData:
    gen = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, spec.in_chans, spec.img_size, spec.img_size), generator=gen, dtype=torch.uint8)
    labels = torch.randint(0, spec.num_classes, (n,), generator=gen)
    return ImageData(images, labels, spec.num_classes, (0.5,), (0.25,), name="tiny")


def save_tiny_ancestry(path, spec: ViTSpec = TINY) -> None:
    from learngene.formats.model_file import save_model

    save_model(path, tiny_ancestry(spec).model, spec, origin={"kind": "ancestry"})


def timm_strict_load(path) -> torch.nn.Module:
    """Load a learngene model file into a fresh timm model with ``strict=True`` (what users do)."""
    import timm

    from learngene.formats.model_file import load_model_file
    from learngene.vit.spec import TIMM_ARCH

    state, spec, _ = load_model_file(path)
    model = timm.create_model(TIMM_ARCH, pretrained=False, **spec.timm_kwargs())
    model.load_state_dict(state, strict=True)
    return model
