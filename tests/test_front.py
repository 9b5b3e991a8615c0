"""FRONT against an independent re-typing of the authors' rule (their script ``front_init_deit.py``).

The oracle below walks the target's parameters one by one as their script does (z-score, DCT-II, keep the
top-left corner, stack over layers, DCT along depth, fill by mode, inverse, restore each layer's stats), with
scipy's DCT instead of our matrices: their unnormalised DCT-II is half of scipy's ``dct(norm=None)``, and
their inverse is scipy's ``idct`` of twice the coefficients.
"""

import math

import numpy as np
import pytest
import timm
import torch
from scipy.fft import dct, idct

from learngene.binding import bind_gene
from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry
from learngene.methods.front import dct_ii, dct_matrix, idct_basis
from learngene.registry import get_method
from learngene.vit.model_spec import spec_from_model
from learngene.vit.spec import ViTSpec, block_key
from tests.bounds import U64, order_bound

SMALL = ViTSpec(depth=12, embed_dim=16, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)


def their_dct(x, axis):
    return dct(x, type=2, axis=axis) / 2


def their_idct(x, axis):
    return idct(2 * x, type=2, axis=axis)


def _as_matrix(w):
    if w.ndim == 4:
        return w.reshape(w.shape[0] * w.shape[1], w.shape[2] * w.shape[3])
    if w.ndim == 3:
        return w.reshape(w.shape[0] * w.shape[1], w.shape[2])
    return w


def _axes(name, ndim, mlp_dct_dim):
    if ndim == 2 and mlp_dct_dim == "1d" and "mlp.fc1" in name:
        return [0]
    if ndim == 2 and mlp_dct_dim == "1d" and "mlp.fc2" in name:
        return [1]
    return list(range(ndim))


def oracle_condense(w, name, keep_ratio, mlp_dct_dim):
    """One source tensor: (kept coefficients of its z-scores, mean, std)."""
    w = w.double().numpy()
    mean, std = w.mean(), w.std(ddof=1)
    z = _as_matrix((w - mean) / (std + 1e-8))
    for axis in _axes(name, z.ndim, mlp_dct_dim):
        if z.shape[axis] > 1:
            z = their_dct(z, axis)
            keep = max(1, int(z.shape[axis] * keep_ratio))
            z = np.take(z, range(keep), axis=axis)
    return z, mean, std


def oracle_reconstruct(coeffs, name, shape, mean, std, use_ratio, mlp_dct_dim):
    """One target tensor of ``shape`` from kept coefficients: pad into the full grid, inverse, ratio, stats."""
    full = _as_matrix(np.zeros(shape))
    padded = np.zeros_like(full)
    fit = tuple(slice(0, min(a, b)) for a, b in zip(coeffs.shape, full.shape))
    padded[fit] = coeffs[fit]
    ratio = 1.0
    for axis in _axes(name, full.ndim, mlp_dct_dim):
        padded = their_idct(padded, axis)
        ratio *= full.shape[axis] / coeffs.shape[axis]
    if use_ratio:
        padded = padded * ratio
    return torch.from_numpy((padded * std + mean).reshape(shape))


