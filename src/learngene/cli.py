"""The ``learngene`` command line.

Every subcommand has ``--help``. Errors caused by input (missing files, impossible sizes, data that
does not fit) print one line and exit with code 2; outputs are written atomically, so a failed run
leaves no partial file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import signal
import sys
import typing
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from . import distributed as dist
from ._version import __version__
from .ancestry import load_ancestry
from .bench import BenchRun, get_profile
from .bench.profiles import PROFILES
from .bench.compare import compare_profile, compare_text, parse_classes, run_compare
from .bench.smoke import FolderSmoke, run_smoke
from .convert import is_model_folder
from .data import default_workers, few_shot, fraction, load_splits, preprocessing_cfg
from .demo import run_demo
from .descendant import fit_gene_to_budget, load_gene, make_descendant
from .describe import describe_file
from .distill import cache_teacher_outputs, setup_distillation
from .errors import LearngeneError
from .export import check_output_folder, export_hub_folder, wants_folder
from .gene import Learngene
from .io import (build_model, digest, check_output_path, load_model_file, lock_run_dir, model_preprocessing, os_error_message, quote,
                 release_run_dirs, save_model)
from .labels import choose_head
from .labels import describe as describe_labels
from .method import AdaptInputs, CondenseInputs, citations, parse_options
from .methods.cluster import plot_attention_distance
from .registry import get_method, list_methods
from .spec import PRESETS, ViTSpec, get_preset
from .train import CHECKPOINT, RunInterrupted, TrainConfig, request_stop, seed_everything, train
from .validate import MAX_INT, choices

EXIT_USAGE = 2
# commands that write many files without rank-0 guards, or only print: refused under torchrun
SINGLE_PROCESS = ("demo", "bench", "compare", "inspect", "methods")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2), like every other learngene error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


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


def _seed(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed must be 0 or more, got {text}")
    return value


# ---- shared argument groups ---------------------------------------------------------------------------
SPEC_FIELDS = ("depth", "embed_dim", "num_heads", "mlp_ratio", "img_size", "patch_size", "in_chans", "num_classes",
               "global_pool")


def add_spec_args(p: argparse.ArgumentParser, preset: bool = True) -> None:
    g = p.add_argument_group("model size (a ViT spec)")
    if preset:
        g.add_argument("--preset", choices=sorted(PRESETS), help="start from a named size")
    g.add_argument("--depth", type=_integer, help="number of blocks")
    g.add_argument("--embed-dim", type=_integer, help="width D")
    g.add_argument("--num-heads", type=_integer, help="attention heads (must divide the width)")
    g.add_argument("--mlp-ratio", type=_real, help="MLP hidden width / D")
    g.add_argument("--img-size", type=_integer, help="input resolution (data are resized to it)")
    g.add_argument("--patch-size", type=_integer, help="patch size (must divide the image size)")
    g.add_argument("--in-chans", type=_integer, help="input channels (data are converted to it)")
    g.add_argument("--num-classes", type=_integer, help="classifier outputs")
    g.add_argument("--global-pool", choices=("token", "avg"), help="class-token or average pooling")


def spec_from_args(args: argparse.Namespace, base=None, data=None):
    """``base`` spec (or preset), overridden by data-derived sizes, overridden by explicit flags."""
    if getattr(args, "preset", None):
        base = get_preset(args.preset)
    values = (base or ViTSpec()).to_dict()
    if data is not None:
        values.update(img_size=data.img_size, in_chans=data.in_chans, num_classes=data.num_classes)
    explicit = {f: getattr(args, f) for f in SPEC_FIELDS if getattr(args, f, None) is not None}
    values.update(explicit)
    if values.get("global_pool") == "avg" and "global_pool" in explicit:
        values["class_token"] = False
    return ViTSpec.from_dict(values)


def add_data_args(p: argparse.ArgumentParser, required: bool = False, default: str | None = "fashion_mnist") -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data", default=None if required else default, required=required,
                   help="fashion_mnist, digits, folder:PATH or torchvision:NAME (default: %(default)s)")
    g.add_argument("--data-dir", help="where the data lie (default: $LEARNGENE_DATA, then system locations)")
    g.add_argument("--train-images", type=_integer, metavar="N", help="use a random subset of N training images")
    g.add_argument("--few-shot", type=_integer, metavar="K", help="use K labelled training images per class")
    g.add_argument("--workers", type=_integer, metavar="N",
                   help="DataLoader processes decoding an image folder (default: auto, min(8, CPUs per process - 1); "
                        "0: in the main process)")
    g.add_argument("--aug", choices=("none", "deit"), default="none",
                   help="training augmentation of an RGB image folder: deit = timm's random-resized crop, flip, "
                        "RandAugment rand-m9-mstd0.5-inc1 and random erasing 0.25 per image, then mixup 0.8 / cutmix "
                        "1.0 per batch with soft targets (DeiT's recipe; DeiT also uses --label-smoothing 0.1) "
                        "(default: %(default)s)")


def load_data_from_args(args: argparse.Namespace, img_size: int | None = None, in_chans: int | None = None,
                        preprocessing: dict[str, Any] | None = None):
    """(train, test) data as the flags ask, resized/converted to the given model input; image folders are read
    with ``preprocessing`` (the model's, :func:`learngene.data.preprocessing_cfg`) when given."""

    img_size = getattr(args, "img_size", None) or img_size
    in_chans = getattr(args, "in_chans", None) or in_chans
    workers = args.workers if args.workers is not None else default_workers()

    def load() -> tuple:
        return load_splits(args.data, img_size, args.data_dir, in_chans, preprocessing, args.aug, workers)

    # under torchrun rank 0 loads first, so a one-time cache (Fashion-MNIST ungzipped) is written once
    # and a bad --data stops every rank with rank 0's message
    loaded = dist.on_main(load)
    train, test = loaded if dist.is_main() else load()
    if args.few_shot is not None:
        if args.few_shot < 1:
            raise LearngeneError(f"--few-shot must be at least 1 image per class, got {args.few_shot}; pass K >= 1")
        train = few_shot(train, args.few_shot, seed=args.seed)
    if args.train_images is not None:
        if args.train_images < 1:
            raise LearngeneError(f"--train-images must be positive, got {args.train_images}; pass N >= 1")
        train = fraction(train, min(1.0, args.train_images / len(train)), seed=args.seed)
    return train, test


def add_train_args(p: argparse.ArgumentParser, epochs: int = 10, lr: float = 1e-3) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=_integer, default=epochs, help="passes over the training data (default: %(default)s)")
    g.add_argument("--max-steps", type=_integer, metavar="N", help="stop after N optimizer steps")
    g.add_argument("--batch-size", type=_integer, default=128, help="global batch size (default: %(default)s)")
    g.add_argument("--lr", type=_real, default=lr, help="peak AdamW learning rate (default: %(default)s)")
    g.add_argument("--weight-decay", type=_real, default=0.05, help="AdamW weight decay, 0 or more (default: %(default)s)")
    g.add_argument("--warmup-epochs", type=_real, default=1.0, help="linear warmup, at most a fifth of the run "
                                                                     "(default: %(default)s)")
    g.add_argument("--grad-clip", type=_real, default=1.0, help="max gradient norm, 0 = off (default: %(default)s)")
    g.add_argument("--label-smoothing", type=_real, default=0.0, help="label smoothing in [0, 1) (default: %(default)s)")
    g.add_argument("--augment", action="store_true", help="random flips and 2-pixel shifts")
    g.add_argument("--run-dir", help="folder for log.jsonl and checkpoint.pt (locked while a run uses it)")
    g.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoint.pt")
    g.add_argument("--checkpoint-every", type=_integer, metavar="N",
                   help="also checkpoint every N steps (default: auto, once per epoch)")
    g.add_argument("--eval-every", type=_integer, default=1, metavar="N",
                   help="evaluate every N epochs and after the last; 0 = after the last only (default: %(default)s)")
    g.add_argument("--eval-images", type=_integer, metavar="N",
                   help="evaluate on a fixed random subset of N test images (default: all of them)")
    g = p.add_argument_group("speed (the same math up to float rounding)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (an aux net: its expand and forward "
                                                          "together); the first steps compile")
    g.add_argument("--fused-adamw", action=argparse.BooleanOptionalAction, default=None,
                   help="AdamW's fused kernel (default: auto, on CUDA only)")
    g.add_argument("--sdpa", action=argparse.BooleanOptionalAction, default=True,
                   help="attention through torch's scaled_dot_product_attention, flash kernels on CUDA "
                        "(--no-sdpa: timm's eager attention) (default: on)")


