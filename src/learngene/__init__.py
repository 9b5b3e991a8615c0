"""learngene: condense a pretrained ViT into a learngene, expand it into timm ViTs of any size.

The pipeline, one module each: :mod:`~learngene.ancestry` (load the big model), :mod:`~learngene.method`
(the interface every method implements) and :mod:`~learngene.methods` (one module per paper, registered
in :mod:`~learngene.registry`), :mod:`~learngene.gene` (the learngene file),
:mod:`~learngene.transfer` (the rules that move tensors between sizes), :mod:`~learngene.auxnet`
(condensing through an aux net), :mod:`~learngene.descendant` (the models a gene becomes) and
:mod:`~learngene.train` (the one training loop).
"""

from . import methods  # noqa: E402,F401  (importing the methods registers them)
from ._version import __version__  # noqa: E402
from .ancestry import load_ancestry  # noqa: E402
from .descendant import GeneNet, fit_gene_to_budget, make_descendant  # noqa: E402
from .errors import LearngeneError  # noqa: E402
from .gene import Learngene  # noqa: E402
from .method import AdaptInputs, Ancestry, CondenseInputs, Method, Paper  # noqa: E402
from .registry import get_method, list_methods, register_method  # noqa: E402
from .spec import PRESETS, ViTSpec, get_preset  # noqa: E402
from .train import TrainConfig, evaluate, train  # noqa: E402

__all__ = [
    "__version__", "AdaptInputs", "Ancestry", "CondenseInputs", "GeneNet", "Learngene", "LearngeneError", "Method",
    "PRESETS", "Paper", "TrainConfig", "ViTSpec", "evaluate", "fit_gene_to_budget", "get_method", "get_preset",
    "list_methods", "load_ancestry", "make_descendant", "register_method", "train",
]
