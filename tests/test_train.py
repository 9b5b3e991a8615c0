import json
import math

import pytest
import torch

from learngene.errors import LearngeneError, TrainingError
from learngene.training.loop import TrainConfig, distill_loss, evaluate, predict_logits, train
from learngene.training.steps import lr_factor
from tests.bounds import U64, assert_same_training, order_bound
from tests.conftest import FaultyData, make_images

FAST = dict(batch_size=16, lr=3e-3, progress=False, warmup_epochs=0.5)


def _model(spec, seed=0):
    torch.manual_seed(seed)
    return spec.create_model()


def test_training_learns_the_toy_task(tiny_spec, toy_data):
    model = _model(tiny_spec)
    before = evaluate(model, toy_data)["acc"]
    result = train(model, toy_data, TrainConfig(epochs=6, **FAST), eval_data=toy_data)
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    assert result.final_acc > max(0.6, before)
    assert result.steps == 6 * 4 and len(result.history) == 6


def test_same_seed_gives_the_same_weights_bit_for_bit(tiny_spec, toy_data):
    states = []
    for _ in range(2):
        model = _model(tiny_spec)
        train(model, toy_data, TrainConfig(epochs=2, augment=True, **FAST))
        states.append(model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    other = _model(tiny_spec)
    train(other, toy_data, TrainConfig(epochs=2, augment=True, seed=1, **FAST))
    assert not torch.equal(other.state_dict()["head.weight"], states[0]["head.weight"])


class _Crash(Exception):
    pass


def _crash(*batch):
    raise _Crash()


def test_resume_after_a_crash_mid_epoch_is_bit_exact(tiny_spec, toy_data, tmp_path):
    cfg = TrainConfig(epochs=3, checkpoint_every=3, **FAST)
    reference = _model(tiny_spec)
    ref = train(reference, toy_data, cfg, run_dir=tmp_path / "ref")
    crashed = _model(tiny_spec)
    with pytest.raises(_Crash):
        train(crashed, FaultyData(toy_data, at=7, fault=_crash), cfg, run_dir=tmp_path / "run")  # dies in epoch 2
    resumed = _model(tiny_spec, seed=99)  # fresh weights: everything must come from the checkpoint
    res = train(resumed, toy_data, cfg, run_dir=tmp_path / "run", resume=True)
    assert all(torch.equal(resumed.state_dict()[k], reference.state_dict()[k]) for k in reference.state_dict())
    assert [h["train_loss"] for h in res.history] == [h["train_loss"] for h in ref.history]
    lines = (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]


def test_resume_refuses_changed_settings(tiny_spec, toy_data, tmp_path):
    train(_model(tiny_spec), toy_data, TrainConfig(epochs=1, **FAST), run_dir=tmp_path)
    with pytest.raises(LearngeneError, match="differs from the checkpointed one: lr was 0.003, now 0.0001; "):
        train(_model(tiny_spec), toy_data, TrainConfig(epochs=1, **{**FAST, "lr": 1e-4}), run_dir=tmp_path, resume=True)


def test_non_finite_loss_stops_with_a_clear_message(tiny_spec, toy_data, tmp_path):
    model = _model(tiny_spec)
    with torch.no_grad():
        model.head.weight.fill_(float("nan"))
    with pytest.raises(TrainingError, match="loss became nan"):
        train(model, toy_data, TrainConfig(epochs=1, **FAST), run_dir=tmp_path)


def test_distillation_loss():
    logits, labels = torch.randn(5, 4), torch.tensor([0, 1, 2, 3, 0])
    ce = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    assert torch.equal(distill_loss(logits, labels, None, 0.0, 1.0), ce)  # λ = 0: the cross-entropy itself
    # KL of a distribution with itself: 0 up to a 4-class sum of terms of at most log 4 (tests/bounds.py)
    assert distill_loss(logits, labels, logits.clone(), 1.0, 2.0).abs().max() <= order_bound(4, math.log(4))
    teacher = torch.randn(5, 4)
    kl = torch.nn.functional.kl_div(
        torch.log_softmax(logits / 2, -1), torch.log_softmax(teacher / 2, -1), log_target=True, reduction="none"
    ).sum(-1)
    expected = 0.75 * ce + 0.25 * 4 * kl  # the same sums in another order: a 4-class sum, then a weighted pair
    bound = order_bound(4, max(1.0, float(expected.abs().max())), steps=2)
    torch.testing.assert_close(distill_loss(logits, labels, teacher, 0.25, 2.0), expected, rtol=0, atol=bound)


def test_distillation_from_cached_teacher_logits(tiny_spec, toy_data):
    teacher = _model(tiny_spec, seed=5)
    train(teacher, toy_data, TrainConfig(epochs=4, **FAST))
    cached = toy_data.with_soft_targets(predict_logits(teacher, toy_data))
    a, b = _model(tiny_spec, seed=1), _model(tiny_spec, seed=1)
    cfg = TrainConfig(epochs=1, distill_lambda=1.0, distill_tau=2.0, **FAST)
    train(a, cached, cfg)
    train(b, toy_data, cfg, teacher=teacher)
    # the teacher's logits cached in evaluation batches or computed in training batches: other orders of its sums;
    # 4 steps (64 images, batches of 16) at lr 3e-3, a gradient summing 16 images x 17 tokens
    assert_same_training(a.state_dict(), b.state_dict(), lr=3e-3, steps=4, terms=16 * 17, depth=2)
    with pytest.raises(LearngeneError, match="needs a teacher"):
        train(_model(tiny_spec), toy_data, cfg)


class _DeviceProbe(torch.nn.Module):
    """A model that fails, as a CUDA layer does, when its input is not on its weights' device (the CPU's only other
    device here is ``meta``); its logits are a fixed CPU tensor, so that they can be read back from anywhere."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[tuple[str, str]] = []

    def forward(self, x):
        self.seen.append((x.device.type, self.weight.device.type))
        assert x.device == self.weight.device, f"input on {x.device}, weights on {self.weight.device}"
        return torch.zeros(len(x), 4)


def test_inference_runs_the_model_on_the_device_it_is_asked_for(toy_data):
    """TAL's task embedding and cached teacher logits run a CPU ancestry through predict_logits with the run's device:
    the model must go where its inputs go (on a GPU the inputs went alone, and bf16 met fp32 weights)."""
    probe = _DeviceProbe()
    assert predict_logits(probe, toy_data, 16, torch.device("meta")).shape == (len(toy_data), 4)
    assert probe.weight.device.type == "meta" and set(probe.seen) == {("meta", "meta")}
    assert torch.equal(predict_logits(_DeviceProbe(), toy_data, 16), torch.zeros(len(toy_data), 4))  # default: its own


def test_a_non_finite_loss_read_every_few_steps_stops_within_them_and_keeps_the_last_good_checkpoint(
    tiny_spec, toy_data, tmp_path, monkeypatch
):
    """On CUDA the loop reads the non-finite flags every few steps (each read waits for the GPU); the same watch, made
    to read every 4 steps here: the NaN of step 5 (epoch 2, step 1) stops the run at the next read (step 8), names
    its step, and no checkpoint is written after it (the last one is epoch 1's end); the fixed data resumes from
    there to the uninterrupted run's weights."""
    from functools import partial

    import learngene.training.epochs as epochs
    from learngene.training.checkpoint import CHECKPOINT, load_checkpoint
    from learngene.training.nonfinite import NonFiniteWatch
    from tests.conftest import nan_images

    monkeypatch.setattr(epochs, "NonFiniteWatch", partial(NonFiniteWatch, every=4))
    cfg = TrainConfig(epochs=3, **FAST)  # 4 steps per epoch
    reference = _model(tiny_spec)
    train(reference, toy_data, cfg)
    with pytest.raises(
        TrainingError,
        match=r"^loss became nan at epoch 2, step 1; the run stopped after epoch 2, step 4, where it reads the GPU's "
        r"check \(every 4 steps\); lower lr \(--lr\) or check the data; the last good checkpoint .*checkpoint.pt",
    ):
        train(_model(tiny_spec), FaultyData(toy_data, at=5, fault=nan_images), cfg, run_dir=tmp_path)
    ckpt = load_checkpoint(tmp_path / CHECKPOINT)
    assert (ckpt["epoch"], ckpt["step_in_epoch"], ckpt["global_step"]) == (1, 0, 4)
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values())
    resumed = _model(tiny_spec, seed=99)
    train(resumed, toy_data, cfg, run_dir=tmp_path, resume=True)
    assert all(torch.equal(resumed.state_dict()[k], v) for k, v in reference.state_dict().items())


def test_the_loop_reads_no_tensor_value_at_every_step_when_its_watch_reads_every_few(tiny_spec, monkeypatch):
    """On CUDA a read of a tensor's value (``.item()``, ``bool(t)``, ``.tolist()``) waits for the GPU; the loop's steps
    make none, so the host prepares the next batch while the GPU runs. Counted here on the CPU, with the watch reading
    every 20 steps as on CUDA (and fused AdamW, as on CUDA: the CPU's unfused one reads its step counts)."""
    import collections
    import sys
    from functools import partial

    import learngene.training.epochs as epochs
    from learngene.training.nonfinite import CUDA_CHECK_EVERY, NonFiniteWatch

    monkeypatch.setattr(epochs, "NonFiniteWatch", partial(NonFiniteWatch, every=CUDA_CHECK_EVERY))
    steps, reads = 2 * CUDA_CHECK_EVERY, collections.Counter()

    def counted(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if "learngene" in caller:
                reads[f"{name} in {caller.rsplit('/', 1)[-1]}:{sys._getframe(1).f_lineno}"] += 1
            return original(self, *args, **kwargs)

        return read

    data, model = make_images(4 * steps), _model(tiny_spec)
    cfg = TrainConfig(max_steps=steps, batch_size=4, augment=True, fused_adamw=True, progress=False)
    with monkeypatch.context() as patched:
        for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy"):
            patched.setattr(torch.Tensor, name, counted(name))
        train(model, data, cfg)
    # what is left: the starting weight norm, the watch's reads (every 20 steps and at the epoch's end) and the
    # epoch's record; one read per step would make at least 40
    assert sum(reads.values()) < steps / 4, reads


def test_schedule_warms_up_then_decays():
    factors = [lr_factor(s, 10, 100, 0.01) for s in range(100)]
    exact = order_bound(8, 1.0, u=U64)  # a handful of float64 operations
    assert factors[0] == pytest.approx(0.1, rel=exact) and factors[9] == pytest.approx(1.0, rel=exact)
    # one step short of the end the cosine is (1 - 0.01)·(1 - cos(π/90))/2 ≈ 3.0e-4 above its floor: within 1e-3
    assert factors[-1] == pytest.approx(0.01, abs=1e-3) and all(a >= b for a, b in zip(factors[9:], factors[10:]))


def test_data_that_does_not_fit_the_model(tiny_spec):
    with pytest.raises(
        LearngeneError,
        match=r"3-channel images but the model expects 1; load the data with in_chans=1 \(--in-chans 1\) ",
    ):
        train(_model(tiny_spec), make_images(8, chans=3), TrainConfig(epochs=1, **FAST))
    with pytest.raises(
        LearngeneError,
        match=r"8px images but the model expects 16px; load the data with img_size=16 \(--img-size 16\)$",
    ):
        train(_model(tiny_spec), make_images(8, size=8), TrainConfig(epochs=1, **FAST))
    with pytest.raises(LearngeneError, match="6 classes"):
        train(_model(tiny_spec), make_images(12, num_classes=6), TrainConfig(epochs=1, **FAST))


def test_bad_settings_are_refused():
    with pytest.raises(
        LearngeneError, match=r"^lr \(--lr\) must be positive, got 0; pass e.g. lr=0.001 \(--lr 0.001\)$"
    ):
        TrainConfig(lr=0)
    with pytest.raises(
        LearngeneError,
        match=r"^distill_lambda \(--distill-lambda\) must be in \[0, 1\], got 2; pass a number from 0 \(plain CE\) to "
        r"1 \(pure distillation\)$",
    ):
        TrainConfig(distill_lambda=2)
    with pytest.raises(LearngeneError, match=r"^epochs \(--epochs\) must be at least 1, got 0"):
        TrainConfig(epochs=0)


# ---- GPU speed flags and DeiT's mixup, checked on CPU ------------------------------------------------------
def _rgb_spec(tiny_spec):
    return tiny_spec.replace(in_chans=3, num_classes=3)


@pytest.fixture(scope="module")
def rgb_folder_data(tmp_path_factory):
    from learngene.data import load_splits, write_image_folder

    root = write_image_folder(tmp_path_factory.mktemp("rgb"), num_classes=3, per_class=6, size=20)
    return load_splits(f"folder:{root}", img_size=16, augment="deit", workers=0)


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_sdpa_and_eager_attention_and_fused_adamw_give_the_same_training(tiny_spec, toy_data):
    from learngene.training.loop import set_fused_attention

    assert set_fused_attention(_model(tiny_spec), False) == tiny_spec.depth
    runs = {}
    for name, flags in {"sdpa": {}, "eager": {"sdpa": False}, "fused": {"fused_adamw": True}}.items():
        model = _model(tiny_spec)
        train(model, toy_data, TrainConfig(epochs=1, **FAST, **flags))
        runs[name] = _weights(model)
        assert all(m.fused_attn == flags.get("sdpa", True) for m in model.modules() if hasattr(m, "fused_attn"))
    for name in ("eager", "fused"):  # other kernels, the same math: 4 steps at lr 3e-3 (tests/bounds.py)
        assert_same_training(runs[name], runs["sdpa"], lr=3e-3, steps=4, terms=16 * 17, depth=2)


def test_deit_mixup_trains_deterministically_on_a_streamed_folder(tiny_spec, rgb_folder_data):
    train_data, test_data = rgb_folder_data
    spec = _rgb_spec(tiny_spec)
    runs = []
    for _ in range(2):
        model = _model(spec)
        result = train(
            model, train_data, TrainConfig(epochs=2, mixup=True, label_smoothing=0.1, **FAST), eval_data=test_data
        )
        runs.append(_weights(model))
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])
    assert all(torch.isfinite(torch.tensor(r["train_loss"])) for r in result.history)
    plain = _model(spec)
    train(plain, train_data, TrainConfig(epochs=2, label_smoothing=0.1, **FAST))
    assert not torch.equal(_weights(plain)["head.weight"], runs[0]["head.weight"])


