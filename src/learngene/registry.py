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

import contextvars
import dataclasses
import importlib
import importlib.metadata
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .errors import ArgumentTypeError, DataError, GeneFormatError, LearngeneError, Remedy

METHOD_GROUP, DATA_SOURCE_GROUP = "learngene.methods", "learngene.data_sources"
METHOD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class MethodClass(Protocol):
    """A method class as the registry reads it, by its parts (the registry is a leaf: it imports no method module,
    :mod:`learngene.method` included, and no torch): a ``name``, an options dataclass ``Config``, a ``condense`` and
    an ``expand``. Every :class:`~learngene.method.Method` subclass is one; :func:`get_method` gives the class back
    as it is (``type[Any]``: annotate ``cls: type[Method] = get_method(name)`` where its type matters)."""

    @property
    def name(self) -> str: ...

    @property
    def Config(self) -> type: ...  # noqa: N802  (the method's attribute: its options' dataclass)

    def condense(self, *args: Any, **kwargs: Any) -> Any: ...

    def expand(self, *args: Any, **kwargs: Any) -> Any: ...


class Dataset(Protocol):
    """Data as the registry reads what a data source's loader gives, by its parts: its length and images by index
    (:class:`~learngene.data.ImageData`, :class:`~learngene.data.FolderData`)."""

    def __len__(self) -> int: ...

    def get_batch(self, *args: Any, **kwargs: Any) -> Any: ...


M = TypeVar("M", bound=MethodClass)
_METHODS: dict[str, type[Any]] = {}


def register_method(cls: M) -> M:
    """Class decorator: make a method discoverable by its ``name`` (CLI, benchmark, gene expansion).

    Refused in one line: a class that is not a Method subclass with a name, a name another class holds, and a
    ``Config`` option declared without the steps that read it (``field(..., phase=...)``): expansion could not
    tell whether it applies, and would record it as applied."""
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
    if not METHOD_NAME.fullmatch(cls.name):  # a name is a flag's value, a gene header's field, a row of a report
        raise LearngeneError(
            f"method name {cls.name[:60]!r} of {cls.__module__}.{cls.__qualname__} is not a plain identifier; name it "
            f"with ASCII letters, digits and '_', starting with a letter (e.g. my_method)"
        )
    taken = _METHODS.get(cls.name)
    if taken is not None and taken is not cls:
        raise LearngeneError(
            f"method name {cls.name!r} is taken by {taken.__module__}.{taken.__qualname__}; give "
            f"{cls.__module__}.{cls.__qualname__} another name"
        )
    if not dataclasses.is_dataclass(cls.Config):
        raise LearngeneError(f"method {cls.name}: its Config must be a dataclass of field(...) fields")
    unphased = [f.name for f in dataclasses.fields(cls.Config) if not f.metadata.get("phase")]
    if unphased:
        raise LearngeneError(
            f"method {cls.name}: option {unphased[0]!r} declares no phase; declare the steps that read it, "
            f"e.g. field(default, phase=EXPAND) (learngene.settings)"
        )
    _METHODS[cls.name] = cls
    return cls


def _load_builtin_methods() -> None:
    from . import methods  # noqa: F401  (importing the method modules registers them)

    if not _loaded.get(METHOD_GROUP):
        _loaded[METHOD_GROUP] = True
        for entry in _entry_points(METHOD_GROUP):
            _load_plugin_method(entry)


def get_method(name: str) -> type[Any]:
    """The method class registered as ``name``; one-line error for a name this version does not know."""
    if name not in _METHODS:
        _ASKED.add((METHOD_GROUP, name))
        _load_builtin_methods()
    try:
        found = _METHODS[name]
    except KeyError:
        problem = _PROBLEMS.get((METHOD_GROUP, name))
        if problem is not None:
            raise LearngeneError(problem) from None
        raise GeneFormatError(
            f"unknown method {name!r}; this version of learngene knows: {', '.join(list_methods())} "
            f"(a gene made by a newer version needs an upgrade of learngene)"
        ) from None
    _say_unraised((METHOD_GROUP, name))
    return found


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
    ``(argument, LoadRequest) -> Dataset``, or its ``"module:function"`` name, imported when the source loads;
    ``help`` is its one line in ``--data``'s help. ``package`` names the installed package that brought it
    (its entry point), empty for learngene's own."""

    name: str
    load: Callable[[str, Any], Dataset] | str
    argument: str = ""
    streams: bool = False
    help: str = ""
    package: str = ""

    @property
    def usage(self) -> str:
        return f"{self.name}:{self.argument}" if self.argument else self.name

    def loader(self) -> Callable[[str, Any], Dataset]:
        if callable(self.load):
            return self.load
        module, _, attr = self.load.partition(":")
        return getattr(importlib.import_module(module), attr)

    def read(self, argument: str, request: Any) -> Dataset:
        """The data the loader gives for ``argument`` and ``request``. A plugin's loader that cannot be imported,
        raises anything but a :class:`LearngeneError`, or gives no data is one line naming its package."""
        if not self.package:
            return self.loader()(argument, request)
        try:
            data = self.loader()(argument, request)
        except (LearngeneError, KeyboardInterrupt):  # a Ctrl-C while a plugin loads data stops the command
            raise
        except BaseException as exc:  # noqa: BLE001  a plugin's failure: say whose, not a traceback
            raise DataError(self._broken(f"failed ({_summary(exc)})")) from None
        if not (hasattr(data, "get_batch") and hasattr(data, "__len__")):  # by its parts: the registry is a leaf
            raise DataError(self._broken(f"gave {type(data).__name__}, not learngene data (ImageData, FolderData)"))
        return data

    def _broken(self, what: str) -> str:
        return f"data source {self.name!r} of package {self.package} {what}; fix or uninstall {self.package}"


