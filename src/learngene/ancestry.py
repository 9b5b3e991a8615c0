"""Loading the ancestry: our own saved models, a timm checkpoint, a timm / transformers model folder, or such a model
by name on the Hugging Face Hub (``hf-hub:ORG/NAME[@REVISION]``, ``timm:NAME[.TAG]``).

timm models are created with ``pretrained=False`` and the weights come from the given file, read through
safetensors or ``torch.load(weights_only=True)``; a Hub name is first resolved to files in the Hugging Face cache
(:mod:`learngene.formats.hub`, which fetches them there when they are missing and the Hub is reachable). Folders are read
by :mod:`learngene.formats.convert` (timm hub layout, or a transformers ViT / DeiT / DINOv2 converted to
timm's keys). Every state_dict goes through the ``checkpoint_filter_fn`` of the architecture's own
timm module (it converts other layouts and resamples position embeddings to the requested image
size); a classifier of another size is dropped.

Big ancestries cost one copy of their weights at most: files are memory-mapped (pages are read as
they are used), and the model is built on the meta device and takes the mapped tensors as its
parameters (``load_state_dict(assign=True)``) instead of allocating and then overwriting its own. The
NaN check reads every page once and gives it back (:func:`learngene.host.memory.release_pages`), so what stays
resident is what a method reads. The one copy made, an unfused Eva's q/k/v fused (0.28 GiB at EVA-02 L), is
kept in a temporary file's map (:func:`learngene.host.memory.tensors_in_temporary_file`), whose pages can go the same way.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import math
import os
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from .errors import LearngeneError, SpecError, first_line, held_warnings, require_argument
from .formats.convert import is_model_folder, read_checkpoint, without_head
from .formats.hub import fetch_model, is_hub_name, looks_like_repo_id
from .formats.licenses import check_license
from .formats.model_file import load_model_file
from .formats.weights import StateDict
from .host.memory import release_pages, require_free_memory, tensors_in_temporary_file
from .method import Ancestry
from .validate import limits_of, out_of_range
from .vit.eva import EVA_MODULE, fuse_qkv_projections, has_unfused_qkv
from .vit.model_spec import spec_from_model
from .vit.spec import ViTSpec

# timm.create_model's sizes, held to the ranges a ViTSpec declares for them (the local spec's limits): a model's config,
# a Hub repo's as a folder's, or the caller's arguments; timm would build a model of none, fail deep inside, or try
# to allocate what no machine has
SIZE_ARGUMENTS = ("depth", "embed_dim", "num_heads", "mlp_ratio", "img_size", "patch_size", "in_chans", "num_classes")


def _check_sizes(model_kwargs: dict[str, Any], where: str = "") -> None:
    """The sizes among ``model_kwargs`` are numbers in the ranges :class:`ViTSpec` declares (whole numbers but
    ``mlp_ratio``; ``img_size`` may also be a (height, width) pair); ``where`` names the config they come from."""
    fields = {f.name: f for f in dataclasses.fields(ViTSpec)}
    for name in SIZE_ARGUMENTS:
        value = model_kwargs.get(name)
        if value is None:
            continue
        values = value if name == "img_size" and isinstance(value, (tuple, list)) and len(value) == 2 else [value]
        kind = (int, float) if name == "mlp_ratio" else int
        limits = limits_of(fields[name])
        if not all(isinstance(v, kind) and not isinstance(v, bool) and not out_of_range(v, limits) for v in values):
            lo, hi = limits.get("at_least", limits.get("above")), limits["at_most"]
            what = "a number above" if "above" in limits else "a whole number from"
            raise LearngeneError(
                f"{where}{name} must be {what} {lo:g} to {hi:,}, got {value!r}; "
                + ("check the model's config" if where else "give a size in that range")
            )


def _require_model_memory(model: nn.Module, state: StateDict, source: str, name: str) -> None:
    """Refuse in one line, before anything is allocated, a model (``model``: built on the meta device) whose tensors
    that ``state`` does not hold at their shape (a fresh classifier, a resampled position table) exceed the free
    memory: 4 bytes a parameter, as a spec's own sizes are checked (:meth:`ViTSpec.require_memory`)."""
    given = {k: v.shape for k, v in state.items()}
    need = sum(t.numel() * t.element_size() for k, t in model.state_dict().items() if given.get(k) != t.shape)
    require_free_memory(
        need,
        f"timm {name} as {source} and the arguments size it",
        "check the sizes in the model's config (num_classes, img_size, depth, width) or the arguments",
    )


