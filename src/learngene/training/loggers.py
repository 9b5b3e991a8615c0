"""Where runs are watched: TensorBoard and Weights & Biases, beside the run's ``log.jsonl`` (which stays the record).

The training loop (:func:`learngene.training.loop.train`) opens the loggers ``TrainConfig.log`` names, on the main
process only, in ``TrainConfig.log_dir`` or else the run directory, and writes to them: per optimizer step the
batch's loss and accuracy, the learning rate and the images per second (``train/*``); per epoch the epoch's loss and
accuracy, the evaluation's accuracy and loss and its images per second (``epoch/*``, ``eval/*``); the run's
settings once. Every point's step is the run's global optimizer step, so the curves of a resumed run continue
where the checkpoint left them: TensorBoard writes into the same folder and discards, when read, what the
interrupted run logged after its checkpoint (``purge_step``); W&B resumes the run whose id the run directory keeps
(``wandb-run-id``). W&B runs offline (``wandb sync`` uploads them later) where ``WANDB_MODE`` says so, where no API
key is set up, or where its server cannot be reached.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from ..errors import LearngeneError, first_line
from ..formats.atomic import write_text_atomic
from .config import TrainConfig

TENSORBOARD_DIR, WANDB_RUN_ID = "tensorboard", "wandb-run-id"
WANDB_CONNECT_SECONDS = 3.0  # how long the server may take to answer before W&B goes offline (or, online, stops)


class Logger(Protocol):
    def settings(self, values: dict[str, Any]) -> None: ...
    def scalars(self, values: dict[str, float], step: int) -> None: ...
    def flush(self) -> None: ...
    def close(self, failed: bool = False) -> None: ...


class TensorBoardLogger:
    """Scalars and the settings (as text) in ``folder``'s event files, through torch's ``SummaryWriter``."""

    def __init__(self, folder: Path, resumed_at: int | None):
        from torch.utils.tensorboard import SummaryWriter

        # a resumed run discards what was logged after its checkpoint; a fresh one anything an earlier run left
        purge = resumed_at + 1 if resumed_at is not None else 0
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge)

    def settings(self, values: dict[str, Any]) -> None:
        self.writer.add_text("settings", "```\n" + json.dumps(values, indent=2, default=str) + "\n```", 0)

    def scalars(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self, failed: bool = False) -> None:
        self.writer.close()


class WandbLogger:
    """One W&B run per training run; a resumed run continues the run whose id the run directory records."""

    def __init__(self, folder: Path, cfg: TrainConfig, resumed_at: int | None, settings: dict[str, Any]):
        """``settings``: the run's, its ``run`` the name it shows (:func:`run_name`)."""
        self.offline, self.tell = wandb_mode() == "offline", cfg.progress
        if not self.offline and not wandb_server_answers():  # W&B's own start-up waits 90 s and more, then 2 lines
            raise LearngeneError(
                f"W&B's server {wandb_server()} did not answer within {WANDB_CONNECT_SECONDS:g} s and WANDB_MODE=online "
                f"asks for it; check the network and WANDB_BASE_URL, or set WANDB_MODE=offline (wandb sync uploads "
                f"the run later)"
            )
        import wandb

        id_file = folder / WANDB_RUN_ID
        run_id = id_file.read_text().strip() if resumed_at is not None and id_file.is_file() else None
        if not run_id:
            run_id = secrets.token_hex(4)  # W&B's id alphabet: lowercase letters and digits
            write_text_atomic(id_file, run_id + "\n")
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "learngene"),
                name=settings["run"],
                id=run_id,
                resume="allow",
                dir=str(folder),
                config=settings,
                mode="offline" if self.offline else "online",
                settings=wandb.Settings(console="off", silent=not cfg.progress),
            )
        except Exception as exc:  # noqa: BLE001  wandb raises its own kinds (a bad key, a refused project): one line
            raise LearngeneError(
                f"W&B could not start a run ({type(exc).__name__}: {first_line(exc)}); "
                f"check WANDB_API_KEY and WANDB_PROJECT, or set WANDB_MODE=offline"
            ) from None

    def settings(self, values: dict[str, Any]) -> None:
        pass  # given to wandb.init as the run's config

    def scalars(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def flush(self) -> None:
        pass  # W&B's service process writes the run file as points come

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)
        if self.offline and self.tell:
            print(
                f"W&B: offline run in {self.run.dir}; `wandb sync {Path(self.run.dir).parent}` uploads it",
                file=sys.stderr,
            )


