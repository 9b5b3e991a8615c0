"""``learngene export``: any model learngene writes, as the file the next tool reads.

- ``hub``: timm's hub folder with a model card (:func:`learngene.formats.export.export_hub_folder`), which
  ``timm.create_model("local-dir:DIR", pretrained=True)`` and transformers load; ``push_to_hub`` uploads it.
- ``onnx``: an ONNX file from torch's dynamo exporter, checked against PyTorch by onnxruntime
  (:mod:`learngene.formats.onnx_file`).
- ``timm``: the plain timm state dict (``.safetensors``, or ``.pth``/``.pt``/``.bin`` through ``torch.save``), which
  ``timm.create_model(arch, **model_args).load_state_dict(...)`` loads (the call is said and returned).

The model is a learngene model file (an ancestry, a descendant, a fine-tuned or adapted model), a hub folder, or a
use case's result (:class:`~learngene.pipeline.results.ModelOutput`, :class:`~learngene.pipeline.results.Adapted`).
The caller's model is not changed (eval mode is set for the export and restored).
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import preprocessing_cfg
from ..errors import GeneFormatError, LearngeneError, named, require_argument
from ..formats.atomic import quote, save_torch_atomic
from ..formats.convert import is_model_folder
from ..formats.export import CARD, CONFIG, export_hub_folder, wants_folder
from ..formats.model_file import model_preprocessing, read_model
from ..formats.onnx_file import DEFAULT_OPSET, MAX_BATCH, OnnxRequest, check_opset, export_onnx, require_onnx
from ..formats.publish import check_can_push, push_folder
from ..formats.weights import is_regular_file, read_regular_text, read_safetensors, save_safetensors
from ..gene import GENE_FORMAT
from ..vit.spec import ViTSpec
from .inputs import Say, check_flag, check_path, quiet, speaker
from .results import Adapted, ModelOutput, check_destination

FORMATS = ("hub", "onnx", "timm")
TORCH_SUFFIXES = (".pth", ".pt", ".bin")
# facts a hub folder's card computes from its config, not carried over when a folder is exported again
COMPUTED_FACTS = ("architecture", "size", "parameters", "input")
# a card's fact names -> export_hub_folder's card entries
CARD_ENTRIES = {"learngene": "gene", "classifier head": "head"}


@dataclass
class Exported:
    """What :func:`export` wrote: the ``path``, its ``format``, one line on it (``summary``), and the ``record``: for
    ONNX what its metadata holds (opset, batch, shapes, the measured difference and its bound, versions), for a timm
    state dict the ``arch`` and ``model_args`` that build its model, for a hub folder its card's entries; ``url``: the
    Hub commit, when it was pushed."""

    path: Path
    format: str
    summary: str
    record: dict[str, Any] = field(default_factory=dict)
    url: str | None = None


@dataclass
class _Source:
    """The model to export and what its file says of it."""

    model: nn.Module
    spec: ViTSpec | None
    origin: dict[str, Any]
    preprocessing: dict[str, Any] | None
    inputs: tuple[str, ...]
    card: dict[str, Any] | None = None  # a hub folder's own card, carried over
    defaults_input: bool = False  # its preprocessing is the architecture's default, not a dataset's
    result: ModelOutput | None = None  # the use case's result it came as, which writes its own hub folder


def export(
    model: str | os.PathLike | ModelOutput | Adapted,
    out: str | os.PathLike,
    format: str | None = None,
    *,
    opset: int = DEFAULT_OPSET,
    dynamic_batch: bool = False,
    batch_size: int = 1,
    overwrite: bool = False,
    push_to_hub: str | None = None,
    say: Say = quiet,
) -> Exported:
    """Write ``model`` to ``out`` as a timm hub folder, an ONNX file or a plain timm state dict, as ``learngene export``
    does.

    Args:
        model: a model file learngene wrote (ancestry, descendant, fine-tuned or adapted), a hub folder, or a use
            case's result.
        out: the output: a folder for ``hub``, a ``.onnx`` file, a ``.safetensors`` or ``.pth`` state dict.
        format: ``"hub"``, ``"onnx"`` or ``"timm"``; None: told by ``out`` (a trailing ``/`` or an existing folder:
            hub; ``.onnx``; ``.safetensors``, ``.pth``, ``.pt``, ``.bin``: timm).
        opset: the ONNX opset (default :data:`~learngene.formats.onnx_file.DEFAULT_OPSET`, recorded in the file).
        dynamic_batch: the ONNX graph takes any batch size (checked at two); else batches of ``batch_size`` only.
        batch_size: the fixed batch of the ONNX graph.
        overwrite: replace an existing output (a hub folder: only the files learngene writes there).
        push_to_hub: a Hub repo id (``ORG/NAME``) to upload the hub folder to, with huggingface_hub's token and
            endpoint (``HF_TOKEN``, ``HF_ENDPOINT``); refused before anything is written when the Hub cannot be reached.
        say: called with the line on what was written (for ONNX: the check's difference and bound), e.g. ``print``.
    """
    check_path(out, "out")
    fmt = _format_of(out, format)
    for flag, name in ((dynamic_batch, "dynamic_batch"), (overwrite, "overwrite")):
        check_flag(flag, name)
    _check_batch_size(batch_size)
    say = speaker(say)
    if fmt == "onnx":
        require_onnx()
    check_opset(opset)  # checked for every format: the same call with another format is as valid
    if push_to_hub is not None:
        if fmt != "hub":
            raise LearngeneError(f"{named('push_to_hub')} uploads a hub folder; give format='hub' (--format hub)")
        check_can_push(push_to_hub)
    source = _read_source(model)
    check_destination(out, overwrite, source.inputs, folder=fmt == "hub")
    if fmt == "onnx":
        request = OnnxRequest(_input_size(source), opset, dynamic_batch, batch_size, output_name=_output_name(source))
        exported = _to_onnx(source, out, request, overwrite)
    elif fmt == "timm":
        exported = _to_timm(source.model, _require_timm_vit(source, fmt), out, overwrite)
    else:
        exported = _to_hub(source, _require_timm_vit(source, fmt), out, overwrite)
        if push_to_hub is not None:
            exported.url = push_folder(exported.path, push_to_hub)
            exported.summary += f"; pushed to {push_to_hub} ({exported.url})"
    say(exported.summary)
    return exported


def _check_batch_size(batch_size: Any) -> None:
    require_argument(batch_size, int, "batch_size", "a batch size (an int)")
    if not 1 <= batch_size <= MAX_BATCH:
        raise LearngeneError(f"{named('batch_size')} must be in [1, {MAX_BATCH}], got {batch_size}")


def _format_of(out: str | os.PathLike, format: str | None) -> str:
    if format is not None:
        if format not in FORMATS:
            raise LearngeneError(f"format (--format) must be one of {', '.join(FORMATS)}, got {format!r}")
        return format
    suffix = Path(out).suffix.lower()
    if wants_folder(out, None):
        return "hub"
    if suffix == ".onnx":
        return "onnx"
    if suffix in (".safetensors", *TORCH_SUFFIXES):
        return "timm"
    raise LearngeneError(
        f"the output {quote(out)} does not tell the format: give format (--format) hub, onnx or timm, or an output "
        f"ending in / (hub), .onnx or .safetensors/.pth (timm)"
    )


def _read_source(model: Any) -> _Source:
    """The model and what its file records, from a path (a model file or a hub folder) or a use case's result."""
    if isinstance(model, Adapted):
        model = model.descendant
    if isinstance(model, ModelOutput):
        return _Source(model.model, model.spec, dict(model.origin), model.preprocessing, model.inputs, result=model)
    require_argument(model, (str, os.PathLike), "model", "a model file's or hub folder's path, or a use case's result")
    check_path(model, "model")
    if is_model_folder(model):
        return _folder_source(model)
    if is_regular_file(model) and read_safetensors(model, lazy=True)[1].get("format") == GENE_FORMAT:
        raise GeneFormatError(
            f"{quote(model)} is a learngene, not a model; expand it first (learngene expand {model} --out "
            f"model.safetensors), then export the model"
        )
    loaded = read_model(model)
    return _Source(loaded.model, loaded.spec, loaded.origin, model_preprocessing(model), (str(model),))


def _folder_source(folder: str | os.PathLike) -> _Source:
    """A hub (or transformers) folder's model, its preprocessing, and its card's facts (carried to a new card)."""
    from ..ancestry import load_ancestry

    ancestry = load_ancestry(folder)
    facts: dict[str, str] = {}
    readme = Path(folder) / CARD
    if is_regular_file(readme):
        for line in readme.read_text(errors="replace").splitlines():
            key, sep, value = line.removeprefix("- **").partition("**: ")
            if line.startswith("- **") and sep:
                facts[CARD_ENTRIES.get(key, key)] = value
    defaults = "timm's defaults" in facts.get("input", "")  # the card said its preprocessing is no dataset's
    card: dict[str, Any] = {k: v for k, v in facts.items() if k not in COMPUTED_FACTS}
    if ancestry.license:
        card["license_id"] = ancestry.license
    origin = {"kind": "hub folder", "folder": str(folder), "label_names": _label_names(Path(folder) / CONFIG)}
    return _Source(ancestry.model, ancestry.spec, origin, ancestry.preprocessing, (str(folder),), card, defaults)


def _label_names(config: Path) -> list[str] | None:
    """What a hub folder's head outputs mean, as its ``config.json`` names them (timm's ``label_names``), if it does."""
    try:
        names = json.loads(read_regular_text(config)).get("label_names")
    except (OSError, ValueError, AttributeError):  # the folder was read already: an odd config only lacks names
        return None
    return [str(n) for n in names] if isinstance(names, list) else None


def _require_timm_vit(source: _Source, fmt: str) -> ViTSpec:
    """The spec of a timm ViT; a model no spec describes (a stitched descendant) goes to ONNX only."""
    if source.spec is None or getattr(source.model, "file_format", None) is not None:
        raise LearngeneError(
            f"this {source.origin.get('kind') or type(source.model).__name__} is not a timm ViT, so it has no "
            f"{'timm hub folder' if fmt == 'hub' else 'timm state dict'}; export it to ONNX (--format onnx)"
        )
    return source.spec


def _input_size(source: _Source) -> tuple[int, int, int]:
    """The (channels, height, width) the model is exported at: its spec's (one fixed resolution, for families that
    take others too), else its preprocessing's."""
    if source.spec is not None:
        return (source.spec.in_chans, source.spec.img_size, source.spec.img_size)
    size = (source.preprocessing or {}).get("input_size")
    if size is None:
        raise LearngeneError("this model records no input size to export it at; save it as a learngene model file")
    c, h, w = (int(v) for v in size)
    return (c, h, w)


def _output_name(source: _Source) -> str:
    classes = getattr(source.model, "num_classes", source.spec.num_classes if source.spec else 1)
    return "logits" if classes else "embedding"


def _cpu_float(model: nn.Module) -> nn.Module:
    """``model`` itself when its weights are fp32 on the CPU (where the check runs); else a copy moved there."""
    tensors = [*model.parameters(), *model.buffers()]
    if all(t.device.type == "cpu" and (t.dtype == torch.float32 or not t.is_floating_point()) for t in tensors):
        return model
    return copy.deepcopy(model).to("cpu", torch.float32)


def _to_onnx(source: _Source, out: str | os.PathLike, request: OnnxRequest, overwrite: bool) -> Exported:
    metadata = {"model": source.origin.get("kind") or "model", "preprocessing": source.preprocessing}
    record = export_onnx(out, _cpu_float(source.model), request, overwrite, metadata)
    batches = " and ".join(map(str, record["probe_batches"]))
    batch = "dynamic" if request.dynamic_batch else f"fixed at {request.batch_size}"
    summary = (
        f"ONNX opset {record['opset']}, batch {batch}, input {record['input_name']} {tuple(record['input_shape'])}: "
        f"onnxruntime matches PyTorch to within {record['max_abs_diff']:.3g} (bound {record['bound']:.3g}) on "
        f"probe batches of {batches} image(s)"
    )
    return Exported(Path(out), "onnx", summary, record)


def _to_timm(model: nn.Module, spec: ViTSpec, out: str | os.PathLike, overwrite: bool) -> Exported:
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    suffix = Path(out).suffix.lower()
    if suffix == ".safetensors":
        save_safetensors(out, state, {"format": "pt"}, overwrite)
    elif suffix in TORCH_SUFFIXES:
        save_torch_atomic(out, state, overwrite)
    else:
        raise LearngeneError(
            f"a timm state dict is written as .safetensors, or with torch.save as {', '.join(TORCH_SUFFIXES)}; "
            f"{quote(out)} has none of these suffixes"
        )
    args = spec.timm_kwargs()
    call = f"timm.create_model({spec.arch!r}, {', '.join(f'{k}={v!r}' for k, v in args.items())})"
    summary = f"timm state dict of {spec.short()}: {call}.load_state_dict(state_dict) loads it"
    return Exported(Path(out), "timm", summary, {"arch": spec.arch, "model_args": args})


def _to_hub(source: _Source, spec: ViTSpec, out: str | os.PathLike, overwrite: bool) -> Exported:
    """A result's hub folder, as its ``save`` writes it (a model file's too, read as a result); a hub folder's with the
    card it had."""
    if source.card is None:
        result = source.result or ModelOutput(source.model, spec, source.origin, source.preprocessing)
        result.save(out, overwrite=overwrite, format="hub")
        card = result.hub_card()
    else:
        card = source.card
        data_config = None
        if source.preprocessing is not None and not source.defaults_input:
            data_config = preprocessing_cfg(source.preprocessing, spec.img_size, spec.in_chans)
        names = source.origin.get("label_names")
        export_hub_folder(out, source.model, spec, card, data_config, overwrite, label_names=names)
    path = Path(str(out).rstrip("/" + os.sep) or ".")
    summary = f"timm hub folder of {spec.short()}: timm.create_model('local-dir:{path}', pretrained=True) loads it"
    return Exported(path, "hub", summary, card)
