"""PITH: its decoding and fusion against their code re-typed (``pith/ghn3/nn_pith.py`` at commit 7c7ff0d), and the
method end to end at tiny sizes (a hypernetwork of hidden size 16, 2 layers).

The graph, its node embeddings and the Graphormer are TAL's (their ``ghn3/graph.py``, ``graphormer.py`` and
``ops.py`` are TAL's ``ghn3`` files): tests/test_tal.py and benchmarks/fidelity_tal.py hold them to their code. Here
the comparison starts from the node embeddings, as their ``GHN3.forward`` continues after the Graphormer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import timm
import torch
from torch import nn

import learngene as lg
from learngene.binding import bind_gene
from learngene.descendant import make_descendant
from learngene.errors import LearngeneError
from learngene.method import Ancestry, CondenseInputs
from learngene.methods.pith import PITH, PITHConfig, PITHHyperNet, inherited_tensors
from learngene.methods.tal import spec_graph
from learngene.training.loop import TrainConfig
from learngene.vit.spec import ViTSpec
from tests.conftest import SMALL_OPTIONS, make_images
from tests.test_tal import their_normalize, their_tile  # nn_pith.py's _tile_params and _normalize are TAL's


# ---- their computations, re-typed from pith/ghn3/nn_pith.py (GHN3.forward after the Graphormer, its 4-entry-key
# branch with the teacher, ConvDecoder3LoRA(_Gradual).forward after their MLP, _map_net_params' key with min_sz's
# rounding commented out, _apply_map_net_params_transform, _transform_positional_encoding, _resize_tensor,
# _map_student_layer_to_teacher); the class row passed in instead of drawn -------------------------------------------
def their_lora(x, expand, r, ck, max_shape, n_dim):
    """``ConvDecoder3LoRA.forward`` after its MLP (``expand``: ``l2``) and ``ConvDecoder3LoRA_Gradual.forward``
    (``expand``: ``l2_step1, relu, l2_step2, relu, l2_step3``), a batch of nodes."""
    x = x.view(-1, 2 * r, r)
    x = expand(torch.relu(x)).view(-1, 2 * ck, r)
    A, B_t = torch.split(x, ck, dim=1)
    B = B_t.transpose(1, 2)
    c_out, c_in, k_out, k_in = max_shape
    A = A[:, : (c_out * k_out), :]
    B = B[:, :, : (c_in * k_in)]
    W = torch.bmm(A, B)
    if n_dim == 1:
        return W.reshape(-1, c_out)
    if n_dim == 2:
        return W
    return W.reshape(-1, c_out, k_out, c_in, k_in).transpose(2, 3)


def their_gradual(step1, step2, step3):
    return lambda x: step3(torch.relu(step2(torch.relu(step1(x)))))


def their_resize_tensor(tensor, target_shape):
    result = tensor
    for dim, (current_size, target_size) in enumerate(zip(tensor.shape, target_shape, strict=False)):
        if current_size > target_size:
            slices = [slice(None)] * result.ndim
            slices[dim] = slice(0, target_size)
            result = result[tuple(slices)]
        elif current_size < target_size:
            repeat_times = [1] * result.ndim
            repeat_times[dim] = (target_size + current_size - 1) // current_size
            result = result.repeat(repeat_times)
            slices = [slice(None)] * result.ndim
            slices[dim] = slice(0, target_size)
            result = result[tuple(slices)]
    return result


def their_positional(param, new_hidden, s):
    batch_size, seq_len, hidden_dim = param.shape
    resized = their_resize_tensor(param, (batch_size, seq_len, new_hidden)) if hidden_dim != new_hidden else param
    if seq_len != s * s:
        resized = their_resize_tensor(resized, (batch_size, s * s, new_hidden))
    return resized.permute(0, 2, 1).reshape(batch_size, new_hidden, s, s)


def their_teacher_transform(param, last_weight):
    sz = param.shape
    if len(sz) == 1 or last_weight:
        return param
    if len(sz) == 2:
        return param.unsqueeze(2).unsqueeze(3)
    if len(sz) == 3:
        if sz[0] == 1 and min(sz[1:]) > 1:
            return their_positional(param, sz[2], int(np.floor(sz[1] ** 0.5)))
        return param
    return param


def their_student_layer_to_teacher(student_layer_idx, student_total_layers, teacher_total_layers):
    return student_layer_idx if student_layer_idx < teacher_total_layers else teacher_total_layers - 1


def their_key(node, max_shape):
    sz = node.shape

    def min_sz(j):
        return min(sz[j], max_shape)

    if len(sz) == 1:
        return (min_sz(0), -1) if node.classifier else (min_sz(0), 0)
    if node.classifier:
        return (min_sz(0), min_sz(1))
    if len(sz) == 2:
        return (min_sz(0), min_sz(1), 1, 1)
    if len(sz) == 3:
        s = int(np.floor(sz[1] ** 0.5))
        return (1, sz[2], s, s)
    return (min_sz(0), min_sz(1), sz[2], sz[3])


def their_decode(ghn, nodes, x, teacher, class_row, magnitudes):
    """Their ``GHN3.forward`` from the node embeddings ``x`` on (groups of nodes by key, each group batched through
    the decoders), ``teacher``: the ancestry's tensors after their preprocessing, by name. ``magnitudes`` collects
    the largest |value| of every block before normalization."""
    r, ck, max_shape = ghn.cfg.lora_r, ghn.cfg.max_ck, ghn.cfg.max_shape
    gradual = their_gradual(ghn.widen.step1, ghn.widen.step2, ghn.widen.step3)

    def decoder(x_, sz, n_dim=4):
        return their_lora(ghn.decoder(x_), gradual, r, ck, sz, n_dim)

    def decoderpq(x_, sz):
        return their_lora(ghn.decoder_pq(x_), ghn.l2_pq, r, ck, sz, 4)

    groups, where = {}, {}
    for i, node in enumerate(nodes):
        if node.key is not None:
            key = their_key(node, max_shape)
            # a group of tensors whose ancestry tensors differ in shape (a max_shape that caps two widths to one)
            # fails their torch.stack: split here by that shape, each node computed as in its group
            split = (key, tuple(teacher[node.key].shape)) if len(key) == 4 else (key, ())
            where[i] = len(groups.setdefault(split, []))
            groups[split].append(i)
    out = {}
    for (sz, _), inds in groups.items():
        x_ = x[torch.tensor(inds)]
        if len(sz) == 2 and sz[1] > 0:
            w = decoder(x_, (sz[0], sz[1], 1, 1), n_dim=2)
        elif len(sz) == 2:
            w = decoder(x_, (2 * sz[0], 1, 1, 1), n_dim=1).reshape(len(inds), 2, -1)
        else:
            teacher_params_batch = torch.stack([teacher[nodes[i].key] for i in inds])
            mt, nt = teacher_params_batch.shape[1], teacher_params_batch.shape[2]
            ms, ns = sz[0], sz[1]
            w = decoder(x_, sz)
            p = decoderpq(x_, (ms, mt, 1, 1)).squeeze(-1).squeeze(-1)
            q = decoderpq(x_, (nt, ns, 1, 1)).squeeze(-1).squeeze(-1)
            w_teacher = torch.einsum("bij,bjklm,bkn->binlm", p, teacher_params_batch, q)
            magnitudes.append(float(w_teacher.abs().max()))
            alpha = torch.sigmoid(ghn.fusion)
            w = (1 - alpha) * w + alpha * w_teacher
        magnitudes.append(float(w.abs().max()))
        for ind in inds:
            node, w_ind = nodes[ind], where[ind]
            is_w = len(node.shape) > 1 or node.kind == "ln"
            for it in range(2 if (len(node.shape) == 1 and is_w) else 1):
                w_ = w[w_ind][1 - is_w + it] if len(node.shape) == 1 else w[w_ind]
                name = node.bias_key if it == 1 else node.key
                out[name] = their_normalize(their_tile(w_, node.shape, class_row), is_w and not it)
    return out


# ---- the decoding and fusion, exactly --------------------------------------------------------------------------
# widths of 11 or more: their _normalize fails on a narrower position embedding
ANCESTRY = ViTSpec(depth=2, embed_dim=16, num_heads=2, mlp_ratio=2.0, img_size=8, patch_size=4, num_classes=3)
DECODER = dict(hid=8, heads=2, layers=1, lora_r=2, max_ck=128)


def integer_weights(module: nn.Module, generator: torch.Generator) -> None:
    """Every Linear with two ±1 entries per row and a bias in {−1, 0, 1}: every sum below is then of integers small
    enough to be exact in float64, whatever order a kernel adds them in, so the two codes must agree bit for bit."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            w = torch.zeros_like(m.weight)
            cols = torch.rand(w.shape, generator=generator, dtype=torch.float64).argsort(dim=1)[:, :2]
            w.scatter_(1, cols, torch.randint(0, 2, cols.shape, generator=generator).to(w) * 2 - 1)
            m.weight.data = w
            if m.bias is not None:
                m.bias.data = torch.randint(-1, 2, m.bias.shape, generator=generator).to(w)


