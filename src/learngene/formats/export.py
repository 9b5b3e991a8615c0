"""Models in the ecosystem's layout: timm's hub folder with a model card.

The folder is what ``timm.models.save_for_hf`` writes and ``timm.create_model("local-dir:DIR",
pretrained=True)`` reads, as do transformers' ``AutoModelForImageClassification`` (a descendant with a
classifier) and ``AutoModel`` (any descendant; the only one for a headless one, whose output is its
pooled embedding: transformers' classifier wrapper refuses a checkpoint without a classifier): ``config.json`` (``architecture``,
``num_classes``, ``num_features``, ``model_args`` = the spec's timm kwargs, ``pretrained_cfg`` with the
input size and normalization), ``model.safetensors`` (timm's own keys) and a ``README.md`` model card
that names what the model is (an ancestry, a descendant, adapted or fine-tuned), on what and how long it was trained
and its accuracy, the method, the ancestry, the gene, the size, the parameter count, the licence and the citation.
timm writes the config (``save_config_for_hf``), so it says exactly what timm will read back; before timm
1.0.31 it described the architecture's published input, and learngene sets the model's own (``_save_timm_config``).

A new folder appears whole or not at all: it is written into a temporary folder beside it and renamed.
Over an existing folder (``overwrite``) only the three files learngene writes are replaced, each by an
atomic rename; any other file the user keeps there is left alone.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import nn

from ..errors import LearngeneError, require_argument
from ..vit.spec import ViTSpec
from .atomic import OVERWRITE, TEMP_NAME_CHARS, check_output_place, library_version, make_parents, quote, umask
from .licenses import check_license
from .weights import save_safetensors

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CARD = "README.md"
HEADLESS = "none: the model outputs its pooled embedding (num_classes 0)"
# fields of the architecture's default pretrained_cfg that describe *its* published weights, not ours
FOREIGN_CFG_FIELDS = ("tag", "license", "hf_hub_id", "url", "paper_ids", "paper_name", "notes", "origin_url")


def wants_folder(out: str | os.PathLike, fmt: str | None) -> bool:
    """``--format hub``, or an ``--out`` that ends in a slash or is an existing folder."""
    if fmt is not None:
        return fmt == "hub"
    return str(out).endswith(("/", os.sep)) or Path(out).is_dir()


def check_output_folder(path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Fail early, with a clear message, if the hub folder ``path`` cannot be written."""
    path = Path(str(path).rstrip("/" + os.sep) or ".")
    if path.exists() and not path.is_dir():
        raise LearngeneError(
            f"{quote(path)} exists and is not a folder; give another path (--out), or save without format='hub' (--format hub)"
        )
    return check_output_place(path, overwrite)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success its files reach ``path``.

    A new ``path`` is the temporary folder, renamed. An existing one (``overwrite``) keeps everything but
    the files written here: each of those replaces its namesake by a rename (atomic per file), and
    whatever else is in the folder (a user's own files) is never touched.
    """
    path = check_output_folder(path, overwrite)
    make_parents(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name[:TEMP_NAME_CHARS]}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes 0700 folders; outputs get the usual permissions
        if path.exists():
            written = {p.name for p in tmp.iterdir()}
            names = [n for n in (WEIGHTS, CONFIG, CARD) if n in written] + sorted(written - {WEIGHTS, CONFIG, CARD})
            for name in names:
                if (path / name).is_dir() and not (path / name).is_symlink():
                    raise LearngeneError(
                        f"{quote(path / name)} is a folder, where learngene writes its {name}; move "
                        f"it away or choose another path (--out)"
                    )
            for name in names:  # the weights, then the config that describes them, then the card
                os.replace(tmp / name, path / name)
        else:
            try:  # claim the name exclusively: of two writers racing for it, the second fails here
                os.mkdir(path)
            except FileExistsError:
                raise LearngeneError(
                    f"{quote(path)} already exists (another process wrote it meanwhile); pass "
                    f"{OVERWRITE} to replace it, or choose another path"
                ) from None
            os.replace(tmp, path)  # onto the empty folder just claimed
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def export_hub_folder(
    path: str | os.PathLike,
    model: nn.Module,
    spec: ViTSpec,
    card: dict[str, Any],
    data_config: dict[str, Any] | None = None,
    overwrite: bool = False,
    *,
    label_names: list[str] | None = None,
) -> Path:
    """Write ``model`` (built from ``spec``) as timm's hub folder at ``path``, with a model card.

    Args:
        card: what the model card names: ``kind`` (``ancestry``, ``descendant``, ``adapted descendant``, each
            perhaps ``fine-tuned``; default: a descendant), ``method``, ``citation``, ``ancestry``, ``gene``,
            ``trained on`` (an ancestry's data), ``adapted`` and ``fine-tuned`` (on what and how long it was adapted or
            fine-tuned; the card says a descendant was not trained, without them), ``head`` (whether
            the classifier is the ancestry's, fresh or fine-tuned), ``licence`` (the ancestry's, when known;
            "unknown" otherwise), ``license_id`` (its identifier, for the hub's ``license:`` front matter, which
            :func:`learngene.formats.licenses.folder_license` reads back), and any other ``key: value`` lines (e.g.
            ``provided tensors``). :func:`learngene.formats.cards.card_from_origin` makes them from what a model
            file records.
        data_config: preprocessing for ``pretrained_cfg`` (``mean``, ``std``, ``interpolation``,
            ``crop_pct``): give the data's the model was trained on (:func:`learngene.data.preprocessing_cfg`
            of the dataset); without it the architecture's defaults are written, and the card says so.
        label_names: the class of each output of the classifier, in order: ``config.json``'s ``label_names``, which
            timm reads into the model's ``pretrained_cfg`` and transformers into ``config.id2label`` (left out when
            their count is not the model's number of classes).
    """
    require_argument(model, nn.Module, "model", "a torch module (a timm ViT)")
    require_argument(spec, ViTSpec, "spec", "a ViTSpec")
    require_argument(card, dict, "card", "a dict of the model card's entries")
    path = Path(str(path).rstrip("/" + os.sep) or ".")
    with atomic_folder(path, overwrite) as tmp:
        save_safetensors(tmp / WEIGHTS, model.state_dict(), {"format": "pt"})
        try:
            config = _save_timm_config(
                model,
                spec,
                tmp / CONFIG,
                {**_channel_stats(model, spec.in_chans), **(data_config or {})},
                label_names=label_names,
            )
        except ValueError as exc:
            raise LearngeneError(
                f"timm cannot describe this model in a config.json ({exc}); save it as a "
                f"learngene model file instead: a path (--out) ending in .safetensors"
            ) from None
        (tmp / CARD).write_text(model_card(config, spec, card, defaults_input=data_config is None))
    return path


def _save_timm_config(
    model: nn.Module, spec: ViTSpec, path: Path, data_config: dict[str, Any], label_names: list[str] | None = None
) -> dict[str, Any]:
    """timm's ``config.json`` of ``model``, written to ``path`` and returned: its ``pretrained_cfg`` describes this
    model's input and classes, and nothing of the architecture's published weights (:data:`FOREIGN_CFG_FIELDS`).

    timm 1.0.31 resolves these itself from ``data_config``. Older versions copy the architecture's published
    ``pretrained_cfg`` (e.g. 3x224x224 ImageNet inputs, 1000 classes, a custom loader for .npz weights): the
    fields timm's own resolution would change are set here, with timm's resolver of the time
    (``resolve_data_config``) merging ``data_config`` over the architecture's defaults.
    """
    from timm.models._hub import save_config_for_hf

    resolves = "data_config" in inspect.signature(save_config_for_hf).parameters
    if resolves:
        save_config_for_hf(model, str(path), model_args=spec.timm_kwargs(), data_config=data_config)
    else:  # annotated `str`, but before timm 1.0.31 it calls `config_path.open()`: timm's own save_for_hf passes a Path
        save_config_for_hf(model, path, model_args=spec.timm_kwargs())  # type: ignore[arg-type]
    config = json.loads(path.read_text())
    cfg = config["pretrained_cfg"]
    if not resolves:
        from timm.data import resolve_data_config

        size = (spec.in_chans, spec.img_size, spec.img_size)
        resolved = resolve_data_config({"input_size": size, **data_config}, model=model)
        if tuple(resolved["input_size"]) != tuple(cfg.get("input_size", ())):
            cfg["pool_size"] = None
        for key in ("test_input_size", "test_pool_size", "test_crop_pct"):  # the published weights' test-time recipe
            cfg.pop(key, None)
        if model.num_classes != cfg.get("num_classes"):
            for key in ("label_names", "label_descriptions", "label_offset"):
                cfg.pop(key, None)
        cfg.update(resolved, num_classes=model.num_classes, custom_load=False)  # the weights are timm's own keys
    for key in FOREIGN_CFG_FIELDS:
        cfg.pop(key, None)
    # transformers' TimmWrapper passes num_classes itself (from the root's), and fails on a second one;
    # timm reads the root's num_classes too
    config.get("model_args", {}).pop("num_classes", None)
    if label_names is not None and len(label_names) == model.num_classes and model.num_classes:
        config["label_names"] = [str(name) for name in label_names]  # timm's field, at the root as timm writes it
    path.write_text(json.dumps(config, indent=2) + "\n")
    return config


def _channel_stats(model: nn.Module, in_chans: int) -> dict[str, tuple[float, ...]]:
    """The architecture's default mean/std for ``in_chans`` channels (their average when the count differs)."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    out = {}
    for key in ("mean", "std"):
        values = tuple(cfg.get(key) or ())
        if values and len(values) != in_chans:
            values = (sum(values) / len(values),) * in_chans
        if values:
            out[key] = values
    return out