def test_mixup_targets_sum_to_one_and_an_odd_batch_goes_unmixed():
    from learngene.data import BatchMixer

    mixer = BatchMixer(num_classes=4, label_smoothing=0.1)
    x, y = torch.rand(6, 3, 8, 8), torch.tensor([0, 1, 2, 3, 0, 1])
    mixed, target = mixer(x, y)
    # two smoothed one-hots mixed: a sum of 4 classes' values of at most 1, twice (tests/bounds.py)
    assert target.shape == (6, 4) and torch.allclose(target.sum(-1), torch.ones(6), rtol=0, atol=order_bound(4, 1.0, 2))
    odd_x, odd_target = mixer(x[:5], y[:5])
    assert torch.equal(odd_x, x[:5]) and torch.equal(odd_target.argmax(-1), y[:5])
    assert odd_target.max() == pytest.approx(1 - 0.1 + 0.1 / 4, rel=order_bound(2, 1.0, 2))  # float32: 1 - ε + ε/C


def test_a_teacher_on_streamed_data_runs_in_inference_mode(tiny_spec, rgb_folder_data):
    train_data, _ = rgb_folder_data
    spec = _rgb_spec(tiny_spec)
    teacher = _model(spec, seed=1)
    calls = []
    teacher.register_forward_hook(lambda m, i, o: calls.append(torch.is_inference_mode_enabled()))
    result = train(
        _model(spec), train_data, TrainConfig(epochs=1, distill_lambda=1.0, mixup=True, **FAST), teacher=teacher
    )
    assert calls and all(calls) and result.history[0]["train_loss"] > 0


@pytest.mark.slow  # compiling takes ~100 s on a busy 2-core CPU (measured)
def test_compiled_training_matches_eager(tiny_spec, toy_data):
    runs = []
    for compile in (False, True):
        model = _model(tiny_spec)
        train(model, toy_data, TrainConfig(epochs=1, compile=compile, **FAST))
        runs.append(_weights(model))
    assert_same_training(runs[1], runs[0], lr=3e-3, steps=4, terms=16 * 17, depth=2)  # compiled: fused kernels