def oracle_front(
    source: dict,
    source_depth: int,
    target: dict,
    keep_ratio=1.0,
    use_ratio=False,
    select_n=None,
    mode="zero",
    mlp_dct_dim="2d",
) -> dict:
    """Every target tensor (``target``: name -> shape) their way. Depth growth: target layer i takes row i of
    the inverse along depth (their script's aliasing would give layers L_s-1 ... L_t-1 all the last row)."""
    out = {}
    groups: dict[str, list[str]] = {}
    for key in target:
        groups.setdefault(key.split(".", 2)[2] if key.startswith("blocks.") else key, []).append(key)
    for group, keys in groups.items():
        if not keys[0].startswith("blocks."):
            coeffs, mean, std = oracle_condense(source[group], group, keep_ratio, mlp_dct_dim)
            out[group] = oracle_reconstruct(coeffs, group, target[group], mean, std, use_ratio, mlp_dct_dim)
            continue
        per_layer = [
            oracle_condense(source[f"blocks.{i}.{group}"], group, keep_ratio, mlp_dct_dim) for i in range(source_depth)
        ]
        stacked = their_dct(np.stack([c for c, _, _ in per_layer]), 0)
        n = min(len(keys), source_depth, select_n or source_depth)
        rows = len(keys) if mode != "repeat" else source_depth
        filled = np.zeros((rows, *stacked.shape[1:]))
        if mode == "consistence":
            index = [i for i in range(n) for _ in range(len(keys) // n + (1 if i < len(keys) % n else 0))]
            filled = stacked[:n][index]
        else:
            filled[:n] = stacked[:n]
        layers = their_idct(filled, 0)
        for i, key in enumerate(keys):
            _, mean, std = per_layer[min(i, source_depth - 1)]
            row = layers[min(i, rows - 1)]
            out[key] = oracle_reconstruct(row, group, target[key], mean, std, use_ratio, mlp_dct_dim)
    return out


def noisy_ancestry(spec: ViTSpec, seed: int = 0) -> Ancestry:
    """A random ancestry whose every tensor varies (timm's init leaves norms at 1 and biases at 0)."""
    torch.manual_seed(seed)
    model = timm.create_model(spec.arch, pretrained=False, **spec.timm_kwargs()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p) + 0.01 * torch.randn(()))
    return Ancestry(model, spec_from_model(model))


CASES = {  # their README's 12 -> 4 layers; width shrink; depth growth; keep_ratio < 1; mlp_dct_dim=1d; the other options
    "depth 12 -> 4": (SMALL, dict(depth=4), {}),
    "width 16 -> 8": (SMALL, dict(depth=12, embed_dim=8, num_heads=1), {}),
    "depth 3 -> 5": (SMALL.replace(depth=3), dict(depth=5), {}),
    "keep_ratio 0.5": (SMALL, dict(depth=6, embed_dim=24, num_heads=3), dict(keep_ratio=0.5)),
    "mlp 1d": (SMALL, dict(depth=4, embed_dim=8, num_heads=1), dict(keep_ratio=0.5, mlp_dct_dim="1d")),
    "use_ratio": (SMALL, dict(depth=4, embed_dim=8, num_heads=1), dict(keep_ratio=0.75, use_ratio=True)),
    "consistence": (SMALL.replace(depth=4), dict(depth=6), dict(dct_mode="consistence", select_n=2)),
    "repeat, growth": (SMALL.replace(depth=3), dict(depth=5), dict(dct_mode="repeat")),
}


@pytest.mark.parametrize("case", CASES)
def test_front_is_the_authors_rule(case):
    spec, size, options = CASES[case]
    ancestry = noisy_ancestry(spec)
    gene = get_method("front")(**options).condense(ancestry)
    target = spec.replace(**size)
    ours = make_descendant(gene, target).state_dict()
    theirs = oracle_front(
        ancestry.model.state_dict(),
        spec.depth,
        target.state_shapes(),
        options.get("keep_ratio", 1.0),
        options.get("use_ratio", False),
        options.get("select_n"),
        options.get("dct_mode", "zero"),
        options.get("mlp_dct_dim", "2d"),
    )
    assert set(theirs) == set(ours)
    for key, expected in theirs.items():
        # float32 (ours) against float64 (theirs): a z-score, the DCT and its inverse along the depth (12) and
        # the width (at most the MLP's 64): 6 steps in a row of at most 64 terms, relative to the weights' scale
        bound = order_bound(64, max(1.0, float(expected.abs().max())), steps=6)
        assert torch.allclose(ours[key].double(), expected, rtol=0, atol=bound), (
            key,
            (ours[key] - expected).abs().max(),
        )


def test_depth_shrink_amplifies_the_z_scores_as_theirs_does():
    """12 -> 4 layers at keep_ratio 1: a layer-constant stack comes out 3x its z-scores (rows of the depth map sum to 12/4)."""
    ones = torch.ones(12, dtype=torch.float64)
    # float64: two matrix products of 12 terms of at most 12 (unnormalised DCT values), then of at most 1
    got = idct_basis(4, 4) @ (dct_ii(12)[:4] @ ones)
    torch.testing.assert_close(
        got, torch.full((4,), 3.0, dtype=torch.float64), rtol=0, atol=order_bound(12, 12.0, 2, U64)
    )
    torch.testing.assert_close(
        idct_basis(12, 12) @ dct_ii(12), torch.eye(12, dtype=torch.float64), rtol=0, atol=order_bound(12, 12.0, 1, U64)
    )


def test_keep_ratio_one_at_the_ancestrys_size_gives_it_back():
    ancestry = noisy_ancestry(SMALL.replace(depth=2))
    model = make_descendant(get_method("front")().condense(ancestry), ancestry.spec)
    for key, value in ancestry.model.state_dict().items():
        # a z-score, the DCT and back, along the depth (2) and the width (at most the MLP's 64), in float32
        bound = order_bound(64, max(1.0, float(value.abs().max())), steps=6)
        torch.testing.assert_close(model.state_dict()[key], value, rtol=0, atol=bound, msg=key)


def test_skip_leaves_those_tensors_to_timm():
    ancestry = noisy_ancestry(SMALL.replace(depth=2))
    gene = get_method("front")(skip=("qkv", "norm")).condense(ancestry)
    keys = set(bind_gene(gene, check=False).method.expand(gene, ancestry.spec))
    assert not any("qkv." in k or "norm" in k for k in keys) and block_key(0, "attn.proj.weight") in keys


def test_random_mode_draws_with_the_descendants_seed():
    ancestry = noisy_ancestry(SMALL.replace(depth=2))
    gene = get_method("front")(dct_mode="random").condense(ancestry)
    target = ancestry.spec.replace(depth=4)
    a, b, c = (make_descendant(gene, target, seed=s).state_dict() for s in (0, 0, 1))
    key = block_key(3, "mlp.fc1.weight")
    assert torch.equal(a[key], b[key]) and not torch.equal(a[key], c[key])


def test_the_orthonormal_variant_is_still_there():
    c = dct_matrix(5)
    torch.testing.assert_close(c @ c.T, torch.eye(5, dtype=c.dtype), rtol=0, atol=order_bound(5, 1.0, 1, U64))
    ancestry = noisy_ancestry(SMALL.replace(depth=2))
    gene = get_method("front")(variant="orthonormal", keep_ratio=1.0).condense(ancestry)
    model = make_descendant(gene, ancestry.spec)
    pos = ancestry.model.state_dict()["pos_embed"]  # the orthonormal DCT and back: as above
    bound = order_bound(64, max(1.0, float(pos.abs().max())), steps=6)
    torch.testing.assert_close(model.state_dict()["pos_embed"], pos, rtol=0, atol=bound)


def test_expand_is_differentiable_in_the_coefficients():
    ancestry = noisy_ancestry(SMALL.replace(depth=2))
    method = get_method("front")(keep_ratio=0.5)
    gene = method.condense(ancestry)
    coeffs = gene.tensors["dct.mlp.fc2.weight"].requires_grad_()
    out = method.expand(gene, ancestry.spec.replace(depth=3, embed_dim=48, num_heads=3))
    out[block_key(2, "mlp.fc2.weight")].sum().backward()
    assert coeffs.grad is not None and coeffs.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "bad", [dict(keep_ratio=0.0), dict(keep_ratio=1.5), dict(dct_mode="mirror"), dict(mlp_dct_dim="3d")]
)
def test_refuses_options_outside_their_choices(bad):
    with pytest.raises(LearngeneError, match=next(iter(bad))):
        get_method("front")(**bad)


def test_their_dct_pair_is_unnormalised():
    x = torch.arange(5, dtype=torch.float64)
    k = 2
    expected = sum(float(x[n]) * math.cos(math.pi * k * (2 * n + 1) / 10) for n in range(5))
    assert math.isclose(float((dct_ii(5) @ x)[k]), expected, abs_tol=order_bound(5, 10.0, 1, U64))  # Σ|x·cos| ≤ 10
