"""The benchmark: the stage cache, the report, and the size-for-budget search."""

from __future__ import annotations

import pytest
import torch

from learngene.bench import BenchRun, Profile, Row, Task
from learngene.bench import cells as cell_stage
from learngene.bench.tables import epochs_to_match, format_table
from learngene.cli import main
from learngene.errors import SpecError
from learngene.formats.model_file import load_model_file
from learngene.method import Ancestry
from learngene.pipeline import training as pipeline_training
from learngene.pipeline.fine_tuning import fresh_head
from learngene.registry import get_method, list_methods
from learngene.training.config import TrainConfig
from learngene.vit.spec import ViTSpec, fit_to_budget
from tests.conftest import make_images

# ---- the stage cache on fake Fashion-MNIST (no real data needed) ----------------------------------------------
MICRO = Profile(
    name="micro",
    ancestry=ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=28, patch_size=7, in_chans=1, num_classes=10),
    ancestry_epochs=1,
    ancestry_images=None,
    condense_epochs=1,
    condense_images=20,
    sizes=((1, 32, 2), (1, 16, 1)),
    tasks=(
        Task("fashion_mnist", "fashion_mnist", epochs=2, train_images=20, scratch_factor=2),
        Task("digits", "digits", epochs=1, train_images=30, eval_images=30, new_head=True),
    ),
    adapt_steps=2,
    seeds=(0, 1),
    methods=("scratch", "pretrained", "weight_selection"),
    train=TrainConfig(batch_size=16),
)


def _micro(tmp_path, fake_fashion, monkeypatch):
    monkeypatch.setenv("LEARNGENE_DATA", str(fake_fashion))
    return BenchRun(MICRO, tmp_path / "out", progress=False, plots=False)


def test_a_profiles_train_config_reaches_every_stage_and_its_cache_keys(tmp_path):
    """``Profile.train`` holds what every stage shares: a stage's settings are it plus the stage's own budget (never the
    base's epochs, steps or seed), and a shared setting joins the cache keys only where it differs from its default,
    so a profile that sets none keeps the keys (and ``profile.json``) of the runs made before it held a TrainConfig."""
    assert MICRO.training_key() == {"batch_size": 16, "lr": 1e-3}  # what the keys held as Profile.batch_size and .lr
    tuned = MICRO.replace(train=TrainConfig(batch_size=16, weight_decay=0.1, epochs=7, max_steps=3, seed=5))
    assert tuned.training_key() == {"batch_size": 16, "lr": 1e-3, "weight_decay": 0.1}
    cfg = BenchRun(tuned, tmp_path, progress=False)._cfg(epochs=2)
    assert (cfg.epochs, cfg.max_steps, cfg.seed, cfg.weight_decay, cfg.batch_size) == (2, None, 0, 0.1, 16)
    plain = MICRO.to_dict()
    assert "train" not in plain and (plain["batch_size"], plain["lr"]) == (16, 1e-3)
    assert list(plain).index("batch_size") == list(plain).index("condense_lambda") + 1  # where the fields were


@pytest.mark.integration  # a whole benchmark run, twice
def test_second_run_reuses_every_stage(tmp_path, fake_fashion, monkeypatch):
    calls = []
    real_train = cell_stage.train

    def counting_train(*args, **kwargs):
        calls.append(kwargs.get("run_dir"))
        assert kwargs.get("resume") is True  # an interrupted training continues from its checkpoint
        return real_train(*args, **kwargs)

    # the ancestry's training (learngene ancestry's, train_ancestry) and the cells' fine-tunes
    monkeypatch.setattr(pipeline_training, "train_loop", counting_train)
    monkeypatch.setattr(cell_stage, "train", counting_train)
    first = _micro(tmp_path, fake_fashion, monkeypatch).run()
    trained_cells = [r for r in first if r.ok]
    assert len(calls) == 1 + len(trained_cells)
    assert all(c is not None and "out" in str(c) for c in calls)
    n_a = [r for r in first if not r.ok]
    assert {(r.method, r.size) for r in n_a} == {("pretrained", "L1-D16-H1")}

    calls.clear()
    second = _micro(tmp_path, fake_fashion, monkeypatch).run()
    assert calls == []
    assert [(r.method, r.task, r.size, r.seed, r.budget, r.accs) for r in second] == [
        (r.method, r.task, r.size, r.seed, r.budget, r.accs) for r in first
    ]

    # one lost cell result is recomputed, nothing else
    victim = next((tmp_path / "out" / "cells" / "digits" / "weight_selection").glob("L1-D16-H1-s1-*.json"))
    victim.unlink()
    _micro(tmp_path, fake_fashion, monkeypatch).run()
    assert len(calls) == 1 and "L1-D16-H1-s1" in str(calls[0])


