"""The NCCL check of tests/test_gpu.py, run as ``torchrun --standalone --nproc_per_node N tests/gpu_nccl_job.py``.

Each process joins the group through :func:`learngene.training.distributed.init_from_env` (the backend string
and GPU binding the training loop gets under torchrun), then all-reduces a CUDA tensor (NCCL) and a CPU tensor
(gloo) and prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as td

# as a torchrun script, this file's folder is on sys.path, not the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from learngene.training import distributed as dist  # noqa: E402


def main() -> None:
    # the library joins a group only for 2+ processes; with one GPU the group is joined anyway, so that NCCL itself
    # (its communicator on this GPU) is exercised with the backend string the loop uses
    dist.launched_distributed = lambda: True
    dist.init_from_env()
    rank, world = td.get_rank(), td.get_world_size()
    sums = {}
    for device in ("cuda", "cpu"):
        tensor = torch.full((3,), float(rank + 1), device=device)
        td.all_reduce(tensor)
        if device == "cuda":
            torch.cuda.synchronize()
        sums[device] = tensor.cpu().tolist()
    print(
        json.dumps(
            {
                "rank": rank,
                "world": world,
                "backend": td.get_backend_config(),
                "cuda_device": torch.cuda.current_device(),
                "local_rank": int(os.environ["LOCAL_RANK"]),
                "sums": sums,
            }
        ),
        flush=True,
    )
    td.destroy_process_group()


if __name__ == "__main__":
    main()