def load_ancestry(
    path: str | os.PathLike, timm_model: str | None = None, drop_head: bool = False, **model_kwargs: Any
) -> Ancestry:
    """Load an ancestry.

    Args:
        path: a model saved by learngene (``learngene ancestry``/``expand``/``train``); with
            ``timm_model``, a timm checkpoint (``.safetensors``, ``.pth``, ``.bin``); or a folder with a
            ``config.json``: a timm hub folder or a transformers ViT / DeiT / DINOv2 (``timm_model``
            is read from it, and overrides it when given); or such a model on the Hugging Face Hub by name,
            ``"hf-hub:ORG/NAME[@REVISION]"``, or a timm pretrained tag, ``"timm:NAME[.TAG]"`` (read from the
            Hugging Face cache, fetched there when missing: :mod:`learngene.formats.hub`; ``ancestry.source`` records
            the repo and revision). A folder's or model file's licence is read (:mod:`learngene.formats.licenses`);
            a bare checkpoint records none.
        timm_model: timm architecture name, e.g. ``"deit_tiny_patch16_224"``.
        drop_head: load a folder's model without its classifier: the ancestry outputs its pooled embedding
            (the way to load a transformers classifier timm's ViT cannot express, e.g. DINOv2's).
        **model_kwargs: passed to ``timm.create_model`` (e.g. ``num_classes``, ``img_size``, ``in_chans``).

    The ancestry records what its inputs expect (``Ancestry.preprocessing``, :func:`ancestry_preprocessing`).
    """
    return _loaded_ancestry(path, timm_model, drop_head, None, model_kwargs)


def _loaded_ancestry(
    path: str | os.PathLike,
    timm_model: str | None,
    drop_head: bool,
    recorded_size: int | None,
    model_kwargs: dict[str, Any],
) -> Ancestry:
    """:func:`load_ancestry`'s work; ``recorded_size``: the input size a checkpoint's source records outside the file
    (a ``timm:`` tag's pretrained config), for a model whose weights do not show it."""
    with held_warnings():  # a library's note on a file that then fails (torch's pickle protocol): unsaid
        ancestry = _read_ancestry(path, timm_model, drop_head, recorded_size, **model_kwargs)
    ancestry.preprocessing = ancestry_preprocessing(path, timm_model, ancestry)
    return ancestry


def _read_ancestry(
    path: str | os.PathLike,
    timm_model: str | None,
    drop_head: bool,
    recorded_size: int | None = None,
    **model_kwargs: Any,
) -> Ancestry:
    require_argument(path, (str, os.PathLike), "path", "a file or folder path")
    if timm_model is not None:
        require_argument(timm_model, str, "timm_model", "a timm architecture name or None")
    require_argument(drop_head, bool, "drop_head", "True or False")
    _check_sizes(model_kwargs)
    check_architecture_arguments(None, model_kwargs)  # before any file is read: a loading key is the caller's mistake
    if is_hub_name(path):
        return _load_hub_ancestry(str(path), timm_model, drop_head, **model_kwargs)
    if looks_like_repo_id(path):
        raise LearngeneError(f"{path} is no file or folder here; for the Hugging Face Hub repo, write hf-hub:{path}")
    license = None  # a bare checkpoint file records none
    if is_model_folder(path):
        model, license = _folder_model(path, timm_model, drop_head, model_kwargs)
    elif timm_model is None:
        return _model_file_ancestry(path, drop_head, model_kwargs)
    else:
        model = _checkpoint_model(path, timm_model, drop_head, model_kwargs, recorded_size)
    try:
        return Ancestry(model.eval(), spec_from_model(model), license=license)
    except SpecError as exc:
        # a non-ViT (or exotic ViT) can still be a teacher
        return Ancestry(model.eval(), None, unsupported=str(exc), license=license)


