"""Hostile inputs, round 6 (issue 56): state read back from disk is checked against what learngene writes, result
objects check their fields, objects passed from Python get their file's checks, timm gets only architecture arguments.

Each refusal is one line (exit code 2 from the command line, a LearngeneError from Python) and leaves nothing behind.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from learngene.cli import main
from learngene.errors import LearngeneError, TrainingError
from learngene.method import Ancestry
from learngene.training.checkpoint import CHECKPOINT, load_checkpoint
from tests.conftest import cli_error

RUN = [
    *("ancestry", "--data", "digits", "--depth", "1", "--embed-dim", "16", "--num-heads", "2", "--patch-size", "4"),
    *("--img-size", "16", "--train-images", "32", "--batch-size", "16", "--epochs", "1", "--eval-images", "16"),
    "--quiet",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished ancestry run's folder: its checkpoint is what each case edits (a copy of it)."""
    base = tmp_path_factory.mktemp("state")
    assert main([*RUN, "--run-dir", str(base / "run"), "--out", str(base / "a.safetensors")]) == 0
    return base / "run"


# ---- a checkpoint's fields --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key, value",
    [
        ("threads", 0),
        ("threads", -3),
        ("threads", "abc"),
        ("threads", True),
        ("epoch", -1),
        ("global_step", 2.5),
        ("seconds", float("nan")),
        ("epoch_sums", torch.zeros(2, dtype=torch.float64)),
        ("history", "none"),
        ("sane", "yes"),
        ("best_loss", "low"),
        ("rng", {"torch": torch.zeros(1)}),
        ("model", {"w": "not a tensor"}),
    ],
)
def test_a_checkpoint_field_learngene_would_not_write_is_refused_on_resume(run_dir, tmp_path, capsys, key, value):
    ckpt = load_checkpoint(run_dir / CHECKPOINT)
    ckpt[key] = value
    (tmp_path / "run").mkdir()
    torch.save(ckpt, tmp_path / "run" / CHECKPOINT)
    argv = [*RUN, "--run-dir", tmp_path / "run", "--out", tmp_path / "b.safetensors", "--resume"]
    err = cli_error(capsys, argv)
    assert f"records {key}=" in err and "delete it" in err, err
    assert not (tmp_path / "b.safetensors").exists()
    with pytest.raises(TrainingError, match=f"records {key}="):
        load_checkpoint(tmp_path / "run" / CHECKPOINT)


def test_a_checkpoint_whose_optimizer_state_does_not_fit_is_one_line(run_dir, tmp_path, capsys):
    """The fingerprint matched (the same run), but the optimizer's state was replaced: torch's several-line error is
    quoted in one line, after its colon."""
    ckpt = load_checkpoint(run_dir / CHECKPOINT)
    ckpt["optimizer"] = {"state": {}, "param_groups": []}
    (tmp_path / "run").mkdir()
    torch.save(ckpt, tmp_path / "run" / CHECKPOINT)
    err = cli_error(capsys, [*RUN, "--run-dir", tmp_path / "run", "--out", tmp_path / "b.safetensors", "--resume"])
    assert "cannot be restored" in err and "delete it" in err, err


