"""DDP plumbing for the one training loop: ranks, reductions, and start-up under ``torchrun``.

``torchrun`` sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``; :func:`init_from_env` then opens the process
group (NCCL for CUDA tensors and gloo for CPU tensors on GPU machines, gloo alone on CPU). Without
those variables everything here is a no-op, so the same code runs as one plain process.

Files are written by rank 0 only (:func:`on_main`); the other ranks wait for it and fail with it, so
every process of a run ends with the same exit status.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from ..errors import LearngeneError, first_line
from ..host.environment import env_number
from ..host.threads import set_threads

T = TypeVar("T")


def launched_distributed() -> bool:
    """True in a process started by ``torchrun`` (or anything else that sets ``WORLD_SIZE`` > 1)."""
    return env_number("WORLD_SIZE", 1, at_least=1) > 1


def start_process(role: str, *, device: str = "auto", threads: int | None = None, sets_threads: bool = True) -> None:
    """A command's process start. ``role`` is its place under ``torchrun``: ``"member"`` joins the process group
    (:func:`init_from_env`, on ``device``), ``"worker"`` runs as an independent rank (no group: compare's ranks share
    a grid), ``"alone"`` is refused under torchrun (the command writes many files without rank-0 guards). Then, where
    ``sets_threads``, torch computes with ``threads`` CPU threads (None: the default,
    :func:`learngene.host.threads.set_threads`)."""
    if role == "alone" and launched_distributed():
        raise LearngeneError("this command runs in one process (it writes many files); run it without torchrun")
    if role == "member":
        init_from_env(device)
    if sets_threads:
        set_threads(threads)


def init_from_env(device: str = "auto") -> None:
    """Join the process group ``torchrun`` describes in the environment; nothing for a plain process.

    ``device`` is the run's ``--device``: ``cpu`` joins with gloo alone, so CPU ranks on a GPU machine need no GPU
    each; anything else binds each rank to its GPU where CUDA is visible, with NCCL for CUDA tensors.

    ``LEARNGENE_DIST_TIMEOUT`` (seconds, default 1800) bounds how long a rank waits for the others in
    one collective before it gives up, e.g. when another node died without ``torchrun`` noticing.
    """
    if not (dist.is_available() and launched_distributed()) or dist.is_initialized():
        return
    # at most a day: timedelta refuses ~1e9 days, and a collective that waits longer has hung
    timeout = datetime.timedelta(seconds=env_number("LEARNGENE_DIST_TIMEOUT", 1800, float, at_least=1, at_most=86400))
    use_cuda = torch.cuda.is_available() and device != "cpu"
    if use_cuda:
        local_rank = int(env_number("LOCAL_RANK", 0, at_least=0))
        if local_rank >= torch.cuda.device_count():
            raise LearngeneError(
                f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} visible); start at "
                f"most {torch.cuda.device_count()} processes per node (--nproc_per_node)"
            )
        torch.cuda.set_device(local_rank)
    try:
        dist.init_process_group(backend="cpu:gloo,cuda:nccl" if use_cuda else "gloo", timeout=timeout)
    except (RuntimeError, ValueError) as exc:
        raise LearngeneError(
            f"could not join the process group ({first_line(exc)}); "
            f"check torchrun's rendezvous endpoint or master address, and that every node can reach it"
        ) from None


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


def count_true(flag: bool, device: torch.device | str = "cpu") -> int:
    """How many ranks hold ``flag`` (``device`` must suit the backend: a CUDA device under NCCL)."""
    return int(all_reduce_sum(torch.tensor([int(flag)], device=device)).item())


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def broadcast_object(obj: T) -> T:
    """Rank 0's ``obj`` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def on_main(fn: Callable[[], T]) -> T | None:
    """Run ``fn`` (a file write, a one-time cache) on rank 0 only; every rank returns, or raises, together.

    The others wait until every rank got here (so no rank still checks an output path rank 0 is about
    to write) and until rank 0 is done; if ``fn`` failed there, they raise too, with its message.
    """
    if not is_distributed():
        return fn()
    barrier()
    result, error = None, None
    if is_main():
        try:
            result = fn()
        except Exception as exc:  # shared with the other ranks, then re-raised here
            error = exc
    outcome = broadcast_object(None if error is None else (isinstance(error, LearngeneError), str(error)))
    if error is not None:
        raise error
    if outcome is not None:
        user_error, message = outcome
        raise (LearngeneError if user_error else RuntimeError)(f"rank 0 failed: {message}")
    return result


def destroy(sync: bool = True) -> None:
    """Leave the process group, after every rank got here when ``sync``.

    Without that barrier a rank that finished its last collective first (a broadcast's sender) could
    tear down its gloo connections while a peer still reads from them; the peer then aborts. After a
    failure pass ``sync=False``: a peer may be inside another collective, which a barrier would meet.
    """
    if dist.is_available() and dist.is_initialized():
        if sync and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()
