"""TAL: its GHN-3 rules against their code re-typed (``ghn3_MTL/nn.py`` at commit 27957e8), and the method end to
end at tiny sizes (a hypernetwork of hidden size 16, 2 layers)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

import learngene as lg
from learngene.binding import bind_gene
from learngene.descendant import make_descendant
from learngene.errors import GeneFormatError, LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.methods.tal import TAL, group_size, lora_block, normalize, spec_graph, tile_params
from learngene.training.loop import TrainConfig
from learngene.vit.spec import ViTSpec
from tests.bounds import order_bound
from tests.conftest import SMALL_OPTIONS, make_images


# ---- their rules, re-typed from ghn3_MTL/nn.py (GHN3._tile_params, GHN3._normalize, ConvDecoder3LoRA.forward,
# GHN3._map_net_params' min_sz); the GHN-3 (not GHN-2) branches, the class row passed in instead of drawn -----------
def their_tile(w, target_shape, class_row=None):  # noqa: C901  (their branches, kept as written to compare)
    t, s = target_shape, w.shape
    if len(t) == 1:
        if len(s) == 1:
            w = w[: min(t[0], s[0])]
        elif len(s) == 2:
            w = w[: min(t[0], s[0]), 0]
        elif len(s) > 2:
            w = w[: min(t[0], s[0]), 0, w.shape[-2] // 2, w.shape[-1] // 2]
    elif len(t) == 2:
        if len(s) == 2:
            w = w[: min(t[0], s[0]), : min(t[1], s[1])]
        elif len(s) > 2:
            w = w[: min(t[0], s[0]), : min(t[1], s[1]), w.shape[-2] // 2, w.shape[-1] // 2]
    elif len(t) == 3:
        if len(s) == 3:
            w = w[: min(t[0], s[0]), : min(t[1], s[1]), : min(t[2], s[2])]
        elif len(s) > 3:
            w = w.reshape(*s[:2], -1).permute(0, 2, 1)
            w = w[: min(t[0], w.shape[0]), : min(t[1], w.shape[1]), : min(t[2], w.shape[2])]
            w = torch.cat((class_row, w), dim=1)
    else:
        s2 = min(t[2], s[2]) if len(s) > 2 else 1
        s3 = min(t[3], s[3]) if len(s) > 3 else 1
        if len(s) > 2:
            offset = (w.shape[-2] // 2, w.shape[-1] // 2)
            w = w[
                : min(t[0], s[0]),
                : min(t[1], s[1]),
                offset[0] - s2 // 2 : offset[0] + int(np.ceil(s2 / 2)),
                offset[1] - s3 // 2 : offset[1] + int(np.ceil(s3 / 2)),
            ]
        else:
            w = w[: min(t[0], s[0]), : min(t[1], s[1])].unsqueeze(2).unsqueeze(3)
    s = w.shape
    if t[0] > s[0]:
        n_out = int(np.ceil(t[0] / s[0]))
        if len(t) == 1:
            w = w.repeat(n_out)[: t[0]]
        elif len(t) == 2:
            w = w.repeat((n_out, 1))[: t[0]]
        else:
            w = w.repeat((n_out, 1, 1, 1))[: t[0]]
    if len(t) > 1:
        if t[1] > s[1]:
            n_in = int(np.ceil(t[1] / s[1]))
            if len(t) == 2:
                w = w.repeat((1, n_in))[:, : t[1]]
            else:
                w = w.repeat((1, n_in, 1, 1))[:, : t[1]]
        elif len(t) == 3 and len(s) == 3 and t[2] > s[2]:
            n_in = int(np.ceil(t[2] / s[2]))
            w = w.repeat((1, 1, n_in))[:, :, : t[2]]
    if len(t) == 1:
        w = w[: t[0]]
    elif len(t) == 2:
        w = w[: t[0], : t[1]]
    elif len(t) == 3:
        w = w[: t[0], : t[1], : t[2]]
    else:
        offset = (w.shape[-2] // 2, w.shape[-1] // 2)
        w = w[
            : t[0],
            : t[1],
            offset[0] - t[2] // 2 : offset[0] + int(np.ceil(t[2] / 2)),
            offset[1] - t[3] // 2 : offset[1] + int(np.ceil(t[3] / 2)),
        ]
    return w


def their_normalize(p, is_w):
    if p.dim() > 1:
        sz = p.shape
        if len(sz) > 2 and sz[2] >= 11 and sz[0] == 1:
            return p
        no_relu = len(sz) > 2 and (sz[1] == 1 or sz[2] < sz[3])
        beta = 1.0 if no_relu else 2.0
        return p * (beta / p[0].numel()) ** 0.5
    return 2 * torch.sigmoid(0.5 * p) if is_w else torch.tanh(0.2 * p)


def their_lora_decoder(x, l2, r, ck, max_shape, n_dim):  # ConvDecoder3LoRA.forward after its MLP, batch of nodes
    x = x.view(-1, 2 * r, r)
    x = l2(torch.relu(x)).view(-1, 2 * ck, r)
    A, B_t = torch.split(x, ck, dim=1)
    B = B_t.transpose(1, 2)
    c_out, c_in, k_out, k_in = max_shape
    W = torch.bmm(A[:, : (c_out * k_out), :], B[:, :, : (c_in * k_in)])
    if n_dim == 1:
        return W.reshape(-1, c_out)
    if n_dim == 2:
        return W
    return W.reshape(-1, c_out, k_out, c_in, k_in).transpose(2, 3)


def their_min_sz(n, max_n):
    n = min(n, max_n)
    if n % 3 == 0:
        n = n // 3 * 4
    if n >= max_n / 2:
        n = max_n
    return n


@pytest.mark.parametrize(
    "block, target",
    [
        ((12,), (7,)),
        ((4,), (10,)),
        ((8, 6), (5, 4)),
        ((4, 3), (10, 7)),
        ((8, 6, 1, 1), (20, 13)),
        ((8, 6, 5, 5), (8, 3, 3, 3)),
        ((4, 2, 4, 4), (9, 5, 4, 4)),
        ((8, 6, 3, 3), (6,)),
    ],
)
def test_tiling_equals_theirs(block, target):
    w = torch.randn(block, generator=torch.Generator().manual_seed(1))
    assert torch.equal(tile_params(w, target), their_tile(w, target))


def test_position_embedding_tiling_equals_theirs():
    w = torch.randn(1, 8, 4, 4, generator=torch.Generator().manual_seed(2))
    row = torch.randn(1, 1, 8)
    for tokens in (17, 16):  # a class token and 4x4 patches; no class token (their chop drops the last patch)
        assert torch.equal(tile_params(w, (1, tokens, 8), row), their_tile(w, (1, tokens, 8), row))


@pytest.mark.parametrize("shape", [(7,), (5, 9), (1, 20, 16), (4, 3, 4, 4), (4, 1, 3, 3), (4, 2, 1, 3)])
def test_normalization_equals_theirs(shape):
    p = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    for is_w in (True, False):
        assert torch.equal(normalize(p, is_w), their_normalize(p, is_w))


@pytest.mark.parametrize("shape, n_dim", [((6, 1, 1, 1), 1), ((5, 7, 1, 1), 2), ((3, 2, 4, 4), 4), ((1, 8, 3, 3), 4)])
def test_the_lora_decoder_equals_theirs(shape, n_dim):
    torch.manual_seed(4)
    r, ck = 3, 40
    l2 = nn.Linear(r, ck)
    factors = torch.randn(2, 2 * r * r)
    theirs = their_lora_decoder(factors, l2, r, ck, shape, n_dim)
    for i in range(2):
        # the same products in other orders: A·B (r terms), l2 (r terms), a sum over the kernel: 3 sums of ≤ 40
        bound = order_bound(ck, max(1.0, float(theirs[i].detach().abs().max())), steps=3)
        torch.testing.assert_close(lora_block(factors[i], l2, r, shape, n_dim), theirs[i], rtol=0, atol=bound)


def test_grouped_sizes_equal_theirs():
    for n in range(1, 300):
        for m in (16, 64, 2048):
            assert group_size(n, m) == their_min_sz(n, m)


def test_the_graph_is_a_chain_of_their_node_kinds_with_residual_sums():
    """What their tracer makes of torchvision's ViT of this size (benchmarks/fidelity_tal.py compares every distance)."""
    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, num_classes=10)
    graph = spec_graph(spec, 50)
    kinds = [n.kind for n in graph.nodes]
    block = ["ln", "conv", "bias", "conv", "bias", "sum", "ln", "conv", "bias", "conv", "bias", "sum"]
    assert kinds == ["input", "conv", "bias", "pos_enc", "sum", *block, *block, "ln", "conv", "bias"]
    assert graph.nodes[-2].classifier and graph.nodes[-2].key == "head.weight"
    d = graph.distances
    assert d[0, 1] == 1 and d[3, 4] == 1 and d[4, 10] == 1  # pos -> sum; the stream skips block 0's attention
    assert d[0, len(kinds) - 1] == 3 + 4 + 3  # virtual edges: shortest paths run through the residual sums
    assert (d.diagonal() == 0).all() and (d.tril() == 0).all()  # forward order