def test_time_limit_leaves_a_partial_report_and_the_next_run_finishes(tmp_path, fake_fashion, monkeypatch):
    monkeypatch.setenv("LEARNGENE_DATA", str(fake_fashion))
    profile = MICRO.replace(sizes=((1, 32, 2),), seeds=(0,), methods=("scratch",))
    stopped = BenchRun(profile, tmp_path / "o", progress=False, plots=False, time_limit=0.0)
    assert stopped.run() == [] and stopped.meta["complete"] is False
    assert "partial run" in (tmp_path / "o" / "report.md").read_text()
    done = BenchRun(profile, tmp_path / "o", progress=False, plots=False)
    assert len(done.run()) == 3 and done.meta["complete"] is True  # fashion, fashion x2, digits


def test_a_method_that_cannot_condense_is_recorded_not_fatal(tmp_path, fake_fashion, monkeypatch):
    monkeypatch.setenv("LEARNGENE_DATA", str(fake_fashion))
    profile = MICRO.replace(
        sizes=((1, 32, 2),),
        seeds=(0,),
        methods=("pretrained", "scratch"),
        method_options={"pretrained": {"variant": "sideways"}},
    )
    rows = BenchRun(profile, tmp_path / "o", progress=False, plots=False).run()
    broken = [r for r in rows if r.method == "pretrained"]
    assert broken and all(not r.ok and "condensation failed" in r.note for r in broken)
    assert all(r.ok for r in rows if r.method == "scratch")


def test_identical_budget_and_data_order_for_every_method(tmp_path, fake_fashion, monkeypatch):
    seen = []
    real_train = cell_stage.train

    def spy(model, data, cfg, **kwargs):
        seen.append((data.name, len(data), cfg.epochs, cfg.seed, cfg.batch_size, cfg.lr))
        return real_train(model, data, cfg, **kwargs)

    # the ancestry's training (learngene ancestry's, train_ancestry) and the cells' fine-tunes
    monkeypatch.setattr(pipeline_training, "train_loop", spy)
    monkeypatch.setattr(cell_stage, "train", spy)
    profile = MICRO.replace(sizes=((1, 32, 2),), seeds=(3,), tasks=MICRO.tasks[1:])
    monkeypatch.setenv("LEARNGENE_DATA", str(fake_fashion))
    BenchRun(profile, tmp_path / "o", progress=False, plots=False).run()
    cells = seen[1:]  # after the ancestry
    assert len(cells) == 3 and len(set(cells)) == 1  # same data, epochs, seed (= data order), batch and lr


def test_bench_genes_are_what_learngene_condense_and_adapt_make(tmp_path):
    """Stages 2 and 3 are the pipeline's condense and adapt: a bench gene has the tensors and the provenance of
    ``learngene condense``'s (the ancestry's label space, licence and preprocessing; for a method that trains, the
    data's preprocessing), an adapted gene keeps them, and no run directory stays behind."""
    import learngene.pipeline as lp
    from learngene.data import preprocessing_cfg

    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
    torch.manual_seed(0)
    model = spec.create_model()
    labels = {"dataset": "toy", "classes": ["a", "b", "c", "d"]}
    ancestry = Ancestry(model, spec, label_space=labels, license="apache-2.0", preprocessing=preprocessing_cfg(model))
    data = make_images(16, 4, 16)
    run = BenchRun(MICRO.replace(adapt_steps=1, train=TrainConfig(batch_size=8)), tmp_path, progress=False)
    run.ancestry_key = "a test ancestry"
    gene, _ = run.gene("pretrained", ancestry, data, data)
    made = lp.condense("pretrained", ancestry).gene
    assert gene.tensors.keys() == made.tensors.keys()
    assert all(torch.equal(gene.tensors[k], made.tensors[k]) for k in made.tensors)
    recorded = (labels, "apache-2.0", preprocessing_cfg(model))
    assert (gene.label_space, gene.license, gene.preprocessing) == recorded
    wave, key = run.gene("wave", ancestry, data, data)
    assert (wave.label_space, wave.license, wave.preprocessing) == (labels, "apache-2.0", preprocessing_cfg(data))
    adapted, _, _ = run.initial_gene(wave, key, spec.replace(depth=3), 0, data)
    assert adapted.layout == spec.replace(depth=3) and adapted.cost["bench_adapt_seconds"] >= 0
    assert (adapted.label_space, adapted.license) == (labels, "apache-2.0")
    assert not list(tmp_path.rglob("*.run"))