def test_an_untouched_checkpoint_still_resumes(run_dir, tmp_path):
    """The checks refuse only what learngene would not write: the run's own checkpoint passes them."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / CHECKPOINT).write_bytes((run_dir / CHECKPOINT).read_bytes())
    assert main([*RUN, "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "b.safetensors"), "--resume"]) == 0
    assert (tmp_path / "b.safetensors").exists()


# ---- result objects check their fields when they are made ---------------------------------------------------
def test_a_comparison_without_a_profile_is_refused_before_any_folder_is_made(tmp_path):
    import learngene as lg

    with pytest.raises(LearngeneError, match="Comparison profile must be a Profile, got None"):
        lg.Comparison([], None).save(tmp_path / "report")
    assert not (tmp_path / "report").exists()
    with pytest.raises(LearngeneError, match="Comparison rows must be a Python list whose every item is a Row"):
        lg.Comparison([{"method": "pretrained"}], None)


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda lg: lg.Condensed(None), "Condensed gene must be a Learngene"),
        (lambda lg: lg.Condensed(_gene(), note=3), "Condensed note must be a string or null"),
        (lambda lg: lg.Condensed(_gene(), inputs=["a"]), "Condensed inputs must be a list"),
        (lambda lg: lg.Descendant(None, None, {}, None), "Descendant model must be a torch module"),
        (lambda lg: lg.Descendant(torch.nn.Linear(1, 1), "L2", {}, None), "Descendant spec must be a ViTSpec"),
        (lambda lg: lg.Descendant(torch.nn.Linear(1, 1), None, None, None), "Descendant origin must be"),
        (lambda lg: lg.Descendant(torch.nn.Linear(1, 1), None, {}, None, provided="x"), "Descendant provided must"),
    ],
)
def test_a_result_made_with_a_wrong_field_is_refused_by_name(make, says):
    import learngene as lg

    with pytest.raises(LearngeneError, match=says):
        make(lg)


def _gene():
    from learngene.gene import Learngene

    return Learngene("pretrained", {"w": torch.zeros(1)})


# ---- a compare cell read back from its cache ----------------------------------------------------------------
@pytest.mark.parametrize(
    "change", [{"accs": "0.5"}, {"accs": [0.5], "eval_epochs": [1, 2]}, {"seed": "0"}, {"train_seconds": None}]
)
def test_a_cached_cell_of_the_wrong_kind_is_taken_for_damaged_and_recomputed(tmp_path, capsys, change):
    """A cell's JSON that learngene would not write is refused when read (by the row's own check), and the cache
    removes it and computes the cell again instead of reporting from it."""
    import dataclasses
    import json

    from learngene.bench.rows import Row, row_from_dict
    from learngene.bench.stages import load_cached

    good = Row("pretrained", "digits", "L2-D32-H2", 2, 32, 2, 0, accs=[0.5], eval_epochs=[1])
    path = tmp_path / "cell.json"
    path.write_text(json.dumps({**dataclasses.asdict(good), **change}))
    assert load_cached(path, lambda f: row_from_dict(json.loads(f.read_text()))) is None
    assert "is damaged (a result row of 'pretrained'" in capsys.readouterr().err
    assert not path.exists()
    path.write_text(json.dumps(dataclasses.asdict(good)))
    assert load_cached(path, lambda f: row_from_dict(json.loads(f.read_text()))) == good


# ---- an object gets the checks its file gets, at the same point of the call ----------------------------------
def _tiny_ancestry():
    from learngene.method import Ancestry
    from tests.conftest import TINY

    torch.manual_seed(0)
    return Ancestry(TINY.create_model().eval(), TINY)


def _poisoned(gene, key=None):
    import dataclasses

    key = key or next(iter(gene.tensors))
    tensors = {k: v.clone() for k, v in gene.tensors.items()}
    tensors[key].view(-1)[0] = float("nan")
    return dataclasses.replace(gene, tensors=tensors)


@pytest.mark.parametrize("method", ["pretrained", "heru_lg", "weight_selection"])
def test_a_gene_object_holding_nan_is_refused_as_its_file_is(tmp_path, method):
    import learngene as lg
    from learngene.pipeline.results import save_gene

    gene = _poisoned(lg.condense(method, _tiny_ancestry()).gene)
    gene.save(tmp_path / "g.safetensors")  # Learngene.save only writes: a made gene is checked by save_gene
    with pytest.raises(LearngeneError, match="holds NaN or infinite values") as from_file:
        lg.expand(tmp_path / "g.safetensors", {"depth": 3})
    with pytest.raises(LearngeneError, match="holds NaN or infinite values") as from_object:
        lg.expand(gene, {"depth": 3})
    assert str(from_object.value) == str(from_file.value).replace(repr(str(tmp_path / "g.safetensors")), "the gene")
    with pytest.raises(LearngeneError, match="holds NaN or infinite values"):
        save_gene(gene, tmp_path / "h.safetensors")
    assert not (tmp_path / "h.safetensors").exists()


@pytest.mark.parametrize("method", ["pretrained", "heru_lg", "auto_lg"])
@pytest.mark.parametrize("change", ["cleared", "one dropped", "misshapen"])
def test_a_weight_copying_gene_lacking_a_stored_tensor_is_refused_not_initialized(tmp_path, method, change):
    """A block copier's expansion skipped a tensor its gene did not hold (an emptied gene expanded into timm's
    initialization, silently): its gene must hold what its condensation stores, in its layout's shapes."""
    import dataclasses

    import learngene as lg

    gene = lg.condense(method, _tiny_ancestry()).gene
    first = sorted(gene.tensors)[0]
    tensors = {
        "cleared": {},
        "one dropped": {k: v for k, v in gene.tensors.items() if k != first},
        "misshapen": {**gene.tensors, first: torch.zeros(3)},
    }[change]
    broken = dataclasses.replace(gene, tensors=tensors)
    says = "its tensor .* has shape" if change == "misshapen" else "it lacks tensor"
    with pytest.raises(LearngeneError, match=f"not a valid {method} learngene \\({says}"):
        lg.expand(broken, {"depth": 3})
    broken.save(tmp_path / "g.safetensors")
    with pytest.raises(LearngeneError, match=f"not a valid {method} learngene \\({says}"):
        lg.expand(tmp_path / "g.safetensors", {"depth": 3})
    assert lg.expand(gene, {"depth": 3}).model is not None  # the gene as condensed expands