def add_distill_args(p: argparse.ArgumentParser, lam: float | None, tau: float = 1.0,
                     help_lambda: str = "λ (default: 0.5 with --teacher, else 0)") -> None:
    g = p.add_argument_group("distillation: (1-λ)·CE + λ·τ²·KL(teacher ‖ student)")
    g.add_argument("--distill-lambda", type=_real, default=lam,
                   help="λ in [0, 1] (default: %(default)s)" if lam is not None else help_lambda)
    g.add_argument("--distill-tau", type=_real, default=tau, help="τ, positive (default: %(default)s)")


def train_config_from_args(args: argparse.Namespace, desc: str):
    """The run's TrainConfig; also refuses a --run-dir whose checkpoint a run without --resume would overwrite."""
    if args.resume and not args.run_dir:
        raise LearngeneError("--resume continues from RUN_DIR/checkpoint.pt; pass --run-dir too")
    if args.run_dir:
        if Path(args.run_dir).exists() and not Path(args.run_dir).is_dir():
            raise LearngeneError(f"--run-dir {quote(args.run_dir)} is a file, not a directory; give a directory path")
        if not args.resume and (Path(args.run_dir) / CHECKPOINT).exists():
            raise LearngeneError(f"{quote(args.run_dir)} holds the checkpoint of an earlier run; pass --resume to "
                                 f"continue it, or give another --run-dir (or delete it) to start over")
    cfg = TrainConfig(
        epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, warmup_epochs=args.warmup_epochs, grad_clip=args.grad_clip or None,
        label_smoothing=args.label_smoothing, augment=args.augment, mixup=getattr(args, "aug", "none") == "deit",
        compile=args.compile, fused_adamw=args.fused_adamw, sdpa=args.sdpa, seed=args.seed, device=args.device,
        distill_lambda=getattr(args, "distill_lambda", 0.0), distill_tau=getattr(args, "distill_tau", 1.0),
        checkpoint_every=args.checkpoint_every or 0, eval_every=args.eval_every, eval_images=args.eval_images,
        progress=not args.quiet, desc=desc,
    )
    if args.run_dir and dist.is_main():  # one run per run directory; the other ranks share rank 0's
        lock_run_dir(args.run_dir)
    return cfg


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=_seed, default=0, help="random seed, 0 or more (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def add_output(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--out", "-o", required=True, help=f"where to write the {what} (.safetensors)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")


def add_ancestry_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ancestry", required=True,
                   help="ancestry model: a learngene model file; a checkpoint (.safetensors/.pth/.bin) with --timm-model; "
                        "or a folder with config.json: a timm hub folder or a transformers ViT/DeiT/DINOv2/CLIP/SigLIP")
    p.add_argument("--drop-head", action="store_true",
                   help="load a model folder without its classifier (the ancestry outputs its pooled embedding)")
    p.add_argument("--timm-model", help="timm architecture of a plain checkpoint, e.g. deit_tiny_patch16_224 "
                                        "(read from a folder's config.json when not given)")