DATA_SOURCES: dict[str, DataSource] = {}


def register_source(source: DataSource) -> DataSource:
    """Make ``source`` a ``--data`` name (a later registration of the same name replaces it)."""
    DATA_SOURCES[source.name] = source
    return source


def list_sources() -> dict[str, DataSource]:
    """Every registered data source by name, those of installed packages' entry points included (one that cannot
    be loaded is left out, and named in one line on stderr: :func:`plugin_problems`)."""
    if not _loaded.get(DATA_SOURCE_GROUP):
        _loaded[DATA_SOURCE_GROUP] = True
        for entry in _entry_points(DATA_SOURCE_GROUP):
            if not _name_taken(entry) and entry.name not in DATA_SOURCES:
                _load_plugin_source(entry)
    return DATA_SOURCES


def find_data_source(name: str) -> DataSource | None:
    """The source registered as ``name``; an installed package's is loaded now (alone: a broken other plugin is
    never imported), and one that cannot be is a one-line error naming its package. None: no such source."""
    _ASKED.add((DATA_SOURCE_GROUP, name))
    for entry in _entry_points(DATA_SOURCE_GROUP):
        if entry.name == name and not _name_taken(entry) and name not in DATA_SOURCES:
            _load_plugin_source(entry)
    if name not in DATA_SOURCES and (DATA_SOURCE_GROUP, name) in _PROBLEMS:
        raise DataError(_PROBLEMS[(DATA_SOURCE_GROUP, name)])
    _say_unraised((DATA_SOURCE_GROUP, name))
    return DATA_SOURCES.get(name)


def source_usages() -> list[tuple[str, str]]:
    """``(usage, help)`` of every data source, for ``--data``'s help and the unknown-name error, without importing
    any plugin's code: an installed package's source is named by its entry point, with its package, until loaded."""
    shown = [(s.usage, s.help) for s in DATA_SOURCES.values()]
    for entry in _entry_points(DATA_SOURCE_GROUP):
        if not _name_taken(entry) and entry.name not in DATA_SOURCES:
            shown.append((entry.name, f"from package {_package(entry)}"))
    return shown


def _name_taken(entry: importlib.metadata.EntryPoint) -> bool:
    """Whether another source holds the entry point's name (learngene's own, or another package's): then it is
    never loaded, and the clash is named in one line (:func:`_problem`)."""
    holder = DATA_SOURCES.get(entry.name)
    if holder is None or holder.package == _package(entry):
        return False
    whose = f"package {holder.package}'s" if holder.package else "learngene's own"
    _problem(entry, DATA_SOURCE_GROUP, f"takes the name of {whose} data source", "rename it")
    return True


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


# ---- plugins: entry points of other installed packages ---------------------------------------------------
# A plugin that fails to import, exits, raises or clashes with a registered name is left out and named in one line
# (which package, which entry point, what to do): printed once on stderr, or, where its name is asked for, raised
# (and not printed as well).
_loaded: dict[str, bool] = {}
_PROBLEMS: dict[tuple[str, str], str] = {}
_ASKED: set[tuple[str, str]] = set()  # (group, name) asked for by name: a problem of theirs is raised, not printed
_UNSAID: set[tuple[str, str]] = set()  # ... kept for that error
_FAILED = object()


def plugin_problems() -> list[str]:
    """One line per entry point of an installed package that learngene could not use (every group loaded first)."""
    list_methods()
    list_sources()
    return list(_PROBLEMS.values())


def _entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    return sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name)


def _package(entry: importlib.metadata.EntryPoint) -> str:
    dist = entry.dist
    return f"{dist.name} {dist.version}" if dist is not None else entry.value.partition(":")[0]


