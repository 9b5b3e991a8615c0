"""One fine-tune (issue 55): ``learngene train`` and every compare and bench cell give a model its head and its
distillation by the same function, :func:`learngene.pipeline.fine_tuning.fine_tuning`."""

from __future__ import annotations

import torch

import learngene as lg
from learngene.bench import cells
from learngene.method import Ancestry
from learngene.methods.pool import StitchedViT
from learngene.pipeline import training
from learngene.pipeline.fine_tuning import fine_tuning
from learngene.training.config import TrainConfig
from learngene.training.epochs import TrainResult
from learngene.vit.spec import ViTSpec
from tests.conftest import make_images

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
CFG = TrainConfig(batch_size=16, epochs=1)


def _scratch_head(spec: ViTSpec, seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)  # the draws a scratch model of this seed makes (fresh_head draws the same)
    return {k: v.clone() for k, v in spec.create_model().get_classifier().state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_train_and_the_cells_call_the_one_fine_tune():
    assert training.fine_tuning is fine_tuning and cells.fine_tuning is fine_tuning


def test_a_fresh_head_is_scratchs_at_the_seed_whatever_the_model_held_and_however_many_classes():
    data = make_images(n=32, num_classes=3)
    torch.manual_seed(99)
    model = SPEC.create_model()  # a 4-way head, other draws than the seed's
    tuned = fine_tuning(model, SPEC, data, 7, CFG)
    assert tuned.head.fresh and tuned.student is model and tuned.teacher is None and tuned.distillation is None
    assert _same(model.get_classifier().state_dict(), _scratch_head(SPEC.replace(num_classes=3), 7))
    same_count = SPEC.create_model()
    assert fine_tuning(same_count, SPEC, make_images(n=32), 7, CFG, new_head=True).head.fresh
    assert _same(same_count.get_classifier().state_dict(), _scratch_head(SPEC, 7))


def test_a_head_trained_on_the_datas_classes_is_kept():
    data = make_images(n=32)
    model = SPEC.create_model()
    before = {k: v.clone() for k, v in model.get_classifier().state_dict().items()}
    tuned = fine_tuning(model, SPEC, data, 7, CFG, label_space=data.label_space)
    assert not tuned.head.fresh and "reusing" in tuned.head.why
    assert _same(model.get_classifier().state_dict(), before)


def test_a_stitched_model_takes_the_scratch_head_of_its_head_side():
    end = SPEC.replace(embed_dim=64, num_heads=4)
    model = StitchedViT(SPEC, end, 0, 1)
    tuned = fine_tuning(model, SPEC, make_images(n=32, num_classes=3), 5, CFG)
    assert tuned.head.fresh and model.num_classes == 3
    assert _same(model.get_classifier().state_dict(), _scratch_head(end.replace(num_classes=3), 5))


def test_the_teachers_outputs_are_computed_once_for_runs_that_share_them():
    data = make_images(n=32, num_classes=3)
    teacher = Ancestry(SPEC.create_model(), SPEC)  # 4 classes, no label space: feature distillation
    cache: dict = {}
    first = fine_tuning(SPEC.create_model(), SPEC, data, 0, CFG, teacher=teacher, teacher_outputs=cache)
    second = fine_tuning(SPEC.create_model(), SPEC, data, 1, CFG, teacher=teacher, teacher_outputs=cache)
    assert first.distillation is not None and first.distillation.kind == "features" and list(cache) == ["features"]
    assert second.data is first.data and first.loss is not None and first.student is not second.student


def test_learngene_train_fine_tunes_from_the_scratch_head_of_its_seed(tmp_path, monkeypatch):
    """The head ``lg.train`` starts from with a fresh head is the one a compare cell of that seed starts from."""
    path = tmp_path / "m.safetensors"
    lg.Trained(SPEC.create_model(), SPEC, {"kind": "descendant"}, None, "", TrainResult()).save(path)
    started = {}

    def loop(model, data, cfg, **kwargs):
        started.update({k: v.clone() for k, v in model.get_classifier().state_dict().items()})
        return TrainResult()

    monkeypatch.setattr(training, "train_loop", loop)
    lg.train(str(path), make_images(n=32, num_classes=3), train_cfg={"epochs": 1, "seed": 4}, new_head=True)
    assert _same(started, _scratch_head(SPEC.replace(num_classes=3), 4))


def test_a_feature_students_projection_is_drawn_from_the_runs_seed_not_the_process_state():
    """compare's ``+kd`` cells with feature distillation differed from one run of the same command to the next (the
    projection was drawn from whatever state the process's generator was in); drawn from the seed, they agree."""
    data, teacher = make_images(n=32, num_classes=3), Ancestry(SPEC.create_model(), SPEC)
    small = SPEC.replace(embed_dim=16, num_heads=1)  # another width than the teacher's: a learned projection
    projections = []
    for state in (1, 2):
        torch.manual_seed(state)
        tuned = fine_tuning(small.create_model(), small, data, 3, CFG, teacher=teacher)
        projections.append(tuned.student.proj.weight.detach().clone())
    assert projections[0].shape == (32, 16) and torch.equal(projections[0], projections[1])
