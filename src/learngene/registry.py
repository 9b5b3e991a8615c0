"""The registries: method names to :class:`~learngene.method.Method` classes, ``--data`` names to data sources.

A leaf, as timm's ``models/_registry.py``: it imports no method and no torch at import time. Methods register
themselves with ``@register_method`` when their module is imported; :func:`get_method` and
:func:`list_methods` import the built-in ones (:mod:`learngene.methods`) on first use, so the registry is
full wherever it is read. Data sources are recorded by name, usage and one help line, their loader named as
``"module:function"`` and imported only when one loads, so ``--help`` lists them without torch.

Other installed packages add methods and data sources without editing learngene, through entry points
(as pytest and setuptools find plugins): group ``learngene.methods`` (a module whose import registers its
methods, or a ``Method`` subclass) and group ``learngene.data_sources`` (a :class:`DataSource`, or a loader
function named by the entry point), loaded once, when a registry is first read.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ArgumentTypeError, GeneFormatError, LearngeneError

if TYPE_CHECKING:
    from .data import Data
    from .method import Method

METHOD_GROUP, DATA_SOURCE_GROUP = "learngene.methods", "learngene.data_sources"

_METHODS: dict[str, type[Method]] = {}


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method discoverable by its ``name`` (CLI, benchmark, gene expansion)."""
    # a Method subclass by its parts (the registry is a leaf: it imports no method module, method.py included)
    parts = ("condense", "expand", "Config")
    if (
        not isinstance(cls, type)
        or not isinstance(getattr(cls, "name", None), str)
        or not all(hasattr(cls, p) for p in parts)
    ):
        raise ArgumentTypeError(
            f"register_method takes a Method subclass with a name, got {cls!r}; subclass learngene.Method"
        )
    if cls.name in _METHODS and _METHODS[cls.name] is not cls:
        raise ValueError(f"method {cls.name!r} is registered twice")
    _METHODS[cls.name] = cls
    return cls


def _load_builtin_methods() -> None:
    from . import methods  # noqa: F401  (importing the method modules registers them)

    if not _loaded.get(METHOD_GROUP):
        _loaded[METHOD_GROUP] = True
        for entry in _entry_points(METHOD_GROUP):
            obj = _load_entry(entry, METHOD_GROUP)
            name = getattr(obj, "name", None)
            if isinstance(obj, type) and name and name not in _METHODS:
                register_method(obj)


def get_method(name: str) -> type[Method]:
    """The method class registered as ``name``; one-line error for a name this version does not know."""
    if name not in _METHODS:
        _load_builtin_methods()
    try:
        return _METHODS[name]
    except KeyError:
        raise GeneFormatError(
            f"unknown method {name!r}; this version of learngene knows: {', '.join(list_methods())} "
            f"(a gene made by a newer version needs an upgrade of learngene)"
        ) from None


def list_methods(**capabilities: Any) -> list[str]:
    """The registered method names, sorted; ``capabilities`` keep those whose class attributes have these values,
    e.g. ``list_methods(needs_data=True)``, ``list_methods(adaptable=True)``, ``list_methods(aux_net=True)``."""
    _load_builtin_methods()
    unknown = [k for k in capabilities if k.startswith("_") or not any(hasattr(c, k) for c in _METHODS.values())]
    if unknown:
        raise LearngeneError(
            f"no method has a capability {unknown[0]!r}; filter on e.g. needs_data, adaptable, aux_net"
        )
    return sorted(n for n, c in _METHODS.items() if all(getattr(c, k, None) == v for k, v in capabilities.items()))


# ---- data sources ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataSource:
    """A registered way to get a dataset. ``name`` is the whole ``--data`` value (``digits``) or, with
    ``argument`` set, its prefix before ``:`` (``folder:PATH``); ``streams`` sources decode images in
    DataLoader workers and so can take per-image augmentation (``--aug deit``). ``load`` is the function
    ``(argument, LoadRequest) -> Data``, or its ``"module:function"`` name, imported when the source loads;
    ``help`` is its one line in ``--data``'s help."""

    name: str
    load: Callable[[str, Any], Data] | str
    argument: str = ""
    streams: bool = False
    help: str = ""

    @property
    def usage(self) -> str:
        return f"{self.name}:{self.argument}" if self.argument else self.name

    def loader(self) -> Callable[[str, Any], Data]:
        if callable(self.load):
            return self.load
        module, _, attr = self.load.partition(":")
        return getattr(importlib.import_module(module), attr)


DATA_SOURCES: dict[str, DataSource] = {}


def register_source(source: DataSource) -> DataSource:
    """Make ``source`` a ``--data`` name (a later registration of the same name replaces it)."""
    DATA_SOURCES[source.name] = source
    return source


def list_sources() -> dict[str, DataSource]:
    """Every registered data source by name, those of installed packages' entry points included."""
    if not _loaded.get(DATA_SOURCE_GROUP):
        _loaded[DATA_SOURCE_GROUP] = True
        for entry in _entry_points(DATA_SOURCE_GROUP):
            obj = _load_entry(entry, DATA_SOURCE_GROUP)
            if obj is not None and entry.name not in DATA_SOURCES:
                register_source(obj if isinstance(obj, DataSource) else DataSource(entry.name, obj))
    return DATA_SOURCES


for _source in (
    DataSource("fashion_mnist", "learngene.data.sources:_fashion_mnist_source", help="Fashion-MNIST, 10 classes"),
    DataSource("digits", "learngene.data.sources:_digits_source", help="scikit-learn's 8x8 digits"),
    DataSource(
        "folder",
        "learngene.data.sources:_folder_source",
        argument="PATH",
        streams=True,
        help="an image folder with one sub-folder per class; PATH/train and PATH/test where present",
    ),
    DataSource(
        "torchvision",
        "learngene.data.sources:_torchvision_source",
        argument="NAME",
        help="a torchvision dataset downloaded under --data-dir",
    ),
    DataSource(
        "hf",
        "learngene.data.hub:hf_source",
        argument="NAME_OR_PATH",
        streams=True,
        help="a Hugging Face datasets dataset: a save_to_disk folder or a Hub name from its cache; "
        "hf:NAME_OR_PATH:SPLIT evaluates on SPLIT, ,image=COLUMN ,label=COLUMN name the columns",
    ),
):
    register_source(_source)


# ---- plugins ----------------------------------------------------------------------------------------------
_loaded: dict[str, bool] = {}


def _entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    return sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name)


def _load_entry(entry: importlib.metadata.EntryPoint, group: str) -> Any:
    """The object an entry point names; one that fails to import is refused in one line naming its package."""
    try:
        return entry.load()
    except Exception as exc:  # noqa: BLE001  a broken plugin: say which, rather than a traceback
        package = entry.dist.name if entry.dist is not None else entry.value
        raise LearngeneError(
            f"the {group} entry point {entry.name!r} of package {package} fails to load ({type(exc).__name__}: "
            f"{exc}); fix or uninstall that package"
        ) from None