def test_an_ancestry_object_gets_its_files_checks():
    import learngene as lg
    from learngene.method import Ancestry

    anc = _tiny_ancestry()
    with torch.no_grad():
        anc.model.cls_token.fill_(float("inf"))
    with pytest.raises(LearngeneError, match="the Ancestry's model: tensor 'cls_token' holds NaN or infinite"):
        lg.condense("pretrained", anc)
    other = _tiny_ancestry()
    wrong = Ancestry(other.model, other.spec.replace(depth=3))
    with pytest.raises(LearngeneError, match="the spec given with it does not describe the Ancestry's model"):
        lg.condense("pretrained", wrong)


def test_a_model_result_holding_nan_is_refused_by_train_as_its_file_is(tmp_path):
    import learngene as lg

    descendant = lg.expand(lg.condense("pretrained", _tiny_ancestry()).gene)
    with torch.no_grad():
        descendant.model.pos_embed.fill_(float("nan"))
    with pytest.raises(LearngeneError, match="the Descendant's model: tensor 'pos_embed' holds NaN"):
        lg.train(descendant, "digits", train_cfg={"epochs": 1})


# ---- timm is given architecture arguments only -----------------------------------------------------------------
@pytest.fixture(scope="module")
def timm_pth(tmp_path_factory) -> Path:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=10, depth=2, img_size=32, patch_size=8
    )
    path = tmp_path_factory.mktemp("timm") / "model.pth"
    torch.save(model.state_dict(), path)
    return path


SIZES = {"num_classes": 10, "depth": 2, "img_size": 32, "patch_size": 8}


@pytest.mark.parametrize(
    "extra",
    [
        {"checkpoint_path": "/etc/passwd"},
        {"pretrained_cfg_overlay": {"file": "/etc/passwd"}},
        {"pretrained": True},
        {"pretrained_cfg": {"file": "/etc/passwd"}},
        {"features_only": True},
    ],
)
def test_a_loading_argument_for_timm_is_refused_from_python(timm_pth, extra):
    import learngene as lg

    with pytest.raises(LearngeneError, match=f"{next(iter(extra))} .*is not an architecture argument.*--ancestry FILE"):
        lg.load_ancestry(timm_pth, "vit_tiny_patch16_224", **SIZES, **extra)


