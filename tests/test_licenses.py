"""The weights' licence: read from the ancestry, stored in the gene, named on the descendant's card; --license overrides."""

from __future__ import annotations

import json

import pytest
import torch

from learngene.ancestry import load_ancestry
from learngene.cli import main
from learngene.errors import LearngeneError
from learngene.formats.licenses import check_license, folder_license
from learngene.formats.model_file import load_model_file, save_model
from learngene.formats.weights import save_safetensors
from learngene.gene import Learngene
from learngene.vit.spec import ViTSpec
from tests.conftest import cli_ok

SPEC = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
TIMM = "vit_tiny_patch16_224"
TIMM_ARGS = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)


def _hub_folder(tmp_path, readme: str | None = None, cfg_license: str | None = None):
    """A timm hub folder of a tiny ViT, as timm writes it, with an optional model card and pretrained_cfg licence."""
    import timm
    from timm.models._hub import save_for_hf

    torch.manual_seed(0)
    folder = tmp_path / "hub"
    save_for_hf(timm.create_model(TIMM, **TIMM_ARGS), str(folder), model_args=TIMM_ARGS, safe_serialization=True)
    if cfg_license is not None:
        config = json.loads((folder / "config.json").read_text())
        config["pretrained_cfg"]["license"] = cfg_license
        (folder / "config.json").write_text(json.dumps(config))
    if readme is not None:
        (folder / "README.md").write_text(readme)
    return folder


def _condense_expand(tmp_path, ancestry, condense=(), expand=(), fmt="hub", **kwargs):
    gene, out = tmp_path / "gene.safetensors", tmp_path / ("desc" if fmt == "hub" else "desc.safetensors")
    condense_flags = ["--quiet", "--overwrite", *condense]
    cli_ok("condense", "--method", "weight_selection", "--ancestry", ancestry, "--out", gene, *condense_flags)
    narrow = ["--embed-dim", "16", "--num-heads", "1"]
    cli_ok("expand", gene, *narrow, "--out", out, "--format", fmt, "--quiet", "--overwrite", *expand)
    return Learngene.load(gene), out


def test_a_hub_folders_model_card_licence_reaches_the_gene_and_the_descendants_card(tmp_path):
    folder = _hub_folder(
        tmp_path, readme="---\nlicense: apache-2.0\nlibrary_name: timm\n---\n# a model\n", cfg_license="mit"
    )  # the card's front matter wins over the config
    gene, out = _condense_expand(tmp_path, folder)
    assert gene.license == "apache-2.0"
    card = (out / "README.md").read_text()
    assert "**licence**: apache-2.0 (the ancestry's, recorded in the learngene)" in card
    assert card.splitlines()[1] == "license: apache-2.0"
    assert load_ancestry(out).license == "apache-2.0"  # the descendant's folder carries it on, as an ancestry


def test_a_timm_pretrained_cfg_licence_is_read_and_license_overrides_it_at_condense_and_at_expand(tmp_path):
    folder = _hub_folder(tmp_path, cfg_license="cc-by-nc-4.0")
    assert load_ancestry(folder).license == "cc-by-nc-4.0"
    gene, out = _condense_expand(tmp_path, folder, condense=["--license", "MIT"])
    assert gene.license == "MIT"
    gene, out = _condense_expand(tmp_path, folder, expand=["--license", "Apache-2.0"])
    assert gene.license == "cc-by-nc-4.0"
    card = (out / "README.md").read_text()
    assert "**licence**: Apache-2.0 (stated with license (--license))" in card and "license: apache-2.0" in card


def test_a_transformers_folders_card_or_config_licence_is_read(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        image_size=16,
        patch_size=4,
        intermediate_size=64,
        num_channels=1,
    )
    folder = tmp_path / "hf"
    transformers.ViTModel(config).eval().save_pretrained(folder)
    assert load_ancestry(folder).license is None
    (folder / "README.md").write_text("---\nlicense: other\nlicense_name: dinov2-license\ntags:\n- vision\n---\n")
    assert load_ancestry(folder).license == "dinov2-license"
    (folder / "README.md").write_text("---\nlicense:\n- bsd-3-clause\n---\n")
    assert folder_license(folder) == "bsd-3-clause"
    (folder / "README.md").unlink()
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "license": "apache-2.0"}))
    assert load_ancestry(folder).license == "apache-2.0"


def test_a_model_files_recorded_licence_is_carried_to_a_descendant_model_file(tmp_path):
    torch.manual_seed(0)
    save_model(tmp_path / "anc.safetensors", SPEC.create_model(), SPEC, origin={"kind": "ancestry", "license": "MIT"})
    gene, out = _condense_expand(tmp_path, tmp_path / "anc.safetensors", fmt="file")
    assert gene.license == "MIT" and load_model_file(out)[2]["license"] == "MIT"
    _, out = _condense_expand(tmp_path, tmp_path / "anc.safetensors", expand=["--license", "BSD-3-Clause"], fmt="file")
    assert load_model_file(out)[2]["license"] == "BSD-3-Clause"


def test_a_bare_checkpoint_records_no_licence_and_the_card_says_unknown(tmp_path):
    import timm

    save_safetensors(tmp_path / "ckpt.safetensors", timm.create_model(TIMM, **TIMM_ARGS).state_dict(), {})
    gene, out = _condense_expand(
        tmp_path,
        tmp_path / "ckpt.safetensors",
        condense=[
            "--timm-model",
            TIMM,
            "--img-size",
            "16",
            "--in-chans",
            "1",
            "--num-classes",
            "4",
            "--timm-arg",
            "depth=2",
            "--timm-arg",
            "embed_dim=32",
            "--timm-arg",
            "num_heads=2",
            "--timm-arg",
            "patch_size=4",
        ],
    )
    assert gene.license is None
    card = (out / "README.md").read_text()
    assert "**licence**: unknown" in card and "license:" not in card.split("---")[1]


def test_a_bad_licence_is_refused_in_one_line(tmp_path, capsys):
    assert (
        main(["expand", str(tmp_path / "g.safetensors"), "--out", str(tmp_path / "d"), "--license", "MIT; rm -rf /"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a licence identifier" in err
    with pytest.raises(LearngeneError, match="not a licence identifier"):
        check_license("")
    folder = _hub_folder(tmp_path, readme="---\nlicense: 'a\\nb: c {}'\n---\n")
    with pytest.raises(LearngeneError, match="licence recorded in"):
        load_ancestry(folder)