def _folder_model(
    path: str | os.PathLike, timm_model: str | None, drop_head: bool, model_kwargs: dict[str, Any]
) -> tuple[nn.Module, str | None]:
    """The model of a timm hub or transformers folder (its architecture from config.json unless ``timm_model``
    names it), with the folder's preprocessing, and the licence it records."""
    ckpt = read_checkpoint(path, drop_head=drop_head)  # checked for NaN as it is read
    _check_sizes(ckpt.kwargs, f"{Path(path) / 'config.json'}: ")
    arch = _require_timm_name(timm_model or ckpt.arch)
    model = build_timm_model(arch, {**ckpt.kwargs, **model_kwargs}, ckpt.state, str(path))
    vit: Any = model  # a timm model, whose pretrained_cfg the folder's own preprocessing updates
    vit.pretrained_cfg = {**vit.pretrained_cfg, **ckpt.pretrained_cfg}
    return model, ckpt.license


def _model_file_ancestry(path: str | os.PathLike, drop_head: bool, model_kwargs: dict[str, Any]) -> Ancestry:
    """The ancestry in a learngene model file, which records its sizes, label space and licence (its tensors are
    read when the model first needs them)."""
    if Path(path).is_dir():
        raise LearngeneError(
            f"{path} is a folder without config.json; give a timm hub or transformers model "
            f"folder, or a checkpoint file"
        )
    if drop_head:
        raise LearngeneError(
            f"drop_head (--drop-head) applies to model folders and timm checkpoints; {path} is a learngene "
            f"model file, whose head a descendant replaces with num_classes (--num-classes)"
        )
    if model_kwargs:  # they would be dropped without a word: the file's spec gives every size
        raise LearngeneError(
            f"{', '.join(model_kwargs)} apply to timm checkpoints and model folders; {path} is a learngene "
            f"model file, which records its sizes: leave them out (a descendant's sizes are expand's)"
        )
    state, spec, origin = load_model_file(path, lazy=True)
    license = origin.get("license")
    return Ancestry(
        build_model_lazily(lambda **kw: spec.create_model(**kw), state, str(path)).eval(),
        spec,
        origin.get("label_space"),
        license=check_license(license, f"the licence recorded in {path}") if license else None,
    )


def _checkpoint_model(
    path: str | os.PathLike,
    timm_model: str,
    drop_head: bool,
    model_kwargs: dict[str, Any],
    recorded_size: int | None = None,
) -> nn.Module:
    """The timm model ``timm_model`` of a plain checkpoint file, its sizes read from the checkpoint where not given
    (its input size too: :func:`checkpoint_img_size`)."""
    _require_timm_name(timm_model)
    # read (and checked for NaN) before building the model: a bad file fails in a moment, not after a big init
    state = read_checkpoint(path).state
    if drop_head:
        state = without_head(state, ("head.", "head_dist."), str(path))
        model_kwargs["num_classes"] = 0
    model_kwargs = _sizes_from_checkpoint(timm_model, model_kwargs, state)
    if "img_size" not in model_kwargs:
        size = checkpoint_img_size(timm_model, model_kwargs, state, path, recorded_size)
        model_kwargs = model_kwargs if size is None else {**model_kwargs, "img_size": size}
    return build_timm_model(timm_model, model_kwargs, state, str(path))


def checkpoint_img_size(
    arch: str, kwargs: dict[str, Any], state: StateDict, path: str | os.PathLike, recorded: int | None = None
) -> int | None:
    """The input size a plain checkpoint of the patch ViT ``arch`` was trained at, read, never taken from ``arch``'s
    default (a DINOv3 trained at 64 px was recorded at timm's 256 px, and its FLOPs and budgets with it): its position table's grid
    times its patch size; else ``recorded`` (a ``timm:`` tag's) or the spec a learngene file's header records. A
    ViT without a position table (RoPE: positions are computed for whatever grid it is built at) and no record is
    refused in one line naming img_size; None for a model that is no patch ViT (a CNN teacher takes any size)."""
    meta: Any = _timm_model(arch, {**kwargs, "device": "meta"})  # sizes only: nothing allocated
    embed: Any = getattr(meta, "patch_embed", None)
    grid = getattr(embed, "grid_size", None)
    if grid is None:
        return None
    table = getattr(meta, "pos_embed", None)
    if table is not None and table.ndim == 3 and state.get("pos_embed") is not None:
        return _size_of_table(state, table.shape[1] - grid[0] * grid[1], embed.patch_size, path)
    recorded = recorded or _header_img_size(path)
    if recorded is not None or table is not None:  # a table the checkpoint lacks: the key check names it
        return recorded
    raise LearngeneError(
        f"{path}: timm {arch} has no position table to read its input size from (its positions are computed for any "
        f"grid, RoPE) and the checkpoint records none; give the size it was trained at, img_size=N (--img-size N)"
    )


