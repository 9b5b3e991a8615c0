"""The training settings, each declared once: a field of :class:`TrainConfig` with its metadata.

A field made with :func:`training_field` (the one helper of every setting, :func:`learngene.settings.field`, with a
training setting's defaults) says everything about itself: its help line, its command-line flag (and
the flag's group, metavar, what 0 or "not given" mean there), its range (checked by
:func:`~learngene.validate.refusal` for Python callers and flags alike), and its ``kind``: whether it
changes the result (``result``: part of the run fingerprint, so a resumed run must agree), only the speed
(``speed``: the same math up to float rounding), or only what is measured and shown (``report``). The
command-line flags (:mod:`learngene.cli.parser`), the validation (:meth:`TrainConfig.__post_init__`) and the
fingerprint's list (:data:`FINGERPRINT_KEYS`, :mod:`learngene.training.checkpoint`) are generated from it.

Torch-free, so that ``learngene --help`` builds its flags from here without importing torch.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ..errors import LearngeneError, assigned, named
from ..settings import SEED, field
from ..validate import refusal

Kind = Literal["result", "speed", "report"]
RESULT: Kind = "result"
SPEED: Kind = "speed"
REPORT: Kind = "report"
# the flag groups of the parser (learngene.cli.flags.add_settings)
TRAINING, SPEED_GROUP, DISTILL, COMMON, LOGGING = "training", "speed", "distill", "common", "logging"
# where a run's curves can also go (learngene.training.loggers), and the optional extra that brings each
Logger = Literal["tensorboard", "wandb"]
# The most a count of the run may be: far past any run or dataset, so that only a typo or a runaway script meets them,
# refused in one line before it starts what no machine finishes (as a spec's sizes are, learngene.vit.spec)
MAX_EPOCHS = 1_000_000  # DeiT trains 300, the longest recipes a few thousand
MAX_STEPS = 10**10  # a step a millisecond for four months
MAX_IMAGES = 10**10  # more images than any dataset holds (LAION-5B: 5.85 x 10^9)
LOGGER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def training_field(
    default: Any = dataclasses.MISSING, *, help: str, kind: Kind = RESULT, group: str = TRAINING, **declared: Any
) -> Any:
    """A training setting: :func:`learngene.settings.field` (see there: ``flag``, ``label``, ``metavar``,
    ``none_means``, ``zero_means_none``, ``fix``, the range) with a ``help`` line required, ``kind`` (result / speed
    / report) and the flag's ``group`` (:data:`TRAINING` by default)."""
    return field(default, help=help, kind=kind, group=group, **declared)


def distillation_field(default: float | None, term: str, symbol: str, **declared: Any) -> Any:
    """A term of the distillation loss ``(1−λ)·CE + λ·τ²·KL``: its flag ``--distill-TERM`` in the distillation group,
    its messages naming it by its ``symbol`` (``distillation λ``)."""
    return training_field(default, flag=f"--distill-{term}", group=DISTILL, label=f"distillation {symbol}", **declared)


def report_count(default: int | None, **declared: Any) -> Any:
    """A count N of how often or on how much the run reports (checkpoints, evaluations): a flag with metavar ``N``,
    of the ``report`` kind (it changes what is kept and shown, never the result)."""
    return training_field(default, metavar="N", kind=REPORT, **declared)


