"""The ``learngene`` argument parser: every subcommand, flag and help text.

It imports no torch (nor anything that does), so ``learngene --help``, ``learngene SUB --help`` and argument
errors answer in a fraction of a second; ``benchmarks/cli_startup.py`` measures it and
``tests/test_cli.py`` checks it. Each subcommand names its handler as ``"module:function"`` inside
:mod:`learngene.cli`, imported only when the command runs (:mod:`learngene.cli.dispatch`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from collections.abc import Callable
from typing import Any

from .._version import __version__
from ..bench.descriptions import QUICK_DEMO_TIME, profiles_help
from ..errors import LearngeneError, message_of, render
from ..threads import THREADS_HELP, check_threads
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
from ..vit.spec import PRESETS, SIZE_FLAG_FIELDS, ViTFamily, ViTSpec, refused

EXIT_USAGE = 2
_SETTING_TYPES = typing.get_type_hints(TrainConfig)  # resolved once: the commands add a hundred training flags


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2), like every other learngene error, naming settings by their flags
    (a type check's message may carry both wordings: :func:`learngene.errors.message_of`)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {render(message, cli=True)} (see --help)\n")


# ---- numbers on the command line: finite, and integers within int64 ---------------------------------------
def _integer(text: str) -> int:
    """An integer that fits torch's int64 (the ranges each setting needs are checked where it is used)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if abs(value) > MAX_INT:
        raise argparse.ArgumentTypeError(f"{text} is too large; give an integer below 2^63")
    return value


def _real(text: str) -> float:
    """A finite number: nan and inf are refused here, before any arithmetic meets them."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; give a finite number")
    return value


def _count(text: str) -> int:
    """A positive count such as ``5000000``, ``5e6``, ``5M`` or ``1.2G``."""
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(text[-1:].upper(), 1)
    try:
        value = float(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count like 5000000, 5e6 or 5M") from None
    if not 1 <= value <= MAX_INT:  # nan and inf fail here too
        raise argparse.ArgumentTypeError(f"a budget must be a finite count of at least 1, got {text!r}")
    return int(value)


def _license(text: str) -> str:
    from ..formats.licenses import check_license

    try:
        return check_license(text, "")
    except LearngeneError as exc:
        raise argparse.ArgumentTypeError(message_of(exc).lstrip()) from None


def add_license(p: argparse.ArgumentParser, what: str, inherited: bool = True) -> None:
    p.add_argument(
        "--license",
        type=_license,
        metavar="SPDX",
        help=f"licence of the weights (an SPDX identifier, e.g. Apache-2.0), stored in the {what}"
        + ("; overrides the one the input records (default: the input's, if it records one)" if inherited else ""),
    )


class _LazyText(str):
    """Help text made when ``--help`` prints it (argparse formats every help with ``%``), not when the parser is
    built: e.g. the bench profiles' descriptions, which need the method registry, and so torch."""

    make: Callable[[], str]

    def __new__(cls, summary: str, make: Callable[[], str]):
        text = super().__new__(cls, summary)
        text.make = make
        return text

    def __mod__(self, params):
        return self.make() % params


def _data_help() -> str:
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
    parse = _integer if tp is int else _real

    def check(text: str):
        value = parse(text)
        bad = refusal_of(f, tp, value)
        if bad is not None:
            raise argparse.ArgumentTypeError(message_of(refused(bad)))
        return value

    check.__name__ = parse.__name__  # argparse names the type in its "invalid ... value" message
    return check


def add_data_args(p: argparse.ArgumentParser, required: bool = False, default: str | None = "fashion_mnist") -> None:
    g = p.add_argument_group("data")
    g.add_argument(
        "--data",
        default=None if required else default,
        required=required,
        help=_LazyText("a registered data source", lambda: _data_help() + " (default: %(default)s)"),
    )
    g.add_argument("--data-dir", help="where the data lie (default: $LEARNGENE_DATA, then system locations)")
    g.add_argument("--train-images", type=_integer, metavar="N", help="use a random subset of N training images")
    g.add_argument("--few-shot", type=_integer, metavar="K", help="use K labelled training images per class")
    g.add_argument(
        "--workers",
        type=_integer,
        metavar="N",
        help="DataLoader processes decoding an image folder (default: auto, min(8, CPUs per process - 1); "
        "0: in the main process)",
    )
    g.add_argument(
        "--aug",
        choices=("none", "deit"),
        default="none",
        help="training augmentation of an RGB image folder: deit = timm's random-resized crop, flip, "
        "RandAugment rand-m9-mstd0.5-inc1 and random erasing 0.25 per image, then mixup 0.8 / cutmix "
        "1.0 per batch with soft targets (DeiT's recipe; DeiT also uses --label-smoothing 0.1) "
        "(default: %(default)s)",
    )


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
    if use_case is not None and name in USE_CASE_DEFAULTS[use_case]:
        given = {"default": USE_CASE_DEFAULTS[use_case][name], **given}
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
            kwargs["type"] = _checked(f, _integer if int in kinds else _real)
        shown = meta.get("none_means") if default is None else "%(default)s"
        text = f"{meta['help']} (default: {shown})" if shown else meta["help"]
    g.add_argument(meta["flag"], help=given.get("help", text), **kwargs)


