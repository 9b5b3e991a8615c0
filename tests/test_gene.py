import json
import pickle

import pytest
import torch
from safetensors.torch import save_file

from learngene.descendant import make_descendant
from learngene.errors import GeneFormatError
from learngene.gene import Learngene
from learngene.registry import get_method, list_methods
from tests.conftest import SCRATCH_HEADER


def _gene(tiny_spec) -> Learngene:
    return Learngene(
        method="pretrained",
        tensors={"blocks.0.norm1.weight": torch.randn(32), "blocks.0.norm1.bias": torch.randn(32)},
        config={"variant": "last"},
        layout=tiny_spec.replace(depth=1),
        ancestry=tiny_spec,
        cost={"steps": 7, "seconds": 1.5},
    )


def test_save_load_round_trip_is_exact(tmp_path, tiny_spec):
    gene = _gene(tiny_spec)
    gene.save(tmp_path / "g.safetensors")
    back = Learngene.load(tmp_path / "g.safetensors")
    assert back.tensors.keys() == gene.tensors.keys()
    assert all(torch.equal(back.tensors[k], gene.tensors[k]) for k in gene.tensors)
    assert (back.method, back.config, back.layout, back.ancestry, back.cost) == (
        gene.method,
        gene.config,
        gene.layout,
        gene.ancestry,
        gene.cost,
    )
    assert back.created == gene.created and back.library_version == gene.library_version
    assert back.num_stored_params == 32 + 32


def test_save_is_atomic_and_respects_overwrite(tmp_path, tiny_spec):
    path = tmp_path / "g.safetensors"
    _gene(tiny_spec).save(path)
    with pytest.raises(Exception, match="already exists"):
        _gene(tiny_spec).save(path, overwrite=False)
    assert [p.name for p in tmp_path.iterdir()] == ["g.safetensors"]  # no temp file left behind


def test_a_plain_safetensors_file_is_not_a_gene(tmp_path):
    save_file({"w": torch.zeros(2)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(GeneFormatError, match="not a learngene"):
        Learngene.load(tmp_path / "w.safetensors")


def _with_header(tmp_path, tensors=None, **changes):
    meta = {**SCRATCH_HEADER, **changes}
    path = tmp_path / "h.safetensors"
    save_file(tensors or {"w": torch.zeros(2)}, str(path), metadata=meta)
    return path


def test_unknown_method_newer_version_and_bad_header_fail_clearly(tmp_path, tiny_spec):
    unknown = Learngene.load(_with_header(tmp_path, method="alchemy"))  # the file is fine; using it is not
    with pytest.raises(GeneFormatError, match="unknown method 'alchemy'.*upgrade"):
        make_descendant(unknown, tiny_spec)
    with pytest.raises(GeneFormatError, match="newer than this library"):
        Learngene.load(_with_header(tmp_path, format_version="99"))
    with pytest.raises(GeneFormatError, match="corrupt learngene header"):
        Learngene.load(_with_header(tmp_path, config="{not json"))
    assert Learngene.load(_with_header(tmp_path)).method == "scratch"
    with pytest.raises(GeneFormatError, match="corrupt learngene header"):  # v2 names its layout
        Learngene.load(_with_header(tmp_path, format_version="2"))


def test_format_v1_layout_is_read_from_its_ancestry_or_trained_spec(tmp_path, tiny_spec):
    """v1 kept the layout in ``ancestry`` (weight pickers) or ``config["trained_spec"]`` (aux-net methods)."""
    norm = {"blocks.0.norm1.weight": torch.ones(tiny_spec.embed_dim)}  # a tensor the method uses
    picker = Learngene.load(_with_header(tmp_path, norm, method="pretrained", ancestry=tiny_spec.to_json()))
    assert picker.layout == picker.ancestry == tiny_spec
    aux = tiny_spec.replace(depth=3, embed_dim=16)
    config = json.dumps({"layers": "all", "trained_spec": aux.to_dict()})
    trained = Learngene.load(_with_header(tmp_path, method="tleg", config=config, ancestry=tiny_spec.to_json()))
    assert (trained.layout, trained.ancestry, trained.config) == (aux, tiny_spec, {"layers": "all"})
    trained.save(tmp_path / "v2.safetensors")  # written back as v2, the layout in its own field
    again = Learngene.load(tmp_path / "v2.safetensors")
    assert (again.layout, again.ancestry, again.config) == (aux, tiny_spec, {"layers": "all"})


def test_corrupt_truncated_and_pickled_files_are_refused(tmp_path, tiny_spec):
    good = tmp_path / "g.safetensors"
    _gene(tiny_spec).save(good)
    truncated = tmp_path / "t.safetensors"
    truncated.write_bytes(good.read_bytes()[:-20])
    garbage = tmp_path / "r.safetensors"
    garbage.write_bytes(b"\x00\x01garbage" * 10)
    pickled = tmp_path / "p.safetensors"
    pickled.write_bytes(pickle.dumps({"w": [1, 2]}))
    for path in (truncated, garbage, pickled):
        with pytest.raises(GeneFormatError, match="not a readable safetensors"):
            Learngene.load(path)
    with pytest.raises(Exception, match="does not exist"):
        Learngene.load(tmp_path / "missing.safetensors")


def test_every_tensor_below_an_expansions_graph_counts_as_used():
    """Saving a gene checks that its expansion uses every tensor, by walking the output's autograd graph on meta. The
    walk frees the nodes it has passed; with torch 2.11 a freed node's id went to the next one, which the walk then
    took for visited: 0 of these 20 tensors were found, and every pretrained gene was refused at save."""
    from learngene.binding import _graph_leaves

    leaves = {f"t{i}": torch.empty(1, 17, 8, device="meta", requires_grad=True) for i in range(20)}
    state = {k: torch.cat([v[:, :1], v[:, 1:] * 2], dim=1) for k, v in leaves.items()}  # a position table's split
    state["as_is"] = leaves["t0"]  # passed through: the tensor itself, no graph
    assert _graph_leaves(state, leaves) == set(leaves)
    assert _graph_leaves({"x": leaves["t1"] * 2}, leaves) == {"t1"}


def test_registry_lists_the_baselines():
    assert {"scratch", "pretrained", "heru_lg", "auto_lg", "weight_selection"} <= set(list_methods())
    assert get_method("auto_lg").name == "auto_lg"
    with pytest.raises(GeneFormatError, match="unknown method"):
        get_method("alchemy")
    assert list_methods() == sorted(list_methods()) and all(get_method(m).name == m for m in list_methods())