def check_outputs(args: argparse.Namespace, outputs: Sequence[str | None], inputs: Sequence[str | None] = ()) -> None:
    """Every output can be written (and does not exist, without --overwrite), and none is an input of the command.

    The outputs are then written by :func:`learngene.io.atomic_path`, which creates them exclusively, so a
    file that appears in the meantime is not replaced either.
    """
    outputs = [o for o in outputs if o]
    for out in outputs:
        for given in inputs:
            if given and _same_file(out, given):
                raise LearngeneError(f"the output {quote(out)} is this command's input {quote(given)}, which an output "
                                     f"never replaces; choose another output path")
        check_output_path(out, getattr(args, "overwrite", False))
    if len({Path(o).resolve() for o in outputs}) < len(outputs):
        raise LearngeneError(f"two outputs name the same file ({', '.join(map(quote, outputs))}); give each its own path")


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve() or os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _say(args: argparse.Namespace, text: str) -> None:
    if dist.is_main():
        print(text, file=sys.stderr if getattr(args, "quiet", False) else sys.stdout)


# ---- subcommands ------------------------------------------------------------------------------------------
def cmd_ancestry(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out])
    train_cfg = train_config_from_args(args, "ancestry")
    train_data, test_data = load_data_from_args(args)
    spec = spec_from_args(args, data=train_data)
    seed_everything(args.seed)
    model = spec.create_model()
    train_cfg.identity = {"command": "ancestry", "spec": spec.to_dict()}
    _say(args, f"ancestry {spec.short()} ({spec.num_params:,} params) on {train_data.name}: {len(train_data)} images")
    result = train(model, train_data, train_cfg, eval_data=test_data, run_dir=args.run_dir, resume=args.resume)
    dist.on_main(lambda: save_model(args.out, model, spec, overwrite=args.overwrite, origin={
        "kind": "ancestry", "data": train_data.name, "epochs": args.epochs, "eval_acc": result.final_acc,
        "label_space": train_data.label_space}, preprocessing=preprocessing_cfg(train_data)))
    _say(args, f"wrote {args.out}: test accuracy {result.final_acc:.4f}")


def _load_ancestry_args(args: argparse.Namespace):
    kwargs: dict[str, Any] = {}
    if args.timm_model:
        for name in ("num_classes", "img_size", "in_chans"):
            if getattr(args, name, None) is not None:
                kwargs[name] = getattr(args, name)
        for item in getattr(args, "timm_arg", None) or []:
            key, sep, raw = item.partition("=")
            if not sep or not key.strip():
                raise LearngeneError(f"--timm-arg {item!r} is not KEY=VALUE, e.g. --timm-arg depth=6")
            try:
                kwargs[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                kwargs[key.strip()] = raw
    elif getattr(args, "timm_arg", None):
        raise LearngeneError("--timm-arg needs --timm-model: it is passed to timm.create_model for the checkpoint")
    return load_ancestry(args.ancestry, args.timm_model, drop_head=getattr(args, "drop_head", False), **kwargs)


def _ancestry_preprocessing(args: argparse.Namespace, ancestry) -> dict[str, Any] | None:
    """What the ancestry's inputs expect: a timm model's pretrained_cfg, or what its model file records."""
    if args.timm_model or is_model_folder(args.ancestry):  # a folder's config is on the model (load_ancestry)
        return preprocessing_cfg(ancestry.model)
    return model_preprocessing(args.ancestry)


def cmd_condense(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out], [args.ancestry])
    method_cls = get_method(args.method)
    method = method_cls(**parse_options(method_cls.Config, args.opt or []))
    if args.distill_lambda is None:
        args.distill_lambda = method_cls.distill_lambda
    train_cfg = train_config_from_args(args, f"condense {args.method}")  # checked even where unused
    ancestry = _load_ancestry_args(args)
    inputs = None
    preprocessing = _ancestry_preprocessing(args, ancestry)
    if method_cls.needs_data:
        model_in = ancestry.spec  # None for a non-ViT teacher: the data keep their own size unless flags say
        train_data, test_data = load_data_from_args(args, model_in.img_size if model_in else None,
                                                    model_in.in_chans if model_in else None, preprocessing)
        if args.run_dir:  # what a resumed run must share with this one, besides what the loop sees
            train_cfg.identity = {"command": "condense", "method": args.method,
                                  "options": dataclasses.asdict(method.config),
                                  "ancestry weights": digest(ancestry.model.state_dict())}
        inputs = CondenseInputs(train=train_data, eval=test_data, train_cfg=train_cfg, run_dir=args.run_dir,
                                resume=args.resume)
        preprocessing = preprocessing_cfg(train_data)  # what the gene's tensors were trained on
    seed_everything(args.seed)
    gene = dataclasses.replace(method.condense(ancestry, inputs), preprocessing=preprocessing)
    gene.label_space = ancestry.label_space
    dist.on_main(lambda: gene.save(args.out, overwrite=args.overwrite))
    _say(args, f"wrote {args.out}: {gene.method} learngene, {gene.num_stored_params:,} stored parameters")
    note = method.condense_note(gene)
    if note:
        _say(args, note)