def _checked(f, parse):
    """The flag's parser: a number of the setting's type within its declared range (the same check as
    TrainConfig's, before any data are loaded), 0 allowed where 0 turns it off."""
    limits = limits_of(f)

    def check(text: str):
        value = parse(text)
        wanted = None if (f.metadata.get("zero_means_none") and value == 0) else out_of_range(value, limits)
        if wanted:
            label = f.metadata.get("label", f.name.replace("_", " "))
            raise argparse.ArgumentTypeError(f"{label} must be {wanted}, got {text}")
        return value

    check.__name__ = parse.__name__  # argparse names the type in its "invalid ... value" message
    return check


def add_train_args(p: argparse.ArgumentParser, use_case: str) -> None:
    """The training flags of ``use_case``, with its defaults (:data:`~learngene.training.config.USE_CASE_DEFAULTS`)."""
    g = p.add_argument_group("training")
    eval_images = (
        "evaluate on a fixed random subset of N test images, 0 = on all of them (default: %(default)s, a "
        "fifth of Fashion-MNIST's test split)"
    )
    add_settings(g, TRAINING, use_case, eval_images={"help": eval_images})
    g.add_argument("--run-dir", help="folder for log.jsonl and checkpoint.pt (locked while a run uses it)")
    g.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoint.pt")
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
        return check_threads(_integer(text), "--threads")
    except LearngeneError as exc:
        raise argparse.ArgumentTypeError(message_of(exc)) from None


def add_threads(p: argparse.ArgumentParser) -> None:
    """``--threads N``, on every command that computes; applied once at start-up (:mod:`learngene.cli.dispatch`)."""
    p.add_argument("--threads", type=_threads, metavar="N", help=THREADS_HELP)


def add_common(p: argparse.ArgumentParser) -> None:
    add_settings(p, COMMON)
    add_threads(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars, no banner: only results and errors")


def add_output(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--out", "-o", required=True, help=f"where to write the {what} (.safetensors)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")


def add_ancestry_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ancestry",
        required=True,
        help="ancestry model: a learngene model file; a checkpoint (.safetensors/.pth/.bin) with --timm-model; "
        "a folder with config.json: a timm hub folder or a transformers ViT/DeiT/DINOv2/CLIP/SigLIP; or such a "
        "model on the Hugging Face Hub, hf-hub:ORG/NAME[@REVISION], or a timm pretrained tag, timm:NAME[.TAG] "
        "(read from the Hugging Face cache; HF_HUB_OFFLINE=1 keeps it offline)",
    )
    p.add_argument(
        "--drop-head",
        action="store_true",
        help="load a model folder without its classifier (the ancestry outputs its pooled embedding)",
    )
    p.add_argument(
        "--timm-model",
        help="timm architecture of a plain checkpoint, e.g. deit_tiny_patch16_224 "
        "(read from a folder's config.json when not given)",
    )


# ---- one function per subcommand ----------------------------------------------------------------------
def _add_ancestry(sub) -> None:
    p = sub.add_parser(
        "ancestry",
        help="train an ancestry ViT on a dataset and save it",
        description="Train a ViT from scratch on a dataset; it becomes the ancestry of learngenes.",
    )
    add_spec_args(p)
    add_data_args(p)
    add_train_args(p, "ancestry")
    add_common(p)
    add_output(p, "ancestry model")
    add_license(p, "model file", inherited=False)
    p.set_defaults(handler="making:cmd_ancestry")


def _add_condense(sub) -> None:
    p = sub.add_parser(
        "condense",
        help="condense an ancestry into a learngene file",
        description="Build a learngene from an ancestry with one method. Methods that train an aux "
        "net distil from the ancestry on --data.",
        epilog="`learngene methods` lists every method with its options",
    )
    p.add_argument("--method", required=True, help="a registered method (`learngene methods` lists them)")
    add_ancestry_args(p)
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="method option (repeatable)")
    add_data_args(p)
    add_train_args(p, "condense")
    add_distill_args(p, lam=None, help_lambda="λ (default: the method's paper's: 1 = pure KL, 0.5 = KL + CE)")
    add_common(p)
    add_output(p, "learngene")
    add_license(p, "learngene (and named on its descendants' model cards)")
    g = p.add_argument_group("timm checkpoint sizes (with --timm-model)")
    add_size_flag(g, "num_classes", "classifier outputs of the checkpoint")
    add_size_flag(g, "img_size", "input resolution of the checkpoint (data are resized to it)")
    add_size_flag(
        g, "in_chans", "input channels of the checkpoint (grey data are repeated to 3; colour data for 1 are refused)"
    )
    g.add_argument(
        "--timm-arg",
        action="append",
        metavar="KEY=VALUE",
        help="another timm.create_model argument of the checkpoint's model, e.g. depth=6 or "
        "dynamic_img_size=true (value read as JSON; repeatable)",
    )
    p.set_defaults(handler="making:cmd_condense")