@pytest.mark.parametrize("max_shape", [4096, 6])  # their README's; one that caps the widths (and tiles them back)
@pytest.mark.parametrize(
    "size",
    [{}, dict(depth=1, embed_dim=12, num_heads=2), dict(embed_dim=20, num_heads=4)],
    ids=["same", "less", "wider"],
)
def test_decoding_and_fusion_equal_theirs_bit_for_bit(size, max_shape):
    g = torch.Generator().manual_seed(0)
    inherited = {k: torch.randint(-1, 2, v.shape, generator=g).double() for k, v in _inherited(ANCESTRY).items()}
    cfg = PITHConfig(**DECODER, max_shape=max_shape)
    ghn = PITHHyperNet(cfg, ANCESTRY.num_classes, ANCESTRY, inherited).double()
    integer_weights(ghn, g)
    spec = ANCESTRY.replace(**size)
    graph = spec_graph(spec, cfg.ve_cutoff)
    rows = [i for i, n in enumerate(graph.nodes) if n.key is not None]
    x = torch.randint(-1, 2, (len(graph.nodes), cfg.hid), generator=g).double()
    class_row = torch.randn(1, 1, spec.embed_dim, generator=g, dtype=torch.float64)
    with torch.no_grad():
        ours = ghn.decode(graph, x, rows, class_row)
        # their preprocessing of the ancestry reads its position table's patch rows here (the next test: where not)
        teacher = {k: their_teacher_transform(v, last_weight=False) for k, v in inherited.items() if k != "pos_embed"}
        teacher["pos_embed"] = their_teacher_transform(inherited["pos_embed"][:, 1:], last_weight=False)
        magnitudes: list[float] = []
        theirs = their_decode(ghn, graph.nodes, x, teacher, class_row, magnitudes)
    # the precondition of exactness: no block reached 2^50 (a sum of integers below 2^53 is exact in float64)
    assert max(magnitudes) < 2.0**50
    assert ours.keys() == theirs.keys() == set(spec.state_shapes()) - {"cls_token"}
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key