def _size_of_table(state: StateDict, prefix: int, patch: tuple[int, int], path: str | os.PathLike) -> int | None:
    """The image side a checkpoint's ``pos_embed`` (``prefix`` class/register rows, then a square grid) was made for:
    the grid's side times the patch size its ``patch_embed.proj`` kernel shows (else the model's); None for a table
    of another layout (the architecture's checkpoint filter reads it)."""
    table = state["pos_embed"]
    if table.ndim != 3:
        return None
    side = math.isqrt(max(table.shape[1] - prefix, 0))
    if side == 0 or side * side != table.shape[1] - prefix:
        raise LearngeneError(
            f"{path}: pos_embed holds {table.shape[1]} positions, no square grid after {prefix} class/register "
            f"rows, so the input size cannot be read; give it, img_size=N (--img-size N)"
        )
    kernel = state.get("patch_embed.proj.weight")
    if kernel is not None and kernel.ndim == 4 and kernel.shape[-1] == kernel.shape[-2]:
        return side * int(kernel.shape[-1])
    return side * patch[0]


def _header_img_size(path: str | os.PathLike) -> int | None:
    """The input size a safetensors checkpoint's header records: a learngene model file's spec (None otherwise)."""
    if Path(path).suffix != ".safetensors":
        return None
    from .formats.weights import read_safetensors

    text = read_safetensors(path, lazy=True)[1].get("spec")  # a map of the file read once already: no second copy
    if text is None:
        return None
    try:
        return ViTSpec.from_json(text).img_size
    except ValueError:  # a corrupt header records nothing to trust; the size stays required
        return None


def _load_hub_ancestry(name: str, timm_model: str | None, drop_head: bool, **model_kwargs: Any) -> Ancestry:
    """A Hub model's ancestry: its snapshot folder (``hf-hub:``) or its tag's weight file and architecture
    (``timm:``, with the tag's preprocessing), recording where it came from."""
    hub = fetch_model(name)
    if hub.folder is not None:
        ancestry = load_ancestry(hub.folder, timm_model, drop_head, **model_kwargs)
    else:
        assert hub.weights is not None and hub.arch is not None  # a timm: tag names both
        size = hub.pretrained_cfg.get("input_size")  # what the tag's weights were trained at
        tag_size = int(size[-1]) if isinstance(size, (list, tuple)) and len(size) == 3 else None
        ancestry = _loaded_ancestry(hub.weights, timm_model or hub.arch, drop_head, tag_size, model_kwargs)
        vit: Any = ancestry.model  # a timm model: the tag's preprocessing, as timm.create_model(NAME.TAG) has it
        vit.pretrained_cfg = {**vit.pretrained_cfg, **hub.pretrained_cfg}
        ancestry.license = ancestry.license or hub.license
    ancestry.source = hub.source
    return ancestry


def ancestry_preprocessing(
    path: str | os.PathLike, timm_model: str | None, ancestry: Ancestry
) -> dict[str, Any] | None:
    """What the inputs of the ancestry loaded from ``path`` expect: a timm model's (or a model folder's)
    ``pretrained_cfg``, or what its learngene model file records (None where nothing is known)."""
    from .data import preprocessing_cfg
    from .formats.model_file import model_preprocessing

    if timm_model or is_model_folder(path) or is_hub_name(path):  # a folder's config is on the model (load_ancestry)
        return preprocessing_cfg(ancestry.model)
    return model_preprocessing(path)


