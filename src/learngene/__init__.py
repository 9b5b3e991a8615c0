"""learngene: condense a pretrained ViT into a learngene, expand it into timm ViTs of any size.

:mod:`learngene.pipeline` holds the use cases, one function each (``condense``, ``expand``, ``adapt``, ``train``,
``train_ancestry``), that the command line calls too: what a command writes, the same Python call writes.

The parts, one module each: :mod:`~learngene.ancestry` (load the big model), :mod:`~learngene.method`
(the interface every method implements) and :mod:`~learngene.methods` (one module per paper, registered
in :mod:`~learngene.registry`), :mod:`~learngene.gene` (the learngene file),
:mod:`~learngene.vit.transfer` (the rules that move tensors between sizes), :mod:`~learngene.training.auxnet`
(condensing through an aux net), :mod:`~learngene.descendant` (the models a gene becomes) and
:mod:`~learngene.training` (the one training loop).

The names below are imported on first use (PEP 562), so that ``import learngene.cli`` and
``learngene --help`` do not pay for torch.
"""

from __future__ import annotations

import importlib
import sys
import types

from ._version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "AdaptInputs": "method",
    "Ancestry": "method",
    "CondenseInputs": "method",
    "Method": "method",
    "Paper": "method",
    "GeneNet": "descendant",
    "fit_gene_to_budget": "descendant",
    "make_descendant": "descendant",
    "LearngeneError": "errors",
    "export_hub_folder": "formats.export",
    "Learngene": "gene",
    "load_ancestry": "ancestry",
    "get_method": "registry",
    "list_methods": "registry",
    "register_method": "registry",
    "PRESETS": "vit.spec",
    "ViTSpec": "vit.spec",
    "get_preset": "vit.spec",
    "TrainConfig": "training.config",
    "evaluate": "training.evaluation",
    "train": "training.loop",
}

__all__ = ["__version__", *sorted(_EXPORTS)]
_SUBPACKAGES = ("pipeline",)


def _export(name: str):
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)


class _Package(types.ModuleType):
    """The package's module type: its public names load on first use."""

    def __getattr__(self, name: str):
        if name in _SUBPACKAGES:  # learngene.pipeline after a plain `import learngene`
            return importlib.import_module(f".{name}", __name__)
        if name not in _EXPORTS:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = _export(name)
        setattr(self, name, value)
        return value

    def __dir__(self):
        return sorted({*super().__dir__(), *_EXPORTS, *_SUBPACKAGES})


sys.modules[__name__].__class__ = _Package