def _summary(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


def _problem(entry: importlib.metadata.EntryPoint, group: str, what: str, fix: str) -> None:
    """Record (and say once, on stderr) that ``entry`` cannot be used: ``what`` happened, ``fix`` in its package."""
    package = _package(entry)
    name = package.split(" ")[0]
    line = (
        f"the {group} entry point {entry.name!r} ({entry.value}) of package {package} {what}; {fix} in {name}, "
        f"or uninstall it (pip uninstall {name}): learngene works without it"
    )
    if (group, entry.name) not in _PROBLEMS:
        _PROBLEMS[(group, entry.name)] = line
        if (group, entry.name) in _ASKED:
            _UNSAID.add((group, entry.name))
        else:
            print(f"learngene: warning: {line}", file=sys.stderr)


def _say_unraised(key: tuple[str, str]) -> None:
    """Say a problem kept for an error that did not come (the name asked for was found elsewhere: learngene's own)."""
    if key in _UNSAID:
        _UNSAID.discard(key)
        print(f"learngene: warning: {_PROBLEMS[key]}", file=sys.stderr)


def _load_entry(entry: importlib.metadata.EntryPoint, group: str) -> Any:
    """The object an entry point names; :data:`_FAILED` (and the problem said) when importing it fails or exits."""
    try:
        return entry.load()
    # anything at all: a plugin's import that raises KeyboardInterrupt or a bare BaseException (not a Ctrl-C: an
    # import takes moments) would stop every command, `learngene methods` included
    except BaseException as exc:  # noqa: BLE001  a broken plugin: say which, rather than a traceback
        what = f"exits when imported (sys.exit({exc.code!r}))" if isinstance(exc, SystemExit) else "fails to load"
        _problem(entry, group, what if isinstance(exc, SystemExit) else f"{what} ({_summary(exc)})", "fix the import")
        return _FAILED


def _load_plugin_method(entry: importlib.metadata.EntryPoint) -> None:
    """Register the method an entry point names (a ``Method`` subclass, or a module whose import registers some)."""
    before = set(_METHODS)
    obj = _load_entry(entry, METHOD_GROUP)
    if obj is _FAILED:
        return
    if isinstance(obj, types.ModuleType):
        if set(_METHODS) == before:
            _problem(entry, METHOD_GROUP, "registers no method", "decorate its Method with @register_method")
        return
    try:
        register_method(obj)
    except LearngeneError as exc:
        _problem(entry, METHOD_GROUP, f"is refused ({exc})", "fix the method")


def _load_plugin_source(entry: importlib.metadata.EntryPoint) -> None:
    """Register the data source an entry point names: a :class:`DataSource` of the entry point's name, or a loader."""
    obj = _load_entry(entry, DATA_SOURCE_GROUP)
    if obj is _FAILED:
        return
    if isinstance(obj, DataSource):
        if obj.name != entry.name:
            _problem(entry, DATA_SOURCE_GROUP, f"gives a source named {obj.name!r}", "name the entry point as it")
            return
        register_source(dataclasses.replace(obj, package=_package(entry)))
    elif callable(obj):
        register_source(DataSource(entry.name, obj, package=_package(entry)))
    else:
        _problem(
            entry, DATA_SOURCE_GROUP, f"names a {type(obj).__name__}", "point it to a DataSource or a loader function"
        )


# a refusal's advice of another method lives beside get_method, so that a method module asks it without an import of
# the others (the registry is the one place that dispatches to them by name).
#
# the methods that carry the ancestry's own weights to another size, in the order a refusal advises them (with the
# options that widen their reach): grow to larger sizes, weight_selection and importance to smaller ones, and
# weight_selection's plain rows to head shapes the ancestry's heads do not fit
CARRIERS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("grow", {}),
    ("weight_selection", {}),
    ("importance", {}),
    ("weight_selection", {"head_aware": False}),
)
# set while carrier() asks the carriers' reach: their own refusals' advice is not asked again (grow's refusal advises
# importance, whose refusal advises grow)
_asking = contextvars.ContextVar("asking", default=False)


def carrier(ancestry: Any, target: Any, refused: str) -> Remedy | None:
    """The first of :data:`CARRIERS` other than ``refused`` whose declared reach
    (:meth:`learngene.method.Method.cannot_reach`, at the options a user gives by following the advice) takes an ancestry of ``ancestry``'s size to ``target``; None where
    none does, or the ancestry is not known. A refusal advises only a method that this says can serve."""
    if ancestry is None or _asking.get():
        return None
    token = _asking.set(True)
    try:
        for name, options in CARRIERS:
            cls = get_method(name)
            if name != refused and not cls.cannot_reach(cls.checked_config(**options), ancestry, target):
                return Remedy(name, options=dict(options))
    finally:
        _asking.reset(token)
    return None
