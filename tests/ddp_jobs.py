"""Training jobs that tests/test_distributed.py runs under ``torchrun`` and, as the reference, in one process.

Under torchrun: ``torchrun --standalone --nproc_per_node 2 tests/ddp_jobs.py OUT ANCESTRY JOB...``. Every
file a rank renames into place (all learngene writes are atomic renames) is listed in
``OUT/writes-rank{R}.txt``, so the test can see which rank wrote what, and how often.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

# as a torchrun script, this file's folder is on sys.path, not the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from learngene.cli import main  # noqa: E402
from learngene.descendant import GeneNet  # noqa: E402
from learngene.errors import TrainingError  # noqa: E402
from learngene.method import Ancestry  # noqa: E402
from learngene.registry import get_method  # noqa: E402
from learngene.training import distributed as dist  # noqa: E402
from learngene.training.loop import TrainConfig, train  # noqa: E402
from learngene.vit.spec import ViTSpec  # noqa: E402
from tests.conftest import SMALL_OPTIONS, TINY_ARGS, FaultyData, make_images  # noqa: E402

TINY = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=4)
# 33 images in global batches of 16: the last batch holds one image, so rank 1 gets none of it
TRAIN = [
    "--data",
    "digits",
    "--train-images",
    "33",
    "--batch-size",
    "16",
    "--epochs",
    "2",
    "--lr",
    "0.003",
    "--checkpoint-every",
    "2",
    "--quiet",
]
CFG = TrainConfig(epochs=2, batch_size=16, lr=3e-3, augment=True, checkpoint_every=2, progress=False)


def cli(argv: list) -> None:
    code = main([str(a) for a in argv])
    if code != 0:
        raise SystemExit(f"learngene {argv[0]} failed with exit code {code}")


def ancestry_job(out: Path, ancestry: Path) -> None:
    """A plain timm ViT trained through the loop by the CLI, with augmentation."""
    run = ["--run-dir", out / "ancestry_run", "--out", out / "ancestry.safetensors"]
    cli(["ancestry", *TINY_ARGS, *TRAIN, "--augment", *run])


def folder_job(out: Path, ancestry: Path) -> None:
    """An image folder streamed by a DataLoader worker per rank (the folder lies next to the ancestry)."""
    data = ["--in-chans", "1", "--data", f"folder:{ancestry.parent / 'images'}", "--workers", "1"]
    schedule = ["--batch-size", "16", "--epochs", "2", "--lr", "0.003", "--checkpoint-every", "2", "--quiet"]
    run = ["--run-dir", out / "folder_run", "--out", out / "folder.safetensors"]
    cli(["ancestry", *TINY_ARGS, *data, *schedule, "--augment", *run])


def genenet_job(out: Path, ancestry: Path) -> None:
    """Condensation through an aux net: a GeneNet's gene tensors trained by the loop (the TLEG/WAVE path)."""
    dist.init_from_env()
    torch.manual_seed(0)
    anc = Ancestry(TINY.create_model(), TINY)
    method = get_method("pretrained")()
    net = GeneNet(method, method.condense(anc), TINY)
    data = make_images(33, num_classes=4, size=16)
    train(net, data, CFG, eval_data=data, run_dir=out / "genenet_run")
    dist.on_main(lambda: net.gene().save(out / "genenet.safetensors"))


def condense_job(method: str):
    def job(out: Path, ancestry: Path) -> None:
        run = ["--run-dir", out / f"{method}_run", "--out", out / f"{method}.safetensors"]
        options = [f"--opt={k}={v}" for k, v in SMALL_OPTIONS.get(method, {}).items()]
        cli(["condense", "--method", method, "--ancestry", ancestry, *TRAIN, *run, *options])

    return job


def _nan_on_rank1(x, y, soft):
    """A non-finite loss that rank 0 cannot see by itself."""
    return (x * float("nan") if dist.rank() == 1 else x), y, soft


def nan_job(out: Path, ancestry: Path) -> None:
    dist.init_from_env()
    torch.manual_seed(0)
    try:
        train(
            TINY.create_model(),
            FaultyData(make_images(64, num_classes=4, size=16), at=3, fault=_nan_on_rank1),
            CFG,
            run_dir=out / "nan_run",
        )
    except TrainingError as exc:
        (out / f"nan-rank{dist.rank()}.txt").write_text(str(exc))


def run(out: Path, ancestry: Path, jobs: list[str]) -> None:
    for name in jobs:
        if name.startswith("condense:"):
            condense_job(name.split(":", 1)[1])(out, ancestry)
        else:
            {"ancestry": ancestry_job, "folder": folder_job, "genenet": genenet_job, "nan": nan_job}[name](
                out, ancestry
            )


def logged_puts(log: Path) -> dict:
    """``os.replace`` and ``os.link`` that also record their destination in ``log``: how atomic writes put
    files in place (a link where an existing file must not be replaced)."""

    def logged(real):
        def put(src, dst, *args, **kwargs):
            with open(log, "a") as fh:
                fh.write(f"{dst}\n")
            return real(src, dst, *args, **kwargs)

        return put

    return {"replace": logged(os.replace), "link": logged(os.link)}


def _log_renames(log: Path) -> None:
    os.replace, os.link = logged_puts(log).values()


if __name__ == "__main__":
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` prints where a hung rank waits
    out_dir, ancestry_path, *job_names = sys.argv[1:]
    _log_renames(Path(out_dir) / f"writes-rank{os.environ['RANK']}.txt")
    # one process group for all jobs: the CLI closes it after its command (a process runs one), and
    # opening a second one in the same torchrun workers can deadlock in gloo's rendezvous
    close = dist.destroy
    dist.destroy = lambda sync=True: None
    run(Path(out_dir), Path(ancestry_path), job_names)
    close()
