"""untrained_attention=mimetic: mimetic's attention and positions where an ancestry's attention was never trained."""

import pytest
import torch

from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry
from learngene.registry import get_method
from learngene.vit.attention_init import UNTRAINED_ATTENTION_SCALE, attention_logit_scale, sincos_pos_embed
from learngene.vit.heads import join_qkv
from learngene.vit.spec import block_key
from tests.bounds import order_bound
from tests.conftest import cli_ok

COPIERS = ("pretrained", "auto_lg", "heru_lg")


def _ancestry(spec, qk_factor=1.0):
    """timm's initialization (untrained attention), with every q and k weight times ``qk_factor``."""
    torch.manual_seed(0)
    model = spec.create_model().eval()
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.qkv.weight[: 2 * spec.embed_dim] *= qk_factor
    return Ancestry(model, spec)


def test_logit_scale_is_the_std_of_the_logits_of_isotropic_tokens(tiny_spec):
    D, H, d = tiny_spec.embed_dim, tiny_spec.num_heads, tiny_spec.head_dim
    # each head: q = k = s·(the head's own d coordinates), so W_q W_kᵀ = s² on d diagonal entries: ‖·‖_F/√d = s²
    s = 0.7
    q = torch.zeros(H, d, D)
    for h in range(H):
        q[h, :, h * d : (h + 1) * d] = s * torch.eye(d)
    state = {
        block_key(0, "attn.qkv.weight"): join_qkv(q, q, torch.zeros(H, d, D)),
        block_key(0, "norm1.weight"): torch.full((D,), 2.0),
    }  # the LayerNorm gain scales q and k: ×4
    # ‖W_q W_kᵀ‖_F/√d in float32: the product's 32-term sums, the norm's sum of squares and a square root
    assert attention_logit_scale(state, tiny_spec, 0) == pytest.approx(4 * s * s, rel=order_bound(32, 1.0, steps=3))
    # and it is what unit-variance tokens give: the std of x A yᵀ/√d over random x, y
    torch.manual_seed(0)
    qkv = torch.randn(3 * D, D) * 0.3
    state = {block_key(0, "attn.qkv.weight"): qkv}
    x, y = torch.randn(20000, D), torch.randn(20000, D)
    logits = ((x @ qkv[:d].T) * (y @ qkv[D : D + d].T)).sum(-1) / d**0.5  # head 0
    heads = [
        ((x @ qkv[h * d : (h + 1) * d].T) * (y @ qkv[D + h * d : D + (h + 1) * d].T)).sum(-1).std() / d**0.5
        for h in range(H)
    ]
    assert d == 16 and logits.std().item() == heads[0].item()  # dividing by √d = 4, a power of two, is exact
    # the sample std of 20,000 draws is within a relative standard error 1/√(2·20000) ≈ 0.005 of the scale: 10 of it
    assert attention_logit_scale(state, tiny_spec, 0) == pytest.approx(float(torch.stack(heads).mean()), rel=0.05)


def test_timm_init_is_untrained_and_mimetic_is_not(tiny_spec):
    timm_state = tiny_spec.create_model().state_dict()
    mimetic = get_method("mimetic")()
    mimetic_state = mimetic.expand(mimetic.condense(None), tiny_spec)
    for layer in range(tiny_spec.depth):
        assert attention_logit_scale(timm_state, tiny_spec, layer) < UNTRAINED_ATTENTION_SCALE / 2
        assert attention_logit_scale(mimetic_state, tiny_spec, layer) > 2 * UNTRAINED_ATTENTION_SCALE