@pytest.mark.parametrize("arg", ['checkpoint_path="/etc/passwd"', 'pretrained_cfg_overlay={"file": "/etc/passwd"}'])
def test_a_loading_timm_arg_is_one_line_that_says_to_pass_the_file_as_ancestry(timm_pth, tmp_path, capsys, arg):
    sizes = [a for k, v in SIZES.items() for a in ("--timm-arg", f"{k}={v}")]
    argv = ["condense", "--method", "pretrained", "--ancestry", timm_pth, "--timm-model", "vit_tiny_patch16_224"]
    err = cli_error(capsys, [*argv, *sizes, "--timm-arg", arg, "--out", tmp_path / "g.safetensors"])
    assert "is not an architecture argument" in err and "--ancestry FILE" in err, err
    assert not (tmp_path / "g.safetensors").exists()


def test_an_argument_the_model_class_does_not_take_is_refused_naming_the_class(timm_pth):
    import learngene as lg

    with pytest.raises(LearngeneError, match="bogus is not an argument of timm's VisionTransformer"):
        lg.load_ancestry(timm_pth, "vit_tiny_patch16_224", **SIZES, bogus=1)
    # an architecture argument the class takes still passes (qkv_bias is the checkpoint's own here)
    assert lg.load_ancestry(timm_pth, "vit_tiny_patch16_224", **SIZES, qkv_bias=True).spec.depth == 2


def test_a_hub_folders_config_holding_a_loading_argument_is_refused(tmp_path):
    import json

    import learngene as lg

    lg.expand(lg.condense("pretrained", _tiny_ancestry()).gene).save(tmp_path / "hub", format="hub")
    config = json.loads((tmp_path / "hub" / "config.json").read_text())
    config.setdefault("model_args", {})["checkpoint_path"] = "/etc/passwd"
    (tmp_path / "hub" / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        LearngeneError,
        match="hub: checkpoint_path is not an architecture argument.*remove it from the folder's config.json",
    ):
        lg.load_ancestry(tmp_path / "hub")


# ---- one rule for repeats: refused, both values named, everywhere ---------------------------------------------
def test_a_flag_given_twice_names_both_values(capsys, tmp_path):
    err = cli_error(capsys, ["expand", tmp_path / "g.safetensors", "--seed", "1", "--seed", "2"])
    assert "given twice (first as 1, then as 2)" in err, err


@pytest.mark.parametrize("values", [("seed=1", "seed=2"), ("seed=1", "seed=1")])
def test_an_option_given_twice_is_refused_from_python_and_the_command_line(capsys, tmp_path, values):
    import learngene as lg

    gene = lg.condense("mimetic", _tiny_ancestry()).gene
    with pytest.raises(LearngeneError, match=r"option seed is given twice \(seed=1, then seed=[12]\)"):
        lg.expand(gene, {"depth": 3}, options=list(values))
    gene.save(tmp_path / "g.safetensors")
    argv = ["expand", tmp_path / "g.safetensors", "--depth", "3", "--out", tmp_path / "d.safetensors"]
    err = cli_error(capsys, [*argv, "--opt", values[0], "--opt", values[1]])
    assert "option seed is given twice" in err and "(--opt seed=VALUE)" in err, err
    assert not (tmp_path / "d.safetensors").exists()


def test_a_timm_arg_given_twice_is_refused(timm_pth, capsys, tmp_path):
    import learngene as lg

    with pytest.raises(LearngeneError, match=r"timm argument depth is given twice \(depth=2, then depth=3\)"):
        lg.AncestryRequest(timm_pth, timm_model="vit_tiny_patch16_224", timm_kwargs=["depth=2", "depth=3"])
    argv = ["condense", "--method", "pretrained", "--ancestry", timm_pth, "--timm-model", "vit_tiny_patch16_224"]
    err = cli_error(capsys, [*argv, "--timm-arg", "depth=2", "--timm-arg", "depth=2", "--out", tmp_path / "g"])
    assert "timm argument depth is given twice" in err, err


