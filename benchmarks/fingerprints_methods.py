"""sha256 of every tensor every registered method condenses and expands to, on tiny ancestries, plus its refusals.

A refactoring meant to leave behaviour alone must leave this file unchanged. For each tiny ancestry
(layer scale, registers + SwiGLU-free DINOv2, MAP head, plain) and each method, with the options that
change a descendant (``untrained_attention=mimetic``, ``--top-up``, ``pos_embed``, ``blend_mimetic``,
``adapt``), it records the gene's tensors, the descendant's full state_dict for several sizes (or the
one-line refusal), the note ``learngene condense`` prints and each method's option listing.

    PYTHONPATH=src python benchmarks/fingerprints_methods.py /tmp/after.txt && diff /tmp/before.txt /tmp/after.txt

Trained methods run 2 steps; a minute or two on a CPU; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys

import timm
import torch

import learngene as lg
from learngene.bench.cells import ablate
from learngene.binding import bind_gene
from learngene.data import ImageData
from learngene.descendant import build_descendant, make_descendant
from learngene.errors import LearngeneError
from learngene.method import AdaptInputs, Ancestry, CondenseInputs
from learngene.training.loop import TrainConfig, seed_everything
from learngene.validate import EXPAND
from learngene.vit.model_spec import spec_from_model
from learngene.vit.spec import ViTSpec

SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4)
FAMILIES = ("deit3_small_patch16_224", "vit_small_patch14_reg4_dinov2", "vit_base_patch16_siglip_224")


def images(spec: ViTSpec, n: int = 16) -> ImageData:
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, spec.in_chans, spec.img_size, spec.img_size), generator=gen, dtype=torch.uint8)
    return ImageData(
        x, torch.randint(0, 10, (n,), generator=gen), 10, (0.5,) * spec.in_chans, (0.25,) * spec.in_chans, name="random"
    )


def ancestries():
    for name in FAMILIES:
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10, **SIZE).eval()
        yield name, Ancestry(model, spec_from_model(model))
    spec = ViTSpec(depth=3, embed_dim=32, num_heads=4, img_size=8, patch_size=4, in_chans=1, num_classes=3)
    torch.manual_seed(0)
    yield "plain-L3-H4", Ancestry(spec.create_model().eval(), spec)


def digest(t: torch.Tensor) -> str:
    t = t.detach().contiguous()
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def ablated(gene: lg.Learngene, target: ViTSpec, **ablation) -> dict[str, torch.Tensor]:
    """The benchmark's ablation of the gene's descendant of ``target`` and seed 1 (:func:`learngene.bench.cells.ablate`)."""
    model, provided = build_descendant(bind_gene(gene, EXPAND, seed=1, at=target), target, seed=1)
    ablate(model, provided, target, 1, **ablation)
    return model.state_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    args = parser.parse_args()
    lines: list[str] = []

    def record(case: str, tensors: dict[str, torch.Tensor]) -> None:
        lines.extend(f"{case} {k} {tuple(tensors[k].shape)} {digest(tensors[k])}" for k in sorted(tensors))

    def attempt(case: str, fn) -> None:
        try:
            record(case, fn())
        except LearngeneError as exc:
            lines.append(f"{case} refused: {' '.join(str(exc).split())}")

    for name in lg.list_methods():
        cls = lg.get_method(name)
        lines.append(f"options {name}: " + ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls.Config)))
    for tag, ancestry in ancestries():
        spec = ancestry.spec
        data = images(spec)
        cfg = TrainConfig(epochs=1, max_steps=2, batch_size=8, progress=False, seed=0)
        sizes = [
            spec.replace(num_classes=10),
            spec.replace(depth=spec.depth + 2, num_classes=10),
            spec.replace(depth=1, num_classes=10),
            spec.replace(depth=2, num_heads=1, embed_dim=spec.head_dim, num_classes=10),
            spec.replace(depth=3, num_heads=2 * spec.num_heads, embed_dim=2 * spec.embed_dim, num_classes=10),
        ]
        for name in lg.list_methods():
            cls = lg.get_method(name)
            variants = [{}]
            if "untrained_attention" in {f.name for f in dataclasses.fields(cls.Config)}:
                variants.append({"untrained_attention": "mimetic"})
            for options in variants:
                case = f"{tag} {name}{options or ''}"
                seed_everything(0)
                try:
                    gene = cls(**options).condense(ancestry, CondenseInputs(train=data, train_cfg=cfg))
                except LearngeneError as exc:
                    lines.append(f"{case} condense refused: {' '.join(str(exc).split())}")
                    continue
                record(f"{case} gene", gene.tensors)
                lines.append(f"{case} note: {cls(**options).condense_note(gene)}")
                for target in sizes:
                    attempt(
                        f"{case} {target.short()}",
                        lambda: make_descendant(gene, target, seed=3, **options).state_dict(),
                    )
                target = sizes[0]
                attempt(
                    f"{case} top_up {target.short()}",
                    lambda: make_descendant(gene, target, seed=1, top_up="mimetic").state_dict(),
                )
                attempt(f"{case} sincos {target.short()}", lambda: ablated(gene, target, pos_embed="sincos"))
                attempt(f"{case} blend {target.short()}", lambda: ablated(gene, target, blend_mimetic=0.5))
                if cls.adaptable and not options:
                    seed_everything(0)
                    try:
                        adapted, _ = bind_gene(gene, check=False).method.adapt(
                            gene, sizes[1], AdaptInputs(train=data, train_cfg=cfg)
                        )
                        record(f"{case} adapted", adapted.tensors)
                        attempt(
                            f"{case} adapted {sizes[1].short()}",
                            lambda: make_descendant(adapted, sizes[1]).state_dict(),
                        )
                    except LearngeneError as exc:
                        lines.append(f"{case} adapt refused: {' '.join(str(exc).split())}")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} lines -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