@dataclass
class TrainConfig:
    """Everything that decides a training run (the ``result`` settings must match when resuming)."""

    # the settings whose default depends on the use case (USE_CASE_DEFAULTS) default to None, "not given": the use
    # case resolves them (resolved), so that a TrainConfig, a dict and the flags give a run the same settings
    epochs: int | None = training_field(
        None, flag="--epochs", at_most=MAX_EPOCHS, none_means="the use case's", help="passes over the training data"
    )
    batch_size: int | None = training_field(
        None,
        flag="--batch-size",
        above=0,
        at_most=MAX_IMAGES,
        none_means="the use case's",
        help="global batch size",
    )
    lr: float = training_field(
        1e-3,
        flag="--lr",
        above=0,
        label="learning rate",
        fix=f"pass e.g. {assigned('lr', 0.001)}",
        help="peak AdamW learning rate",
    )
    min_lr: float = training_field(1e-5, at_least=0, help="the cosine schedule's final learning rate")
    weight_decay: float = training_field(0.05, flag="--weight-decay", at_least=0, help="AdamW weight decay, 0 or more")
    warmup_epochs: float = training_field(
        1.0, flag="--warmup-epochs", at_least=0, help="linear warmup, at most a fifth of the run"
    )
    max_steps: int | None = training_field(
        None,
        flag="--max-steps",
        metavar="N",
        at_least=1,
        at_most=MAX_STEPS,
        help="stop after N optimizer steps (e.g. WAVE's scaler step)",
    )
    grad_clip: float | None = training_field(
        1.0,
        flag="--grad-clip",
        above=0,
        zero_means_none=True,
        label="gradient clipping",
        fix=f"pass {assigned('grad_clip', None, 0)} for no clipping, or a positive maximum norm",
        help="max gradient norm, 0 = off",
    )
    label_smoothing: float = training_field(
        0.0,
        flag="--label-smoothing",
        at_least=0,
        below=1,
        fix="pass a number from 0 (off) to below 1, e.g. 0.1",
        help="label smoothing in [0, 1)",
    )
    distill_lambda: float | None = distillation_field(
        None,
        "lambda",
        "λ",
        at_least=0,
        at_most=1,
        fix="pass a number from 0 (plain CE) to 1 (pure distillation)",
        none_means="the use case's: a condensing method's own, 0.5 with a teacher, else 0",
        help="λ in [0, 1]: 0 = plain CE; 1 = pure distillation",
    )
    distill_tau: float = distillation_field(
        1.0, "tau", "τ", above=0, fix=f"pass e.g. {assigned('distill_tau', 1.0)}", help="τ, positive"
    )
    augment: bool = training_field(False, flag="--augment", help="random flips and 2-pixel shifts")
    mixup: bool | None = training_field(
        None,
        none_means="on with DeiT's augmentation (DataRequest(aug='deit'), --aug deit), else off",
        help="DeiT's mixup/cutmix with soft targets (data.BatchMixer; --aug deit); needs an even share per rank",
    )
    seed: int = training_field(0, group=COMMON, **SEED)
    device: str = training_field("auto", flag="--device", group=COMMON, kind=SPEED, help="auto, cpu, cuda or cuda:N")
    eval_batch_size: int = training_field(
        512, kind=SPEED, above=0, at_most=MAX_IMAGES, help="images per evaluation batch"
    )
    checkpoint_every: int = report_count(
        0,
        flag="--checkpoint-every",
        at_least=0,
        at_most=MAX_STEPS,
        label="checkpoint interval",
        none_means="auto, once per epoch",
        help="also checkpoint every N steps inside an epoch (0: at the end of each epoch only)",
    )
    eval_every: int = report_count(
        1,
        flag="--eval-every",
        at_least=0,
        at_most=MAX_EPOCHS,
        help="evaluate every N epochs and after the last; 0 = after the last only",
    )
    eval_images: int | None = report_count(
        None,
        flag="--eval-images",
        at_least=0,
        at_most=MAX_IMAGES,
        none_means="the use case's, else all of them",
        help="evaluate on a fixed random subset of N test images, 0 = on all of them",
    )
    progress: bool = training_field(
        True, kind=REPORT, help="progress bars on a terminal (the CLI's --quiet turns them off)"
    )
    desc: str = training_field("train", kind=REPORT, help="what progress bars and logs call the run")
    compile: bool = training_field(
        False,
        flag="--compile",
        group=SPEED_GROUP,
        kind=SPEED,
        help="torch.compile the model (an aux net: its expand and forward together); the first steps compile",
    )
    fused_adamw: bool | None = training_field(
        None,
        flag="--fused-adamw",
        group=SPEED_GROUP,
        kind=SPEED,
        none_means="auto, on CUDA only",
        help="AdamW's fused kernel",
    )
    sdpa: bool = training_field(
        True,
        flag="--sdpa",
        group=SPEED_GROUP,
        kind=SPEED,
        help="attention through torch's scaled_dot_product_attention, flash kernels on CUDA "
        "(--no-sdpa: timm's eager attention)",
    )
    log: tuple[Logger, ...] = training_field(
        (),
        flag="--log",
        group=LOGGING,
        kind=REPORT,
        help="also log loss, accuracy, learning rate and throughput per step and evaluation, and the settings, to "
        "TensorBoard (RUN_DIR/tensorboard) or Weights & Biases (RUN_DIR/wandb; offline without network or login); "
        "repeatable; needs --run-dir",
    )
    log_dir: str | None = training_field(
        None,
        kind=REPORT,
        help="where --log's loggers write (default: the run directory, so a resumed run continues its curves)",
    )
    # what else decides the result that the loop cannot see (the command, method and options, a digest of the
    # input weights): part of the run's fingerprint (see run_fingerprint), set by the caller
    identity: dict[str, Any] = training_field(
        kind=RESULT, default_factory=dict, help="what else decides the result (command, method, input digests)"
    )

    def __post_init__(self) -> None:
        bad = refusal(self)
        if bad is not None and bad.of_type:
            raise LearngeneError(
                f"training setting {bad.named} must be {bad.wanted}, got {bad.value!r}; pass a value of that kind "
                "(help(learngene.TrainConfig) lists each setting's; learngene COMMAND --help each flag's)"
            )
        if bad is not None:
            fix = bad.field.metadata.get("fix") or f"pass {bad.expected}"
            raise LearngeneError(f"{bad.named} must be {bad.wanted}, got {bad.value}; {fix}")
        twice = next((name for i, name in enumerate(self.log) if name in self.log[:i]), None)
        if twice is not None:  # the one rule for repeats (learngene.validate.refuse_repeat): refused, not merged
            raise LearngeneError(f"{named('log')} names {twice} twice; give each once")
        for name in self.log:
            if importlib.util.find_spec(LOGGER_PACKAGES[name]) is None:
                raise LearngeneError(
                    f"logging to {name} needs the {LOGGER_PACKAGES[name]} package; install it with "
                    f"pip install 'learngene-vit[{name}]'"
                )
        if self.epochs is not None and self.epochs < 1 and not self.max_steps:  # a run of max_steps needs no epochs
            raise LearngeneError(
                f"epochs (--epochs) must be at least 1, got {self.epochs}; pass {assigned('epochs', 1)} or more"
            )

    def evaluates_after(self, epoch: int, epochs: int) -> bool:
        """Whether the run evaluates after (1-based) ``epoch`` of ``epochs``."""
        return epoch == epochs or (self.eval_every > 0 and epoch % self.eval_every == 0)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` applied, checked as a new config is."""
        return dataclasses.replace(self, **changes)

    def resolved(self, use_case: str = "training", **defaults: Any) -> TrainConfig:
        """These settings as ``use_case`` runs them: each one not given (None) takes ``defaults`` (what only the caller
        knows: a method's distillation λ, mixup with DeiT's augmentation), else the use case's
        (:data:`USE_CASE_DEFAULTS`), else the training loop's; the settings given stay as they are. Resolving twice
        changes nothing."""
        fallback = {**USE_CASE_DEFAULTS["training"], **USE_CASE_DEFAULTS[use_case], **defaults}
        missing = {k: v for k, v in fallback.items() if getattr(self, k) is None and v is not None}
        return self.replace(**missing) if missing else self


# the settings a checkpoint and the run resuming it must agree on (with run_fingerprint's others): those that change
# the result, in declaration order (a fingerprint written before this list was generated has the same keys)
FINGERPRINT_KEYS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(TrainConfig) if f.metadata["kind"] == RESULT and f.name != "identity"
)


T = TypeVar("T")


def known(value: T | None) -> T:
    """A setting of a resolved TrainConfig (:meth:`TrainConfig.resolved`), which is never None: None here means code
    read the settings before resolving them, a bug, not the user's input."""
    if value is None:
        raise TypeError("a TrainConfig setting was read before TrainConfig.resolved gave it its use case's default")
    return value


def flagged_settings(group: str) -> list[dataclasses.Field]:
    """The settings with a command-line flag in ``group`` (:data:`TRAINING`, :data:`SPEED_GROUP`, ...)."""
    return [f for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag") and f.metadata["group"] == group]


def from_flags(values: dict[str, Any], **others: Any) -> TrainConfig:
    """A TrainConfig from parsed flag values (by field name; absent ones and flags not given keep the setting's
    default); a flag's 0 is None for a ``zero_means_none`` setting. ``others``: settings without a flag."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(TrainConfig):
        if not f.metadata.get("flag") or f.name not in values:
            continue
        value = values[f.name]
        if value is None:  # not given: the setting's default (what its none_means says)
            continue
        if f.metadata.get("zero_means_none") and value == 0:
            value = None
        kwargs[f.name] = tuple(value) if isinstance(value, list) else value  # a repeatable flag's values
    return TrainConfig(**{**kwargs, **others})


# the command line's default test subset: top-1 of a 2,000-image sample has a standard error under 1.2 points
# (binomial, at most sqrt(0.25 / 2000)), at a fifth of the cost of evaluating Fashion-MNIST's 10,000 after every epoch
EVAL_IMAGES = 2000
# what each use case runs with unless told otherwise (TrainConfig.resolved): the command line's flags show them
# (learngene.cli.flags) and the pipeline's use cases resolve every TrainConfig and dict of settings with them
# (learngene.pipeline.inputs.train_config), so that a Python call trains as the command does
USE_CASE_DEFAULTS: dict[str, dict[str, Any]] = {
    # the training loop's own (learngene.training.train), under every use case's: each setting a use case may resolve
    # (eval_images: not given is every test image, as 0 is)
    "training": {"epochs": 10, "batch_size": 128, "distill_lambda": 0.0, "mixup": False},
    "ancestry": {"eval_images": EVAL_IMAGES},
    "condense": {"eval_images": EVAL_IMAGES},
    "adapt": {"epochs": 1, "eval_images": EVAL_IMAGES},
    "train": {"epochs": 5, "eval_images": EVAL_IMAGES},
    # the fine-tuning of every method, size and seed, and the batch of every stage (learngene.comparison)
    "compare": {"epochs": 5, "batch_size": 64},
    # each stage's budget is its profile's, and the settings the stages share its ``train`` (learngene.bench.profiles)
    "bench": {},
}