def feed_size(ancestry: Ancestry, preprocessing: dict[str, Any] | None) -> int | None:
    """The image size data are loaded at to be fed to ``ancestry`` (by condensation, compare and bench alike):
    its pretrained input size where the model takes any size and that is smaller than its position grid (RADIO:
    512 px, not the 2048-px grid it is built with), else the size its spec records (None for a non-ViT: the data
    keep theirs)."""
    from .vit.naflex import image_input

    spec = ancestry.spec
    if spec is None:
        return None
    expects = image_input(ancestry.model)
    size = (preprocessing or {}).get("input_size")
    if expects and expects[2] and isinstance(size, (list, tuple)) and len(size) == 3 and 0 < size[-1] < spec.img_size:
        return int(size[-1])
    return spec.img_size


# the sizes a bare checkpoint's weights show: (the size, the pretrained config's name of the layer that shows it, that
# layer's weight's dimensions, the axis that holds the size)
_SIZES_IN_WEIGHTS = (("in_chans", "first_conv", 4, 1), ("num_classes", "classifier", 2, 0))


def _sizes_from_checkpoint(arch: str, kwargs: dict[str, Any], state: StateDict) -> dict[str, Any]:
    """``kwargs`` with the input channels and classes a bare checkpoint's weights show where the caller gave none
    (the first convolution's input channels, the classifier's outputs, both named by timm's pretrained config of
    ``arch``, so no model is built to find them): a grey or 10-class ViT or CNN (e.g. a ResNet teacher) loads as
    it was trained, with its own head, instead of being refused or given a fresh one."""
    import timm

    try:
        cfg = timm.models.get_pretrained_cfg(arch)
    except (RuntimeError, ValueError, KeyError):
        cfg = None
    found: dict[str, Any] = {}
    for name, layer, ndim, axis in _SIZES_IN_WEIGHTS:
        module = getattr(cfg, layer, None)
        weight = state.get(f"{module}.weight") if isinstance(module, str) else None
        if name not in kwargs and weight is not None and weight.ndim == ndim:
            found[name] = int(weight.shape[axis])
    return {**kwargs, **found}


def build_timm_model(arch: str, kwargs: dict[str, Any], state: StateDict, source: str) -> nn.Module:
    """timm's ``arch`` with ``kwargs``, holding ``state`` after the architecture's own checkpoint filter."""

    check_architecture_arguments(arch, kwargs, f"{source}: " if Path(source).is_dir() else "")

    def create(**extra: Any) -> nn.Module:
        return _timm_model(arch, {**kwargs, **extra})

    meta = create(device="meta")
    _require_model_memory(meta, state, source, arch)
    try:
        state = checkpoint_filter(arch)(state, meta)
    except (RuntimeError, KeyError, ValueError, AttributeError) as exc:
        raise LearngeneError(f"{source} does not fit timm model {arch}: {first_line(exc, 200)}") from None
    if has_unfused_qkv(state) and checkpoint_filter_module(arch) == EVA_MODULE:  # EVA-02 B/L: one fused layout
        # the fused copy lives in a temporary file's map, so methods can give its pages back once read, as the checkpoint's
        state, fused = fuse_qkv_projections(state, read_once=release_pages, place=tensors_in_temporary_file)
        kwargs = {**kwargs, **fused}
    return build_model_lazily(create, state, source, arch)


def build_model_lazily(create: Callable[..., nn.Module], state: StateDict, source: str, name: str = "") -> nn.Module:
    """``create()``'s model holding ``state``, built without a second copy of the weights where possible.

    The model is made on the meta device and takes ``state``'s tensors as its own. When that cannot
    work (the checkpoint leaves a fresh classifier to draw, or the model has buffers no checkpoint
    holds) it is made normally and ``state`` is copied in.
    """
    model = create(device="meta")
    state = _fitting_state(model, state, source, name)
    if set(state) == set(model.state_dict()):
        model.load_state_dict(state, strict=True, assign=True)
        _compute_buffers(model)
        if not any(t.is_meta for t in itertools.chain(model.parameters(), model.buffers())):
            return model
    _require_model_memory(model, {}, source, name or "model")  # made whole, then the state copied in
    model = create()
    model.load_state_dict(state, strict=False)
    return model


