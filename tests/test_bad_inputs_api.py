"""Bad input through the Python API (issue 37): each a one-line LearngeneError naming the argument, raised before
anything is trained, allocated or loaded; their command-line twins exit 2 with the same line."""

from __future__ import annotations

import pytest
import torch

import learngene as lg
from learngene.cli import main
from learngene.errors import LearngeneError
from learngene.formats.model_file import save_model
from learngene.registry import get_method
from learngene.training.loop import TrainConfig, evaluate, train
from tests.conftest import TINY, make_images

FAST = TrainConfig(epochs=1, batch_size=8, progress=False)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "anc.safetensors"
    torch.manual_seed(0)
    save_model(path, TINY.create_model(), TINY)
    return path


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: train(m, None, FAST), "^train_data must be image data .*, got NoneType None"),
        (lambda m: train(m, make_images(8), FAST, eval_data=3), "^eval_data must be image data .*, got int 3"),
        (lambda m: evaluate(m, None), "^data must be image data .*, got NoneType None"),
        (lambda m: evaluate(m, make_images(8), batch_size=0), "^batch_size must be at least 1, got 0"),
        (lambda m: evaluate(m, make_images(8), batch_size=2.5), "^batch_size must be a whole number"),
        (
            lambda m: train(m, make_images(8), FAST, resume=True),
            r"^resume=True \(--resume\) continues from the run directory's checkpoint; pass run_dir \(--run-dir\) too$",
        ),
    ],
)
def test_train_and_evaluate_refuse_what_they_cannot_use(call, message):
    model = TINY.create_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(LearngeneError, match=message):
        call(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing trained


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"img_size": 0}, "^img_size must be a whole number from 1 to 16,384, got 0"),
        ({"num_classes": -1}, "^num_classes must be a whole number from 0 to 10,000,000, got -1"),
        ({"in_chans": "3"}, "^in_chans must be a whole number from 1 to 1,024, got '3'"),
        ({"img_size": 32}, "^img_size apply to timm checkpoints and model folders; .* is a learngene model file"),
    ],
)
def test_load_ancestry_refuses_sizes_it_would_drop_or_could_not_build(model_file, kwargs, message):
    with pytest.raises(LearngeneError, match=message):
        lg.load_ancestry(model_file, **kwargs)
    if "must be" in message:  # a timm checkpoint's sizes, checked before anything is read or built
        with pytest.raises(LearngeneError, match=message):
            lg.load_ancestry(model_file, "vit_tiny_patch16_224", **kwargs)


def test_tal_refuses_heads_that_do_not_divide_hid_when_made():
    with pytest.raises(LearngeneError, match=r"^tal option heads \(3\) must divide hid \(16\); pass heads=N"):
        get_method("tal")(hid=16, heads=3)
    assert get_method("tal")(hid=16, heads=4).config.heads == 4


def test_tal_refuses_a_min_depth_past_the_ancestry_and_a_hypernetwork_past_the_memory(monkeypatch):
    from learngene.method import Ancestry, CondenseInputs

    ancestry = Ancestry(TINY.create_model(), TINY)
    inputs = CondenseInputs(train=make_images(8), train_cfg=FAST)
    tal = get_method("tal")
    small = {"hid": 16, "heads": 2, "layers": 1, "lora_r": 4, "max_ck": 512}
    with pytest.raises(LearngeneError, match=r"^tal option min_depth \(5\) is more than the ancestry's 2 layers"):
        tal(**small, min_depth=5).condense(ancestry, inputs)
    # 1 GiB free: hid=4096 asks for ~1.4e10 bytes of weights, gradients and moments (counted on meta, nothing made)
    monkeypatch.setattr("learngene.host.memory.available_memory", lambda: 2**30)
    with pytest.raises(LearngeneError, match=r"^training tal's hypernetwork \([\d,]+ parameters.*GiB free; choose"):
        tal(**{**small, "hid": 4096}).condense(ancestry, inputs)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"widths": "8,16"}, "^pool option widths applies to design=authors, not equal_width"),
        ({"instance_depth": 1}, "^pool option instance_depth applies to design=authors"),
        ({"joint_epochs": 2}, "^pool option joint_epochs applies to design=authors"),
        ({"design": "authors", "instance_depths": "1,2"}, "^pool option instance_depths applies to design=equal"),
    ],
)
def test_pool_refuses_the_options_of_its_other_design(options, message, model_file, tmp_path, capsys):
    with pytest.raises(LearngeneError, match=message):
        get_method("pool")(**options)
    opts = [a for k, v in options.items() for a in ("--opt", f"{k}={v}")]
    argv = ["condense", "--method", "pool", "--ancestry", str(model_file), *opts, "-o", str(tmp_path / "g")]
    assert main(argv) == 2 and not (tmp_path / "g").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.strip("^").split(" applies")[0] in err


def test_training_refuses_a_model_whose_gradients_and_moments_cannot_fit(monkeypatch):
    """The weights fit (they are made), but the step's gradients and AdamW's two moments, 3 more copies, do not."""
    from learngene.training import epochs

    model = TINY.create_model()
    params = sum(p.numel() for p in model.parameters())
    monkeypatch.setattr("learngene.host.memory.available_memory", lambda: 3 * 4 * params - 1)
    monkeypatch.setattr(epochs, "require_activation_memory", lambda *args: None)  # only the parameters' memory here
    with pytest.raises(
        LearngeneError, match=rf"^training {params:,} parameters \(their gradients and AdamW's two moments\) needs "
    ):
        train(model, make_images(8), FAST)