def cmd_expand(args: argparse.Namespace) -> None:
    hub = wants_folder(args.out, args.format)
    if hub:
        check_output_folder(args.out, args.overwrite)
    else:
        check_outputs(args, [args.out], [args.gene])
    gene = Learngene.load(args.gene)  # checked against its method where make_descendant expands it
    method_cls = get_method(gene.method)
    if gene.ancestry is None and not args.preset:
        raise LearngeneError(f"{quote(args.gene)} records no ancestry size; give --preset and/or all size flags")
    spec = spec_from_args(args, base=gene.ancestry)
    options = parse_options(method_cls.Config, args.opt or [])
    if args.max_params is not None or args.max_flops is not None:
        spec = _fit_gene_to_budget(args, gene, spec, options)
    model, provided = make_descendant(gene, spec, seed=args.seed, top_up=args.top_up, source=args.gene, return_keys=True,
                                      **options)
    if hub:
        dist.on_main(lambda: _export_descendant(args, gene, model, spec, options, provided))
    else:
        dist.on_main(lambda: save_model(args.out, model, spec, overwrite=args.overwrite, origin={
            "kind": "descendant", "method": gene.method, "gene": str(args.gene), "options": options,
            "provided_keys": len(provided), "top_up": args.top_up, "label_space": head_label_space(gene, provided)},
            preprocessing=gene.preprocessing))
    _say(args, f"wrote {args.out}{' (timm hub folder)' if hub else ''}: {spec.short()} timm ViT ({spec.num_params:,} params), "
               f"{len(provided)}/{len(spec.state_shapes())} tensors from the {gene.method} gene"
               + (f", the rest topped up by {args.top_up} where it has weights" if args.top_up else ""))


def _head_status(gene, spec, provided, top_up: str | None = None) -> str | None:
    """Whether a descendant's classifier is the ancestry's (carried by the gene) or fresh; None: it has none."""
    if not spec.num_classes:
        return None
    if "head.weight" in provided:
        return f"the ancestry's, carried by the gene ({describe_labels(gene.label_space, spec.num_classes)})"
    if top_up:
        return f"topped up by {top_up} where it has one of this shape, else fresh (timm's initialization)"
    return f"fresh: timm's initialization of a {spec.num_classes}-way head, untrained (fine-tune before use)"


def _export_descendant(args: argparse.Namespace, gene, model, spec, options: dict[str, Any], provided) -> None:
    ancestry = gene.ancestry
    card = {
        "method": gene.method,
        "citation": "; ".join(map(str, citations(get_method(gene.method)))),
        "ancestry": (f"timm `{getattr(ancestry, 'arch', None) or 'ViT'}` {ancestry.short()}, {ancestry.num_params:,} "
                     f"parameters" if ancestry else "none recorded (a non-ViT teacher, or no ancestry)"),
        "gene": f"`{Path(args.gene).name}`, {gene.num_stored_params:,} stored parameters, made by learngene "
                f"{gene.library_version} on {gene.created}",
        "tensors from the gene": f"{len(provided)} of {len(spec.state_shapes())}"
                                 + (f", the rest topped up by {args.top_up}" if args.top_up else ", the rest timm's init"),
        "head": _head_status(gene, spec, provided, args.top_up),
    }
    if options:
        card["options"] = ", ".join(f"{k}={v!r}" for k, v in options.items())
    data_config = None
    if gene.preprocessing is not None:  # the gene's, at the descendant's input size
        data_config = preprocessing_cfg(gene.preprocessing, spec.img_size, spec.in_chans)
    export_hub_folder(args.out, model, spec, card, data_config=data_config, overwrite=args.overwrite)


def _fit_gene_to_budget(args: argparse.Namespace, gene, base, options: dict[str, Any]):
    """The deepest, then widest, size under --max-params/--max-flops that the gene's method can expand."""
    heads = args.num_heads or (base.num_heads if args.embed_dim else None)
    refused: list = []
    spec = fit_gene_to_budget(gene, base, args.max_params, args.max_flops, depth=args.depth, num_heads=heads,
                              refused=refused, **options)
    budget = ", ".join(f"{name} {value:,}" for name, value in (("params", args.max_params), ("FLOPs", args.max_flops))
                       if value is not None)
    why = f"the deepest, then widest size within the budget that the {gene.method} gene expands to"
    if refused:
        first, reason = refused[0]
        why += (f"; {len(refused)} deeper or wider size(s) within the budget it refuses, e.g. {first.short()}: "
                f"{reason.split('; ')[0]}")  # the reason without the advice to pass other sizes
    _say(args, f"picked {spec.short()}: {spec.num_params:,} params, {spec.flops / 1e6:,.1f} MFLOPs per image "
               f"(budget: {budget}; {why})")
    return spec


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


def cmd_adapt(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out, args.gene_out], [args.gene])
    train_cfg = train_config_from_args(args, "adapt")
    gene = load_gene(args.gene)
    method_cls = get_method(gene.method)
    options = parse_options(method_cls.Config, args.opt or [])
    method = method_cls.from_gene(gene, **options)
    base = gene.ancestry
    train_data, test_data = load_data_from_args(args, (base.img_size if base else None), (base.in_chans if base else None),
                                                gene.preprocessing)
    spec = spec_from_args(args, base=base, data=train_data)
    train_cfg.identity = {"command": "adapt", "method": gene.method, "options": dataclasses.asdict(method.config),
                          "spec": spec.to_dict(), "gene": digest(gene.tensors) if args.run_dir else None}
    adapted, result = method.adapt(gene, spec, AdaptInputs(train_data, train_cfg.replace(desc=f"adapt {gene.method}"),
                                                           eval=test_data, run_dir=args.run_dir, resume=args.resume))
    model, provided = make_descendant(adapted, spec, seed=args.seed, return_keys=True)

    def write() -> None:
        if args.gene_out:
            adapted.save(args.gene_out, overwrite=args.overwrite)
        save_model(args.out, model, spec, overwrite=args.overwrite, origin={
            "kind": "descendant", "method": gene.method, "gene": str(args.gene), "adapted_on": train_data.name,
            "adapt_steps": result.steps, "options": options,
            "label_space": head_label_space(gene, provided)},
            preprocessing=preprocessing_cfg(train_data))

    dist.on_main(write)
    _say(args, f"wrote {args.out}: {spec.short()} timm ViT adapted for {result.steps} steps"
               + (f", accuracy {result.final_acc:.4f}" if result.final_acc is not None else ""))


