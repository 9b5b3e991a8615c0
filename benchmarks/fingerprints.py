"""sha256 of every tensor PEG and cluster produce on tiny ancestries: run it on two commits and diff the files.

A change meant to lower memory (not what is computed) must leave these unchanged: PEG's condensation and
expansions (unadapted and after 2 steps of ``adapt``) and cluster's condensation and expansions, for random
tiny ancestries of several families (layer scale, registers, MAP head without class token, no qkv bias,
plain), two other depth / head counts, and one loaded from a memory-mapped safetensors file.

    git stash; PYTHONPATH=src python benchmarks/fingerprints.py /tmp/before.txt; git stash pop
    PYTHONPATH=src python benchmarks/fingerprints.py /tmp/after.txt && diff /tmp/before.txt /tmp/after.txt

``--tensors FILE`` also saves the tensors themselves; ``--compare OLD NEW`` then says how far apart two such
files are (for a change that reorders float operations on purpose).

Seconds on a CPU; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path

import timm
import torch

from learngene.ancestry import load_ancestry
from learngene.data import ImageData
from learngene.formats.weights import save_safetensors
from learngene.method import AdaptInputs, Ancestry, CondenseInputs
from learngene.methods.cluster import ClusterLearngene
from learngene.methods.peg import PEG
from learngene.training.loop import TrainConfig, seed_everything
from learngene.vit.model_spec import spec_from_model
from learngene.vit.spec import ViTSpec

SIZE = dict(depth=2, embed_dim=32, num_heads=2, img_size=28, patch_size=4)
FAMILIES = (
    "deit3_small_patch16_224",
    "vit_small_patch14_reg4_dinov2",
    "vit_base_patch16_siglip_224",
    "vit_medium_patch16_gap_256",
    "deit_tiny_patch16_224",
)


def images(spec: ViTSpec, n: int = 16) -> ImageData:
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, spec.in_chans, spec.img_size, spec.img_size), generator=gen, dtype=torch.uint8)
    return ImageData(
        x, torch.randint(0, 10, (n,), generator=gen), 10, (0.5,) * spec.in_chans, (0.25,) * spec.in_chans, name="random"
    )


def ancestries(tmp: Path):
    for name in FAMILIES:
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10, **SIZE).eval()
        yield name, Ancestry(model, spec_from_model(model))
    for depth, heads in [(3, 4), (5, 6)]:
        spec = ViTSpec(
            depth=depth, embed_dim=8 * heads, num_heads=heads, img_size=8, patch_size=4, in_chans=1, num_classes=3
        )
        torch.manual_seed(0)
        yield f"plain-L{depth}-H{heads}", Ancestry(spec.create_model().eval(), spec)
    torch.manual_seed(1)
    model = timm.create_model("vit_small_patch14_dinov2", pretrained=False, num_classes=0, **SIZE)
    save_safetensors(tmp / "dinov2.safetensors", model.state_dict(), {"format": "pt"})
    yield "dinov2-mmap", load_ancestry(tmp / "dinov2.safetensors", "vit_small_patch14_dinov2", num_classes=0, **SIZE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="text file: one line per tensor (case, key, shape, sha256)")
    parser.add_argument("--tensors", help="also save every tensor to this safetensors file")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two --tensors files and exit")
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if not args.out:
        parser.error("give the output file (or --compare OLD NEW)")
    lines, kept = [], {}

    def record(case: str, tensors: dict[str, torch.Tensor]) -> None:
        for key in sorted(tensors):
            t = tensors[key].detach().contiguous()
            digest = hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
            lines.append(f"{case} {key} {tuple(t.shape)} {digest}")
            kept[f"{case} {key}"] = t.clone()

    with tempfile.TemporaryDirectory() as tmp:
        for tag, ancestry in ancestries(Path(tmp)):
            spec, d = ancestry.spec, ancestry.spec.head_dim
            data = images(spec)
            sizes = [
                spec.replace(depth=spec.depth + 1, num_heads=spec.num_heads + 1, embed_dim=(spec.num_heads + 1) * d),
                spec.replace(depth=1, num_heads=1, embed_dim=d),
                spec.replace(depth=2 * spec.depth, num_heads=3, embed_dim=3 * d),
            ]
            sizes = [s.replace(num_classes=10) for s in sizes]
            for options in [{}, {"gene_heads": spec.num_heads, "gene_ffns": 1}]:
                gene = PEG(**options).condense(ancestry)
                record(f"{tag} peg{options} gene", gene.tensors)
                for target in sizes:
                    record(f"{tag} peg{options} {target.short()}", PEG(**options).expand(gene, target))
            cfg = TrainConfig(epochs=1, max_steps=2, batch_size=8, progress=False, seed=0)
            adapted, _ = PEG().adapt(PEG().condense(ancestry), sizes[0], AdaptInputs(train=data, train_cfg=cfg))
            record(f"{tag} peg adapted", adapted.tensors)
            record(f"{tag} peg adapted {sizes[0].short()}", PEG().expand(adapted, sizes[0]))
            for options in [
                dict(eps=1e-3, num_images=12, batch_size=5),
                dict(num_images=16, batch_size=16, ffn="random"),
            ]:
                seed_everything(0)
                gene = ClusterLearngene(**options).condense(ancestry, CondenseInputs(train=data))
                record(f"{tag} cluster{options} gene", gene.tensors)
                for target in sizes:
                    record(f"{tag} cluster{options} {target.short()}", ClusterLearngene(**options).expand(gene, target))
    Path(args.out).write_text("\n".join(lines) + "\n")
    if args.tensors:
        save_safetensors(args.tensors, kept, {})
    print(f"{len(lines)} tensors -> {args.out}")


def compare(old_path: str, new_path: str) -> None:
    from safetensors.torch import load_file

    old, new = load_file(old_path), load_file(new_path)
    if old.keys() != new.keys():
        raise SystemExit(f"the files hold different tensors: {sorted(old.keys() ^ new.keys())[:5]} ...")
    differ = [k for k in old if not torch.equal(old[k], new[k])]
    print(f"{len(old) - len(differ)} of {len(old)} tensors bit-identical")
    if differ:
        worst = max(differ, key=lambda k: (old[k] - new[k]).abs().max().item())
        print(
            f"largest absolute difference {(old[worst] - new[worst]).abs().max().item():.3g} ({worst}); "
            f"differing cases: {sorted({k.split(' ')[0] + ' ' + k.split(' ')[1] for k in differ})}"
        )


if __name__ == "__main__":
    main()
