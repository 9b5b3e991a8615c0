"""The one training loop and what it needs: checkpoints, distillation, DDP, progress."""