def _inherited(spec: ViTSpec) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return inherited_tensors(Ancestry(spec.create_model(), spec), spec)


def test_the_ancestry_is_read_as_their_preprocessing_reads_it_but_its_position_rows():
    inherited = _inherited(ANCESTRY)
    ghn = PITHHyperNet(PITHConfig(**DECODER, max_shape=4096), ANCESTRY.num_classes, ANCESTRY, inherited)
    for key in ("blocks.1.attn.qkv.weight", "blocks.0.mlp.fc2.weight", "patch_embed.proj.weight"):
        shape = (1, 1, *inherited[key].shape[2:])  # its kernel sides: its own
        assert torch.equal(ghn.ancestral(key, shape), their_teacher_transform(inherited[key], last_weight=False))
    pos = inherited["pos_embed"]  # (1, 1 + 2², 16): the class token's row first
    ours = ghn.ancestral("pos_embed", (1, 16, 2, 2))
    assert torch.equal(ours, their_teacher_transform(pos[:, 1:], last_weight=False))  # the patch rows
    # theirs cuts the table's first s² rows: the class token's row and all patches but the last, each patch reading
    # its predecessor's position
    assert torch.equal(their_teacher_transform(pos, last_weight=False), their_teacher_transform(pos[:, :4], False))
    assert not torch.equal(their_teacher_transform(pos, last_weight=False), ours)


def test_a_layer_past_the_ancestry_reads_its_last_as_their_unused_helper_says():
    ghn = PITHHyperNet(PITHConfig(**DECODER, max_shape=4096), ANCESTRY.num_classes, ANCESTRY, _inherited(ANCESTRY))
    for layer in range(5):
        expected = their_student_layer_to_teacher(layer, 5, ANCESTRY.depth)
        assert ghn.source_key(f"blocks.{layer}.mlp.fc1.weight") == f"blocks.{expected}.mlp.fc1.weight"
    assert ghn.source_key("pos_embed") == "pos_embed"


# ---- the method end to end -----------------------------------------------------------------------------------
SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, num_classes=10)
TINY = SMALL_OPTIONS["pith"]
CFG = TrainConfig(epochs=1, max_steps=3, batch_size=8, progress=False)


def _condense(seed: int = 0, spec: ViTSpec = SPEC, size: int = 16, chans: int = 3, **options):
    torch.manual_seed(0)
    ancestry = Ancestry(spec.create_model().eval(), spec)
    data = make_images(16, num_classes=10, size=size, chans=chans)
    cfg = dataclasses.replace(CFG, seed=seed)
    return PITH(**{**TINY, **options}).condense(ancestry, CondenseInputs(train=data, train_cfg=cfg)), ancestry