# ---- the method end to end -----------------------------------------------------------------------------------
SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, num_classes=10)
TINY = SMALL_OPTIONS["tal"]
CFG = TrainConfig(epochs=1, max_steps=3, batch_size=8, distill_lambda=0.2, progress=False)


def _condense(seed: int = 0, **options):
    torch.manual_seed(0)
    ancestry = Ancestry(SPEC.create_model().eval(), SPEC)
    data = make_images(16, num_classes=10, size=16, chans=3)
    cfg = TrainConfig(**{**CFG.__dict__, "seed": seed})
    return TAL(**{**TINY, **options}).condense(ancestry, CondenseInputs(train=data, train_cfg=cfg))


def test_condense_save_load_expand_to_two_sizes(tmp_path):
    gene = _condense()
    path = tmp_path / "tal.safetensors"
    gene.save(path)
    loaded = lg.Learngene.load(path)
    assert loaded.method == "tal" and set(loaded.tensors) == set(gene.tensors)
    for size in (dict(depth=1), dict(depth=3, embed_dim=64, num_heads=4)):
        spec = SPEC.replace(**size)
        model = make_descendant(loaded, spec)
        plain = timm.create_model(spec.arch, pretrained=False, **spec.timm_kwargs())
        plain.load_state_dict(model.state_dict(), strict=True)
        out = plain.eval()(torch.randn(2, 3, 16, 16))
        assert out.shape == (2, 10) and torch.isfinite(out).all()
        expanded = bind_gene(loaded, check=False).method.expand(loaded, spec)
        assert torch.equal(model.state_dict()["blocks.0.attn.qkv.weight"], expanded["blocks.0.attn.qkv.weight"])
        assert set(expanded) == set(spec.state_shapes()) - {"cls_token"}  # the class token keeps timm's init


