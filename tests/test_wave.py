"""WAVE: Kronecker templates (Eq. 4), linear padding (Eq. 7), TLEG as a special case (App. A), width, adapt."""

import dataclasses

import pytest
import timm
import torch
from safetensors.torch import load_file

from learngene.binding import bind_gene
from learngene.cli import main
from learngene.cli.describe import describe_gene
from learngene.descendant import GeneNet, make_descendant
from learngene.errors import LearngeneError
from learngene.gene import Learngene
from learngene.method import AdaptInputs, CondenseInputs
from learngene.methods.tleg import TLEG
from learngene.methods.wave import MATRICES, WAVE, block_grid
from learngene.training.loop import TrainConfig, evaluate
from learngene.vit.spec import block_key
from tests.bounds import assert_same_forward, forward_steps, order_bound
from tests.conftest import TINY_ARGS, cli_ok, timm_vit


def tleg_bound(tleg_gene, w: int) -> float:
    """WAVE's linear padding against TLEG: a sum over at most 2·4096/w² templates (the tiles of θ_A and θ_B of a
    128 x 32 MLP weight), then θ_B + c·θ_A: 2 steps, at the scale of |θ_B| + |θ_A| (tests/bounds.py)."""
    size = max(
        float((tleg_gene.tensors[f"theta_b.{n}"].abs() + tleg_gene.tensors[f"theta_a.{n}"].abs()).max())
        for n in ("attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight", "mlp.fc2.weight")
    )
    return order_bound(2 * 4096 // (w * w), size, steps=2)


def condense(ancestry, data, steps=4, seed=0, **opts):
    cfg = TrainConfig(epochs=1, max_steps=steps, batch_size=16, lr=3e-3, seed=seed, distill_lambda=0.5, progress=False)
    return WAVE(**opts).condense(ancestry, CondenseInputs(train=data, train_cfg=cfg))


def random_gene(method, spec, seed=0, scalers=True):
    torch.manual_seed(seed)
    tensors = {
        k: (v if k.startswith("scalers.") else torch.randn_like(v))
        for k, v in method.initial_tensors(spec).items()
        if scalers or not k.startswith("scalers.")
    }
    return method.new_gene(tensors, spec, None)


def tleg_as_wave(gene, spec, w):
    """Appendix A: cut θ_B and θ_A into w×w (or w) blocks, row-major; θ_B's blocks first ("base"), then θ_A's."""
    tensors = {k: v for k, v in gene.tensors.items() if not k.startswith("theta_")}
    for name in spec.block_shapes():
        grid = block_grid(spec, name, w)

        def cut(t):
            if t.ndim == 1:
                return t.reshape(grid[0], w)
            return t.reshape(grid[0], w, grid[1], w).permute(0, 2, 1, 3).reshape(-1, w, w)

        tensors[f"templates.{name}"] = torch.cat(
            [cut(gene.tensors[f"theta_b.{name}"]), cut(gene.tensors[f"theta_a.{name}"])]
        )
    return WAVE().new_gene(tensors, spec, None)


def test_kronecker_product_of_eq4(tiny_spec):
    method = WAVE(template_size=16)
    gene = random_gene(method, tiny_spec)
    gene.tensors["scalers.mlp.fc1.weight"] = torch.randn_like(gene.tensors["scalers.mlp.fc1.weight"])
    state = method.expand(gene, tiny_spec)
    templates, scalers = gene.tensors["templates.mlp.fc1.weight"], gene.tensors["scalers.mlp.fc1.weight"]
    for layer in range(tiny_spec.depth):
        expected = sum(torch.kron(scalers[layer, t], templates[t]) for t in range(len(templates)))
        size = sum(torch.kron(scalers[layer, t].abs(), templates[t].abs()) for t in range(len(templates)))
        bound = order_bound(len(templates), float(size.max()))  # one sum over the templates, in another order
        assert torch.allclose(state[block_key(layer, "mlp.fc1.weight")], expected, rtol=0, atol=bound)


@pytest.mark.parametrize("w", [32, 16])
def test_linear_padding_reproduces_tleg_appendix_a(tiny_spec, w):
    torch.manual_seed(0)
    tleg_gene = TLEG().new_gene(
        {k: torch.randn_like(v) for k, v in TLEG().initial_tensors(tiny_spec).items()}, tiny_spec, None
    )
    wave_gene = tleg_as_wave(tleg_gene, tiny_spec, w)
    as_tleg = WAVE(padding_eps=0.0, padding_offset=1)  # TLEG's (l−1)/L
    for depth in (1, 2, 3, 5, 8):
        spec = tiny_spec.replace(depth=depth)
        a, b = as_tleg.expand(wave_gene, spec), TLEG().expand(tleg_gene, spec)
        assert a.keys() == b.keys()
        for key in a:  # sums over the templates tiling θ_A and θ_B (2·4096/w² of them at most), then θ_B + c·θ_A
            assert torch.allclose(a[key], b[key], rtol=0, atol=tleg_bound(tleg_gene, w)), key
    # Eq. 7 as printed weights the slope templates by l/L: layer l is TLEG's layer l + 1 of a depth-L net
    paper = WAVE(padding_eps=0.0).expand(wave_gene, tiny_spec.replace(depth=4))
    theta_a, theta_b = tleg_gene.tensors["theta_a.attn.qkv.weight"], tleg_gene.tensors["theta_b.attn.qkv.weight"]
    assert torch.allclose(
        paper[block_key(0, "attn.qkv.weight")], theta_b + 1 / 4 * theta_a, rtol=0, atol=tleg_bound(tleg_gene, w)
    )


def test_width_tiles_the_aux_blocks_inside_q_k_v_segments(tiny_spec):
    method = WAVE(padding_eps=0.0)
    gene = random_gene(method, tiny_spec, scalers=False)
    narrow_spec, wide_spec = tiny_spec.replace(depth=3), tiny_spec.replace(depth=3, embed_dim=64, num_heads=4)
    narrow, wide = method.expand(gene, narrow_spec), method.expand(gene, wide_spec)
    for layer in range(3):
        n, w = (s[block_key(layer, "attn.qkv.weight")] for s in (narrow, wide))
        for seg in range(3):  # q, k, v of the aux land at the start of the wide q, k, v
            assert torch.equal(w[seg * 64 : seg * 64 + 32, :32], n[seg * 32 : (seg + 1) * 32])
            assert not w[seg * 64 + 32 : (seg + 1) * 64].any() and not w[seg * 64 : (seg + 1) * 64, 32:].any()
        n, w = (s[block_key(layer, "mlp.fc2.weight")] for s in (narrow, wide))
        assert torch.equal(w[:32, :128], n) and not w[32:].any() and not w[:, 128:].any()
        n, w = (s[block_key(layer, "norm1.weight")] for s in (narrow, wide))
        assert torch.equal(w[:32], n) and not w[32:].any()
    model = wide_spec.create_model()
    result = model.load_state_dict(wide, strict=False)
    assert not result.unexpected_keys and set(result.missing_keys) == set(wide_spec.non_block_shapes())


def test_width_that_does_not_tile_is_a_clear_error(tiny_spec):
    gene = random_gene(WAVE(), tiny_spec)
    with pytest.raises(LearngeneError, match="multiple of 32"):
        WAVE().expand(gene, tiny_spec.replace(embed_dim=48, num_heads=2))
    with pytest.raises(LearngeneError, match="multiple of 32"):
        WAVE().expand(gene, tiny_spec.replace(mlp_ratio=3.5))
    with pytest.raises(LearngeneError, match="n_qkv must be a multiple of 2"):
        WAVE(n_qkv=5)


def test_expansion_loads_strictly_into_timm_and_is_differentiable(tiny_spec):
    method = WAVE()
    gene = random_gene(method, tiny_spec, scalers=False)
    for depth in range(1, 4 * tiny_spec.depth + 1):
        spec = tiny_spec.replace(depth=depth)
        timm.create_model("vit_tiny_patch16_224", pretrained=False, **spec.timm_kwargs()).load_state_dict(
            method.expand(gene, spec), strict=True
        )
    gene = random_gene(method, tiny_spec)
    leaves = {k: v.clone().requires_grad_() for k, v in gene.tensors.items()}
    state = method.expand(dataclasses.replace(gene, tensors=leaves), tiny_spec)
    sum((v * torch.randn_like(v)).sum() for v in state.values()).backward()
    assert all(leaves[k].grad is not None and leaves[k].grad.abs().sum() > 0 for k in leaves)


def test_template_counts_follow_table_8(tiny_spec):
    torch.manual_seed(0)
    tensors = WAVE().initial_tensors(tiny_spec)
    assert [tensors[f"templates.{n}"].shape[0] for n in MATRICES.values()] == [6, 2, 8, 8]
    assert tensors["templates.attn.qkv.weight"].shape[1:] == (32, 32)
    assert tensors["scalers.attn.qkv.weight"].shape == (2, 6, 3, 1)
    small = WAVE(template_size=16, n_qkv=6).initial_tensors(tiny_spec)
    assert small["templates.attn.qkv.weight"].shape == (6, 16, 16) and small["templates.mlp.fc1.weight"].shape[0] == 32
    plain = WAVE(vector_templates=False).initial_tensors(tiny_spec)
    assert not any(k.startswith("templates.norm") or k.endswith("bias") and k.startswith("templates.") for k in plain)


def test_descendant_of_the_aux_size_is_the_aux_net(tiny_ancestry, toy_data, tiny_spec):
    gene = condense(tiny_ancestry, toy_data)
    net = GeneNet(bind_gene(gene, check=False).method, gene, tiny_spec).eval()
    descendant = make_descendant(gene, tiny_spec, seed=3).eval()
    x = toy_data.get_batch(torch.arange(16))[0]
    with torch.no_grad():
        assert_same_forward(descendant(x), net(x), depth=2, widest=128)  # expanded in or out of the forward pass
        # the condensed scalers are not linear: a freshly padded net of the same size is another function, farther
        # off than any rounding of this forward pass
        padded = make_descendant(gene, tiny_spec, seed=3, scaler_init="padding").eval()
        assert (net(x) - padded(x)).abs().max() > order_bound(
            128, max(1.0, float(net(x).abs().max())), forward_steps(2)
        )


def test_condensation_is_deterministic(tiny_ancestry, toy_data):
    a, b = condense(tiny_ancestry, toy_data), condense(tiny_ancestry, toy_data)
    assert all(torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors)
    assert a.cost["steps"] == 4 and a.cost["distill_lambda"] == 0.5


def test_without_vector_templates_biases_and_norms_keep_timm_init(tiny_ancestry, toy_data, tiny_spec):
    gene = condense(tiny_ancestry, toy_data, steps=2, vector_templates=False)
    provided = bind_gene(gene, check=False).method.provided_keys(gene, tiny_spec.replace(depth=3))
    assert {k.split(".", 2)[2] for k in provided if k.startswith("blocks.")} == set(MATRICES.values())


def test_adapt_trains_only_the_scalers_and_its_gene_is_the_adapted_net(tiny_ancestry, toy_data, tiny_spec):
    gene = condense(tiny_ancestry, toy_data, steps=2)
    spec = tiny_spec.replace(depth=3)
    method = bind_gene(gene, check=False).method
    cfg = TrainConfig(epochs=1, max_steps=5, batch_size=16, lr=1e-2, progress=False)
    adapted, result = method.adapt(gene, spec, AdaptInputs(toy_data, cfg, eval=toy_data))
    assert result.steps == 5 and adapted.layout == spec
    for key, value in gene.tensors.items():
        if not key.startswith("scalers."):  # templates and (same-size) embeddings and head are frozen
            assert torch.equal(adapted.tensors[key], value), key
    padded = method.scalers(gene, spec)["attn.qkv.weight"]
    assert adapted.tensors["scalers.attn.qkv.weight"].shape == padded.shape
    assert (adapted.tensors["scalers.attn.qkv.weight"] - padded).abs().max() > 1e-3  # AdamW: ~lr (1e-2) a step
    descendant = make_descendant(adapted, spec)
    assert evaluate(descendant, toy_data)["acc"] == result.final_acc


@pytest.mark.parametrize("depth", [2, 3])  # the aux net's own size, and another depth
def test_adapt_with_padding_scalers_trains_them(tiny_ancestry, toy_data, tiny_spec, depth):
    """scaler_init=padding starts adapt from Eq. 7's scalers and trains those (it crashed: 'element 0 of tensors
    does not require grad', as the net made new padding scalers at every step)."""
    gene = condense(tiny_ancestry, toy_data, steps=2, scaler_init="padding")
    spec = gene.layout.replace(depth=depth)
    method = bind_gene(gene, "adapt", check=False).method
    cfg = TrainConfig(epochs=1, max_steps=2, batch_size=16, lr=1e-2, progress=False)
    adapted, result = method.adapt(gene, spec, AdaptInputs(toy_data, cfg))
    padded = method.scalers(gene, spec)["attn.qkv.weight"]
    assert result.steps == 2 and (adapted.tensors["scalers.attn.qkv.weight"] - padded).abs().max() > 1e-3  # as above
    if depth == gene.layout.depth:  # padding, not the stored scalers, was the start
        assert not torch.equal(padded, gene.tensors["scalers.attn.qkv.weight"])
    assert adapted.config["scaler_init"] == "auto"  # the adapted scalers are what its descendants get


def test_adapt_to_a_doubled_width_trains_what_the_gene_cannot_provide(tiny_ancestry, toy_data, tiny_spec):
    gene = condense(tiny_ancestry, toy_data, steps=2)
    wide = tiny_spec.replace(depth=3, embed_dim=64, num_heads=4)
    method = bind_gene(gene, "adapt", options={"adapt_steps": 3}, check=False).method
    adapted, result = method.adapt(
        gene, wide, AdaptInputs(toy_data, TrainConfig(epochs=1, batch_size=16, progress=False))
    )
    assert result.steps == 3
    assert adapted.tensors["pos_embed"].shape[-1] == 64 and adapted.tensors["scalers.mlp.fc1.weight"].shape == (
        3,
        8,
        8,
        2,
    )
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **wide.timm_kwargs())
    model.load_state_dict(bind_gene(adapted, check=False).method.expand(adapted, wide), strict=True)
    assert "scalers stored for L3-D64-H4" in describe_gene(adapted)