@pytest.mark.parametrize("name", COPIERS)
def test_untrained_ancestry_attention_becomes_mimetics(tiny_spec, name):
    ancestry = _ancestry(tiny_spec)
    gene = get_method(name)().condense(ancestry)
    kept = make_descendant(gene, tiny_spec, seed=3).state_dict()
    fixed = make_descendant(gene, tiny_spec, seed=3, untrained_attention="mimetic").state_dict()
    reference = make_descendant(get_method("mimetic")().condense(None), tiny_spec, seed=3).state_dict()
    given = get_method(name)().expand(gene, tiny_spec)
    for key in kept:
        if ".attn." in key and key in given:
            want = reference[key] if key.endswith("weight") else torch.zeros_like(kept[key])
            assert torch.equal(fixed[key], want), key  # mimetic's draws for this seed, zero biases
        elif key == "pos_embed" and key in given:
            assert torch.equal(fixed[key], sincos_pos_embed(tiny_spec))
        else:  # MLPs, norms, patch embedding, head, and whatever the gene does not give: as without the option
            assert torch.equal(fixed[key], kept[key]), key
    assert any(".attn." in k for k in given)


@pytest.mark.parametrize("name", COPIERS)
def test_trained_ancestry_attention_is_kept(tiny_spec, name):
    # q and k 10x timm's scale: logits vary by ~0.025·100 = 2.5, far above the threshold
    gene = get_method(name)().condense(_ancestry(tiny_spec, qk_factor=10.0))
    kept = make_descendant(gene, tiny_spec, seed=3).state_dict()
    fixed = make_descendant(gene, tiny_spec, seed=3, untrained_attention="mimetic").state_dict()
    assert all(torch.equal(kept[k], fixed[k]) for k in kept)


def test_untrained_attention_takes_keep_or_mimetic(tiny_spec):
    with pytest.raises(LearngeneError, match="untrained_attention must be one of 'keep', 'mimetic'"):
        get_method("pretrained")(untrained_attention="sometimes")


def test_bench_records_an_option_that_changes_nothing_as_such(tiny_spec):
    from learngene.bench.cells import check_variant_changes
    from learngene.bench.profiles import Variant

    variant = Variant("+fix", options=(("untrained_attention", "mimetic"),))
    check_variant_changes(variant, get_method("pretrained")().condense(_ancestry(tiny_spec)), tiny_spec)  # changes
    with pytest.raises(LearngeneError, match="changes nothing"):
        check_variant_changes(variant, get_method("pretrained")().condense(_ancestry(tiny_spec, 10.0)), tiny_spec)


def test_transfer_profile_runs_the_fix_on_the_short_and_converged_ancestries_of_both_splits():
    from learngene.bench import get_profile

    profile = get_profile("transfer")
    fix = [v for v in profile.variants if dict(v.options).get("untrained_attention") == "mimetic"]
    assert len(fix) == 1 and set(fix[0].methods) == set(COPIERS)
    on = {u.name: u for u in profile.upstreams if fix[0].runs_on(u)}
    assert set(on) == {"A-short", "B-short", "A-converged", "B-converged"}
    assert {u.classes for u in on.values()} == {u.classes for u in profile.upstreams}  # both class splits


def test_condense_says_when_the_option_would_apply(tiny_spec, tmp_path, capsys):
    from learngene.formats.model_file import save_model

    for factor, expected in ((1.0, True), (10.0, False)):
        ancestry = _ancestry(tiny_spec, qk_factor=factor)
        path = tmp_path / f"anc{factor}.safetensors"
        save_model(path, ancestry.model, tiny_spec, origin={"kind": "ancestry"})
        capsys.readouterr()
        gene = tmp_path / f"gene{factor}.safetensors"
        cli_ok("condense", "--method", "pretrained", "--ancestry", path, "--out", gene)
        assert ("untrained_attention=mimetic" in capsys.readouterr().out) is expected
    capsys.readouterr()  # the option on: no hint
    on = ["--opt", "untrained_attention=mimetic", "--out", tmp_path / "gene-on.safetensors"]
    cli_ok("condense", "--method", "auto_lg", "--ancestry", tmp_path / "anc1.0.safetensors", *on)
    assert "untrained_attention=mimetic" not in capsys.readouterr().out
