"""The one training loop and what it needs: checkpoints, distillation, DDP, progress."""

from ..lazy_exports import lazy_exports

# the loop's public names, imported on first use (learngene.training.config is read by `learngene --help`: no torch)
__getattr__, __dir__ = lazy_exports(__name__, {"train": "loop", "evaluate": "evaluation", "TrainResult": "loop"})
