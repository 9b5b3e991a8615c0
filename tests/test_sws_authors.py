"""SWS at its defaults is the authors' rule (github.com/AlphaXia/SWS at 2ad3b64) on a 12-layer ancestry."""

import torch

from learngene.method import Ancestry
from learngene.methods.sws import middle_first_stages, spread
from learngene.registry import get_method
from learngene.vit.spec import ViTSpec

SUBLAYERS = ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2", "norm1", "norm2")


def authors_gene_transfer(cp: dict, layers_source: str, num_layers_target: int, load_head: bool) -> dict:
    """Their ``gene_tranfer_1`` (utils.py), typed again from reading it: patch and position embeddings shared,
    the aux net's final norm becomes the descendant's ``fc_norm``, the head only when asked, and descendant
    layer ``i`` a copy of stage ``layers_source[i]``'s instance of every sub-layer."""
    source = [int(x) for x in layers_source.split(",")]
    out = {k: cp[k] for k in ("pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias")}
    if load_head:
        out["head.weight"], out["head.bias"] = cp["head.weight"], cp["head.bias"]
    out["fc_norm.weight"], out["fc_norm.bias"] = cp["norm.weight"], cp["norm.bias"]
    for layer, stage in zip(range(num_layers_target), source):
        for sub in SUBLAYERS:
            for p in ("weight", "bias"):
                out[f"blocks.{layer}.{sub}.{p}"] = cp[f"blocks.block.{sub}.instances.{stage}.{p}"]
    return out


def test_the_default_stages_and_mapping_are_theirs_at_their_depths():
    assert middle_first_stages(16) == [3, 3, 4, 3, 3]  # the rule their one extra layer follows
    assert spread(12, 5) == [3, 3, 2, 2, 2] and spread(2, 5) == [1, 1, 0, 0, 0]


def test_defaults_on_a_12_layer_ancestry_equal_their_gene_transfer():
    ancestry_spec = ViTSpec(
        depth=12, embed_dim=384, num_heads=6, img_size=16, patch_size=8, in_chans=3, num_classes=5, mlp_ratio=0.25
    )
    method = get_method("sws")()
    aux = method.aux_spec(Ancestry(torch.nn.Identity(), ancestry_spec))
    # their Aux-S: 16 layers, 12 heads at width 384, no class token, average pooling
    assert (aux.depth, aux.num_heads, aux.embed_dim, aux.global_pool, aux.class_token) == (16, 12, 384, "avg", False)
    assert method.aux_stages(aux) == [3, 3, 4, 3, 3]
    torch.manual_seed(0)
    gene = method.new_gene({k: torch.randn_like(v) for k, v in method.initial_tensors(aux).items()}, aux, ancestry_spec)
    # the gene in their checkpoint's names: one instance per stage; our aux net's final norm is timm's fc_norm
    cp = {
        f"blocks.block.{sub}.instances.{s}.{p}": gene.tensors[f"stage.{sub}.{p}"][s]
        for sub in SUBLAYERS
        for p in ("weight", "bias")
        for s in range(5)
    }
    cp.update({k: v for k, v in gene.tensors.items() if not k.startswith("stage.")})
    cp["norm.weight"], cp["norm.bias"] = cp.pop("fc_norm.weight"), cp.pop("fc_norm.bias")
    descendant = ancestry_spec.replace(global_pool="avg", class_token=False)  # their deit_small_patch16_224_L12
    theirs = authors_gene_transfer(cp, "0,0,0,1,1,1,2,2,3,3,4,4", 12, load_head=True)
    ours = method.expand(gene, descendant)
    assert set(theirs) <= set(ours)
    for key, tensor in theirs.items():
        assert torch.equal(ours[key], tensor), key