def head_label_space(gene, provided: list[str]) -> dict[str, Any] | None:
    """The label space a descendant's head means: the gene's when the gene gave the head, else none (untrained)."""
    return gene.label_space if "head.weight" in provided else None


def cmd_train(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out], [args.model])
    if args.distill_lambda is None:
        args.distill_lambda = 0.5 if args.teacher else 0.0
    elif args.distill_lambda > 0 and not args.teacher:
        raise LearngeneError("--distill-lambda needs a teacher to distil from; pass --teacher ANCESTRY")
    train_cfg = train_config_from_args(args, "train")
    state, spec, origin = load_model_file(args.model)
    model = build_model(spec, state, source=str(args.model))
    train_data, test_data = load_data_from_args(args, spec.img_size, spec.in_chans, model_preprocessing(args.model))
    head = choose_head(origin.get("label_space"), spec.num_classes, train_data.label_space, train_data.num_classes,
                       force_new=args.new_head)
    if head.fresh:
        seed_everything(args.seed)
        model.reset_classifier(train_data.num_classes)
        spec = spec.replace(num_classes=train_data.num_classes)
    train_cfg.identity = {"command": "train", "model weights": digest(state) if args.run_dir else None,
                          "new head": head.fresh}
    student, teacher, data = model, None, train_data
    if args.teacher:
        ancestry = load_ancestry(args.teacher, args.teacher_timm_model)
        kd = setup_distillation(model, ancestry.model, train_data, ancestry.label_space)
        _say(args, f"distilling from {args.teacher} with λ = {train_cfg.distill_lambda:g}: {kd.why}")
        train_cfg.identity.update(teacher=str(args.teacher), distilled=kd.kind)
        student = kd.student
        data, teacher = cache_teacher_outputs(train_data, kd.teacher, train_cfg)
    result = train(student, data, train_cfg, eval_data=test_data, teacher=teacher, run_dir=args.run_dir,
                   resume=args.resume)
    dist.on_main(lambda: save_model(args.out, model, spec, overwrite=args.overwrite, origin={
        **origin, "finetuned_on": train_data.name, "epochs": args.epochs, "eval_acc": result.final_acc,
        "label_space": train_data.label_space, "new_head": head.fresh}, preprocessing=preprocessing_cfg(train_data)))
    _say(args, f"wrote {args.out}: test accuracy {result.final_acc:.4f}; {head.why}")


def cmd_inspect(args: argparse.Namespace) -> None:
    check_outputs(args, [args.plot], [args.path])
    print(describe_file(args.path, show_tensors=args.tensors))
    if args.plot:

        plot_attention_distance(load_gene(args.path), args.plot, overwrite=args.overwrite)
        print(f"wrote {args.plot}")


def cmd_methods(args: argparse.Namespace) -> None:
    for name in list_methods():
        cls = get_method(name)
        auto = getattr(cls.Config, "AUTO_OPTIONS", ())
        hints = typing.get_type_hints(cls.Config)

        def shown(f) -> str:
            allowed = choices(hints.get(f.name))
            return (f"{f.name}={'auto' if f.name in auto else repr(f.default)}"
                    + (" {" + ",".join(c if c else repr(c) for c in map(str, allowed)) + "}" if allowed else ""))

        options = ", ".join(shown(f) for f in dataclasses.fields(cls.Config)) or "-"
        print(f"{name:18s} {cls.summary}\n{'':18s} options: {options}")
        for paper in citations(cls):
            print(f"{'':18s} paper: {paper}")


def cmd_bench(args: argparse.Namespace) -> None:
    profile = get_profile(args.profile)
    if isinstance(profile, FolderSmoke):
        if args.max_steps is not None and args.max_steps < 1:
            raise LearngeneError(f"--max-steps must be at least 1, got {args.max_steps}")
        record = run_smoke(profile, Path(args.out or f"runs/bench-{args.profile}"), main,
                           args.device, args.max_steps, progress=not args.quiet)
        for stage in record["stages"]:
            print(f"learngene bench {args.profile}: {stage['stage']:9s} {stage['seconds']:8.1f} s on {record['device']}")
        return
    if args.methods:
        unknown = [m for m in args.methods if m not in list_methods()]
        if unknown:
            raise LearngeneError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(list_methods())}")
        profile = profile.replace(methods=tuple(dict.fromkeys(args.methods)))
    if args.seeds is not None:
        if args.seeds < 1:
            raise LearngeneError(f"--seeds must be at least 1, got {args.seeds}")
        profile = profile.replace(seeds=tuple(range(args.seeds)))
    out = Path(args.out or f"runs/bench-{profile.name}")
    if args.time_limit is not None and not args.time_limit > 0:
        raise LearngeneError(f"--time-limit must be a positive number of minutes, got {args.time_limit}")
    limit = args.time_limit * 60 if args.time_limit is not None else None
    run = BenchRun(profile, out, data_dir=args.data_dir, device=args.device, progress=not args.quiet, time_limit=limit,
                   command=args.command_line)
    run.run()
    if run.meta.get("complete"):
        print(f"learngene bench: report in {out}/report.md ({run.meta['wall_seconds'] / 60:.1f} min)")
    else:
        print(f"learngene bench: time limit reached, partial report in {out}/report.md; "
              f"run the same command again to continue where it stopped")