def test_new_head_tasks_give_every_method_the_same_classifier(tiny_spec):
    ancestry = Ancestry(tiny_spec.create_model(), tiny_spec)
    gene = get_method("pretrained")().condense(ancestry)
    from learngene.descendant import make_descendant

    a = make_descendant(gene, tiny_spec, seed=5)
    b = make_descendant(get_method("scratch")().condense(ancestry), tiny_spec, seed=5)
    assert not torch.equal(a.head.weight, b.head.weight)
    fresh_head(a, tiny_spec, seed=5)
    assert torch.equal(a.head.weight, b.head.weight) and torch.equal(a.head.bias, b.head.bias)


# ---- the report ------------------------------------------------------------------------------------------------
def _row(method, size, seed, accs, budget=1):
    return Row(
        method=method,
        task="t",
        size=size,
        depth=1,
        embed_dim=8,
        num_heads=1,
        seed=seed,
        budget=budget,
        stored_params=10,
        accs=accs,
    )


def test_table_shows_mean_std_and_na():
    rows = [
        _row("a", "S", 0, [0.5, 0.6]),
        _row("a", "S", 1, [0.5, 0.8]),
        _row("b", "S", 0, [0.1]),
        Row(method="b", task="t", size="T", depth=1, embed_dim=8, num_heads=1, seed=0, note="cannot"),
        _row("a", "T", 0, [0.3]),
    ]
    table = format_table(rows, "t")
    assert "| a | 70.0 ± 14.1 | 30.0 |" in table
    assert "| b | 10.0 | n/a |" in table


def test_epochs_to_match_reads_the_long_scratch_curve():
    rows = [
        _row("m", "S", 0, [0.70]),
        _row("m", "S", 1, [0.72]),
        _row("scratch", "S", 0, [0.5, 0.6, 0.70, 0.75], budget=4),
        _row("scratch", "S", 1, [0.5, 0.6, 0.72, 0.73], budget=4),
        _row("w", "S", 0, [0.9]),
    ]
    table = epochs_to_match(rows, "t", 4)
    assert "| m | 3 / 4 |" in table  # mean target 0.71, scratch x4 mean curve 0.5, 0.6, 0.71, 0.74
    assert "| w | > 4 |" in table


# ---- size for a budget ------------------------------------------------------------------------------------------
BASE = ViTSpec(depth=4, embed_dim=64, num_heads=4, img_size=16, patch_size=4, in_chans=1, num_classes=10)


def test_budget_picks_deepest_then_widest():
    narrower = BASE.replace(embed_dim=48, num_heads=3)
    assert fit_to_budget(BASE, max_params=BASE.num_params) == BASE
    # L4 at 48 wide fits, L3 at 64 wide has more parameters: depth wins
    shallower = BASE.replace(depth=3)
    assert shallower.num_params > narrower.num_params
    assert fit_to_budget(BASE, max_params=shallower.num_params) == narrower
    assert fit_to_budget(BASE, max_flops=narrower.flops) == narrower
    assert fit_to_budget(BASE, max_params=BASE.num_params, depth=2) == BASE.replace(depth=2)


def test_budget_respects_what_the_method_supports():
    same_width = lambda s: s.embed_dim == BASE.embed_dim  # noqa: E731
    picked = fit_to_budget(BASE, max_params=BASE.replace(depth=3).num_params + 1, supports=same_width)
    assert picked == BASE.replace(depth=3)
    with pytest.raises(SpecError, match="raise the budget"):
        fit_to_budget(BASE, max_params=1_000)
    with pytest.raises(SpecError, match="budget"):
        fit_to_budget(BASE)


def test_expand_with_max_params_says_what_it_picked(tmp_path, capsys):
    torch.manual_seed(0)
    ancestry = Ancestry(BASE.create_model(), BASE)
    get_method("pretrained")().condense(ancestry).save(tmp_path / "gene.safetensors")
    out = tmp_path / "d.safetensors"
    budget = BASE.replace(depth=3).num_params + 10  # a narrower L4 would fit, but pretrained copies whole blocks
    assert main(["expand", str(tmp_path / "gene.safetensors"), "--max-params", str(budget), "--out", str(out)]) == 0
    assert "picked L3-D64-H4" in capsys.readouterr().out
    assert load_model_file(out)[1] == BASE.replace(depth=3)
    get_method("weight_selection")().condense(ancestry).save(tmp_path / "ws.safetensors")
    out = tmp_path / "ws-d.safetensors"
    assert main(["expand", str(tmp_path / "ws.safetensors"), "--max-params", str(budget), "--out", str(out)]) == 0
    assert "picked L4-D48-H3" in capsys.readouterr().out
    assert load_model_file(out)[1] == BASE.replace(embed_dim=48, num_heads=3)
    assert main(["expand", str(tmp_path / "ws.safetensors"), "--max-params", "1K", "--out", str(tmp_path / "x")]) == 2
    assert "raise the budget" in capsys.readouterr().err