def test_expansion_is_differentiable_in_the_gene():
    gene = _condense()
    tensors = {k: v.clone().requires_grad_(True) for k, v in gene.tensors.items()}
    live = dataclasses.replace(gene, tensors=tensors)
    state = bind_gene(gene, check=False).method.expand(live, SPEC.replace(depth=1))
    sum(v.square().sum() for v in state.values()).backward()
    assert tensors["ghn.l2.weight"].grad is not None and tensors["ghn.l2.weight"].grad.abs().sum() > 0
    assert tensors["task_embedding"].grad is not None  # the task embedding conditions every prediction
    assert gene.cost["steps"] == 3


def test_the_same_seed_gives_the_same_gene_bit_for_bit():
    a, b, c = _condense(0), _condense(0), _condense(1)
    assert all(torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors)
    assert not all(torch.equal(a.tensors[k], c.tensors[k]) for k in a.tensors)


def test_bad_input_is_one_line():
    with pytest.raises(LearngeneError, match="must divide hid") as info:
        _condense(heads=3)
    assert "\n" not in str(info.value)
    with pytest.raises(LearngeneError, match="give training data"):
        TAL(**TINY).condense(Ancestry(SPEC.create_model(), SPEC), None)
    gene = _condense()
    with pytest.raises(LearngeneError, match="max_ck") as info:
        # 256 x 4 patch rows > 512
        bind_gene(gene, check=False).method.expand(gene, SPEC.replace(embed_dim=256, num_heads=4))
    assert "\n" not in str(info.value)
    assert math.isfinite(float(gene.tensors["task_embedding"].sum()))


def test_a_tensor_of_a_dtype_it_cannot_compute_with_is_refused_in_one_line_naming_file_and_tensor(tmp_path):
    """A tal gene whose decoder bias is int64 (a draw of test_fuzz.py's) or float64 beside float32: ``meta``'s kernels
    do not compare dtypes, so the shape check alone passed them and the real expansion failed deep in a matmul; the
    check before expanding now finds the integer tensor computed with as a float, and the operation given two
    floating dtypes."""
    gene = _condense()
    key = "ghn.decoder.0.bias"
    path = tmp_path / "forged.safetensors"
    gene.save(path)
    with safe_open(str(path), framework="pt") as fh:
        tensors, meta = {k: fh.get_tensor(k) for k in fh.keys()}, fh.metadata()
    for dtype, why in [
        (torch.int64, f"its tensor '{key}' is torch.int64, where its method computes in floats"),
        (torch.float64, f"together (addmm); its tensor '{key}' is torch.float64, the rest torch.float32"),
    ]:
        save_file({**tensors, key: tensors[key].to(dtype)}, str(path), metadata=meta)
        with pytest.raises(GeneFormatError) as info:
            lg.expand(path, dict(depth=1))
        message = str(info.value)
        assert "\n" not in message and str(path) in message, message
        assert why in message, message
        assert message.endswith("create it again with `learngene condense`"), message