def cmd_compare(args: argparse.Namespace) -> None:
    if args.time_limit is not None and not args.time_limit > 0:
        raise LearngeneError(f"--time-limit must be a positive number of minutes, got {args.time_limit}")
    if args.kd is not None and not 0 < args.kd <= 1:
        raise LearngeneError(f"--kd λ must be in (0, 1], got {args.kd}; e.g. --kd 0.5")
    methods = None if args.methods in (None, "all") else [m.strip() for m in args.methods.split(",") if m.strip()]
    # the ancestry's size decides the descendants' family: read it now (on the meta device), so that bad input
    # fails before anything trains
    ancestry = load_ancestry(args.ancestry, args.timm_model)
    profile = compare_profile(
        ancestry.spec, args.ancestry, args.data, args.sizes.split(","), methods, seeds=args.seeds, epochs=args.epochs,
        max_steps=args.max_steps, few_shot=args.few_shot, train_images=args.train_images, eval_images=args.eval_images,
        references=args.references.split(","), kd_lambda=args.kd, condense_data=args.condense_data,
        condense_epochs=args.condense_epochs, adapt_steps=args.adapt_steps, batch_size=args.batch_size, lr=args.lr,
        timm_model=args.timm_model, condense_images=args.condense_images,
        classes=parse_classes(args.classes) if args.classes else None)
    del ancestry
    limit = args.time_limit * 60 if args.time_limit is not None else None
    rows = run_compare(profile, args.out, data_dir=args.data_dir, device=args.device, progress=not args.quiet,
                       time_limit=limit, command=args.command_line, plots=not args.no_plots)
    print(compare_text(rows, profile))
    print(f"learngene compare: report in {args.out}/report.md")


def cmd_demo(args: argparse.Namespace) -> None:
    run_demo(out_dir=Path(args.out_dir), data_dir=args.data_dir, device=args.device, seed=args.seed,
             progress=not args.quiet, quick=args.quick)