def _add_expand(sub) -> None:
    p = sub.add_parser(
        "expand",
        help="expand a learngene into a descendant timm ViT",
        description="Initialize a timm ViT of the given size from a learngene; sizes default to the "
        "ancestry's. The output loads with timm.create_model(...).load_state_dict(..., strict=True).",
    )
    p.add_argument("gene", help="learngene file (.safetensors)")
    add_spec_args(p)
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="method option for this expansion (repeatable)")
    p.add_argument(
        "--top-up",
        metavar="METHOD",
        help="fill what the gene leaves to timm from a method without a "
        "learngene, e.g. mimetic (attention weights, sin-cos positions)",
    )
    g = p.add_argument_group(
        "size for a budget",
        "Among depths 1..the ancestry's and head counts 1..the ancestry's "
        "(width = heads x head size): the deepest size that fits the budget, then the widest at "
        "that depth, skipping sizes the gene's method cannot expand (tried without allocating); "
        "--depth or --num-heads pin that axis. It says which size it picked and why.",
    )
    g.add_argument("--max-params", type=_count, metavar="N", help="at most N parameters (e.g. 5e6 or 5M)")
    g.add_argument("--max-flops", type=_count, metavar="N", help="at most N forward FLOPs per image (e.g. 2G)")
    p.add_argument(
        "--stitch",
        metavar="F:J-E:K",
        help="a pool gene of design=authors only: write a stitched descendant instead of a timm ViT: instance F's "
        "embeddings and blocks 0..J, a learned stitch layer, instance E's blocks K.. and head (F < E, |J-K| <= 1; "
        "e.g. 0:1-2:0). Its size is the instances'; no size, budget, --opt, --top-up or hub flags. "
        "`learngene inspect GENE` lists the instances; `learngene train` fine-tunes the file",
    )
    add_common(p)
    p.add_argument(
        "--out",
        "-o",
        required=True,
        help="where to write the descendant: a learngene model file (.safetensors), or timm's hub folder "
        "(config.json, model.safetensors, README.md) when it ends in / or is a folder",
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
    add_license(p, "descendant's model card or model file")
    p.set_defaults(handler="expanding:cmd_expand")


def _add_adapt(sub) -> None:
    p = sub.add_parser(
        "adapt",
        help="specialize a learngene to a size on a little data (WAVE scalers, PEG φ)",
        description="Train only the size-specific part of a learngene (WAVE's weight scalers, PEG's "
        "expansion map φ) on a little downstream data, then write the plain timm descendant.",
    )
    p.add_argument("gene", help="learngene file (.safetensors)")
    add_spec_args(p)
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="method option (repeatable)")
    add_data_args(p)
    add_train_args(p, "adapt")
    add_common(p)
    add_output(p, "adapted descendant model")
    p.add_argument("--gene-out", help="also save the adapted learngene here")
    add_license(p, "descendant model file and the adapted learngene")
    p.set_defaults(handler="making:cmd_adapt")