# ---- the hypernetwork sized for the ancestry (TALConfig.sized_for) ---------------------------------------------
def test_the_decoder_is_theirs_at_their_scale_and_scaled_with_the_width_below_it():
    from learngene.methods.pith import PITHConfig
    from learngene.methods.tal import TALConfig

    vit_b = ViTSpec(depth=12, embed_dim=768, num_heads=12, img_size=224, patch_size=16, num_classes=1000)
    for wide in (vit_b, vit_b.replace(embed_dim=1024, num_heads=16)):  # their nets' widest, and a wider ancestry
        tal, pith = TALConfig().sized_for(wide), PITHConfig().sized_for(wide)
        # their README's --lora_r 90 --max_shape 2048 (PITH 4096), config.py's max_ck_lora 2048*16
        assert (tal.lora_r, tal.max_ck, tal.max_shape) == (90, 2048 * 16, 2048)
        assert (pith.lora_r, pith.max_ck, pith.max_shape) == (90, 2048 * 16, 4096)
    tiny = ViTSpec(depth=4, embed_dim=64, num_heads=4, img_size=28, patch_size=4, in_chans=1, num_classes=10)
    tal, pith = TALConfig().sized_for(tiny), PITHConfig().sized_for(tiny)
    # the rule re-typed: theirs times 64 / 768, rounded up
    assert (tal.lora_r, tal.max_ck, tal.max_shape) == (math.ceil(90 / 12), math.ceil(32768 / 12), math.ceil(2048 / 12))
    assert pith.max_shape == math.ceil(4096 / 12) and (pith.lora_r, pith.max_ck) == (tal.lora_r, tal.max_ck)
    given = TALConfig(lora_r=5, max_ck=999, max_shape=40).sized_for(tiny)
    assert (given.lora_r, given.max_ck, given.max_shape) == (5, 999, 40)  # a value given is kept


def test_max_ck_covers_the_ancestrys_own_tensors_where_the_scaled_value_would_not():
    from learngene.methods._tal_hypernet import decoder_rows
    from learngene.methods.tal import TALConfig

    # 8 wide: max_ck scaled is ceil(32768 * 8 / 768) = 342, but the 56-px patch kernel reads 8 x 56 = 448 rows
    narrow = ViTSpec(depth=1, embed_dim=8, num_heads=1, img_size=112, patch_size=56, num_classes=2)
    sized = TALConfig().sized_for(narrow)
    assert decoder_rows(narrow, sized.axis_size) == 448 and sized.max_ck == 448


def test_a_condensed_gene_records_the_sizes_its_hypernetwork_was_built_with():
    gene = _condense(max_ck=0)  # lora_r is TINY's 4; max_ck and max_shape sized for SPEC (32 wide)
    assert (gene.config["lora_r"], gene.config["max_ck"], gene.config["max_shape"]) == (4, 1366, 86)
    assert gene.tensors["ghn.l2.weight"].shape == (1366, 4)
    model = make_descendant(gene, SPEC.replace(depth=3, embed_dim=64, num_heads=4))  # wider than the ancestry
    assert torch.isfinite(model(torch.randn(1, 3, 16, 16))).all()


@pytest.mark.parametrize("method", ["tal", "pith"])
def test_a_gene_of_auto_decoder_sizes_passes_the_check_before_saving_and_saves(method, tmp_path):
    # lg.condense checks the gene with the method that made it, whose decoder sizes are still 0 (auto): the gene's
    # recorded sizes must build its hypernetwork (the demo's tal and pith failed there before built_config)
    torch.manual_seed(0)
    ancestry = Ancestry(SPEC.create_model().eval(), SPEC)
    data = make_images(16, num_classes=10, size=16, chans=3)
    options = {"hid": 16, "heads": 2, "layers": 1}  # the decoder's lora_r, max_ck and max_shape left at 0
    gene = lg.condense(method, ancestry, options=options, data=data, train_cfg=CFG).gene
    assert gene.config["lora_r"] == math.ceil(90 * 32 / 768) and gene.config["max_ck"] == math.ceil(32768 * 32 / 768)
    gene.save(tmp_path / "gene.safetensors")
    loaded = lg.Learngene.load(tmp_path / "gene.safetensors")
    assert torch.isfinite(make_descendant(loaded, SPEC.replace(depth=3))(torch.randn(1, 3, 16, 16))).all()
