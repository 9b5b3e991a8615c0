"""The gpu-smoke profile: an image folder through ancestry, condense, expand and fine-tune, bounded by --max-steps."""

from __future__ import annotations

import json

import pytest

from learngene.bench.profiles import PROFILES
from learngene.bench.smoke import FolderSmoke, run_smoke
from learngene.cli import main
from learngene.formats.model_file import model_preprocessing

pytestmark = pytest.mark.integration  # the smoke pipeline end to end, with its CLI


def test_the_smoke_pipeline_runs_every_stage_at_a_small_size(tmp_path):
    tiny = FolderSmoke(
        "tiny",
        depth=2,
        embed_dim=32,
        num_heads=2,
        patch_size=8,
        img_size=32,
        classes=3,
        train_per_class=6,
        test_per_class=2,
        descendant_depth=1,
        batch_size=8,
        max_steps=2,
    )
    record = run_smoke(tiny, tmp_path, main, device="cpu", workers=1, progress=False)
    assert [s["stage"] for s in record["stages"]] == ["ancestry", "condense", "expand", "fine-tune"]
    assert json.loads((tmp_path / "smoke.json").read_text()) == record
    pre = model_preprocessing(tmp_path / "finetuned.safetensors")
    assert pre["input_size"] == (3, 32, 32) and pre["interpolation"] == "bilinear"


@pytest.mark.slow  # ~7 min on a busy 2-core CPU (224-px ViT-S/16; measured), minutes less on an idle one
@pytest.mark.timeout(1800)  # the suite's 300 s would stop it; 1800 s: over 4 times the 7 min measured
def test_gpu_smoke_starts_and_runs_on_a_cpu_with_one_step(tmp_path, capsys):
    assert (
        main(
            [
                "bench",
                "--profile",
                "gpu-smoke",
                "--max-steps",
                "1",
                "--device",
                "cpu",
                "--quiet",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert "fine-tune" in capsys.readouterr().out
    assert PROFILES["gpu-smoke"].img_size == 224


def test_a_deit_ancestrys_preprocessing_flows_from_checkpoint_to_gene_to_descendants(tmp_path):
    """A random-weight timm DeiT checkpoint (torch.save), condensed on an RGB image folder through the CLI:
    the data are read with DeiT's bicubic resize and 0.9 centre crop, and gene and descendants record it."""
    import timm
    import torch

    from learngene.data import write_image_folder
    from learngene.gene import Learngene

    torch.manual_seed(0)
    deit = timm.create_model("deit_tiny_patch16_224", pretrained=False, num_classes=3)
    torch.save(deit.state_dict(), tmp_path / "deit.pth")
    images = write_image_folder(tmp_path / "images", num_classes=3, per_class=4, size=40)
    fast = ["--data", f"folder:{images}", "--batch-size", "6", "--max-steps", "2", "--workers", "1", "--quiet"]
    assert (
        main(
            [
                str(a)
                for a in [
                    "condense",
                    "--method",
                    "tleg",
                    "--ancestry",
                    tmp_path / "deit.pth",
                    "--timm-model",
                    "deit_tiny_patch16_224",
                    "--num-classes",
                    "3",
                    "--img-size",
                    "32",
                    "--opt",
                    "aux_depth=2",
                    *fast,
                    "--aug",
                    "deit",
                    "--out",
                    tmp_path / "gene.safetensors",
                ]
            ]
        )
        == 0
    )
    gene = Learngene.load(tmp_path / "gene.safetensors")
    deit_pre = {
        "interpolation": "bicubic",
        "mean": (0.485, 0.456, 0.406),
        "std": (0.229, 0.224, 0.225),
        "crop_pct": 0.9,
        "crop_mode": "center",
    }
    assert gene.preprocessing == {"input_size": (3, 32, 32), **deit_pre}
    assert (
        main(
            [
                str(a)
                for a in [
                    "expand",
                    tmp_path / "gene.safetensors",
                    "--depth",
                    "1",
                    "--quiet",
                    "--out",
                    tmp_path / "child.safetensors",
                ]
            ]
        )
        == 0
    )
    assert model_preprocessing(tmp_path / "child.safetensors") == gene.preprocessing
    assert (
        main(
            [str(a) for a in ["train", tmp_path / "child.safetensors", *fast, "--out", tmp_path / "tuned.safetensors"]]
        )
        == 0
    )
    assert model_preprocessing(tmp_path / "tuned.safetensors") == gene.preprocessing
    from learngene.cli.describe import describe_file

    for name in ("gene", "tuned"):
        assert "3x32x32, bicubic resize, center crop 0.9" in describe_file(tmp_path / f"{name}.safetensors")
