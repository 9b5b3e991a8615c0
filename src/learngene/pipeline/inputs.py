"""What the use cases take, in the forms a Python caller and the command line both give, each checked at the use case's
entry (one :class:`~learngene.errors.LearngeneError` line naming the argument, before anything is loaded or written):
data to load, a size to resolve, training settings, a run directory, method options, an ancestry, a licence and the
``say`` of the lines a use case tells."""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch import nn

from ..data import Data, FolderData, ImageData
from ..errors import (
    ArgumentTypeError,
    GeneFormatError,
    LearngeneError,
    SpecError,
    first_line,
    named,
    require_argument,
    shown,
)
from ..formats.atomic import quote
from ..formats.weights import nonfinite_tensor
from ..method import Ancestry
from ..training import distributed as dist
from ..training.config import TrainConfig, from_flags
from ..training.loop import CHECKPOINT
from ..training.run_dirs import lock_run_dir
from ..validate import parse_options
from ..vit.spec import ViTSpec, check_state_shapes, get_preset
from .requests import AncestryRequest, DataRequest, RunChoices

PathArg = str | os.PathLike
# a line about what is about to run (``banner=True``: left out by a quiet command line) or what was decided
Say = Callable[..., None]


def quiet(text: str, banner: bool = False) -> None:
    """The default :data:`Say` of a Python call: nothing is printed (progress bars follow ``TrainConfig.progress``)."""


def speaker(say: Any) -> Say:
    """``say`` as a use case calls it (``say(text, banner=...)``): a callable of one text, such as ``print``, gets the
    text alone; anything else is refused."""
    if not callable(say):
        raise ArgumentTypeError(f"say must be a callable of one text, such as print, got {type(say).__name__} {say!r}")
    params: Mapping[str, inspect.Parameter] = {}
    try:
        params = inspect.signature(say).parameters
    except (TypeError, ValueError):  # a builtin without a signature: it takes the text alone
        pass
    takes_banner = "banner" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    return say if takes_banner else lambda text, banner=False: say(text)


def check_flag(value: Any, name: str) -> bool:
    """A yes/no argument: True or False only (``"yes"`` or 1 is refused, not taken as true)."""
    require_argument(value, bool, name, "True or False")
    return value


def check_path(value: Any, name: str, what: str = "a file or folder path") -> PathArg:
    """A file or folder path argument: a non-empty string or path (``what``: how a refusal of another kind names
    what it takes)."""
    require_argument(value, (str, os.PathLike), name, what)
    if not str(value).strip():
        raise LearngeneError(f"{name} is an empty path; give a file or folder path")
    return value


def optional_path(value: Any, name: str) -> PathArg | None:
    """A file or folder path argument, or None."""
    return None if value is None else check_path(value, name)


def ancestry_argument(ancestry: Any) -> Ancestry | AncestryRequest:
    """An ancestry as loaded, or an :class:`AncestryRequest` (a path or Hub name is made one)."""
    if isinstance(ancestry, Ancestry):
        check_model_object(ancestry.model, ancestry.spec, "the Ancestry's model")
    if isinstance(ancestry, (Ancestry, AncestryRequest)):
        return ancestry
    require_argument(
        ancestry, (str, os.PathLike), "ancestry", "a path or Hub name, an AncestryRequest or a loaded Ancestry"
    )
    return AncestryRequest(ancestry)


def check_model_object(model: nn.Module, spec: ViTSpec | None, what: str) -> None:
    """What reading a model's file checks (:func:`~learngene.formats.weights.check_finite`, the spec its header
    records against its tensors), for a model given as an object: finite weights, and every tensor of ``spec``'s timm
    model in its shape where a spec comes with it."""
    state = model.state_dict()
    bad = nonfinite_tensor(state)
    if bad is not None:
        raise GeneFormatError(
            f"{what}: tensor {bad!r} holds NaN or infinite values; use the weights of a run that did not diverge"
        )
    if spec is None:
        return
    try:
        check_state_shapes(state, spec, what, require_all=True)
    except LearngeneError as exc:
        raise SpecError(
            f"the spec given with it does not describe {what} ({first_line(exc)}); give the model's own spec "
            "(learngene.vit.model_spec.spec_from_model(model))"
        ) from None


def request_path(request: Any) -> PathArg | None:
    """The file or folder a request or path argument reads, to keep an output off it (None: none)."""
    if isinstance(request, AncestryRequest):
        return request.path
    if isinstance(request, DataRequest):
        return request.source.partition(":")[2] if request.source.startswith("folder:") else None
    return request if isinstance(request, (str, os.PathLike)) else None


# data a use case trains on: a source's name, a request, or data already loaded (train, or train and test)
DataArg = str | DataRequest | Data | tuple[Data, Data | None]