def _add_train(sub) -> None:
    p = sub.add_parser(
        "train",
        help="fine-tune a model file (e.g. a descendant) on a dataset",
        description="Fine-tune a learngene model file (or a stitched descendant, written by `learngene expand "
        "--stitch`, which stays one); a new classifier head is made when the data's label space differs.",
    )
    p.add_argument("model", help="model file written by `learngene expand` (--stitch too), `ancestry` or `train`")
    p.add_argument(
        "--new-head",
        action="store_true",
        help="always start from a fresh classifier head (default: fresh only when the data's classes "
        "differ from those the model's head was trained on)",
    )
    add_data_args(p)
    add_train_args(p, "train")
    p.add_argument(
        "--teacher",
        metavar="ANCESTRY",
        help="distil from this model while training (what --ancestry accepts): on its logits when its head "
        "was trained on the data's classes, else on its pooled embedding (cosine, through a learned "
        "projection when the widths differ; the projection is not saved)",
    )
    p.add_argument("--teacher-timm-model", help="timm architecture of a plain --teacher checkpoint")
    add_distill_args(p, lam=None)
    add_common(p)
    add_output(p, "fine-tuned model")
    add_license(p, "fine-tuned model file")
    p.set_defaults(handler="making:cmd_train", img_size=None, in_chans=None)


def _add_inspect(sub) -> None:
    p = sub.add_parser(
        "inspect",
        help="print a learngene's, model file's or hub folder's metadata and sizes",
        description="Show what a learngene, model file or timm hub folder holds: method, options, "
        "ancestry, stored parameters, cost; or a model's spec, parameters and FLOPs; "
        "a hub folder's config and model card too.",
    )
    p.add_argument("path", help="learngene or model file, or a timm hub folder (config.json, model.safetensors)")
    p.add_argument("--tensors", action="store_true", help="also list every tensor and its shape")
    p.add_argument(
        "--plot", metavar="PNG", help="write a plot of mean attention distance per layer and head (cluster learngenes)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing plot file")
    p.set_defaults(handler="info:cmd_inspect")


def _add_methods(sub) -> None:
    p = sub.add_parser(
        "methods",
        help="list the registered methods and their options",
        description="List every registered method with its options (for --method / --opt).",
    )
    p.set_defaults(handler="info:cmd_methods")


def _add_bench(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="every method side by side on identical budgets: tables, CSV and plots",
        description="Train an ancestry on Fashion-MNIST, condense it with every registered method, "
        "fine-tune descendants of several sizes on Fashion-MNIST, digits and a few-shot "
        "task with identical budgets and seeds, and write report.md, results.csv and "
        "plots. Every stage is cached: rerunning continues an interrupted run.",
    )
    p.add_argument("--profile", default="quick", metavar="NAME", help="a benchmark profile: " + profiles_help())
    add_setting(p, "max_steps", "bench", help="gpu-smoke: optimizer steps of each training stage (default: 20)")
    p.add_argument("--out", help="report folder (default: runs/bench-PROFILE)")
    p.add_argument("--methods", nargs="+", metavar="METHOD", help="only these registered methods (default: all)")
    p.add_argument("--seeds", type=_integer, metavar="N", help="seeds 0..N-1 instead of the profile's")
    p.add_argument(
        "--time-limit",
        type=_real,
        metavar="MINUTES",
        help="start no new stage after this long; the same command continues later",
    )
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    add_setting(p, "device", "bench")
    add_threads(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler="benching:cmd_bench")


