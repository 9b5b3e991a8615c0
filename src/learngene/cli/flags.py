"""The flags several ``learngene`` commands share, made from their declarations where there are some: numbers checked
on the command line, the size flags (from :class:`~learngene.vit.spec.ViTSpec`), the training settings (from
:class:`~learngene.training.config.TrainConfig`), data, ancestry, output, licence and threads.

Like the commands' flags (each command's ``add_arguments``), which are built from them, it imports no torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from ..errors import LearngeneError
from ..host.threads import THREADS_HELP, check_threads
from ..training.config import (
    COMMON,
    DISTILL,
    LOGGING,
    SPEED_GROUP,
    TRAINING,
    USE_CASE_DEFAULTS,
    TrainConfig,
    flagged_settings,
)
from ..validate import MAX_INT, choices, limits_of, out_of_range, refusal_of
from ..vit.family import refused
from ..vit.spec import PRESETS, SIZE_FLAG_FIELDS, ViTFamily, ViTSpec

_SETTING_TYPES = typing.get_type_hints(TrainConfig)  # resolved once: the commands add a hundred training flags


# ---- numbers on the command line: finite, and integers within int64 ---------------------------------------
def integer(text: str) -> int:
    """An integer that fits torch's int64 (the ranges each setting needs are checked where it is used)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if abs(value) > MAX_INT:
        raise argparse.ArgumentTypeError(f"{text} is too large; give an integer below 2^63")
    return value