def card_text(value: Any) -> str:
    """``value`` as one line of a model card: text read from input files (a gene header's dates and versions,
    file, class and method names) can start no new line, so no heading, list item or YAML key: line breaks
    (and every other control or separator character) become single spaces. Each value follows ``- **key**:``
    on its line, where markdown's inline marks cannot end the line either."""
    text = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in str(value))
    return " ".join(text.split())


def model_card(config: dict[str, Any], spec: ViTSpec, card: dict[str, Any], defaults_input: bool = False) -> str:
    """The README.md of a model: YAML front matter for the hub, then what it is and how to load it.

    The card's values come from input files (a gene's header, file names, class names, a licence): each is
    written through :func:`card_text`, one escaped line, and the licence is checked as an identifier before it
    reaches the front matter."""
    card = {card_text(k): card_text(v) if v is not None else None for k, v in card.items()}
    if card.get("license_id"):
        card["license_id"] = check_license(card["license_id"], "the licence")
    facts = _card_facts(config, spec, card, defaults_input)
    title, about = _about(config["architecture"], facts["kind"], facts["method"], card)
    lines = [*_front_matter(card.get("license_id")), f"# {title}", "", about, ""]
    lines += [f"- **{key}**: {value}" for key, value in facts.items()]
    lines += _load_section(spec)
    lines += _citation_section(facts["method"], card.get("citation"))
    return "\n".join(lines)