@pytest.mark.parametrize(
    "choice, says",
    [
        ({"methods": ("pretrained", "pretrained")}, "methods (--methods) names pretrained twice"),
        ({"references": ("scratch", "scratch")}, "references (--references) names scratch twice"),
    ],
)
def test_a_list_naming_one_twice_is_refused_as_sizes_are(choice, says):
    from learngene.comparison.choices import CompareChoices

    with pytest.raises(LearngeneError, match=re.escape(says)):
        CompareChoices(**choice)


def test_compare_and_bench_refuse_a_method_named_twice_on_the_command_line(capsys, tmp_path):
    argv = ["compare", "--ancestry", tmp_path / "a.safetensors", "--data", "digits", "--sizes", "L1-D32-H2"]
    err = cli_error(capsys, [*argv, "--methods", "pretrained,pretrained", "--out", tmp_path / "report"])
    assert "names pretrained twice" in err, err
    err = cli_error(
        capsys, ["bench", "--profile", "demo", "--out", tmp_path / "bench", "--methods", "pretrained", "pretrained"]
    )
    assert "names pretrained twice" in err, err


@pytest.mark.parametrize("value", [None, "abc", -100])
def test_a_transformers_config_field_of_null_is_refused_as_a_string_is(tmp_path, value):
    """transformers writes rope_theta as a number: null (an edit) was read as the default, a string refused."""
    import json

    import learngene as lg
    from tests.test_rope_families import hf_dinov3_folder

    hf_dinov3_folder(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["rope_theta"] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(LearngeneError, match=f"rope_theta is {re.escape(repr(value))}, not a non-negative number"):
        lg.load_ancestry(tmp_path)


# ---- expand --verify takes every ancestry form condense takes ---------------------------------------------------
def _ancestry_forms(tmp_path, monkeypatch):
    """The one tiny timm ViT as each form condense reads, with condense's arguments for it: a .pth and a safetensors
    checkpoint (timm_model and the sizes as --timm-arg), a timm hub folder, the same folder by hf-hub: name from a
    local Hugging Face cache."""
    import timm
    from safetensors.torch import save_file

    from tests.hub_fixtures import TINY_TIMM_ARGS, cache_repo, folder_files, offline_hub, tiny_timm_folder

    model = tiny_timm_folder(tmp_path / "hub")
    torch.save(model.state_dict(), tmp_path / "model.pth")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "model.safetensors")
    cache_repo(offline_hub(monkeypatch, tmp_path / "cache"), "someone/tiny-vit", folder_files(tmp_path / "hub"))
    sizes = [a for k, v in {**TINY_TIMM_ARGS, "num_classes": 4}.items() for a in ("--timm-arg", f"{k}={v}")]
    checkpoint = ["--timm-model", "vit_tiny_patch16_224", *sizes]
    assert timm.is_model("vit_tiny_patch16_224")
    return {
        "pth": (tmp_path / "model.pth", checkpoint),
        "safetensors": (tmp_path / "model.safetensors", checkpoint),
        "hub folder": (tmp_path / "hub", []),
        "hf-hub": ("hf-hub:someone/tiny-vit", []),
    }


@pytest.mark.parametrize("form", ["pth", "safetensors", "hub folder", "hf-hub"])
def test_expand_verify_reads_every_ancestry_form_condense_reads(tmp_path, monkeypatch, capsys, form):
    """expand takes no --timm-model: a plain checkpoint given to --verify is read as the architecture and sizes the
    gene records of its ancestry (the advice to pass --timm-model named a flag expand does not have)."""
    ancestry, extra = _ancestry_forms(tmp_path, monkeypatch)[form]
    gene = tmp_path / "g.safetensors"
    assert main(["condense", "--method", "pretrained", "--ancestry", str(ancestry), *extra, "--out", str(gene)]) == 0
    out = tmp_path / "d.safetensors"
    assert main(["expand", str(gene), "--verify", str(ancestry), "--out", str(out)]) == 0, capsys.readouterr().err
    assert "outputs differ by at most 0 " in capsys.readouterr().out
    assert out.exists()


