"""The use cases, one function each, that the Python API and the command line share.

A CLI handler parses its flags, calls one of these, writes what it returns and says so; whatever it writes, the
same Python call writes (the creation time aside). Each function owns the provenance its output records (label
space, licence, preprocessing, the identity a resumed run must share) and returns an object that saves itself:

- :func:`condense` -> :class:`~.results.Condensed` (a gene; ``learngene condense``)
- :func:`expand` -> :class:`~.results.Descendant` (a model file or timm hub folder; ``learngene expand``)
- :func:`adapt` -> :class:`~.results.Adapted` (a descendant and its adapted gene; ``learngene adapt``)
- :func:`train` and :func:`train_ancestry` -> :class:`~.results.Trained` (``learngene train``, ``learngene ancestry``)
- :func:`export` -> :class:`~.exporting.Exported` (a hub folder, ONNX or timm state dict; ``learngene export``)
- :func:`save_gene`: a gene made by hand, saved once its method can read it.

``learngene compare`` (which start wins for an ancestry, data and sizes) sits above the benchmark, in
:mod:`learngene.comparison`. The names load on first use, as the package's do.

    >>> import learngene.pipeline as lp
    >>> gene = lp.condense("pretrained", "ancestry.safetensors").gene  # doctest: +SKIP
    >>> lp.expand(gene, {"depth": 6}).save("descendant.safetensors")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib

# public name -> the module of this package that defines it
_EXPORTS = {
    "condense": "condensing",
    "expand": "expanding",
    "adapt": "adapting",
    "train": "training",
    "train_ancestry": "training",
    "export": "exporting",
    "Exported": "exporting",
    "save_gene": "results",
    "Condensed": "results",
    "Descendant": "results",
    "Adapted": "results",
    "Trained": "results",
    "ModelOutput": "results",
    "DataRequest": "inputs",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