def test_bench_rejects_unknown_methods(capsys):
    assert main(["bench", "--methods", "nonesuch", "--out", "/tmp/never"]) == 2
    assert "unknown method" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["tleg", "wave"])
def test_budget_never_picks_a_size_the_method_refuses(name, tmp_path, capsys):
    """tleg expands in depth only (its 2 heads of 16); wave tiles 32-wide templates: neither takes 48 wide."""
    layout = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
    ancestry = layout.replace(depth=4, embed_dim=64, num_heads=4)
    method = get_method(name)()
    torch.manual_seed(0)
    gene = method.new_gene(
        {k: torch.randn_like(v) for k, v in method.initial_tensors(layout).items()}, layout, ancestry
    )
    gene.save(tmp_path / "gene.safetensors")
    narrow = ancestry.replace(embed_dim=48, num_heads=3)
    # without the method's say, L4 at 48 wide is the deepest, widest size under this budget
    assert fit_to_budget(ancestry, max_params=narrow.num_params) == narrow
    out = tmp_path / "d.safetensors"
    assert (
        main(["expand", str(tmp_path / "gene.safetensors"), "--max-params", str(narrow.num_params), "--out", str(out)])
        == 0
    )
    said = capsys.readouterr().out
    assert f"picked L4-D32-H2: {layout.replace(depth=4).num_params:,} params" in said, said
    assert "deepest, then widest" in said and "refuses, e.g. L4-D48-H3" in said, said
    assert len(said.strip().splitlines()) == 2  # the pick, then what was written
    assert load_model_file(out)[1] == layout.replace(depth=4)
    # under the budget of a 3-deep, 32-wide net the deepest size that fits is picked, not a wider shallower one
    budget = layout.replace(depth=3).num_params
    assert (
        main(
            [
                "expand",
                str(tmp_path / "gene.safetensors"),
                "--max-params",
                str(budget),
                "--out",
                str(tmp_path / "d3.safetensors"),
            ]
        )
        == 0
    )
    assert load_model_file(tmp_path / "d3.safetensors")[1] == layout.replace(depth=3)
    # below every size the gene expands to: one line, exit 2, nothing written
    smallest = layout.replace(depth=1).num_params
    assert (
        main(
            [
                "expand",
                str(tmp_path / "gene.safetensors"),
                "--max-params",
                str(smallest - 1),
                "--out",
                str(tmp_path / "none.safetensors"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "raise the budget" in err and "L1-D32-H2" in err, err
    assert not (tmp_path / "none.safetensors").exists()


def test_one_profile_registry_whose_descriptions_are_the_help(capsys, monkeypatch):
    from learngene.bench.profiles import PROFILES
    from learngene.cli import main

    monkeypatch.setenv("COLUMNS", "10000")  # argparse wraps at a hyphen too (gpu- smoke): one line per option
    assert main(["bench", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for name, profile in PROFILES.items():
        assert profile.description, name
        assert " ".join(f"{name}: {profile.description}".split()) in help_text, name


def test_the_transfer_methods_are_every_method_but_those_equal_to_another_at_the_ancestry_width():
    from learngene.bench.profiles import PROFILES
    from learngene.registry import get_method, list_methods

    same = {m for m in list_methods() if get_method(m).same_as_at_ancestry_width}
    assert same == {"weight_selection"}
    assert set(PROFILES["transfer"].methods) == set(list_methods()) - same
    assert PROFILES["transfer"].methods[:2] == ("scratch", "mimetic")
    assert set(list_methods(aux_net=True)) == {"lets", "pool", "share_init", "sws", "tleg", "wave"}


def test_each_profile_gives_a_method_the_options_its_hook_asks_for_its_sizes():
    """WAVE's bench option (its hook, not the bench) makes templates that tile every width of a profile's grid;
    a profile's own ``method_options`` win over a hook."""
    from learngene.bench.profiles import PROFILES

    for name, profile in PROFILES.items():
        if not isinstance(profile, Profile):
            continue
        widths = {spec.embed_dim for spec in profile.specs()}
        w = profile.options_for("wave")["template_size"]
        assert w == min(widths) and all(width % w == 0 for width in widths), (name, w, widths)
        for method in list_methods():
            get_method(method)(**profile.options_for(method))  # every option the bench passes is a valid one
    quick = PROFILES["quick"]
    assert isinstance(quick, Profile)
    assert quick.replace(method_options={"wave": {"template_size": 8}}).options_for("wave") == {"template_size": 8}
    assert quick.options_for("tleg") == {}