def test_a_gene_given_where_a_model_is_wanted_is_told_it_is_a_learngene(tmp_path, capsys):
    import learngene as lg

    lg.condense("pretrained", _tiny_ancestry()).save(tmp_path / "g.safetensors")
    err = cli_error(
        capsys, ["expand", tmp_path / "g.safetensors", "--verify", tmp_path / "g.safetensors", "--out", tmp_path / "d"]
    )
    assert "is a learngene, not a model" in err and "--timm-model" not in err, err
    with pytest.raises(LearngeneError, match="is a learngene, not a model"):
        lg.load_ancestry(tmp_path / "g.safetensors")


# ---- messages (issue 56's held-out cases) -----------------------------------------------------------------------
def test_an_objects_repr_over_several_lines_is_quoted_on_one():
    import learngene as lg

    gene = lg.condense("mimetic", _tiny_ancestry()).gene
    module = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.ReLU())
    with pytest.raises(LearngeneError) as refused:
        lg.expand(gene, module)
    assert "\n" not in str(refused.value) and "Sequential( (0): Linear" in str(refused.value), str(refused.value)


def test_a_learngene_error_is_one_line_whatever_it_quotes():
    assert str(LearngeneError("cannot read 'a\nb'; give another")) == "cannot read 'a\\nb'; give another"


def test_torchs_error_is_quoted_past_its_colon_so_the_tensor_is_named():
    """torch ends its first line with a colon and names the tensor below it: 'Error(s) in reparametrizing for
    PITHHyperNet:' alone named nothing."""
    from learngene.errors import first_line

    exc = RuntimeError("Error(s) in reparametrizing for PITHHyperNet:\n\tsize mismatch for hyper.w: (2, 3) vs (3, 2).")
    assert (
        first_line(exc) == "Error(s) in reparametrizing for PITHHyperNet: size mismatch for hyper.w: (2, 3) vs (3, 2)."
    )
    assert first_line(RuntimeError("one line\nand more")) == "one line"


def test_a_negative_layer_index_reaches_the_layers_check(capsys, tmp_path):
    """argparse took '-1,0,1' for a flag ("expected one argument"); the layers check now words the refusal."""
    err = cli_error(capsys, ["expand", tmp_path / "g.safetensors", "--layers", "-1,0,1", "--out", tmp_path / "d"])
    assert "layers (--layers) must be first, last, spread or ancestry layer indices" in err and "'-1,0,1'" in err, err
    err = cli_error(capsys, ["expand", tmp_path / "g.safetensors", "--out"])  # a flag without its value: still said
    assert "expected one argument" in err, err


def test_an_output_name_holding_a_newline_is_reported_on_one_line(tmp_path, capsys):
    import learngene as lg

    lg.condense("pretrained", _tiny_ancestry()).save(tmp_path / "g.safetensors")
    out = tmp_path / "two\nlines.safetensors"
    assert main(["expand", str(tmp_path / "g.safetensors"), "--out", str(out)]) == 0
    wrote = [line for line in capsys.readouterr().out.splitlines() if "wrote" in line or "lines.safetensors" in line]
    assert len(wrote) == 1 and repr(str(out)) in wrote[0], wrote
    assert out.exists()