def _compute_buffers(model: nn.Module) -> None:
    """Fill the buffers no checkpoint holds (an Eva's RoPE tables, its zero k bias) where timm can compute them
    (``init_non_persistent_buffers``), so a model of such buffers needs no second, randomly initialized copy of
    its weights; a module whose buffers timm cannot recompute keeps them on ``meta`` (the caller falls back)."""
    import torch
    from timm.models._manipulate import reinit_non_persistent_buffers

    owners = [m for m in model.modules() if any(b is not None and b.is_meta for b in m._buffers.values())]
    if not owners or not all(hasattr(m, "init_non_persistent_buffers") for m in owners):
        return
    for module in owners:
        for key, buffer in module._buffers.items():
            if buffer is not None and buffer.is_meta:
                module._buffers[key] = torch.empty_like(buffer, device="cpu")
    reinit_non_persistent_buffers(model)


def checkpoint_filter(arch: str) -> Callable[[StateDict, nn.Module], StateDict]:
    """The ``checkpoint_filter_fn`` of the timm module that defines ``arch`` (vision_transformer, deit, eva, ...).

    timm passes it to its builder for pretrained weights; its layer-scale renaming (DeiT III's old
    ``gamma_1``) is turned on where the function has it, as timm's deit module does.
    """
    module = sys.modules[checkpoint_filter_module(arch)]
    fn = getattr(module, "checkpoint_filter_fn", None)
    if fn is None:
        return lambda state, model: state
    if "adapt_layer_scale" in inspect.signature(fn).parameters:
        fn = functools.partial(fn, adapt_layer_scale=True)
    return fn


def checkpoint_filter_module(arch: str) -> str:
    """The timm module that defines ``arch`` (``timm.models.vision_transformer``, ``timm.models.eva``, ...)."""
    import timm

    return timm.models.model_entrypoint(arch).__module__


def _require_timm_name(name: str | None) -> str:
    import timm

    if name is None or not timm.is_model(name):
        raise LearngeneError(f"timm has no model {name!r}; pick a name from timm.list_models()")
    return name


# timm.create_model's keys that load weights or shape what is returned instead of describing the architecture: given
# through, timm would read another file than the ancestry given (checkpoint_path, pretrained_cfg_overlay's file) or
# fetch one; learngene reads the ancestry itself (weights only) and builds the model empty
LOADING_ARGUMENTS = frozenset(
    {
        *("pretrained", "checkpoint_path", "pretrained_cfg", "pretrained_cfg_overlay", "pretrained_strict"),
        *("pretrained_filter_fn", "pretrained_model_args", "cache_dir", "model_cfg", "kwargs_filter"),
        *("features_only", "feature_cfg", "feature_cls", "out_indices", "output_stride", "flatten_sequential"),
        *("scriptable", "exportable", "no_jit", "device", "dtype"),
    }
)


def check_architecture_arguments(arch: str | None, kwargs: dict[str, Any], where: str = "") -> None:
    """Refuse a ``timm.create_model`` argument that is not an architecture argument: a loading one
    (:data:`LOADING_ARGUMENTS`) always, and, where ``arch`` is known, one its model class's constructor does not take
    (the allow-list: the ``__init__`` parameters along the class's bases, read from a model built on ``meta``).
    ``where`` names the config the arguments come from (a folder's), else they are the caller's."""
    loading = sorted(set(kwargs) & LOADING_ARGUMENTS)
    if loading:
        key = loading[0] if where else f"{loading[0]} (--timm-arg {loading[0]}=...)"
        do = (
            "remove it from the folder's config.json model_args"
            if where
            else "pass the weights' file as the ancestry (--ancestry FILE; a .pth with timm_model (--timm-model)) and "
            "give timm only architecture arguments (sizes, num_classes)"
        )
        raise LearngeneError(
            f"{where}{key} is not an architecture argument: it makes timm load or shape weights, and learngene reads "
            f"only the ancestry it is given; {do}"
        )
    others = [k for k in kwargs if k not in SIZE_ARGUMENTS]
    if arch is None or not others:
        return
    model_class = type(_timm_model(arch, {"device": "meta"}))
    allowed = _constructor_arguments(model_class)
    if allowed is None:  # a constructor that takes any keyword and says not which: timm's own check refuses
        return
    allowed -= LOADING_ARGUMENTS
    unknown = [k for k in others if k not in allowed]
    if unknown:
        listed = ", ".join(sorted(allowed)[:12]) + (", ..." if len(allowed) > 12 else "")
        raise LearngeneError(
            f"{where}{unknown[0]} is not an argument of timm's {model_class.__name__} ({arch}); its architecture "
            f"arguments are {listed}"
        )