def test_condense_save_load_expand_smaller_same_deeper_wider(tmp_path):
    gene, ancestry = _condense()
    own = ancestry.model.state_dict()
    stored = {k.removeprefix("ancestry."): v for k, v in gene.tensors.items() if k.startswith("ancestry.")}
    assert stored.keys() == {k for k, v in own.items() if v.dim() > 1 and k not in ("cls_token", "head.weight")}
    assert all(torch.equal(stored[k], own[k]) for k in stored)  # the ancestry's own weights, for the fusion
    assert gene.tensors["ghn.fusion"].item() != -1.5  # β trained from its start
    path = tmp_path / "pith.safetensors"
    gene.save(path)
    loaded = lg.Learngene.load(path)
    assert loaded.method == "pith" and set(loaded.tensors) == set(gene.tensors)
    sizes = dict(smaller=dict(depth=1, embed_dim=16, num_heads=1), same={}, deeper=dict(depth=4))
    for size in (*sizes.values(), dict(depth=3, embed_dim=64, num_heads=4)):
        spec = SPEC.replace(**size)
        model = make_descendant(loaded, spec)
        plain = timm.create_model(spec.arch, pretrained=False, **spec.timm_kwargs())
        plain.load_state_dict(model.state_dict(), strict=True)
        out = plain.eval()(torch.randn(2, 3, 16, 16))
        assert out.shape == (2, 10) and torch.isfinite(out).all()
        expanded = bind_gene(loaded, check=False).method.expand(loaded, spec)
        assert torch.equal(model.state_dict()["blocks.0.attn.qkv.weight"], expanded["blocks.0.attn.qkv.weight"])
        assert set(expanded) == set(spec.state_shapes()) - {"cls_token"}  # the class token keeps timm's init


def test_expansion_is_differentiable_in_the_hypernetwork_and_the_ancestry_layer_it_reads():
    gene, _ = _condense()
    tensors = {k: v.clone().requires_grad_(True) for k, v in gene.tensors.items()}
    live = dataclasses.replace(gene, tensors=tensors)
    state = bind_gene(gene, check=False).method.expand(live, SPEC.replace(depth=4))
    state["blocks.3.mlp.fc1.weight"].square().sum().backward()  # a layer past the ancestry's two: its last one's
    grads = {k: t.grad for k, t in tensors.items() if t.grad is not None and t.grad.abs().sum() > 0}
    assert {"ghn.fusion", "ghn.decoder_pq.4.weight", "ghn.widen.step3.weight"} <= grads.keys()
    assert {k for k in grads if k.startswith("ancestry.")} == {"ancestry.blocks.1.mlp.fc1.weight"}


def test_the_same_seed_gives_the_same_gene_bytes(tmp_path):
    (a, _), (b, _), (c, _) = _condense(0), _condense(0), _condense(1)
    for name, gene in (("a", a), ("b", b)):  # but for the time it was made and took
        dataclasses.replace(gene, created="fixed", cost={}).save(tmp_path / f"{name}.safetensors")
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    assert not all(torch.equal(a.tensors[k], c.tensors[k]) for k in a.tensors)


def test_other_channels_and_resolution_than_the_ancestry_s():
    """Grey 8-px data from an RGB 16-px ancestry: Q maps 3 input channels to 1, the 4×4 position grid is
    resampled to 2×2 (their code fails on both)."""
    gene, _ = _condense(size=8, chans=1)
    assert gene.layout.in_chans == 1 and gene.layout.img_size == 8
    spec = gene.layout.replace(depth=3)
    out = make_descendant(gene, spec).eval()(torch.randn(2, 1, 8, 8))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_bad_input_is_one_line():
    with pytest.raises(LearngeneError, match="pith option heads .* must divide hid") as info:
        PITH(hid=16, heads=3)
    assert "\n" not in str(info.value)
    with pytest.raises(LearngeneError, match="give it training data"):
        PITH(**TINY).condense(Ancestry(SPEC.create_model(), SPEC), None)
    with pytest.raises(LearngeneError, match="pith option min_depth"):
        _condense(min_depth=3)
    with pytest.raises(LearngeneError, match=r"fusion_init must be .*30"):
        PITH(fusion_init=40.0)
    gene, _ = _condense()
    with pytest.raises(LearngeneError, match="max_ck") as info:
        # 256 x 4 patch rows > 512
        bind_gene(gene, check=False).method.expand(gene, SPEC.replace(embed_dim=256, num_heads=4))
    assert "\n" not in str(info.value)
    with pytest.raises(LearngeneError, match="records no ancestry"):
        bind_gene(gene, check=False).method.expand(dataclasses.replace(gene, ancestry=None), SPEC)
