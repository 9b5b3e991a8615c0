"""learngene: condense a pretrained ViT into a learngene, expand it into timm ViTs of any size.

The use cases, one call each, the same calls the command line makes (what a command writes, the same call writes)::

    import learngene as lg

    condensed = lg.condense("tleg", "ancestry.safetensors", data="digits")  # -> Condensed: .gene, .save(path)
    descendant = lg.expand(condensed.gene, {"depth": 6})                    # -> Descendant: .model, .save(path)
    tuned = lg.train(descendant, "digits", train_cfg={"epochs": 5})         # -> Trained: .model, .result, .save(path)
    report = lg.compare("ancestry.safetensors", "digits", ["L4-D192-H3"])   # -> Comparison: .table, .save(folder)
    lg.export(tuned, "tuned.onnx")                                          # ONNX checked by onnxruntime; hub, timm

:func:`load_ancestry`, :func:`condense`, :func:`expand`, :func:`adapt`, :func:`train`, :func:`train_ancestry`,
:func:`compare` and :func:`export` are :mod:`learngene.pipeline`'s; what they take travels as request objects
(:class:`DataRequest`, :class:`AncestryRequest`, :class:`TrainConfig`, and each use case's choices, e.g.
:class:`ExpandChoices`). The parts below them, one package or module
each: :mod:`~learngene.methods` (one module per paper, registered in :mod:`~learngene.registry`), :mod:`~learngene.gene`
(the learngene file), :mod:`~learngene.vit` (specs and the rules that move tensors between sizes),
:mod:`~learngene.descendant` (the models a gene becomes) and :mod:`~learngene.training` (the one training loop,
``learngene.training.train``).

The names below are imported on first use (PEP 562), so that ``import learngene.cli`` and ``learngene --help`` do not
pay for torch.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings

from ._version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "load_ancestry": "ancestry",
    "condense": "pipeline.condensing",
    "expand": "pipeline.expanding",
    "adapt": "pipeline.adapting",
    "train": "pipeline.training",
    "train_ancestry": "pipeline.training",
    "compare": "comparison.comparing",
    "export": "pipeline.exporting",
    "Condensed": "pipeline.results",
    "Descendant": "pipeline.results",
    "Adapted": "pipeline.results",
    "Trained": "pipeline.results",
    "Comparison": "comparison.comparing",
    "Launcher": "comparison.launching",
    "DataRequest": "pipeline.requests",
    "AncestryRequest": "pipeline.requests",
    "ExpandChoices": "pipeline.requests",
    "CondenseChoices": "pipeline.requests",
    "AdaptChoices": "pipeline.requests",
    "TrainChoices": "pipeline.requests",
    "AncestryChoices": "pipeline.requests",
    "TrainConfig": "training.config",
    "Learngene": "gene",
    "ViTSpec": "vit.spec",
    "PRESETS": "vit.spec",
    "get_preset": "vit.spec",
    "get_method": "registry",
    "list_methods": "registry",
    "register_method": "registry",
    "Method": "method",
    "Paper": "method",
    "Ancestry": "method",
    "CondenseInputs": "method",
    "AdaptInputs": "method",
    "LearngeneError": "errors",
}
# names that left the top level (internals, or the loop now in learngene.training): they still load, for one release,
# with a DeprecationWarning naming where they live
_MOVED = {
    "make_descendant": "descendant",
    "fit_gene_to_budget": "descendant",
    "GeneNet": "training.genenet",
    "export_hub_folder": "formats.export",
    "evaluate": "training.evaluation",
}

__all__ = ["__version__", *_EXPORTS]
_SUBPACKAGES = ("pipeline", "training")


def _export(name: str):
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)


class _Package(types.ModuleType):
    """The package's module type: its public names load on first use."""

    def __getattr__(self, name: str):
        if name in _SUBPACKAGES:  # learngene.pipeline after a plain `import learngene`
            return importlib.import_module(f".{name}", __name__)
        if name in _MOVED:
            warnings.warn(
                f"learngene.{name} left the top level; import it from learngene.{_MOVED[name]} (this name goes in the "
                f"next release)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(f".{_MOVED[name]}", __name__), name)
        if name not in _EXPORTS:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = _export(name)
        setattr(self, name, value)
        return value

    def __dir__(self):
        return sorted({*super().__dir__(), *_EXPORTS, *_SUBPACKAGES})


sys.modules[__name__].__class__ = _Package
