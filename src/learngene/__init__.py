"""learngene: condense a pretrained ViT into a learngene, expand it into timm ViTs of any size."""

__version__ = "0.1.0"

from .ancestry import load_ancestry  # noqa: E402
from .errors import LearngeneError  # noqa: E402
from .gene import Learngene, get_method, list_methods, register_method  # noqa: E402
from .methods import Ancestry, CondenseInputs, GeneNet, Method, make_descendant  # noqa: E402
from .spec import PRESETS, ViTSpec, get_preset  # noqa: E402
from .train import TrainConfig, evaluate, train  # noqa: E402

__all__ = [
    "Ancestry", "CondenseInputs", "GeneNet", "Learngene", "LearngeneError", "Method", "PRESETS", "TrainConfig",
    "ViTSpec", "evaluate", "get_method", "get_preset", "list_methods", "load_ancestry", "make_descendant",
    "register_method", "train",
]
