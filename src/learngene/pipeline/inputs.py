"""What the use cases take, in the forms a Python caller and the command line both give: data to load, a size to
resolve, training settings, a run directory, method options."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..data import Data
from ..errors import LearngeneError, render
from ..errors import setting as by_caller
from ..formats.atomic import quote
from ..training import distributed as dist
from ..training.config import TrainConfig, from_flags
from ..training.loop import CHECKPOINT
from ..training.run_dirs import lock_run_dir
from ..validate import caller_name, parse_assignment, parse_options
from ..vit.spec import ViTSpec, get_preset
from .requests import DataRequest

# a line about what is about to run (``banner=True``: left out by a quiet command line) or what was decided
Say = Callable[..., None]


def quiet(text: str, banner: bool = False) -> None:
    """The default :data:`Say` of a Python call: nothing is printed (progress bars follow ``TrainConfig.progress``)."""


def in_callers_words(say: Say) -> Say:
    """``say`` for a line that names a setting (:func:`learngene.errors.setting`): a Python caller's ``say`` gets
    the line in Python's words; one that picks the words itself (the command line's, marked ``renders_settings``)
    gets it whole."""
    if getattr(say, "renders_settings", False):
        return say
    return lambda text, **how: say(render(text, cli=False), **how)


# data a use case trains on: a source's name, a request, or data already loaded (train, or train and test)
DataArg = str | DataRequest | Data | tuple[Data, Data | None]


def load_data(
    data: DataArg | None,
    img_size: int | None = None,
    in_chans: int | None = None,
    preprocessing: dict[str, Any] | None = None,
    seed: int = 0,
) -> tuple[Data, Data | None]:
    """``data`` as ``(train, test)``: a name or :class:`DataRequest` loaded for that model input, loaded data as
    they are."""
    if data is None:
        raise LearngeneError("this step trains on data: pass data, e.g. data='digits' or a DataRequest")
    if isinstance(data, str):
        data = DataRequest(data)
    if isinstance(data, DataRequest):
        return data.load(img_size, in_chans, preprocessing, seed)
    if isinstance(data, tuple):
        return data
    return data, None


# a ViT size: a spec as it is, a preset's name, or fields over a base (``{"preset": ..., "depth": 6, ...}``)
SizeArg = ViTSpec | str | Mapping[str, Any]


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


def train_config(settings: TrainConfig | Mapping[str, Any] | None, desc: str, **defaults: Any) -> TrainConfig:
    """The run's settings: a TrainConfig as it is (named ``desc`` unless it has a name of its own); a mapping of
    settings by name (None: not given) over the use case's ``defaults`` (those the command line shows,
    :data:`~learngene.training.config.USE_CASE_DEFAULTS`, and e.g. the method's distillation λ) and the settings'
    own."""
    if isinstance(settings, TrainConfig):
        return settings if settings.desc != TrainConfig.desc else settings.replace(desc=desc)
    values = {**defaults, **{k: v for k, v in (settings or {}).items() if v is not None}}
    desc = values.pop("desc", desc)
    flagged = {f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag")}
    others = {k: v for k, v in values.items() if k not in flagged}
    return from_flags({k: v for k, v in values.items() if k in flagged}, desc=desc, **others)


def open_run_dir(run_dir: str | Path | None, resume: bool, cfg: TrainConfig | None = None) -> None:
    """Refuse ``resume`` without a run directory, loggers (``cfg.log``) with nowhere to write, a run directory that is
    a file, or one whose checkpoint a run that does not resume would overwrite; then lock it for this run (rank 0;
    the lock is held until the process releases it: :func:`learngene.training.run_dirs.release_run_dirs`, or exits)."""
    flag = caller_name("run_dir", "--run-dir")
    if resume and not run_dir:
        raise LearngeneError(
            f"{caller_name('resume', '--resume')} continues from RUN_DIR/checkpoint.pt; pass {flag} too"
        )
    if cfg is not None and cfg.log and not run_dir and not cfg.log_dir:  # before any data load
        raise LearngeneError(
            f"{caller_name('log', '--log')} {cfg.log[0]} writes into the run directory, next to log.jsonl; "
            f"pass {flag} too"
        )
    if not run_dir:
        return
    if Path(run_dir).exists() and not Path(run_dir).is_dir():
        raise LearngeneError(f"{flag} {quote(run_dir)} is a file, not a directory; give a directory path")
    if not resume and (Path(run_dir) / CHECKPOINT).exists():
        raise LearngeneError(
            f"{quote(run_dir)} holds the checkpoint of an earlier run; pass {caller_name('resume', '--resume')} to "
            f"continue it, or give another {flag} (or delete it) to start over"
        )
    if dist.is_main():  # one run per run directory; the other ranks share rank 0's
        lock_run_dir(run_dir)


def method_options(config_cls: type, options: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """A method's options by name: a mapping as it is, or ``KEY=VALUE`` texts (``--opt``) read for their fields' types
    (:func:`learngene.validate.parse_options`)."""
    if options is None:
        return {}
    if isinstance(options, Mapping):
        return dict(options)
    return parse_options(config_cls, list(options))


def timm_arguments(items: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """``timm.create_model`` arguments by name: a mapping as it is, or ``KEY=VALUE`` texts (``--timm-arg``), each
    value read as JSON."""
    if isinstance(items, Mapping) or items is None:
        return dict(items or {})
    usage = by_caller(
        "timm_kwargs {item} is not KEY=VALUE, e.g. depth=6",
        "--timm-arg {item} is not KEY=VALUE, e.g. --timm-arg depth=6",
    )
    return dict(parse_assignment(item, None, usage) for item in items)