def _constructor_arguments(model_class: type) -> set[str] | None:
    """The keyword arguments ``model_class`` takes: the ``__init__`` parameters along its bases (a subclass's
    ``**kwargs`` reach its base's), and the fields of a config dataclass one of them takes (NaFlexVit's
    ``NaFlexVitCfg``, whose fields its ``**kwargs`` set); None where a ``**kwargs`` goes nowhere these name."""
    names: set[str] = set()
    fields: set[str] = set()
    inits, open_ended = 0, False
    for cls in model_class.__mro__:
        if cls is nn.Module or not issubclass(cls, nn.Module) or "__init__" not in vars(cls):
            continue
        inits += 1
        try:
            hints = typing.get_type_hints(cls.__init__)
        except Exception:  # noqa: BLE001  an annotation that does not resolve names no config
            hints = {}
        for name, p in inspect.signature(cls.__init__).parameters.items():
            open_ended |= p.kind is p.VAR_KEYWORD
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self":
                names.add(name)
                arms = typing.get_args(hints.get(name)) or (hints.get(name),)
                fields.update(f.name for arm in arms if dataclasses.is_dataclass(arm) for f in dataclasses.fields(arm))
    return None if open_ended and inits == 1 and not fields else names | fields


def _timm_model(name: str, kwargs: dict[str, Any]) -> nn.Module:
    import timm

    try:
        return timm.create_model(name, pretrained=False, **kwargs)
    except (TypeError, ValueError, AssertionError, ZeroDivisionError) as exc:  # e.g. num_heads 0: timm divides by it
        shown = {k: v for k, v in kwargs.items() if k != "device"}
        raise LearngeneError(
            f"cannot build timm model {name} with {shown}: {first_line(exc, 200)}; "
            f"check the sizes in the model's config or the arguments"
        ) from None


def _fitting_state(model: nn.Module, state: StateDict, path: str, name: str) -> StateDict:
    """``state`` without a classifier of the wrong size; any other difference from ``model`` is an error."""
    own_state = model.state_dict()
    own = {k: v.shape for k, v in own_state.items()}
    head = {k for k in own if k.startswith(_classifier_prefixes(model))}
    state = {k: v for k, v in state.items() if not (k in head and own[k] != v.shape)}
    hint = (
        "pick the matching timm_model (--timm-model) or give the checkpoint's sizes as timm.create_model arguments "
        "(--timm-arg KEY=VALUE, e.g. depth=6, embed_dim=384; --img-size N)"
        if name
        else "create the file again with learngene"
    )
    for key, value in state.items():
        if key in own and own[key] != value.shape:
            raise LearngeneError(
                f"{path}: {key} has shape {tuple(value.shape)} but timm {name or 'model'} needs "
                f"{tuple(own[key])}; {hint}"
            )
        if key in own and own_state[key].is_floating_point() and not value.is_floating_point():
            raise LearngeneError(
                f"{path}: {key} holds {str(value.dtype).removeprefix('torch.')} values where timm "
                f"{name or 'model'} has floating-point weights; use the model's real (float) weights"
            )
    missing = [k for k in own if k not in state and k not in head]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        bad = (missing or unexpected)[0]
        raise LearngeneError(
            f"{path} does not match timm {name or 'model'} (e.g. {'missing' if missing else 'unexpected'} "
            f"key {bad!r}); {hint}"
        )
    return state


def _classifier_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Key prefixes of the classifier(s): ``head.``, and ``head_dist.`` for a distilled DeiT."""
    get = getattr(model, "get_classifier", None)
    classifiers = get() if get else None
    classifiers = classifiers if isinstance(classifiers, tuple) else (classifiers,)
    names = tuple(
        name + "." for name, module in model.named_modules() if name and any(module is c for c in classifiers)
    )
    return names or ("head.",)