def _add_compare(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="which start wins for my ancestry, data and sizes: every method against "
        "scratch, scratch ×10 and mimetic, one recommendation per size",
        description="Condense the ancestry with every method once, make every size, fine-tune every "
        "method × size × seed on --data with the same budget and a fresh head, and print "
        "per size mean ± std, the paired difference to each reference with its 95 % interval and a "
        "Holm-corrected decision, costs, the epoch each method reaches scratch ×10's final accuracy, and "
        "one recommendation line (with the seeds a lead would need when it is not resolved). Writes "
        "report.md, results.csv and plots to --out; cached and resumable like bench. Several compare "
        "processes on one --out (or torchrun ranks, or SLURM array tasks) share the work.",
    )
    add_ancestry_args(p)
    p.add_argument(
        "--data",
        required=True,
        help=_LazyText(
            "a registered data source", lambda: _data_help() + ": fine-tuned and tested on (its train and test splits)"
        ),
    )
    p.add_argument("--data-dir", help="where the data lie (default: $LEARNGENE_DATA, then system locations)")
    p.add_argument(
        "--sizes",
        required=True,
        metavar="LIST",
        help="descendant sizes, e.g. L4-D192-H3,L12-D384-H6 (the rest of the spec follows the ancestry)",
    )
    p.add_argument("--methods", metavar="LIST", default="all", help="comma-separated methods, or all (default: all)")
    p.add_argument(
        "--references",
        metavar="LIST",
        default="scratch,scratch_x10,mimetic,structured",
        help="what a recommendation must beat (paired over seeds, Holm-corrected); scratch_x10 = scratch "
        "fine-tuned 10× as long; "
        "structured only where registered (default: %(default)s)",
    )
    p.add_argument("--seeds", type=_integer, default=3, help="seeds 0..N-1 per method and size (default: %(default)s)")
    g = p.add_mutually_exclusive_group()
    add_setting(g, "epochs", "compare", help="fine-tuning epochs of every method (default: %(default)s)")
    add_setting(g, "max_steps", "compare", metavar="S", help="fine-tune S optimizer steps instead of --epochs")
    p.add_argument("--few-shot", type=_integer, metavar="K", help="fine-tune on K labelled images per class")
    p.add_argument("--train-images", type=_integer, metavar="N", help="fine-tune on a fixed random subset of N images")
    add_setting(p, "eval_images", "compare", help="test on a fixed random subset of N test images")
    p.add_argument(
        "--kd",
        type=_real,
        nargs="?",
        const=0.5,
        metavar="λ",
        help="also fine-tune every method distilling the ancestry (rows '+kd'): logits when its head knows "
        "the data's classes, else pooled features; λ (default when given: 0.5)",
    )
    p.add_argument(
        "--condense-data", metavar="D", help="data the methods that need data condense and adapt on (default: --data)"
    )
    p.add_argument(
        "--classes",
        metavar="LIST",
        help="only these classes of --data, by index, e.g. 5,6,7,8,9 (also for condensing, unless --condense-data)",
    )
    p.add_argument(
        "--condense-classes",
        metavar="LIST",
        help="only these classes of the condensing data, e.g. the ancestry's own 0,1,2,3,4, so that no "
        "method learns from the labels of the classes it is compared on (default: --classes)",
    )
    p.add_argument(
        "--condense-images",
        type=_integer,
        metavar="N",
        help="condense and adapt on a fixed random subset of N images (default: all)",
    )
    p.add_argument(
        "--condense-epochs",
        type=_integer,
        default=2,
        help="aux-net epochs of tleg, wave, share_init (default: %(default)s)",
    )
    p.add_argument(
        "--adapt-steps",
        type=_integer,
        default=50,
        help="steps of wave's and peg's adaptation per size and seed (default: %(default)s)",
    )
    add_setting(p, "batch_size", "compare", help="every training stage (default: %(default)s)")
    add_setting(p, "lr", "compare")
    p.add_argument(
        "--time-limit",
        type=_real,
        metavar="MINUTES",
        help="start no new stage after this long; the same command continues later",
    )
    p.add_argument(
        "--out",
        required=True,
        help="report folder (also the cache a rerun continues from); every compare with the same flags on it "
        "takes a share of the cells",
    )
    p.add_argument("--no-plots", action="store_true", help="no PNG plots")
    add_settings(
        p,
        LOGGING,
        log={
            "help": "also log every training stage's curves to TensorBoard or Weights & Biases, under OUT/logs/ "
            "(repeatable)"
        },
    )
    device = "auto, cpu, cuda or cuda:N; under torchrun auto is each rank's own GPU (default: %(default)s)"
    add_setting(p, "device", "compare", help=device)
    add_threads(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler="comparing:cmd_compare")


def _add_demo(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job end to end on Fashion-MNIST, on a CPU (the report states its wall time)",
        description="Train a small ancestry on Fashion-MNIST, condense it with every registered "
        "method, expand to several depths, fine-tune each briefly and print a table of "
        "method x size -> accuracy and stored parameters.",
    )
    p.add_argument(
        "--out",
        "--out-dir",
        dest="out",
        default="runs/demo",
        help="where models, genes and the table go; --out-dir is the same flag (default: %(default)s)",
    )
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    p.add_argument(
        "--quick", action="store_true", help=f"a much smaller run, to check the pipeline ({QUICK_DEMO_TIME})"
    )
    add_common(p)
    p.set_defaults(handler="benching:cmd_demo")


SUBCOMMANDS = (
    _add_ancestry,
    _add_condense,
    _add_expand,
    _add_adapt,
    _add_train,
    _add_inspect,
    _add_methods,
    _add_bench,
    _add_compare,
    _add_demo,
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="learngene",
        description="Condense a pretrained ViT into a learngene and expand it into "
        "timm ViTs of any depth, width and head count.",
    )
    parser.add_argument("--version", action="version", version=f"learngene {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser
