"""Benchmark profiles: the sizes and budgets of a run, as data, in one registry (:data:`PROFILES`).

A :class:`Profile` fixes every size and budget of the protocol (ancestry, condensation, descendant
sizes, tasks, seeds); the protocol itself (:mod:`learngene.bench.protocol`) has one code path for all
of them. The registry also holds the image-folder smoke run (:class:`~learngene.bench.smoke.FolderSmoke`),
which runs the CLI's commands instead. Each entry's ``description`` is what ``learngene bench --help`` says.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..errors import LearngeneError
from ..registry import get_method, list_methods
from ..training.config import FINGERPRINT_KEYS, TrainConfig
from ..vit.spec import ViTSpec, get_preset
from .descriptions import PROFILE_DESCRIPTIONS
from .smoke import FolderSmoke


@dataclass(frozen=True)
class Task:
    """A downstream task every descendant is fine-tuned on with the same budget.

    Attributes:
        name: key in tables and file names.
        data: ``fashion_mnist`` or ``digits`` (loaded at the ancestry's image size and channels).
        epochs: fine-tuning epochs (top-1 is measured after each).
        train_images: a fixed random subset of the training split (``None``: all of it).
        shots: labelled images per class instead (the few-shot tasks).
        eval_images: a fixed subset of the test split for accuracy (``None``: all of it).
        new_head: every method gets the same freshly initialized classifier (another label space:
            the gene's Fashion-MNIST head would mean nothing there).
        scratch_factor: scratch is also trained for this many times the epochs (the papers' "same
            accuracy at a fraction of the training" claim); 1 = no such run.
        other_classes: train and test only on the classes of ``data`` that the upstream (ancestry and
            condensation) never saw (the transfer tasks); with ``new_head`` every method gets a fresh head.
        eval_every: evaluate every N epochs (0: after the last only); a ×N scratch run evaluates at every
            multiple of ``epochs``, the points its plot and the "epochs to match" table use.
        batch_size: fine-tuning batch (``None``: the profile's), for tasks with few images.
        max_steps: fine-tune this many optimizer steps instead of ``epochs`` epochs (``None``: epochs); a ×N
            budget is N times as many steps.
        classes: only these classes of ``data`` (indices, relabelled in this order; ``None``: all).
    """

    name: str
    data: str
    epochs: int
    train_images: int | None = None
    shots: int | None = None
    eval_images: int | None = None
    new_head: bool = False
    scratch_factor: int = 1
    other_classes: bool = False
    eval_every: int = 1
    batch_size: int | None = None
    max_steps: int | None = None
    classes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Upstream:
    """What one ancestry is trained on, and how long it and the aux-net condensations train.

    Attributes:
        name: key in tables and file names ("" for a profile's single default upstream).
        classes: the Fashion-MNIST classes the ancestry and the condensation see (``None``: all ten).
        ancestry_epochs: the ancestry's training epochs.
        condense_epochs: epochs of the condensations that train an aux net (TLEG, WAVE, Share-Init).
        methods: only these methods on this upstream (``None``: the profile's); the variants that
            change only the condensation budget need only the methods that train one (plus the
            references, whose cells are shared through the cache).
        converged: this ancestry is meant to be trained to convergence (the report checks its
            evaluation curve for a plateau and says whether it found one).
        ablations: the profile's :class:`Variant` rows run on this upstream.
        sizes: only these of the profile's descendant sizes (``None``: all of them).
    """

    name: str
    classes: tuple[int, ...] | None
    ancestry_epochs: int
    condense_epochs: int
    methods: tuple[str, ...] | None = None
    converged: bool = False
    ablations: bool = False
    sizes: tuple[tuple[int, int, int], ...] | None = None


@dataclass(frozen=True)
class Variant:
    """A row that changes how a method's descendants are made, for the ablations.

    Attributes:
        name: appended to the method's name in tables (e.g. ``+mimetic``).
        methods: the methods it applies to (``None``: every method with stored weights).
        top_up: fill what the gene leaves to timm from this empty-gene method (``mimetic``).
        pos_embed: ``sincos``: 2-D sin-cos position embeddings instead of the gene's or timm's; ``learned``:
            timm's own (random) initialization instead of what the method gives. Trained either way.
        blend_mimetic: α; each head's ``W_q W_kᵀ`` becomes ``α·gene + (1−α)·mimetic``.
        head: ``reuse`` keeps the gene's classifier even on a task with a fresh head (the trap of
            reusing a head trained on other classes); ``None`` follows the task.
        options: the method's expand-time options, as ``(name, value)`` pairs (e.g.
            ``(("untrained_attention", "mimetic"),)``).
        upstreams: the upstreams it runs on, by name (``None``: those with ``ablations=True``).
        distill_lambda: λ; the descendant is fine-tuned with distillation from the ancestry
            (:func:`learngene.training.distill.setup_distillation`: logits on the ancestry's classes, else features).
    """

    name: str
    methods: tuple[str, ...] | None = None
    top_up: str | None = None
    pos_embed: str | None = None
    blend_mimetic: float | None = None
    head: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    upstreams: tuple[str, ...] | None = None
    distill_lambda: float | None = None

    def descendant_options(self) -> dict[str, Any]:
        """The arguments of ``make_descendant`` this variant sets (the method's options among them)."""
        return {
            **{
                k: v
                for k, v in (
                    ("top_up", self.top_up),
                    ("pos_embed", self.pos_embed),
                    ("blend_mimetic", self.blend_mimetic),
                )
                if v is not None
            },
            **dict(self.options),
        }

    def runs_on(self, upstream: Upstream) -> bool:
        return upstream.ablations if self.upstreams is None else upstream.name in self.upstreams


@dataclass(frozen=True)
class Condensing:
    """How a run condenses method ``method``'s gene (what the gene's cache key holds of it)."""

    method: str
    options: dict[str, Any]
    epochs: int
    distill_lambda: float


@dataclass(frozen=True)
class Profile:
    """Sizes and budgets of one benchmark run.

    Attributes:
        name: profile key.
        ancestry: spec of the ancestry trained on Fashion-MNIST.
        ancestry_epochs, ancestry_images: its training budget (``None`` images, the default: the whole train
            split).
        condense_epochs, condense_images: budget (and the upstream data, ``None``: all of it) of methods that
            train or measure a gene; adaptable methods adapt on the same upstream images.
        sizes: descendant sizes as ``(depth, embed_dim, num_heads)``; other fields follow the ancestry.
        tasks: what every descendant is fine-tuned on.
        adapt_steps: optimizer steps of the ``adapt`` stage of adaptable methods (WAVE scalers, PEG φ).
        seeds: descendant seeds (initialization of what the gene does not provide, data order).
        methods: registered methods to run (``None`` = all).
        method_options: per-method ``Config`` overrides, on top of what each method asks for these sizes
            (:meth:`~learngene.method.Method.bench_options`; see :meth:`options_for`).
        condense_lambda: distillation λ of trained condensations, per method, where it should differ
            from the method's paper (``Method.distill_lambda``: TLEG's pure KL, WAVE's KL + CE).
        train: the training settings every stage shares (learning rate, batch size, weight decay, schedule,
            augmentation, ...); what each stage sets for itself (:data:`STAGE_SETTINGS`: its epochs or steps, seed,
            evaluation, distillation λ) comes from the fields above, its upstream and its task, not from here.
        upstreams: several ancestries (class splits, training lengths, condensation budgets), each with
            every method and task; empty: one ancestry on all of Fashion-MNIST with the epochs above.
        upstream_images_per_class: with ``upstreams``, the ancestry and condensation see this many
            training images of each of their classes (``None``: all).
        variants: ablation rows, each a method made another way (see :class:`Variant`).
        description: one line for ``learngene bench --help``.
        ancestry_file: a given ancestry (what ``learngene condense --ancestry`` accepts) instead of stage 1's
            training; ``ancestry`` is then its spec (``learngene compare``).
        ancestry_timm_model: timm architecture of a plain ``ancestry_file`` checkpoint.
        ancestry_drop_head: load ``ancestry_file`` without its classifier (``--drop-head``).
        upstream_data: the dataset the ancestry trains on and condensations and adaptations read.
        references: the labels a recommendation must beat (``learngene compare``; empty: no recommendation).
        left_out: methods asked for that can make none of the sizes, each with why (``learngene compare`` leaves
            them out before condensing anything: :func:`learngene.advice.left_out`).
        method_budgets: each method condenses on the share of the condensation images its class declares
            (:attr:`~learngene.method.Method.demo_budget`) instead of all of them: the demo's short run, which
            compares nothing; False gives every method the same budget.
    """

    name: str
    ancestry: ViTSpec
    ancestry_epochs: int
    ancestry_images: int | None = field(default=None, kw_only=True)
    condense_epochs: int
    condense_images: int | None = field(default=None, kw_only=True)
    sizes: tuple[tuple[int, int, int], ...]
    tasks: tuple[Task, ...]
    adapt_steps: int
    seeds: tuple[int, ...] = (0,)
    methods: tuple[str, ...] | None = None
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    condense_lambda: dict[str, float] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    upstreams: tuple[Upstream, ...] = ()
    upstream_images_per_class: int | None = None
    variants: tuple[Variant, ...] = ()
    description: str = ""
    ancestry_file: str | None = None
    ancestry_timm_model: str | None = None
    ancestry_drop_head: bool = False
    upstream_data: str = "fashion_mnist"
    references: tuple[str, ...] = ()
    method_budgets: bool = False
    left_out: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # the shared settings as every stage runs them: one not given is the training loop's (TrainConfig.resolved)
        object.__setattr__(self, "train", self.train.resolved("bench"))

    def all_upstreams(self) -> tuple[Upstream, ...]:
        return self.upstreams or (Upstream("", None, self.ancestry_epochs, self.condense_epochs),)

    def specs(self) -> list[ViTSpec]:
        """The descendant sizes, in table order."""
        return [self.ancestry.replace(depth=d, embed_dim=w, num_heads=h) for d, w, h in self.sizes]

    def options_for(self, method: str) -> dict[str, Any]:
        """The options ``method`` condenses with: what it asks for this profile's sizes, then ``method_options``."""
        return {**get_method(method).bench_options(self.specs()), **self.method_options.get(method, {})}

    def condensing(self, method: str, epochs: int | None = None) -> Condensing:
        """How ``method`` condenses: with :meth:`options_for`, ``epochs`` (default ``condense_epochs``) and its
        ``condense_lambda`` (default the method's paper's)."""
        lam = self.condense_lambda.get(method, get_method(method).distill_lambda)
        return Condensing(method, self.options_for(method), self.condense_epochs if epochs is None else epochs, lam)

    def replace(self, **changes: Any) -> Profile:
        return dataclasses.replace(self, **changes)

    def condense_share(self, method: str) -> float:
        """The share of the condensation images ``method`` condenses on: 1, or with ``method_budgets`` the
        ``demo_budget`` its class declares (a number in (0, 1], else a one-line error naming the method)."""
        if not self.method_budgets:
            return 1.0
        share = get_method(method).demo_budget
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise LearngeneError(
                f"method {method} declares demo_budget={share!r}; it must be a number in (0, 1] (the share of the "
                f"demo's condensation images it condenses on): fix the method's class"
            )
        return float(share)

    def stage_config(self, **stage: Any) -> TrainConfig:
        """A stage's training settings: the profile's shared ones (``train``), then what the ``stage`` sets."""
        return TrainConfig(**{**shared_settings(self.train), **stage})

    def training_key(self) -> dict[str, Any]:
        """The shared settings every stage's cache key holds: the learning rate and batch size, and each other one that
        changes the result where it differs from TrainConfig's default (so the keys of runs that could not set it stay
        valid)."""
        shared, default = shared_settings(self.train), shared_settings(TrainConfig().resolved("bench"))
        changed = {k: v for k, v in shared.items() if k in FINGERPRINT_KEYS and v != default[k]}
        return {"batch_size": self.train.batch_size, "lr": self.train.lr, **changed}

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain values (``profile.json``, the workers' fingerprint), with :meth:`training_key` in the
        place of ``train``: the batch size and learning rate where they were before ``train`` held them."""
        values: dict[str, Any] = {}
        for name, value in dataclasses.asdict(self).items():
            values.update(self.training_key() if name == "train" else {name: value})
        return values


# what each stage of the protocol sets for itself (its budget, seed, evaluation, distillation, progress and logs, and
# the device it runs on): a profile's ``train`` gives every other setting to every stage
STAGE_SETTINGS = (
    "epochs",
    "max_steps",
    "seed",
    "distill_lambda",
    "eval_every",
    "eval_images",
    "checkpoint_every",
    "progress",
    "desc",
    "device",
    "log",
    "log_dir",
    "identity",
)


def shared_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The settings of ``cfg`` that a profile gives every stage (all but :data:`STAGE_SETTINGS`)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in STAGE_SETTINGS}


def grid(depths: tuple[int, ...], widths: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int, int], ...]:
    """Every depth at every ``(embed_dim, num_heads)`` width."""
    return tuple((d, w, h) for w, h in widths for d in depths)


_TINY = get_preset("cpu_tiny")
# the transfer runs: 7-px patches (16 tokens) make every stage ~3x cheaper than cpu_tiny's 4-px ones
_TRANSFER_ANCESTRY = _TINY.replace(patch_size=7)
SPLIT_A = (0, 1, 2, 3, 4)  # T-shirt/top, Trouser, Pullover, Dress, Coat -> Sandal, Shirt, Sneaker, Bag, Ankle boot
SPLIT_B = (0, 2, 4, 6, 8)  # T-shirt/top, Pullover, Coat, Shirt, Bag -> Trouser, Dress, Sandal, Sneaker, Ankle boot
# every method, except those that at the ancestry's own width (the only width of the transfer runs) make the very
# descendants of another (weight_selection: pretrained's); references first
TRANSFER_METHODS = (
    "scratch",
    "mimetic",
    *(m for m in list_methods() if m not in ("scratch", "mimetic") and get_method(m).same_as_at_ancestry_width is None),
)
_CPU_ANCESTRY = get_preset("cpu_tiny").replace(depth=6)  # L6-D64-H4, 16-dim heads


def _registry(*profiles: Profile | FolderSmoke) -> dict[str, Profile | FolderSmoke]:
    """Each profile under its name, with its line of :data:`PROFILE_DESCRIPTIONS` (which ``--help`` reads without
    torch) as its description."""
    return {p.name: dataclasses.replace(p, description=PROFILE_DESCRIPTIONS[p.name]) for p in profiles}


PROFILES = _registry(
    # within ten minutes on a 2-core CPU: tests/test_demo.py bounds its planned work. In batches of 64
    # (about the cost per image of 128s, one thread), condensation and adaptation take as many steps as 128s did on
    # twice the images (158 and 60: with 79 the aux nets fell below mimetic), the ancestry twice the steps on the
    # same images; fine-tunes are 47 steps on 3,000 images (63 on 8,000 before); methods condense on their shares.
    # Depths 2 and 4: with a depth-6 column too, `make demo` took 10 min 32 s on the idle machine (that column's train
    # and adapt seconds in results.csv: 133 s), and without it the other columns are the same cells, so the table
    # ranks the same (fewer fine-tune images instead, 2,000, moved mimetic and structured 3-4 places down)
    Profile(
        name="demo",
        ancestry=_TINY,
        ancestry_epochs=3,
        ancestry_images=20_000,
        condense_epochs=2,
        condense_images=5_000,
        sizes=grid((2, 4), ((64, 4),)),
        tasks=(Task("fashion_mnist", "fashion_mnist", epochs=1, train_images=3_000, eval_images=2_000),),
        adapt_steps=60,
        train=TrainConfig(batch_size=64),
        method_budgets=True,
    ),
    Profile(
        name="quick",
        ancestry=_TINY.replace(depth=2, embed_dim=32, num_heads=2),
        ancestry_epochs=1,
        ancestry_images=1_000,
        condense_epochs=1,
        condense_images=500,
        sizes=((1, 32, 2), (3, 32, 2), (2, 16, 1)),
        tasks=(
            Task("fashion_mnist", "fashion_mnist", epochs=1, train_images=300, eval_images=300, scratch_factor=2),
            Task("digits", "digits", epochs=1, train_images=200, eval_images=200, new_head=True),
            Task("fashion_mnist_5shot", "fashion_mnist", epochs=1, shots=5, eval_images=300),
        ),
        adapt_steps=3,
        method_budgets=True,
    ),
    # sized from the measured throughputs, see docs/RESULTS.md
    Profile(
        name="cpu",
        ancestry=_CPU_ANCESTRY,
        # condensation gets half the ancestry's training (2 of its 4 epochs): with 2 epochs on 10k images
        # (158 steps) the aux nets reached only 50-56 % against the ancestry's 83 %
        ancestry_epochs=4,
        condense_epochs=2,
        sizes=grid((2, 4, 6), ((64, 4),)) + grid((2, 6), ((32, 2),)),
        tasks=(
            Task("fashion_mnist", "fashion_mnist", epochs=3, train_images=2_000, eval_images=1_000, scratch_factor=10),
            Task("digits", "digits", epochs=3, new_head=True),
            Task("fashion_mnist_20shot", "fashion_mnist", epochs=5, shots=20, eval_images=1_000),
        ),
        adapt_steps=50,
        seeds=(0, 1, 2),
    ),
    Profile(
        name="transfer",
        ancestry=_TRANSFER_ANCESTRY,
        ancestry_epochs=2,
        condense_epochs=2,
        sizes=((2, 64, 4), (4, 64, 4)),
        tasks=(
            Task(
                "other5_20shot",
                "fashion_mnist",
                epochs=5,
                shots=20,
                eval_images=300,
                new_head=True,
                scratch_factor=10,
                other_classes=True,
                eval_every=0,
                batch_size=25,
            ),
        ),
        adapt_steps=5,
        seeds=(0, 1, 2, 3, 4),  # 20-step fine-tunes vary a lot between seeds: five give the paired marks a chance
        methods=TRANSFER_METHODS,
        train=TrainConfig(batch_size=64),
        upstream_images_per_class=1000,
        # in order of importance: a run cut short by its time limit has the first ones. "converged": 30 epochs,
        # checked in the report (the best of the last 3 epochs within 0.5 points of the best before them)
        upstreams=(
            Upstream("A-short", SPLIT_A, ancestry_epochs=2, condense_epochs=2),
            # the ablations: the A-short cells again (from the cache) beside each ablation, at the smaller size
            Upstream(
                "A-short-ablations", SPLIT_A, ancestry_epochs=2, condense_epochs=2, ablations=True, sizes=((2, 64, 4),)
            ),
            Upstream("A-converged", SPLIT_A, ancestry_epochs=30, condense_epochs=2, converged=True),
            Upstream("B-short", SPLIT_B, ancestry_epochs=2, condense_epochs=2),
            Upstream(
                "A-converged-long-condense",
                SPLIT_A,
                ancestry_epochs=30,
                condense_epochs=8,
                converged=True,
                methods=("scratch", "mimetic", *list_methods(aux_net=True)),
            ),
            Upstream("B-converged", SPLIT_B, ancestry_epochs=30, condense_epochs=2, converged=True),
        ),
        variants=(
            Variant("+mimetic", top_up="mimetic"),  # every stored-weight method; a no-op is recorded as such
            Variant("+sincos", methods=("scratch", "pretrained", "tleg", "wave"), pos_embed="sincos"),
            Variant("learned-pos", methods=("mimetic",), pos_embed="learned"),
            Variant("blend0.5", methods=("pretrained", "share_init", "tleg", "wave"), blend_mimetic=0.5),
            Variant("head-reuse", methods=("pretrained", "tleg"), head="reuse"),
            # the fix for the short ancestries' loss to mimetic (docs/RESULTS.md): mimetic's attention and sin-cos
            # positions where the ancestry's attention is untrained; n/a (changes nothing) on the converged ones
            Variant(
                "+mimetic-if-untrained",
                methods=("pretrained", "auto_lg", "heru_lg"),
                options=(("untrained_attention", "mimetic"),),
                upstreams=("A-short", "B-short", "A-converged", "B-converged"),
            ),
        ),
    ),
    Profile(
        name="gpu",
        ancestry=ViTSpec(depth=12, embed_dim=384, num_heads=6, img_size=28, patch_size=4, in_chans=1, num_classes=10),
        ancestry_epochs=30,
        condense_epochs=10,
        sizes=grid((3, 6, 12), ((384, 6), (192, 3))),
        tasks=(
            Task("fashion_mnist", "fashion_mnist", epochs=2, train_images=None, scratch_factor=10),
            Task("digits", "digits", epochs=20, new_head=True),
            Task("fashion_mnist_20shot", "fashion_mnist", epochs=20, shots=20),
        ),
        adapt_steps=300,
        seeds=(0, 1, 2),
        train=TrainConfig(batch_size=256),
    ),
    FolderSmoke("gpu-smoke"),
)


def get_profile(name: str) -> Profile | FolderSmoke:
    try:
        return PROFILES[name]
    except KeyError:
        raise LearngeneError(f"unknown benchmark profile {name!r}; choose one of {', '.join(PROFILES)}") from None