def real(text: str) -> float:
    """A finite number: nan and inf are refused here, before any arithmetic meets them."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; give a finite number")
    return value


def count(text: str) -> int:
    """A count such as ``5000000``, ``5e6``, ``5M`` or ``1.2G`` (its range is its declaration's)."""
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(text[-1:].upper(), 1)
    try:
        value = float(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count like 5000000, 5e6 or 5M") from None
    if not abs(value) <= MAX_INT:  # nan and inf fail here too; the range is the declaration's to check
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite count below 2^63; give e.g. 5000000, 5e6 or 5M")
    return int(value)


class LazyText(str):
    """Help text made when ``--help`` prints it (argparse formats every help with ``%``), not when the parser is
    built: e.g. the bench profiles' descriptions, which need the method registry, and so torch."""

    make: Callable[[], str]

    def __new__(cls, summary: str, make: Callable[[], str]):
        text = super().__new__(cls, summary)
        text.make = make
        return text

    def __mod__(self, params):
        return self.make() % params


def data_help() -> str:
    """Every registered data source (entry points of installed packages too, named without importing them) with its
    help line; no torch."""
    from ..registry import source_usages

    return "; ".join(usage + (f" ({text})" if text else "") for usage, text in source_usages())


# ---- shared argument groups ---------------------------------------------------------------------------
def add_spec_args(p: argparse.ArgumentParser, preset: bool = True) -> None:
    """The size flags, made from the fields of :class:`~learngene.vit.spec.ViTSpec` (and its family) that declare one."""
    g = p.add_argument_group("model size (a ViT spec)")
    if preset:
        g.add_argument("--preset", choices=sorted(PRESETS), help="start from a named size")
    for f in SIZE_FLAG_FIELDS:
        add_size_flag(g, f.name)


def add_size_flag(g, name: str, help: str | None = None) -> None:
    """The flag of spec field ``name`` (``help`` replaces its declared help): its type, choices and range as the field
    declares them, checked as the spec checks them, before anything is loaded; not given: None."""
    f = next(f for f in SIZE_FLAG_FIELDS if f.name == name)
    tp = {**typing.get_type_hints(ViTFamily), **typing.get_type_hints(ViTSpec)}[name]
    offered = f.metadata.get("flag_choices") or choices(tp)
    kwargs: dict[str, Any] = {"choices": offered} if offered else {"type": _size(f, tp)}
    g.add_argument(f.metadata["flag"], help=help or f.metadata["help"], **kwargs)


def _size(f, tp):
    """A size flag's parser: a number of the field's type ``tp`` that the spec's checker accepts (its words if not)."""
    parse = integer if tp is int else real

    def check(text: str):
        value = parse(text)
        bad = refusal_of(f, tp, value)
        if bad is not None:
            raise argparse.ArgumentTypeError(str(refused(bad)))
        return value

    check.__name__ = parse.__name__  # argparse names the type in its "invalid ... value" message
    return check


FASHION_MNIST_DIR = "folder with the Fashion-MNIST IDX files"  # bench and demo: Fashion-MNIST only


def add_data_dir(g, help: str | None = None) -> None:
    """``--data-dir``: where a command's data lie, as :class:`~learngene.pipeline.requests.DataRequest` declares it
    (``help``: this command's own words)."""
    from ..pipeline.requests import DataRequest

    f = next(f for f in dataclasses.fields(DataRequest) if f.name == "data_dir")
    g.add_argument(f.metadata["flag"], help=help or f.metadata["help"])


def add_data_args(p: argparse.ArgumentParser) -> None:
    """The data flags, made from :class:`~learngene.pipeline.requests.DataRequest`'s declarations (its image size and
    channels are the model's size flags)."""
    from ..pipeline.requests import DataRequest

    actions = add_declared(p.add_argument_group("data"), DataRequest)  # type: ignore[arg-type]
    # the sources' list needs the registry: made when --help prints it
    actions["source"].help = LazyText("a registered data source", lambda: data_help() + " (default: %(default)s)")


def add_choices(p: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """The flags of a use case's choices (:class:`~learngene.pipeline.requests.Choices`): its licence, and where the
    run checkpoints in a group of their own."""
    from ..pipeline.requests import RUN

    add_declared(p, cls, groups={"run": RUN}, skip=skip)


def add_settings(g, group: str, use_case: str | None = None, **overrides: dict[str, Any]) -> None:
    """The flags of the training settings in ``group``, made from their declarations in
    :class:`~learngene.training.config.TrainConfig` (:func:`add_setting`), with ``use_case``'s defaults;
    ``overrides`` gives a setting this command's own ``default``, ``help`` or ``metavar``."""
    for f in flagged_settings(group):
        add_setting(g, f.name, use_case, **overrides.get(f.name, {}))


def add_setting(g, name: str, use_case: str | None = None, **given: Any) -> None:
    """The flag of training setting ``name``, made from its declaration (flag, help, range, what "not given" means),
    its default ``use_case``'s where :data:`~learngene.training.config.USE_CASE_DEFAULTS` gives one; ``given``: this
    command's own ``default``, ``metavar`` or ``help`` (which then replaces the whole line)."""
    f = next(f for f in dataclasses.fields(TrainConfig) if f.name == name)
    tp, meta = _SETTING_TYPES[name], f.metadata
    resolved = {**USE_CASE_DEFAULTS["training"], **USE_CASE_DEFAULTS[use_case]} if use_case is not None else {}
    if name in resolved:  # the setting as the use case resolves it when not given (TrainConfig.resolved)
        given = {"default": resolved[name], **given}
    default = given.get("default", None if "none_means" in meta else f.default)
    kwargs: dict[str, Any] = {"default": default}
    if "metavar" in meta or "metavar" in given:
        kwargs["metavar"] = given.get("metavar", meta.get("metavar"))
    if typing.get_origin(tp) is tuple:  # a repeatable flag of the tuple's choices
        kwargs.update(default=None, action="append", choices=typing.get_args(typing.get_args(tp)[0]))
        text = meta["help"]
    elif tp is bool and default is False:
        kwargs["action"], text = "store_true", meta["help"]
    elif bool in typing.get_args(tp) or tp is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
        text = f"{meta['help']} (default: {meta.get('none_means') if default is None else 'on' if default else 'off'})"
    else:
        kinds = (tp, *typing.get_args(tp))
        if int in kinds or float in kinds:
            kwargs["type"] = _checked(f, integer if int in kinds else real)
        shown = meta.get("none_means") if default is None else "%(default)s"
        text = f"{meta['help']} (default: {shown})" if shown else meta["help"]
    g.add_argument(meta["flag"], help=given.get("help", text), **kwargs)


def _checked(f, parse):
    """The flag's parser: a number of the setting's type within its declared range (the same check as
    TrainConfig's, before any data are loaded), 0 allowed where 0 turns it off."""
    label = f.metadata.get("label", f.name.replace("_", " "))
    return bounded(label, parse, limits_of(f), zero_means_none=bool(f.metadata.get("zero_means_none")))


def bounded(label: str, parse: Callable[[str], Any], limits: dict[str, Any], zero_means_none: bool = False):
    """A number flag's parser: ``parse``'s value within ``limits`` (a declaration's range, :func:`limits_of`), refused
    on the command line in one line naming ``label``."""

    def check(text: str):
        value = parse(text)
        wanted = None if (zero_means_none and value == 0) else out_of_range(value, limits)
        if wanted:
            raise argparse.ArgumentTypeError(f"{label} must be {wanted}, got {text}")
        return value

    check.__name__ = parse.__name__  # argparse names the type in its "invalid ... value" message
    return check


def data_count(name: str):
    """The parser of the count flag of :class:`~learngene.pipeline.requests.DataRequest` field ``name`` (``--workers``,
    ``--few-shot``, ``--train-images``): an integer in the range the field declares."""
    from ..pipeline.requests import DataRequest

    f = next(f for f in dataclasses.fields(DataRequest) if f.name == name)
    return _checked(f, integer)


def add_train_args(p: argparse.ArgumentParser, use_case: str) -> None:
    """The training flags of ``use_case``, with its defaults (:data:`~learngene.training.config.USE_CASE_DEFAULTS`)."""
    g = p.add_argument_group("training")
    eval_images = (
        "evaluate on a fixed random subset of N test images, 0 = on all of them (default: %(default)s, a "
        "fifth of Fashion-MNIST's test split)"
    )
    add_settings(g, TRAINING, use_case, eval_images={"help": eval_images})
    add_settings(g, LOGGING)
    add_settings(p.add_argument_group("speed (the same math up to float rounding)"), SPEED_GROUP)


def add_distill_args(
    p: argparse.ArgumentParser,
    lam: float | None,
    tau: float = 1.0,
    help_lambda: str = "λ (default: 0.5 with --teacher, else 0)",
) -> None:
    g = p.add_argument_group("distillation: (1-λ)·CE + λ·τ²·KL(teacher ‖ student)")
    lam_given = {"default": lam} if lam is not None else {"default": None, "help": help_lambda}
    add_settings(g, DISTILL, distill_lambda=lam_given, distill_tau={"default": tau})


def _threads(text: str) -> int:

    try:
        return check_threads(integer(text), "--threads")
    except LearngeneError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_threads(p: argparse.ArgumentParser) -> None:
    """``--threads N``, on every command that computes; applied once at start-up (:mod:`learngene.cli.dispatch`)."""
    p.add_argument("--threads", type=_threads, metavar="N", help=THREADS_HELP)


def add_declared(
    p: argparse.ArgumentParser, cls: type, groups: dict[str, Any] | None = None, skip: tuple[str, ...] = ()
) -> dict[str, argparse.Action]:
    """The flags of dataclass ``cls``'s fields that declare one (:func:`learngene.settings.field`), in declaration
    order, on ``p`` (a parser or an argument group): a field's type, choices and range as declared (checked as the
    dataclass checks them, refused in the same line: ``cls.refuse``, else
    :func:`learngene.pipeline.requests.refused_line`), its help and metavar; a tuple's items separated by commas; a
    ``dict`` field a repeatable ``KEY=VALUE`` flag; a field without a default a required flag. ``groups``: an
    argument group (its title and description) for the fields that declare that ``group``; ``skip``: fields whose
    flag this command has not (or adds with a shared helper). Not given: the field's default (shown in the help), None
    for a field without one. Returns each flag's action by field name (e.g. to give the help a lazy text)."""
    hints, made, actions = typing.get_type_hints(cls), {}, {}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if not meta.get("flag") or f.name in skip:
            continue
        group = meta.get("group")
        if group in (groups or {}) and group not in made:
            made[group] = p.add_argument_group(*groups[group])  # type: ignore[index]
        target = made.get(group, p)
        actions[f.name] = target.add_argument(meta["flag"], **_declared_flag(cls, f, hints[f.name]))
    return actions


def _declared_flag(cls: type, f: dataclasses.Field, tp: Any) -> dict[str, Any]:
    """``add_argument``'s keywords for declared field ``f`` of dataclass ``cls``, of type ``tp``."""
    meta = f.metadata
    default = None if f.default is dataclasses.MISSING else f.default
    kwargs: dict[str, Any] = {"default": default}
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        kwargs["required"] = True  # a field the request cannot be made without
    if tp is bool:
        kwargs["action"] = "store_true"
    elif typing.get_origin(tp) is dict:  # by name on the command line: KEY=VALUE, repeated
        kwargs["action"] = "append"
    elif offered := choices(tp):
        kwargs["choices"] = offered
    else:
        kwargs["type"] = _declared(cls, f, tp, _parser(f, tp))
    if "const" in meta:
        kwargs.update(nargs="?", const=meta["const"])
    if "metavar" in meta:
        kwargs["metavar"] = meta["metavar"]
    kwargs["help"] = meta.get("help", "") + ("" if tp is bool else _default_shown(f, default))
    return kwargs


def _default_shown(f: dataclasses.Field, default: Any) -> str:
    """What a declared flag's help says of its default (and of the flag given alone)."""
    alone = f" (given alone: {f.metadata['const']})" if "const" in f.metadata else ""
    if default is None:
        return alone + (f" (default: {f.metadata['none_word']})" if "none_word" in f.metadata else "")
    if isinstance(default, tuple):  # shown as the flag takes it
        return alone + f" (default: {','.join(map(str, default))})"
    return alone + " (default: %(default)s)"


def _parser(f: dataclasses.Field, tp: Any) -> Callable[[str], Any]:
    """How a declared flag reads its text: a number of the field's kind, a text, or a tuple's items by commas."""
    arms = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    items = next((typing.get_args(a)[0] for a in arms if typing.get_origin(a) is tuple), None)
    if items is not None and str not in arms:  # a field that also takes a text reads the list itself (--layers)
        return _listed(f.name, _parser(f, items))
    kinds = (tp, *typing.get_args(tp))
    return count if f.metadata.get("counts") else integer if int in kinds else real if float in kinds else str


def _listed(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A comma-separated list's parser: each item read by ``parse`` (empty items left out)."""

    def items(text: str) -> tuple[Any, ...]:
        try:
            return tuple(parse(item.strip()) for item in text.split(",") if item.strip())
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(
                f"{name} takes a list separated by commas, e.g. 5,6,7 ({exc}); got {text!r}"
            ) from None

    items.__name__ = "list"
    return items


def _declared(cls: type, f: dataclasses.Field, tp: Any, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A declared field's flag parser: the field's ``none_word`` is None; else ``parse``, then the check Python runs
    when ``cls`` is made with that value (its ``refuse``, e.g. :meth:`learngene.pipeline.requests.Choices.refuse`, else
    the field's declaration), refused in the same line."""
    from ..pipeline.requests import refused_line

    def check(text: str) -> Any:
        if text == f.metadata.get("none_word"):
            return None
        value = parse(text)
        refuse = getattr(cls, "refuse", None)
        try:
            if refuse is not None:
                refuse(f.name, value)
            elif (bad := refusal_of(f, tp, value)) is not None:
                raise LearngeneError(refused_line(cls, bad))
        except LearngeneError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    check.__name__ = getattr(parse, "__name__", "value")  # argparse names the type in its "invalid ... value" message
    return check


def add_common(p: argparse.ArgumentParser) -> None:
    add_settings(p, COMMON)
    add_threads(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars, no banner: only results and errors")


def add_method_options(p: argparse.ArgumentParser, help: str = "method option (repeatable)") -> None:
    """``--opt KEY=VALUE``: the method's options for this command's step."""
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help=help)


def add_gene_and_size(p: argparse.ArgumentParser, options_help: str) -> None:
    """The learngene file a descendant is made from, its size and the method's options (``expand``, ``adapt``)."""
    p.add_argument("gene", help="learngene file (.safetensors)")
    add_spec_args(p)
    add_method_options(p, options_help)


def add_time_limit(p: argparse.ArgumentParser) -> None:
    """``--time-limit``: of a cached, resumable run (bench, compare)."""
    p.add_argument(
        "--time-limit",
        type=real,
        metavar="MINUTES",
        help="start no new stage after this long; the same command continues later",
    )


def add_stage_runner(p: argparse.ArgumentParser, use_case: str, device_help: str | None = None) -> None:
    """Where and how quietly a run of many stages (bench, compare) computes: ``--device``, ``--threads``, ``--quiet``."""
    add_setting(p, "device", use_case, **({"help": device_help} if device_help else {}))
    add_threads(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_output(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--out", "-o", required=True, help=f"where to write the {what} (.safetensors)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")


def add_model_output(p: argparse.ArgumentParser, what: str) -> None:
    """Where a command that writes a model writes it: a model file or a timm hub folder (one rule for all of them,
    :func:`learngene.formats.export.wants_folder`)."""
    p.add_argument(
        "--out",
        "-o",
        required=True,
        help=f"where to write the {what}: a learngene model file (.safetensors), or timm's hub folder "
        "(config.json, model.safetensors, README.md model card) when it ends in / or is a folder",
    )
    p.add_argument(
        "--format",
        choices=("file", "hub"),
        help="file: one learngene model file; hub: timm's hub folder, loadable by "
        "timm.create_model('local-dir:DIR', pretrained=True) (default: hub for a folder-like --out)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output file, or the files learngene writes in an existing folder "
        "(other files there are left alone)",
    )


def add_ancestry_args(p: argparse.ArgumentParser, timm_args: Any = None) -> None:
    """The ancestry flags, made from :class:`~learngene.pipeline.requests.AncestryRequest`'s declarations;
    ``timm_args`` (an argument group): where ``--timm-arg`` goes, for a command that reads it (else it is left out)."""
    from ..pipeline.requests import AncestryRequest

    add_declared(p, AncestryRequest, skip=("timm_kwargs",))
    if timm_args is not None:
        names = tuple(f.name for f in dataclasses.fields(AncestryRequest) if f.name != "timm_kwargs")
        add_declared(timm_args, AncestryRequest, skip=names)
