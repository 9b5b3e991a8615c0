"""DDP plumbing for the one training loop: ranks, reductions, and start-up under ``torchrun``.

``torchrun`` sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``; :func:`init_from_env` then opens the process
group (NCCL on GPUs, gloo on CPU). Without those variables everything here is a no-op, so the same code
runs as one plain process.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_from_env() -> None:
    if dist.is_available() and not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        use_cuda = torch.cuda.is_available()
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def broadcast_object(obj):
    """Rank 0's ``obj`` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