def wandb_mode() -> str:
    """``WANDB_MODE`` when set; else online where an API key is set up (``WANDB_API_KEY``, or ``wandb login``'s
    netrc entry) and the server answers within a few seconds, offline otherwise (no login prompt, no hang)."""
    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in ("offline", "dryrun", "disabled"):
        return "offline"
    if mode == "online":
        return "online"
    host = urlparse(wandb_server()).hostname or "api.wandb.ai"
    if not os.environ.get("WANDB_API_KEY") and not _netrc_has(host):
        return "offline"
    return "online" if wandb_server_answers() else "offline"


def wandb_server() -> str:
    return os.environ.get("WANDB_BASE_URL", "").strip() or "https://api.wandb.ai"


def wandb_server_answers() -> bool:
    """Whether W&B's server answers one HTTP request (any status) within :data:`WANDB_CONNECT_SECONDS`: a server
    that takes the connection and never answers counts as none."""
    import http.client
    import urllib.error
    import urllib.request

    request = urllib.request.Request(wandb_server(), method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=WANDB_CONNECT_SECONDS):
            return True
    except urllib.error.HTTPError as answer:  # it answered, if only to refuse
        answer.close()
        return True
    except (OSError, ValueError, http.client.HTTPException):  # refused, timed out, no such host, no HTTP, no URL
        return False


def _netrc_has(host: str) -> bool:
    import netrc

    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class RunLoggers:
    """The loggers of one training run, written together; what the loop calls."""

    def __init__(self, loggers: list[Logger]):
        self.loggers = loggers

    def step(self, step: int, sums: list[float], lr: float, seconds: float, images: int) -> None:
        """After optimizer step ``step``: the batch's ``(loss sum, correct, images)`` on this process, the learning
        rate, and the step's wall time for ``images`` images (every process's)."""
        loss_sum, correct, seen = sums
        values = {"train/loss": loss_sum / max(seen, 1), "train/acc": correct / max(seen, 1), "train/lr": lr}
        if seconds > 0:
            values["train/images_per_second"] = images / seconds
        self._scalars(values, step)

    def epoch(self, record: dict[str, Any], eval_images: int, eval_seconds: float) -> None:
        """After an epoch: its ``log.jsonl`` record, with the evaluation's throughput where it evaluated."""
        values = {f"epoch/{k}": float(record[k]) for k in ("train_loss", "train_acc") if k in record}
        values["epoch/epoch"] = float(record["epoch"])
        if "eval_acc" in record:
            values.update({"eval/acc": record["eval_acc"], "eval/loss": record["eval_loss"]})
            if eval_seconds > 0:
                values["eval/images_per_second"] = eval_images / eval_seconds
        self._scalars(values, int(record["step"]))

    def _scalars(self, values: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            logger.scalars(values, step)

    def flush(self) -> None:
        for logger in self.loggers:
            logger.flush()

    def close(self, failed: bool = False) -> None:
        for logger in self.loggers:
            logger.close(failed)


def run_name(cfg: TrainConfig, data: str | None = None) -> str:
    """What TensorBoard and W&B call a run, so that runs tell apart: the command and method (``cfg.desc``, e.g.
    ``condense tleg``; a use case names its run so), the data and the seed: ``condense tleg on digits, seed 0``."""
    return cfg.desc + (f" on {data}" if data else "") + f", seed {cfg.seed}"


def open_loggers(
    cfg: TrainConfig, run_dir: str | Path | None, resumed_at: int | None, data: str | None = None
) -> RunLoggers | None:
    """The loggers ``cfg.log`` names, writing into ``cfg.log_dir`` or else ``run_dir`` (None when it names none);
    ``resumed_at``: the global step a resumed run continues from (None: a fresh run); ``data``: the training data's
    name. The run is named by :func:`run_name`, and its settings, name and data recorded (TensorBoard's ``settings``
    text, W&B's run config)."""
    if not cfg.log:
        return None
    where = cfg.log_dir or run_dir
    if where is None:
        raise LearngeneError(
            f"logging to {cfg.log[0]} needs a place for its files: pass run_dir (--run-dir) or TrainConfig(log_dir=...)"
        )
    folder = Path(where).resolve()  # W&B's service process, started once per process, has its own working directory
    folder.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("log", "log_dir", "progress")}
    settings.update(run=run_name(cfg, data), data=data)
    loggers: list[Logger] = []
    try:
        for name in cfg.log:
            if name == "tensorboard":
                loggers.append(TensorBoardLogger(folder / TENSORBOARD_DIR, resumed_at))
            else:
                loggers.append(WandbLogger(folder, cfg, resumed_at, settings))
    except BaseException:
        for logger in loggers:
            logger.close(failed=True)
        raise
    if resumed_at is None:
        for logger in loggers:
            logger.settings(settings)
    return RunLoggers(loggers)