def _about(arch: str, kind: str, method: str, card: dict[str, Any]) -> tuple[str, str]:
    """The card's title and first sentence: what the model is (its ``kind``) and whether, on what and how long it was
    trained (``card``'s ``trained on``, ``adapted``, ``fine-tuned``: a model without them was not trained)."""
    base = kind.removeprefix("fine-tuned ")
    tuned = card.get("fine-tuned") or ("how: not recorded" if base != kind else None)
    if base == "ancestry":
        title = f"{arch}, trained from scratch by learngene (an ancestry)"
        about = "A timm Vision Transformer trained from scratch by learngene (`learngene ancestry`)"
        untuned = f"{about} on {card.get('trained on') or 'data not recorded'}: an ancestry, the model learngenes are "
        untuned += "condensed from."
    elif base == "adapted descendant":
        title = f"{arch}, initialized by learngene ({method}), adapted"
        about = "A timm Vision Transformer expanded from a learngene that `learngene adapt` specialized to this size "
        about += f"({card.get('adapted') or 'how: not recorded'})"
        untuned = f"{about}: the adaptation trained the method's size-specific part (and what the gene does not give, "
        untuned += (
            "such as a fresh head), from which the weights are expanded; it has not been trained after expansion."
        )
    elif base == "descendant":
        title = f"{arch}, initialized by learngene ({method})"
        about = "A timm Vision Transformer whose weights were expanded from a learngene"
        untuned = f"{about}; it has not been trained after expansion."
    else:  # a model file that records no kind learngene makes (e.g. saved by hand): nothing more is known
        title = f"{arch}, saved by learngene"
        about = f"A timm Vision Transformer saved by learngene ({base})"
        untuned = f"{about}; its file records neither where it comes from nor any training."
    return (f"{title}, fine-tuned", f"{about}, then fine-tuned ({tuned}).") if tuned else (title, untuned)


