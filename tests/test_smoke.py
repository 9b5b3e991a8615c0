"""The gpu-smoke profile: an image folder through ancestry, condense, expand and fine-tune, bounded by --max-steps."""

from __future__ import annotations

import json

import pytest

from learngene.bench.smoke import SMOKE_PROFILES, FolderSmoke, run_smoke
from learngene.cli import main
from learngene.io import model_preprocessing


def test_the_smoke_pipeline_runs_every_stage_at_a_small_size(tmp_path):
    tiny = FolderSmoke("tiny", depth=2, embed_dim=32, num_heads=2, patch_size=8, img_size=32, classes=3,
                       train_per_class=6, test_per_class=2, descendant_depth=1, batch_size=8, max_steps=2)
    record = run_smoke(tiny, tmp_path, device="cpu", workers=1, progress=False)
    assert [s["stage"] for s in record["stages"]] == ["ancestry", "condense", "expand", "fine-tune"]
    assert json.loads((tmp_path / "smoke.json").read_text()) == record
    pre = model_preprocessing(tmp_path / "finetuned.safetensors")
    assert pre["input_size"] == (3, 32, 32) and pre["interpolation"] == "bilinear"


@pytest.mark.slow  # ~7 min on a busy 2-core CPU (224-px ViT-S/16; measured), minutes less on an idle one
def test_gpu_smoke_starts_and_runs_on_a_cpu_with_one_step(tmp_path, capsys):
    assert main(["bench", "--profile", "gpu-smoke", "--max-steps", "1", "--device", "cpu", "--quiet",
                 "--out", str(tmp_path)]) == 0
    assert "fine-tune" in capsys.readouterr().out
    assert SMOKE_PROFILES["gpu-smoke"].img_size == 224
