"""Every registered method, as timm's ``tests/test_models.py`` runs every registered model.

For each method: its gene of a tiny ancestry expands to the gene's own size without error, into keys
and shapes of that size's timm model; and ``expand`` is differentiable in every float gene tensor it
reads (changing the tensor changes the output), so that GeneNet can train any of them (TLEG/WAVE
condense, WAVE/PEG adapt) and none is cut from the graph by an in-place edit, ``.detach()`` or a
detour through numpy. Methods that never train their gene are held to it too.
"""

from __future__ import annotations

import pytest
import torch

from learngene.binding import bind_gene
from learngene.gene import Learngene
from learngene.method import Ancestry, CondenseInputs, Paper, citations
from learngene.registry import get_method, list_methods
from learngene.training.loop import TrainConfig, seed_everything
from learngene.vit.spec import ViTSpec, check_state_shapes
from tests.conftest import SMALL_OPTIONS, make_images

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)


@pytest.fixture(scope="module")
def genes() -> dict[str, Learngene]:
    """Every method's gene of one seeded tiny ancestry (trained methods: two steps on toy data)."""
    out = {}
    for name in list_methods():
        seed_everything(0)
        ancestry = Ancestry(SPEC.create_model().eval(), SPEC)
        inputs = CondenseInputs(train=make_images(16), train_cfg=TrainConfig(max_steps=2, batch_size=8, progress=False))
        # tal's and pith's hypernetworks at hidden size 16: seconds, not minutes (learngene demo runs their defaults)
        method = get_method(name)(**SMALL_OPTIONS.get(name, {}))
        out[name] = method.condense(ancestry, inputs if get_method(name).needs_data else None)
    return out


def own_size(gene: Learngene) -> ViTSpec:
    return gene.layout or gene.ancestry  # an empty gene (scratch, mimetic) has no layout


@pytest.mark.parametrize("name", list_methods())
def test_expanding_to_its_own_size_never_raises(name, genes):
    gene = genes[name]
    with torch.no_grad():
        state = bind_gene(gene, check=False).method.expand(gene, own_size(gene))
    check_state_shapes(state, own_size(gene), f"the {name} gene")
    assert all(torch.isfinite(t).all() for t in state.values())


def _expand(name: str, gene: Learngene, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return bind_gene(gene, check=False).method.expand(
        Learngene(**{**gene.__dict__, "tensors": tensors}), own_size(gene)
    )


@pytest.mark.parametrize("name", list_methods())
def test_every_float_tensor_expand_reads_gets_a_gradient(name, genes):
    gene = genes[name]
    floats = [k for k, t in gene.tensors.items() if t.is_floating_point()]
    with torch.no_grad():
        base = _expand(name, gene, gene.tensors)
    read = []  # the float tensors whose value reaches the output
    for key in floats:
        with torch.no_grad():
            nudged = _expand(name, gene, {**gene.tensors, key: gene.tensors[key] + 0.5})
        if any(not torch.equal(base[k], nudged[k]) for k in base):
            read.append(key)
    if floats:  # an empty gene (scratch, mimetic, structured) has nothing to read
        assert read, f"{name}: expand reads none of its gene's float tensors"
    leaves = {k: t.detach().clone().requires_grad_(k in read) for k, t in gene.tensors.items()}
    out = _expand(name, gene, leaves)
    generator = torch.Generator().manual_seed(0)
    loss = sum((v * torch.randn(v.shape, generator=generator)).sum() for v in out.values() if v.requires_grad)
    if read:
        loss.backward()
    missing = [k for k in read if leaves[k].grad is None or not torch.isfinite(leaves[k].grad).all()]
    assert not missing, f"{name}: expand reads {missing} but no gradient reaches them"


@pytest.mark.parametrize("name", list_methods())
def test_every_method_cites_its_paper(name):
    papers = citations(get_method(name))
    assert papers and all(isinstance(p, Paper) and p.title and p.venue and p.year > 2000 for p in papers), papers


@pytest.fixture
def threads():
    """Sets torch's CPU threads for the test's body; the suite's own count comes back after."""
    kept = torch.get_num_threads()

    def use(count: int) -> None:
        torch.set_num_threads(count)
        assert torch.get_num_threads() == count

    yield use
    torch.set_num_threads(kept)


@pytest.mark.parametrize("name", list_methods())
def test_every_descendant_is_the_same_bytes_at_one_and_two_threads(name, genes, threads):
    """What `learngene expand --threads 1` and `--threads 2` write: the same bytes, for every method (wave's einsum
    and structured's SVDs were not). In one process: torch takes a new thread count at once."""
    from learngene.descendant import make_descendant

    made = []
    for count in (1, 2):
        threads(count)
        model = make_descendant(genes[name], own_size(genes[name]), seed=0)
        made.append({k: v.detach().contiguous().numpy().tobytes() for k, v in model.state_dict().items()})
    differ = [k for k in made[0] if made[0][k] != made[1][k]]
    assert not differ, f"{name}: {differ[:3]} differ between 1 and 2 threads"
