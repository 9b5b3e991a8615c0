"""The ``learngene`` argument parser: every subcommand, its flags and help texts (the flags several commands share are
made in :mod:`learngene.cli.flags`).

It imports no torch (nor anything that does), so ``learngene --help``, ``learngene SUB --help`` and argument
errors answer in a fraction of a second; ``benchmarks/cli_startup.py`` measures it and
``tests/test_cli.py`` checks it. Each subcommand names its handler as ``"module:function"`` inside
:mod:`learngene.cli`, imported only when the command runs (:mod:`learngene.cli.dispatch`).
"""

from __future__ import annotations

import argparse
from typing import Any

from .._version import __version__
from ..bench.descriptions import QUICK_DEMO_TIME, profiles_help
from ..errors import render
from ..training.config import LOGGING
from .flags import (
    FASHION_MNIST_DIR,
    LazyText,
    add_ancestry_args,
    add_common,
    add_data_args,
    add_data_dir,
    add_distill_args,
    add_license,
    add_method_options,
    add_output,
    add_setting,
    add_settings,
    add_size_flag,
    add_spec_args,
    add_stage_runner,
    add_time_limit,
    add_train_args,
    count,
    data_help,
    integer,
    real,
)

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2), like every other learngene error, naming settings by their flags
    (a type check's message may carry both wordings: :func:`learngene.errors.message_of`)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {render(message, cli=True)} (see --help)\n")


# ---- one function per subcommand ----------------------------------------------------------------------
def _command(sub, name: str, handler: str, **texts: Any) -> argparse.ArgumentParser:
    """Subcommand ``name`` with its ``help``, ``description`` (and ``epilog``), run by ``handler``, a
    ``"module:function"`` of :mod:`learngene.cli`."""
    p = sub.add_parser(name, **texts)
    p.set_defaults(handler=handler)
    return p


def _add_ancestry(sub) -> None:
    p = _command(
        sub,
        "ancestry",
        "making:cmd_ancestry",
        help="train an ancestry ViT on a dataset and save it",
        description="Train a ViT from scratch on a dataset; it becomes the ancestry of learngenes.",
    )
    add_spec_args(p)
    add_data_args(p)
    add_train_args(p, "ancestry")
    add_common(p)
    add_output(p, "ancestry model")
    add_license(p, "model file", inherited=False)


def _add_condense(sub) -> None:
    p = _command(
        sub,
        "condense",
        "making:cmd_condense",
        help="condense an ancestry into a learngene file",
        description="Build a learngene from an ancestry with one method. Methods that train an aux "
        "net distil from the ancestry on --data.",
        epilog="`learngene methods` lists every method with its options",
    )
    p.add_argument("--method", required=True, help="a registered method (`learngene methods` lists them)")
    add_ancestry_args(p)
    add_method_options(p)
    add_data_args(p)
    add_train_args(p, "condense")
    add_distill_args(p, lam=None, help_lambda="λ (default: the method's paper's: 1 = pure KL, 0.5 = KL + CE)")
    add_common(p)
    add_output(p, "learngene")
    add_license(p, "learngene (and named on its descendants' model cards)")
    _add_checkpoint_sizes(p)


def _add_checkpoint_sizes(p: argparse.ArgumentParser) -> None:
    """The sizes of a plain timm checkpoint's model, which its file does not record (with ``--timm-model``)."""
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


def _add_expand(sub) -> None:
    p = _command(
        sub,
        "expand",
        "expanding:cmd_expand",
        help="expand a learngene into a descendant timm ViT",
        description="Initialize a timm ViT of the given size from a learngene; sizes default to the "
        "ancestry's. The output loads with timm.create_model(...).load_state_dict(..., strict=True).",
    )
    _add_gene_and_size(p, "method option for this expansion (repeatable)")
    p.add_argument(
        "--top-up",
        metavar="METHOD",
        help="fill what the gene leaves to timm from a method without a "
        "learngene, e.g. mimetic (attention weights, sin-cos positions)",
    )
    _add_budget(p)
    p.add_argument(
        "--stitch",
        metavar="F:J-E:K",
        help="a pool gene of design=authors only: write a stitched descendant instead of a timm ViT: instance F's "
        "embeddings and blocks 0..J, a learned stitch layer, instance E's blocks K.. and head (F < E, |J-K| <= 1; "
        "e.g. 0:1-2:0). Its size is the instances'; no size, budget, --opt, --top-up or hub flags. "
        "`learngene inspect GENE` lists the instances; `learngene train` fine-tunes the file",
    )
    add_common(p)
    _add_descendant_output(p)
    add_license(p, "descendant's model card or model file")


def _add_gene_and_size(p: argparse.ArgumentParser, options_help: str) -> None:
    """The learngene file a descendant is made from, its size and the method's options."""
    p.add_argument("gene", help="learngene file (.safetensors)")
    add_spec_args(p)
    add_method_options(p, options_help)


def _add_budget(p: argparse.ArgumentParser) -> None:
    """``expand``'s budget: the size picked for at most so many parameters or FLOPs."""
    g = p.add_argument_group(
        "size for a budget",
        "Among depths 1..the ancestry's and head counts 1..the ancestry's "
        "(width = heads x head size): the deepest size that fits the budget, then the widest at "
        "that depth, skipping sizes the gene's method cannot expand (tried without allocating); "
        "--depth or --num-heads pin that axis. It says which size it picked and why.",
    )
    g.add_argument("--max-params", type=count, metavar="N", help="at most N parameters (e.g. 5e6 or 5M)")
    g.add_argument("--max-flops", type=count, metavar="N", help="at most N forward FLOPs per image (e.g. 2G)")


def _add_descendant_output(p: argparse.ArgumentParser) -> None:
    """Where ``expand`` writes: a model file or a timm hub folder."""
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


def _add_adapt(sub) -> None:
    p = _command(
        sub,
        "adapt",
        "making:cmd_adapt",
        help="specialize a learngene to a size on a little data (WAVE scalers, PEG φ)",
        description="Train only the size-specific part of a learngene (WAVE's weight scalers, PEG's "
        "expansion map φ) on a little downstream data, then write the plain timm descendant.",
    )
    _add_gene_and_size(p, "method option (repeatable)")
    add_data_args(p)
    add_train_args(p, "adapt")
    add_common(p)
    add_output(p, "adapted descendant model")
    p.add_argument("--gene-out", help="also save the adapted learngene here")
    add_license(p, "descendant model file and the adapted learngene")


def _add_train(sub) -> None:
    p = _command(
        sub,
        "train",
        "making:cmd_train",
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
    p.set_defaults(img_size=None, in_chans=None)


def _add_inspect(sub) -> None:
    p = _command(
        sub,
        "inspect",
        "info:cmd_inspect",
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


def _add_methods(sub) -> None:
    _command(
        sub,
        "methods",
        "info:cmd_methods",
        help="list the registered methods and their options",
        description="List every registered method with its options (for --method / --opt).",
    )


def _add_bench(sub) -> None:
    p = _command(
        sub,
        "bench",
        "benching:cmd_bench",
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
    p.add_argument("--seeds", type=integer, metavar="N", help="seeds 0..N-1 instead of the profile's")
    add_time_limit(p)
    add_data_dir(p, FASHION_MNIST_DIR)
    add_stage_runner(p, "bench")


def _add_compare(sub) -> None:
    p = _command(
        sub,
        "compare",
        "comparing:cmd_compare",
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
    _add_compared_on(p)
    _add_contenders(p)
    _add_fine_tuning(p)
    _add_classes_and_condensing(p)
    _add_compare_run(p)


def _add_compared_on(p: argparse.ArgumentParser) -> None:
    """``compare``'s inputs: the ancestry, the data and the descendant sizes."""
    add_ancestry_args(p)
    p.add_argument(
        "--data",
        required=True,
        help=LazyText(
            "a registered data source", lambda: data_help() + ": fine-tuned and tested on (its train and test splits)"
        ),
    )
    add_data_dir(p)
    p.add_argument(
        "--sizes",
        required=True,
        metavar="LIST",
        help="descendant sizes, e.g. L4-D192-H3,L12-D384-H6 (the rest of the spec follows the ancestry)",
    )


def _add_contenders(p: argparse.ArgumentParser) -> None:
    """What ``compare`` sets against each other: the methods, the references they must beat, over how many seeds."""
    p.add_argument("--methods", metavar="LIST", default="all", help="comma-separated methods, or all (default: all)")
    p.add_argument(
        "--references",
        metavar="LIST",
        default="scratch,scratch_x10,mimetic,structured",
        help="what a recommendation must beat (paired over seeds, Holm-corrected); scratch_x10 = scratch "
        "fine-tuned 10× as long; "
        "structured only where registered (default: %(default)s)",
    )
    p.add_argument("--seeds", type=integer, default=3, help="seeds 0..N-1 per method and size (default: %(default)s)")


def _add_fine_tuning(p: argparse.ArgumentParser) -> None:
    """``compare``'s fine-tuning budget, data subset, test subset and distillation."""
    g = p.add_mutually_exclusive_group()
    add_setting(g, "epochs", "compare", help="fine-tuning epochs of every method (default: %(default)s)")
    add_setting(g, "max_steps", "compare", metavar="S", help="fine-tune S optimizer steps instead of --epochs")
    p.add_argument("--few-shot", type=integer, metavar="K", help="fine-tune on K labelled images per class")
    p.add_argument("--train-images", type=integer, metavar="N", help="fine-tune on a fixed random subset of N images")
    add_setting(p, "eval_images", "compare", help="test on a fixed random subset of N test images")
    p.add_argument(
        "--kd",
        type=real,
        nargs="?",
        const=0.5,
        metavar="λ",
        help="also fine-tune every method distilling the ancestry (rows '+kd'): logits when its head knows "
        "the data's classes, else pooled features; λ (default when given: 0.5)",
    )


def _add_classes_and_condensing(p: argparse.ArgumentParser) -> None:
    """The classes ``compare`` keeps, and what the methods that need data condense and adapt on."""
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
        type=integer,
        metavar="N",
        help="condense and adapt on a fixed random subset of N images (default: all)",
    )
    p.add_argument(
        "--condense-epochs",
        type=integer,
        default=2,
        help="aux-net epochs of tleg, wave, share_init (default: %(default)s)",
    )
    p.add_argument(
        "--adapt-steps",
        type=integer,
        default=50,
        help="steps of wave's and peg's adaptation per size and seed (default: %(default)s)",
    )


def _add_compare_run(p: argparse.ArgumentParser) -> None:
    """How ``compare`` runs: the shared training settings, time, report folder, plots, logs and device."""
    add_setting(p, "batch_size", "compare", help="every training stage (default: %(default)s)")
    add_setting(p, "lr", "compare")
    add_time_limit(p)
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
    add_stage_runner(p, "compare", device)


def _add_demo(sub) -> None:
    p = _command(
        sub,
        "demo",
        "benching:cmd_demo",
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
    add_data_dir(p, FASHION_MNIST_DIR)
    p.add_argument(
        "--quick", action="store_true", help=f"a much smaller run, to check the pipeline ({QUICK_DEMO_TIME})"
    )
    add_common(p)


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