def _card_facts(config: dict[str, Any], spec: ViTSpec, card: dict[str, Any], defaults_input: bool) -> dict[str, Any]:
    """The card's list of facts: where the descendant comes from, its size and input, head and licence, then the
    card's other entries."""
    arch = config["architecture"]
    cfg = config["pretrained_cfg"]
    return {
        "kind": card.get("kind") or ("fine-tuned descendant" if card.get("fine-tuned") else "descendant"),
        "method": card.get("method", "not recorded"),
        "ancestry": card.get("ancestry", "not recorded"),
        "learngene": card.get("gene", "not recorded"),
        "architecture": f"timm `{arch}`"
        if arch == spec.arch_label()
        else f"{spec.arch_label()}; config.json names the builder, `{arch}`, with these sizes as model_args",
        "size": f"{spec.short()}: depth {spec.depth}, width {spec.embed_dim}, {spec.num_heads} heads, MLP ratio "
        f"{spec.mlp_ratio:g}, {spec.img_size}x{spec.img_size} px input, patch {spec.patch_size}, "
        f"{spec.in_chans} channel(s), {spec.num_classes} classes",
        "parameters": f"{spec.num_params:,}",
        "input": f"size {tuple(cfg.get('input_size', ()))}, mean {tuple(cfg.get('mean', ()))}, "
        f"std {tuple(cfg.get('std', ()))}, interpolation {cfg.get('interpolation', '?')}, "
        f"crop_pct {cfg.get('crop_pct', '?')}, crop_mode {cfg.get('crop_mode', '?')}"
        + (" (timm's defaults for the architecture, not a dataset's)" if defaults_input else ""),
        "classifier head": card.get("head") or (HEADLESS if not spec.num_classes else "not recorded"),
        "licence": card.get("licence") or "unknown: no licence was recorded for the ancestry; its weights' terms apply",
        **{
            k: v
            for k, v in card.items()
            if k not in ("kind", "method", "ancestry", "gene", "citation", "head", "licence", "license_id")
        },
    }


def _front_matter(license_id: str | None) -> list[str]:
    """The card's YAML front matter for the hub (its licence, where one is recorded), then a blank line."""
    licence = [f"license: {license_id.lower()}"] if license_id else []
    return [
        "---",
        *licence,
        "library_name: timm",
        "tags:",
        "- image-classification",
        "- timm",
        "- learngene",
        "---",
        "",
    ]


def _load_section(spec: ViTSpec) -> list[str]:
    """How to load the folder with timm and with transformers (its backbone wrapper for a model without a
    classifier)."""
    lines = [
        "",
        "## Load",
        "",
        "```python",
        "import timm",
        "",
        'model = timm.create_model("local-dir:PATH/TO/THIS/FOLDER", pretrained=True)',
        "",
        "# or with transformers (its TimmWrapper models)",
        "import transformers",
        "",
    ]
    if spec.num_classes:
        lines += [
            'model = transformers.AutoModelForImageClassification.from_pretrained("PATH/TO/THIS/FOLDER")',
            "logits = model(pixel_values=images).logits",
        ]
    else:  # transformers' classifier wrapper refuses a checkpoint without a classifier; its backbone wrapper loads it
        lines += [
            'model = transformers.AutoModel.from_pretrained("PATH/TO/THIS/FOLDER")  # no classifier: features',
            "embedding = model(pixel_values=images).pooler_output",
        ]
    return [*lines, "```", "", f"Written by learngene {library_version()}.", ""]


def _citation_section(method: str, citation: str | None) -> list[str]:
    """What to cite: the method's paper, where the gene records it, and the library."""
    lines = ["## Citation", ""]
    if citation:
        lines += [f"The {method} method: {citation}", ""]
    return [
        *lines,
        f"The learngene library ({library_version()}, Apache-2.0): as its CITATION.cff, at the root of the learngene "
        "repository and source distribution, says.",
        "",
    ]