def data_argument(data: Any) -> DataRequest | Data | tuple[Data, Data | None]:
    """Refuse ``data`` of another kind than :data:`DataArg` (a source's name is made a :class:`DataRequest`)."""
    if data is None:
        raise ArgumentTypeError("this step trains on data: pass data, e.g. data='digits' or a DataRequest")
    loaded = (ImageData, FolderData)
    pair = isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], loaded)
    if not (isinstance(data, (str, DataRequest, *loaded)) or pair and isinstance(data[1], (*loaded, type(None)))):
        raise ArgumentTypeError(
            f"data must be a data source's name (e.g. 'digits'), a DataRequest, or loaded image data (or a (train, "
            f"test) pair of them), got {type(data).__name__} {shown(data)}"
        )
    return DataRequest(data) if isinstance(data, str) else data


def load_data(
    data: DataArg | None,
    img_size: int | None = None,
    in_chans: int | None = None,
    preprocessing: dict[str, Any] | None = None,
    seed: int = 0,
) -> tuple[Data, Data | None]:
    """``data`` as ``(train, test)``: a name or :class:`DataRequest` loaded for that model input, loaded data as
    they are."""
    data = data_argument(data)
    if isinstance(data, DataRequest):
        return data.load(img_size, in_chans, preprocessing, seed)
    if isinstance(data, tuple):
        return data
    return data, None


# a ViT size: a spec as it is, a preset's name, or fields over a base (``{"preset": ..., "depth": 6, ...}``)
SizeArg = ViTSpec | str | Mapping[str, Any]


def size_argument(size: Any) -> SizeArg | None:
    """Refuse a ``size`` of another kind than :data:`SizeArg` (None: the default size), or a preset that does not
    exist, before anything is loaded."""
    if size is None or isinstance(size, ViTSpec):
        return size
    if not isinstance(size, (str, Mapping)):
        require_argument(size, (str, Mapping), "size", "a ViTSpec, a preset's name, a dict of spec fields or None")
    preset = size if isinstance(size, str) else size.get("preset")
    if preset is not None:
        require_argument(preset, str, "size's preset", "a preset's name")
        get_preset(preset)
    return size


def resolve_spec(size: SizeArg | None, base: ViTSpec | None = None, data: Data | None = None) -> ViTSpec:
    """The spec of ``size``: a ViTSpec as it is; else its preset (or ``base``), the data's image size, channels and
    classes over it, and the fields ``size`` gives over those."""
    if isinstance(size, ViTSpec):
        return size
    given = {"preset": size} if isinstance(size, str) else dict(size or {})
    preset = given.pop("preset", None)
    if preset:
        base = get_preset(preset)
    values = (base or ViTSpec()).to_dict()
    if data is not None:
        values.update(img_size=data.img_size, in_chans=data.in_chans, num_classes=data.num_classes)
    explicit = {k: v for k, v in given.items() if v is not None}
    values.update(explicit)
    if values.get("global_pool") == "avg" and "global_pool" in explicit:
        values["class_token"] = False
    return ViTSpec.from_dict(values)


# the fields a size needs when the gene records no size to give it over (the others are a ViTSpec's defaults)
WHOLE_SIZE = ("depth", "embed_dim", "num_heads")


def descendant_spec(size: SizeArg | None, base: ViTSpec | None, source: PathArg | None) -> ViTSpec:
    """The spec of a descendant of ``size`` over ``base``, the size the gene (read from ``source``) records: its
    ancestry's, or its own layout's. A gene that records neither (scratch, mimetic or structured condensed from a
    teacher no spec describes) takes a whole size only: a ViTSpec, a preset, or the :data:`WHOLE_SIZE` fields (the
    rest default to a ViTSpec's); one line names the fields missing."""
    fields = size_fields(size)
    missing = [name for name in WHOLE_SIZE if name not in fields]
    if base is None and not isinstance(size, ViTSpec) and not fields.get("preset") and missing:
        where = quote(source) if source is not None else "this gene"
        default = ViTSpec()
        raise LearngeneError(
            f"{where} records no ancestry size, so the descendant's is given whole: give "
            f"{', '.join(named(n) for n in missing[:-1])}{' and ' if len(missing) > 1 else ''}{named(missing[-1])} "
            f"(the others default to {default.img_size} px, patch {default.patch_size}, {default.in_chans} channels "
            f"and {default.num_classes} classes), or a {named('preset')}"
        )
    return resolve_spec(size, base=base)


def size_fields(size: SizeArg | None) -> dict[str, Any]:
    """The fields ``size`` gives by name (a preset's name under ``preset``); {} for a whole ViTSpec."""
    if size is None or isinstance(size, ViTSpec):
        return {}
    given = {"preset": size} if isinstance(size, str) else dict(size)
    return {k: v for k, v in given.items() if v is not None}