# ---- parser -----------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="learngene", description="Condense a pretrained ViT into a learngene and expand it into "
                                                   "timm ViTs of any depth, width and head count.")
    parser.add_argument("--version", action="version", version=f"learngene {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    p = sub.add_parser("ancestry", help="train an ancestry ViT on a dataset and save it",
                       description="Train a ViT from scratch on a dataset; it becomes the ancestry of learngenes.")
    add_spec_args(p)
    add_data_args(p)
    add_train_args(p)
    add_common(p)
    add_output(p, "ancestry model")
    p.set_defaults(func=cmd_ancestry)

    p = sub.add_parser("condense", help="condense an ancestry into a learngene file",
                       description="Build a learngene from an ancestry with one method. Methods that train ("
                                   + ", ".join(n for n in list_methods() if get_method(n).aux_net)
                                   + ") distil from the ancestry on --data.",
                       epilog="methods: " + ", ".join(list_methods()) + " (see `learngene methods` for options)")
    p.add_argument("--method", required=True, help="one of: " + ", ".join(list_methods()))
    add_ancestry_args(p)
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="method option (repeatable)")
    add_data_args(p)
    add_train_args(p)
    add_distill_args(p, lam=None, help_lambda="λ (default: the method's paper: " + ", ".join(
        f"{name} {get_method(name).distill_lambda:g}" for name in list_methods() if get_method(name).aux_net)
        + "; 1 = pure KL, 0.5 = KL + CE)")
    add_common(p)
    add_output(p, "learngene")
    g = p.add_argument_group("timm checkpoint sizes (with --timm-model)")
    g.add_argument("--num-classes", type=_integer, help="classifier outputs of the checkpoint")
    g.add_argument("--img-size", type=_integer, help="input resolution of the checkpoint (data are resized to it)")
    g.add_argument("--in-chans", type=_integer, help="input channels of the checkpoint (data are converted to it)")
    g.add_argument("--timm-arg", action="append", metavar="KEY=VALUE",
                   help="another timm.create_model argument of the checkpoint's model, e.g. depth=6 or "
                        "dynamic_img_size=true (value read as JSON; repeatable)")
    p.set_defaults(func=cmd_condense)

    p = sub.add_parser("expand", help="expand a learngene into a descendant timm ViT",
                       description="Initialize a timm ViT of the given size from a learngene; sizes default to the "
                                   "ancestry's. The output loads with timm.create_model(...).load_state_dict(..., strict=True).")
    p.add_argument("gene", help="learngene file (.safetensors)")
    add_spec_args(p)
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="method option for this expansion (repeatable)")
    p.add_argument("--top-up", metavar="METHOD", help="fill what the gene leaves to timm from a method without a "
                                                      "learngene, e.g. mimetic (attention weights, sin-cos positions)")
    g = p.add_argument_group("size for a budget", "Among depths 1..the ancestry's and head counts 1..the ancestry's "
                             "(width = heads x head size): the deepest size that fits the budget, then the widest at "
                             "that depth, skipping sizes the gene's method cannot expand (tried without allocating); "
                             "--depth or --num-heads pin that axis. It says which size it picked and why.")
    g.add_argument("--max-params", type=_count, metavar="N", help="at most N parameters (e.g. 5e6 or 5M)")
    g.add_argument("--max-flops", type=_count, metavar="N", help="at most N forward FLOPs per image (e.g. 2G)")
    add_common(p)
    p.add_argument("--out", "-o", required=True,
                   help="where to write the descendant: a learngene model file (.safetensors), or timm's hub folder "
                        "(config.json, model.safetensors, README.md) when it ends in / or is a folder")
    p.add_argument("--format", choices=("file", "hub"),
                   help="file: one learngene model file; hub: timm's hub folder, loadable by "
                        "timm.create_model('local-dir:DIR', pretrained=True) (default: hub for a folder-like --out)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file or folder")
    p.set_defaults(func=cmd_expand)

    p = sub.add_parser("adapt", help="specialize a learngene to a size on a little data (WAVE scalers, PEG φ)",
                       description="Train only the size-specific part of a learngene (WAVE's weight scalers, PEG's "
                                   "expansion map φ) on a little downstream data, then write the plain timm descendant.")
    p.add_argument("gene", help="learngene file (.safetensors)")
    add_spec_args(p)
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="method option (repeatable)")
    add_data_args(p)
    add_train_args(p, epochs=1)
    add_common(p)
    add_output(p, "adapted descendant model")
    p.add_argument("--gene-out", help="also save the adapted learngene here")
    p.set_defaults(func=cmd_adapt)

    p = sub.add_parser("train", help="fine-tune a model file (e.g. a descendant) on a dataset",
                       description="Fine-tune a learngene model file; a new classifier head is made when the "
                                   "data's label space differs.")
    p.add_argument("model", help="model file written by `learngene expand`, `ancestry` or `train`")
    p.add_argument("--new-head", action="store_true",
                   help="always start from a fresh classifier head (default: fresh only when the data's classes "
                        "differ from those the model's head was trained on)")
    add_data_args(p)
    add_train_args(p, epochs=5)
    p.add_argument("--teacher", metavar="ANCESTRY",
                   help="distil from this model while training (what --ancestry accepts): on its logits when its head "
                        "was trained on the data's classes, else on its pooled embedding (cosine, through a learned "
                        "projection when the widths differ; the projection is not saved)")
    p.add_argument("--teacher-timm-model", help="timm architecture of a plain --teacher checkpoint")
    add_distill_args(p, lam=None)
    add_common(p)
    add_output(p, "fine-tuned model")
    p.set_defaults(func=cmd_train, img_size=None, in_chans=None)

    p = sub.add_parser("inspect", help="print a learngene's or model's metadata and sizes",
                       description="Show what a learngene or model file holds: method, options, ancestry, "
                                   "stored parameters, cost; or a model's spec, parameters and FLOPs.")
    p.add_argument("path", help="learngene or model file")
    p.add_argument("--tensors", action="store_true", help="also list every tensor and its shape")
    p.add_argument("--plot", metavar="PNG", help="write a plot of mean attention distance per layer and head "
                                                 "(cluster learngenes)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing plot file")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("methods", help="list the registered methods and their options",
                       description="List every registered method with its options (for --method / --opt).")
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("bench", help="every method side by side on identical budgets: tables, CSV and plots",
                       description="Train an ancestry on Fashion-MNIST, condense it with every registered method, "
                                   "fine-tune descendants of several sizes on Fashion-MNIST, digits and a few-shot "
                                   "task with identical budgets and seeds, and write report.md, results.csv and "
                                   "plots. Every stage is cached: rerunning continues an interrupted run.")
    p.add_argument("--profile", default="quick", choices=list(PROFILES),
                   help="; ".join(f"{name}: {profile.description}" for name, profile in PROFILES.items())
                        + " (default: %(default)s)")
    p.add_argument("--max-steps", type=_integer, metavar="N", help="gpu-smoke: optimizer steps of each training stage "
                                                              "(default: 20)")
    p.add_argument("--out", help="report folder (default: runs/bench-PROFILE)")
    p.add_argument("--methods", nargs="+", metavar="METHOD", help="only these registered methods (default: all)")
    p.add_argument("--seeds", type=_integer, metavar="N", help="seeds 0..N-1 instead of the profile's")
    p.add_argument("--time-limit", type=_real, metavar="MINUTES",
                   help="start no new stage after this long; the same command continues later")
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("compare", help="which start wins for my ancestry, data and sizes: every method against "
                                       "scratch, scratch ×10 and mimetic, one recommendation per size",
                       description="Condense the ancestry with every method once, make every size, fine-tune every "
                                   "method × size × seed on --data with the same budget and a fresh head, and print "
                                   "per size mean ± std, 2-std marks against the references, costs, the epoch each "
                                   "method reaches scratch ×10's final accuracy, and one recommendation line. Writes "
                                   "report.md, results.csv and plots to --out; cached and resumable like bench.")
    add_ancestry_args(p)
    p.add_argument("--data", required=True, help="fashion_mnist, digits, folder:PATH or torchvision:NAME: fine-tuned and "
                                                 "tested on (its train and test splits)")
    p.add_argument("--data-dir", help="where the data lie (default: $LEARNGENE_DATA, then system locations)")
    p.add_argument("--sizes", required=True, metavar="LIST", help="descendant sizes, e.g. L4-D192-H3,L12-D384-H6 "
                                                                  "(the rest of the spec follows the ancestry)")
    p.add_argument("--methods", metavar="LIST", default="all", help="comma-separated methods, or all (default: all)")
    p.add_argument("--references", metavar="LIST", default="scratch,scratch_x10,mimetic,structured",
                   help="what a recommendation must beat by 2 std; scratch_x10 = scratch fine-tuned 10× as long; "
                        "structured only where registered (default: %(default)s)")
    p.add_argument("--seeds", type=_integer, default=3, help="seeds 0..N-1 per method and size (default: %(default)s)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=_integer, default=5, help="fine-tuning epochs of every method (default: %(default)s)")
    g.add_argument("--max-steps", type=_integer, metavar="S", help="fine-tune S optimizer steps instead of --epochs")
    p.add_argument("--few-shot", type=_integer, metavar="K", help="fine-tune on K labelled images per class")
    p.add_argument("--train-images", type=_integer, metavar="N", help="fine-tune on a fixed random subset of N images")
    p.add_argument("--eval-images", type=_integer, metavar="N", help="test on a fixed random subset of N test images")
    p.add_argument("--kd", type=_real, nargs="?", const=0.5, metavar="λ",
                   help="also fine-tune every method distilling the ancestry (rows '+kd'): logits when its head knows "
                        "the data's classes, else pooled features; λ (default when given: 0.5)")
    p.add_argument("--condense-data", metavar="D", help="data the methods that need data condense and adapt on "
                                                       "(default: --data)")
    p.add_argument("--classes", metavar="LIST", help="only these classes of --data, by index, e.g. 5,6,7,8,9 "
                                                    "(also for condensing, unless --condense-data)")
    p.add_argument("--condense-images", type=_integer, metavar="N", help="condense and adapt on a fixed random "
                                                                         "subset of N images (default: all)")
    p.add_argument("--condense-epochs", type=_integer, default=2, help="aux-net epochs of tleg, wave, share_init "
                                                                     "(default: %(default)s)")
    p.add_argument("--adapt-steps", type=_integer, default=50, help="steps of wave's and peg's adaptation per size "
                                                                  "and seed (default: %(default)s)")
    p.add_argument("--batch-size", type=_integer, default=64, help="every training stage (default: %(default)s)")
    p.add_argument("--lr", type=_real, default=1e-3, help="peak AdamW learning rate (default: %(default)s)")
    p.add_argument("--time-limit", type=_real, metavar="MINUTES",
                   help="start no new stage after this long; the same command continues later")
    p.add_argument("--out", required=True, help="report folder (also the cache a rerun continues from)")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("demo", help="the main job end to end on Fashion-MNIST, in minutes on a CPU",
                       description="Train a small ancestry on Fashion-MNIST, condense it with every registered "
                                   "method, expand to several depths, fine-tune each briefly and print a table of "
                                   "method x size -> accuracy and stored parameters.")
    p.add_argument("--out-dir", default="runs/demo", help="where models, genes and the table go (default: %(default)s)")
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    p.add_argument("--quick", action="store_true", help="a much smaller run (seconds), to check the pipeline")
    add_common(p)
    p.set_defaults(func=cmd_demo)
    return parser


def _clear_progress_bars() -> None:
    """Close the bars an error interrupted, so that the one-line error starts a line of its own."""
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a one-line usage error already printed
        return int(exc.code or 0)
    args.command_line = shlex.join(["learngene", *argv])  # what reports name as the command that made them
    finished = False
    previous_handlers = _stop_on_signals()
    try:
        if dist.launched_distributed() and args.command in SINGLE_PROCESS:
            raise LearngeneError("this command runs in one process (it writes many files); run it without torchrun")
        dist.init_from_env()
        args.func(args)
        finished = True
    except LearngeneError as exc:
        return _fail(args, str(exc))
    except OSError as exc:  # the place, not the program: a full or read-only disk, permissions, a name too long
        if isinstance(exc, BrokenPipeError):  # output piped into e.g. `head`, which stopped reading
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush does not fail too
            return 1
        return _fail(args, os_error_message(exc))
    except MemoryError:
        return _fail(args, "out of memory; choose smaller sizes (--depth, --embed-dim, --img-size) or a smaller "
                           "--batch-size")
    except KeyboardInterrupt as exc:
        print(f"learngene {args.command}: {_interruption_message(args, exc)}", file=sys.stderr)
        return 143 if _signal_name(exc) == "SIGTERM" else 130
    finally:
        if previous_handlers is not None:
            signal.signal(signal.SIGINT, previous_handlers[0])
            signal.signal(signal.SIGTERM, previous_handlers[1])
        release_run_dirs()
        dist.destroy(sync=finished)
    return 0


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a training loop, handled like Ctrl-C (SIGINT)."""


def _signal_name(exc: KeyboardInterrupt) -> str:
    if isinstance(exc, RunInterrupted):
        return exc.signame
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"


def _interruption_message(args: argparse.Namespace, exc: KeyboardInterrupt) -> str:
    """One line: what stopped the run, what was saved, and the command that continues it."""
    said = f"stopped by {_signal_name(exc)}"
    continues = ("rerun the same command with --resume to continue" if hasattr(args, "resume")
                 else "rerun the same command to continue (finished stages are kept)")
    if isinstance(exc, RunInterrupted):
        if exc.checkpoint is not None:
            return f"{said} after step {exc.step}; checkpoint written to {quote(exc.checkpoint)}; {continues}"
        return f"{said} after step {exc.step}; nothing was saved (give --run-dir to make a run resumable)"
    if getattr(args, "run_dir", None):
        return f"{said} outside a training step; {continues} from the last checkpoint in {quote(args.run_dir)}"
    return f"{said}; nothing was saved"


def _stop_on_signals():
    """SIGINT and SIGTERM: a running training loop finishes its step, checkpoints and stops (train.RunInterrupted);
    anywhere else, or at a second signal, the command stops at once."""
    def handler(signum, frame):
        name = signal.Signals(signum).name
        if not request_stop(name):
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    try:
        previous_int = signal.signal(signal.SIGINT, handler)
        previous_term = signal.signal(signal.SIGTERM, handler)
        return previous_int, previous_term
    except ValueError:  # not the main thread (e.g. main() called from a worker thread): leave signals alone
        return None


def _fail(args: argparse.Namespace, message: str) -> int:
    """Print the one-line error (a name holding a newline cannot split it) and give the usage exit code."""
    _clear_progress_bars()
    where = f" (rank {dist.rank()})" if dist.is_distributed() else ""
    one_line = message.replace("\r", "\\r").replace("\n", "\\n")
    print(f"learngene {args.command}{where}: error: {one_line}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
