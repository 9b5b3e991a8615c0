"""``learngene bench --profile gpu-smoke``: the image-folder pipeline end to end at 224 px, bounded by steps.

It writes a folder of generated 224-px RGB images (:func:`learngene.data.write_image_folder`), then runs
the commands a user runs, in this process: ``ancestry`` (a ViT-S/16 trained with DeiT's augmentation),
``condense`` (TLEG's aux net distilled from it, the ancestry's preprocessing from its model file),
``expand`` (a shallower descendant) and ``train`` (fine-tuning), each training stage stopped after
``--max-steps`` optimizer steps. It checks that the path runs on the machine at hand (workers, pinned
memory, bf16, the train loop's GPU flags) and records how long each stage took; its accuracies mean
nothing (random images, a few steps). Without a GPU it refuses unless asked for ``--device cpu``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LearngeneError


@dataclass(frozen=True)
class FolderSmoke:
    """Sizes of a smoke run: the ancestry ViT, the generated folder, the steps of each training stage."""

    name: str
    depth: int = 12
    embed_dim: int = 384
    num_heads: int = 6
    patch_size: int = 16
    img_size: int = 224
    classes: int = 4
    train_per_class: int = 64
    test_per_class: int = 16
    descendant_depth: int = 6
    batch_size: int = 64
    max_steps: int = 20
    method: str = "tleg"
    description: str = ""  # one line for `learngene bench --help`


def run_smoke(
    profile: FolderSmoke,
    out: Path,
    run_command: Callable[[list[str]], int],
    device: str = "auto",
    max_steps: int | None = None,
    workers: int | None = None,
    progress: bool = True,
    extra: list[str] | None = None,
) -> dict:
    """Run every stage; returns (and writes to ``out/smoke.json``) each stage's command and seconds.

    ``run_command`` is the CLI's entry point (:func:`learngene.cli.main`, argv in, exit code out): the CLI
    that dispatches here passes itself, so this module does not import it back.
    """
    # imported here, not at the top: the CLI's parser reads SMOKE_PROFILES without loading torch
    import torch

    from ..formats.atomic import write_text_atomic
    from ..training.loop import resolve_device

    dev = resolve_device(device)  # before anything is written: a refused run leaves no folder behind
    if dev.type != "cuda" and device == "auto":
        raise LearngeneError(
            f"{profile.name} checks the GPU path (bf16, pinned memory, fused AdamW, flash attention) and needs a "
            f"GPU, but no CUDA device is visible; run it on a GPU machine, or pass device='cpu' (--device cpu) to run it on "
            f"this CPU anyway (minutes per stage at {profile.img_size} px)"
        )
    steps = max_steps or profile.max_steps
    images = _write_images(profile, out)
    common = ["--data", f"folder:{images}", "--device", device, "--batch-size", str(profile.batch_size)]
    common += ["--max-steps", str(steps), "--overwrite", *([] if progress else ["--quiet"])]
    common += [*(["--workers", str(workers)] if workers is not None else []), *(extra or [])]
    record: dict[str, Any] = {
        "profile": profile.name,
        "max_steps": steps,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "stages": [_run_stage(name, argv, run_command) for name, argv in _stages(profile, out, common, device)],
    }
    write_text_atomic(out / "smoke.json", json.dumps(record, indent=1) + "\n")
    return record


def _write_images(profile: FolderSmoke, out: Path) -> Path:
    """``out/images``: the generated train and test folders (written once, then renamed: a killed run never leaves
    half a folder)."""
    from ..data import write_image_folder

    out.mkdir(parents=True, exist_ok=True)
    images = out / "images"
    if not (images / "test").is_dir():
        tmp = out / "images.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        for seed, (split, per_class) in enumerate(
            (("train", profile.train_per_class), ("test", profile.test_per_class))
        ):
            write_image_folder(tmp, profile.classes, per_class, profile.img_size, seed=seed, splits=(split,))
        tmp.rename(images)
    return images


def _stages(profile: FolderSmoke, out: Path, common: list[str], device: str) -> list[tuple[str, list[str]]]:
    """Each stage's name and its command line (``common``: the data and budget flags the training stages share)."""
    size = _size_flags(
        depth=profile.depth,
        embed_dim=profile.embed_dim,
        num_heads=profile.num_heads,
        patch_size=profile.patch_size,
        img_size=profile.img_size,
    )
    shallower = _size_flags(depth=profile.descendant_depth)
    anc, gene, desc = out / "ancestry.safetensors", out / "gene.safetensors", out / "descendant.safetensors"
    aug = ["--aug", "deit"]
    stages: list[tuple[str, list[Any]]] = [
        ("ancestry", ["ancestry", *size, *common, *aug, "--label-smoothing", "0.1", "--out", anc]),
        ("condense", ["condense", "--method", profile.method, "--ancestry", anc, *common, *aug, "--out", gene]),
        ("expand", ["expand", gene, *shallower, "--overwrite", "--device", device, "--out", desc]),
        ("fine-tune", ["train", desc, *common, "--out", out / "finetuned.safetensors"]),
    ]
    return [(name, [str(a) for a in argv]) for name, argv in stages]


def _size_flags(**sizes: int) -> list[str]:
    """``--depth 12 --embed-dim 384 ...``: each size by the flag :class:`~learngene.vit.spec.ViTSpec` declares for it."""
    from ..vit.spec import ViTSpec

    flags = {f.name: f.metadata["flag"] for f in dataclasses.fields(ViTSpec) if f.metadata.get("flag")}
    return [arg for name, value in sizes.items() for arg in (flags[name], str(value))]


def _run_stage(name: str, argv: list[str], run_command: Callable[[list[str]], int]) -> dict[str, Any]:
    """Run one stage's command line; its name, seconds and command (a failed stage raises, naming it)."""
    tic = time.perf_counter()
    code = run_command(argv)
    seconds = time.perf_counter() - tic
    if code != 0:
        raise LearngeneError(
            f"gpu-smoke stage {name} failed (exit {code}): learngene {' '.join(argv)}; see its error above"
        )
    return {"stage": name, "seconds": round(seconds, 2), "command": "learngene " + " ".join(argv)}
