"""The use cases leave what they are given as it was: ``lg.train`` fine-tunes a copy of a result's model unless told
``inplace=True`` (then the given result refuses to save what it no longer is); ``lg.adapt`` leaves the gene it is
given untouched; a result's ``save`` writes what it holds, labelled as what it is."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

import learngene as lg
from learngene.data import digits, label_space, preprocessing_cfg
from learngene.formats.model_file import load_model_file, save_model
from learngene.gene import Learngene
from learngene.vit.spec import ViTSpec

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
DATA = lg.DataRequest("digits", train_images=16)
# two steps: the first may run at a warm-up learning rate of 0, the second moves the weights
SETTINGS = {"max_steps": 2, "batch_size": 8, "eval_images": 8, "progress": False}


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory) -> Path:
    """A tiny ancestry trained on nothing, recording the digits' label space (so a descendant keeps its head)."""
    path = tmp_path_factory.mktemp("no-mutation") / "anc.safetensors"
    train = digits("train", img_size=16)
    torch.manual_seed(0)
    origin = {"kind": "ancestry", "label_space": label_space(train)}
    save_model(path, SPEC.create_model(), SPEC, origin=origin, preprocessing=preprocessing_cfg(train))
    return path


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("new_head", [False, True], ids=["head kept", "fresh head"])
def test_train_fine_tunes_a_copy_and_the_callers_result_still_saves_what_it_was(ancestry, new_head, tmp_path):
    small = lg.expand(lg.condense("pretrained", str(ancestry)).gene)
    before, origin = _weights(small.model), copy.deepcopy(small.origin)
    tuned = lg.train(small, DATA, train_cfg=SETTINGS, new_head=new_head)
    assert tuned.model is not small.model
    assert _same(_weights(small.model), before), "lg.train changed the caller's model"
    assert small.origin == origin
    assert not _same(_weights(tuned.model), before), "the copy was not trained (the test would prove nothing)"
    small.save(tmp_path / "small.safetensors")
    state, _, saved_origin = load_model_file(tmp_path / "small.safetensors")
    assert _same(state, before) and saved_origin["kind"] == "descendant" and "finetuned_on" not in saved_origin
    tuned.save(tmp_path / "tuned.safetensors")
    state, _, saved_origin = load_model_file(tmp_path / "tuned.safetensors")
    assert _same(state, _weights(tuned.model)) and saved_origin["finetuned_on"].startswith("digits")


def test_inplace_trains_the_callers_module_to_the_same_weights_and_the_stale_result_refuses_to_save(ancestry, tmp_path):
    gene = lg.condense("pretrained", str(ancestry)).gene
    copied = lg.train(lg.expand(gene), DATA, train_cfg=SETTINGS)
    small = lg.expand(gene)
    tuned = lg.train(small, DATA, train_cfg=SETTINGS, inplace=True)
    assert tuned.model is small.model and small.trained_in_place
    # the copy changes nothing of the run: the same seed gives the same weights bit for bit, in place or not
    assert _same(_weights(tuned.model), _weights(copied.model))
    for stale in (lambda: small.save(tmp_path / "s.safetensors"), lambda: small.save(tmp_path / "hub/")):
        with pytest.raises(lg.LearngeneError, match=r"inplace=True.*save the result that call returned") as info:
            stale()
        assert "\n" not in str(info.value)
    with pytest.raises(lg.LearngeneError, match=r"inplace=True"):
        lg.train(small, DATA, train_cfg=SETTINGS)
    assert list(tmp_path.iterdir()) == []
    tuned.save(tmp_path / "tuned.safetensors")
    assert _same(load_model_file(tmp_path / "tuned.safetensors")[0], _weights(small.model))


def test_inplace_is_true_or_false_and_a_torch_module_is_refused_in_one_line(ancestry):
    small = lg.expand(lg.condense("pretrained", str(ancestry)).gene)
    with pytest.raises(lg.LearngeneError, match=r"inplace must be true or false"):
        lg.train(small, DATA, train_cfg=SETTINGS, inplace="yes")
    # learngene.train takes a file or a result, nothing else (the training loop on a module is learngene.training's)
    with pytest.raises(
        lg.LearngeneError, match=r"^model must be a model file's path or a use case's result, got VisionTransformer"
    ) as info:
        lg.train(SPEC.create_model(), DATA, train_cfg=SETTINGS)
    assert "\n" not in str(info.value)
    assert not small.trained_in_place


def test_adapt_leaves_the_callers_gene_untouched(ancestry):
    gene: Learngene = lg.condense("wave", str(ancestry), data=DATA, train_cfg=SETTINGS).gene
    tensors = {k: v.clone() for k, v in gene.tensors.items()}
    fields = copy.deepcopy((gene.config, gene.cost, gene.layout, gene.license, gene.label_space))
    adapted = lg.adapt(gene, DATA, {"depth": 1}, train_cfg=SETTINGS)
    assert adapted.gene is not gene
    assert _same(gene.tensors, tensors), "lg.adapt changed the caller's gene"
    assert (gene.config, gene.cost, gene.layout, gene.license, gene.label_space) == fields
    assert not _same({k: v for k, v in adapted.gene.tensors.items() if k in tensors}, tensors)