def test_a_result_changed_to_hold_nan_is_not_saved(tmp_path):
    """A result checks its fields when made; its tensors can change after: saving refuses what reading would."""
    import learngene as lg

    condensed = lg.condense("pretrained", _tiny_ancestry())
    descendant = lg.expand(condensed.gene)
    with torch.no_grad():
        next(iter(condensed.gene.tensors.values())).view(-1)[0] = float("nan")
        descendant.model.cls_token.fill_(float("inf"))
    with pytest.raises(LearngeneError, match="holds NaN or infinite values"):
        condensed.save(tmp_path / "g.safetensors")
    with pytest.raises(LearngeneError, match="the model's tensor 'cls_token' holds NaN or infinite values"):
        descendant.save(tmp_path / "d.safetensors")
    assert not list(tmp_path.iterdir())


# ---- a hostile table of this round's new surfaces: each one LearngeneError line, nothing written -----------------
def _hostile_cases(timm_pth: Path, tmp_path: Path):
    import learngene as lg
    from learngene.bench.rows import Row
    from learngene.pipeline.results import Condensed

    anc = _tiny_ancestry()
    return {
        "a timm loading key of value False": (
            lambda: lg.load_ancestry(timm_pth, "vit_tiny_patch16_224", **SIZES, pretrained=False),
            "pretrained (--timm-arg pretrained=...) is not an architecture argument",
        ),
        "a timm loading key given as a --timm-arg text": (
            lambda: lg.AncestryRequest(timm_pth, "vit_tiny_patch16_224", timm_kwargs=["cache_dir=/tmp"]).load(),
            "cache_dir (--timm-arg cache_dir=...) is not an architecture argument",
        ),
        "a timm argument of another model class": (
            lambda: lg.load_ancestry(timm_pth, "vit_tiny_patch16_224", **SIZES, use_rel_pos_bias=True),
            "use_rel_pos_bias is not an argument of timm's VisionTransformer",
        ),
        "a row of text accuracies": (lambda: Row("m", "t", "s", 1, 2, 3, 0, accs=["0.5"]), "accs is not"),
        "a comparison of a meta text": (lambda: lg.Comparison([], None, meta="x"), "Comparison"),
        "a condensed result of a path as note": (
            lambda: Condensed(lg.condense("scratch", anc).gene, Path("n")),
            "note",
        ),
        "options repeating a key with the same value": (
            lambda: lg.condense("mimetic", anc, options=["seed=0", "seed=0"]),
            "option seed is given twice (seed=0, then seed=0)",
        ),
        "an ancestry whose spec names another width": (
            lambda: lg.condense("mimetic", Ancestry(anc.model, anc.spec.replace(embed_dim=64, num_heads=2))),
            "does not describe the Ancestry's model",
        ),
        "a gene object with an infinite tensor": (
            lambda: lg.expand(_poisoned(lg.condense("heru_lg", anc).gene)),
            "holds NaN or infinite values",
        ),
    }


CASE_NAMES = [
    "a timm loading key of value False",
    "a timm loading key given as a --timm-arg text",
    "a timm argument of another model class",
    "a row of text accuracies",
    "a comparison of a meta text",
    "a condensed result of a path as note",
    "options repeating a key with the same value",
    "an ancestry whose spec names another width",
    "a gene object with an infinite tensor",
]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_this_rounds_hostile_table(timm_pth, tmp_path, case):
    call, says = _hostile_cases(timm_pth, tmp_path)[case]
    with pytest.raises(LearngeneError) as refused:
        call()
    message = str(refused.value)
    assert says in message and "\n" not in message, message
    assert not list(tmp_path.iterdir())


def test_a_logger_named_twice_is_refused_as_every_repeat(capsys, tmp_path):
    """It was merged without a word, while a size named twice was refused."""
    from learngene.training.config import TrainConfig

    with pytest.raises(LearngeneError, match=re.escape("log (--log) names tensorboard twice; give each once")):
        TrainConfig(log=("tensorboard", "tensorboard"))
    err = cli_error(
        capsys,
        [*RUN, "--run-dir", tmp_path / "run", "--out", tmp_path / "a", "--log", "tensorboard", "--log", "tensorboard"],
    )
    assert "names tensorboard twice" in err, err