def size_input(
    size: SizeArg | None, img_size: int | None = None, in_chans: int | None = None
) -> tuple[int | None, int | None]:
    """The image size and channels data are loaded at for a model of ``size``: those it gives (a ViTSpec's, or the
    fields named), else ``img_size`` and ``in_chans``."""
    if isinstance(size, ViTSpec):
        return size.img_size, size.in_chans
    fields = size_fields(size)
    return fields.get("img_size") or img_size, fields.get("in_chans") or in_chans


TrainArg = TrainConfig | Mapping[str, Any]


def train_config(settings: Any, use_case: str, desc: str | None = None, **defaults: Any) -> TrainConfig:
    """The run's settings, the same whichever way they are given: a TrainConfig, or a mapping of settings by name
    (None: not given), resolved for ``use_case`` (:meth:`~learngene.training.config.TrainConfig.resolved`: each setting
    not given takes the use case's default, or one of ``defaults``, e.g. the method's distillation λ). ``desc``: what
    the run is called unless the settings name it."""
    if settings is not None and not isinstance(settings, (TrainConfig, Mapping)):
        require_argument(
            settings, (TrainConfig, dict), "train_cfg", "a TrainConfig, a dict of settings by name or None"
        )
    if isinstance(settings, TrainConfig):
        cfg = settings
    else:
        values = dict(settings or {})
        require_argument(values.get("desc", ""), str, "train_cfg's desc", "a text")
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        unknown = [k for k in values if k not in known]
        if unknown:
            raise ArgumentTypeError(
                f"train_cfg names {unknown[0]!r}, which is no training setting; the settings are those of "
                f"learngene.TrainConfig: {', '.join(sorted(known - {'identity'}))}"
            )
        flagged = {f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag")}
        others = {k: v for k, v in values.items() if k not in flagged and v is not None}
        cfg = from_flags({k: v for k, v in values.items() if k in flagged}, **others)
    cfg = cfg.resolved(use_case, **defaults)
    return cfg.replace(desc=desc) if desc is not None and cfg.desc == TrainConfig.desc else cfg


def open_run_dir(chosen: RunChoices, cfg: TrainConfig | None = None) -> None:
    """Refuse what ``chosen`` cannot run with ``cfg`` (:meth:`~learngene.pipeline.requests.RunChoices.check_config`),
    ``resume`` without a run directory, loggers (``cfg.log``) with nowhere to write, a run directory that is a file, or
    one whose checkpoint a run that does not resume would overwrite; then lock it for this run (rank 0; the lock is
    held until the process releases it: :func:`learngene.training.run_dirs.release_run_dirs`, or exits). The values'
    kinds were checked when ``chosen`` was made."""
    if cfg is not None:
        chosen.check_config(cfg)
    run_dir, resume = chosen.run_dir, chosen.resume
    flag = named("run_dir")
    if resume and not run_dir:
        raise LearngeneError(f"{named('resume')} continues from RUN_DIR/checkpoint.pt; pass {flag} too")
    if cfg is not None and cfg.log and not run_dir and not cfg.log_dir:  # before any data load
        raise LearngeneError(
            f"{named('log')} {cfg.log[0]} writes into the run directory, next to log.jsonl; pass {flag} too"
        )
    if not run_dir:
        return
    if Path(run_dir).exists() and not Path(run_dir).is_dir():
        raise LearngeneError(f"{flag} {quote(run_dir)} is not a directory; give a directory path")
    if not resume and (Path(run_dir) / CHECKPOINT).exists():
        raise LearngeneError(
            f"{quote(run_dir)} holds the checkpoint of an earlier run; pass {named('resume')} to continue it, or "
            f"give another {flag} (or delete it) to start over"
        )
    if dist.is_main():  # one run per run directory; the other ranks share rank 0's
        lock_run_dir(run_dir)


def method_options(config_cls: type, options: Any) -> dict[str, Any]:
    """A method's options by name: a mapping as it is, or a list of ``KEY=VALUE`` texts (``--opt``) read for their
    fields' types (:func:`learngene.validate.parse_options`); a single text is refused, not read letter by letter."""
    if options is None or (isinstance(options, (list, tuple)) and not options):  # none given: nothing to parse
        return {}
    if isinstance(options, Mapping):
        return dict(options)
    if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
        raise ArgumentTypeError(
            f"options must be a dict of the method's options by name, or a list of KEY=VALUE texts, got "
            f"{type(options).__name__} {shown(options)}; e.g. options={{'aux_depth': 2}} or options=['aux_depth=2']"
        )
    return parse_options(config_cls, list(options))


def mixup_of(data: DataArg | None) -> bool | None:
    """Whether ``data`` ask for DeiT's mixup (a :class:`DataRequest` with ``aug="deit"``, ``--aug deit``); None: they
    do not say, and the run's settings decide (off unless given)."""
    return True if isinstance(data, DataRequest) and data.aug == "deit" else None


def input_paths(*inputs: Any) -> tuple[str, ...]:
    """The files and folders a use case read (:func:`request_path` of each input): what its result never saves over."""
    return tuple(str(path) for path in map(request_path, inputs) if path)