DATA = ["--data", "digits", "--train-images", "200"]


def test_cli_condense_adapt_expand_inspect(tmp_path, capsys):
    anc, gene, adapted = (str(tmp_path / f"{n}.safetensors") for n in ("anc", "gene", "adapted"))
    assert main(["ancestry", *TINY_ARGS, *DATA, "--epochs", "1", "--quiet", "--out", anc]) == 0
    assert (
        main(["condense", "--method", "wave", "--ancestry", anc, *DATA, "--max-steps", "3", "--quiet", "--out", gene])
        == 0
    )
    assert Learngene.load(gene).cost["distill_lambda"] == 0.5  # Eq. 6's KL + CE by default, not TLEG's pure KL
    wide = ["--depth", "3", "--embed-dim", "64", "--num-heads", "4"]
    outputs = ["--gene-out", adapted, "--out", tmp_path / "wide.safetensors"]
    cli_ok("adapt", gene, *wide, *DATA, "--max-steps", "3", "--quiet", *outputs)
    model = timm_vit(depth=3, embed_dim=64, num_heads=4, patch_size=4, img_size=16, in_chans=1, num_classes=10)
    model.load_state_dict(load_file(str(tmp_path / "wide.safetensors")), strict=True)
    assert main(["expand", gene, "--depth", "6", "--quiet", "--out", str(tmp_path / "deep.safetensors")]) == 0
    capsys.readouterr()
    assert main(["inspect", adapted]) == 0
    assert "scalers stored for L3-D64-H4" in capsys.readouterr().out
    assert (
        main(
            [
                "expand",
                gene,
                "--embed-dim",
                "48",
                "--num-heads",
                "2",
                "--quiet",
                "--out",
                str(tmp_path / "bad.safetensors"),
            ]
        )
        == 2
    )
