"""Cheap evaluation: every N epochs (0: after the last only) on a fixed subset of the test images."""

import pytest

from learngene.errors import LearngeneError
from learngene.training import epochs as train_module
from learngene.training.loop import TrainConfig, train

from .conftest import make_images

REAL_EVALUATE = train_module.evaluate


def _evaluated(tiny_spec, monkeypatch, **cfg):
    seen = []
    real = REAL_EVALUATE

    def spy(model, data, *args, **kwargs):
        seen.append((len(data), data.labels.tolist()))
        return real(model, data, *args, **kwargs)

    monkeypatch.setattr(train_module, "evaluate", spy)
    result = train(
        tiny_spec.create_model(),
        make_images(32),
        TrainConfig(batch_size=16, progress=False, **cfg),
        eval_data=make_images(40, seed=1),
    )
    return [h["epoch"] for h in result.history if "eval_acc" in h], seen, result


def test_eval_every_n_epochs_and_after_the_last(tiny_spec, monkeypatch):
    assert _evaluated(tiny_spec, monkeypatch, epochs=5, eval_every=2)[0] == [2, 4, 5]
    assert _evaluated(tiny_spec, monkeypatch, epochs=3, eval_every=0)[0] == [3]
    epochs, _, result = _evaluated(tiny_spec, monkeypatch, epochs=2)
    assert epochs == [1, 2] and result.final_acc is not None


def test_eval_images_is_a_fixed_subset(tiny_spec, monkeypatch):
    _, first, _ = _evaluated(tiny_spec, monkeypatch, epochs=2, eval_images=10)
    _, again, _ = _evaluated(tiny_spec, monkeypatch, epochs=1, eval_images=10, seed=7)
    assert [n for n, _ in first] == [10, 10] and first[0] == first[1] == again[0]  # same images, any seed


def test_bad_eval_settings_are_one_line_errors():
    # from Python: the field, in both callers' words
    with pytest.raises(LearngeneError, match=r"eval_every \(--eval-every\) must be in \[0, 1000000\], got -1"):
        TrainConfig(eval_every=-1)
    with pytest.raises(LearngeneError, match=r"eval_images \(--eval-images\) must be in \[0, "):  # 0: every image
        TrainConfig(eval_images=-1)
