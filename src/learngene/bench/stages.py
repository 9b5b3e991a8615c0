"""What every stage of a benchmark run shares: its cache key, its cached result (computed under a worker's claim
where it is not there yet), its training settings, its share of the run's progress bar and the time limit."""

from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..errors import LearngeneError, first_line
from ..formats.atomic import quote
from ..method import Ancestry
from ..registry import get_method, list_methods
from ..training.config import Logger
from ..training.loop import TrainConfig
from ..training.progress import RunProgress, on_terminal
from ..training.run_dirs import RUN_LOCK, unlock_run_dir
from .profiles import Profile, Upstream
from .report import write_report
from .rows import Row
from .workers import Busy, Claims

T = TypeVar("T")


def load_cached(path: Path, load: Callable[[Path], Any]) -> Any:
    """A cached stage's result read from ``path``, or ``None`` when there is none or it is damaged (a crash, a
    concurrent writer): a damaged one is said in one line and removed, so the stage is computed again."""
    if not path.exists():
        return None
    try:
        return load(path)
    except (LearngeneError, ValueError, TypeError, KeyError, AttributeError, OSError, RecursionError) as exc:
        reason = first_line(exc)
        print(f"learngene: cached {quote(path)} is damaged ({reason}); recomputing it", file=sys.stderr)
        path.unlink(missing_ok=True)
        return None


def stage_key(**config: Any) -> str:
    """Short hash of a stage's configuration: the name of its cached result."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def method_source_hash(name: str) -> str:
    """Hash of the file implementing method ``name``: editing a method invalidates its cached genes and cells."""
    source = Path(inspect.getfile(get_method(name)))
    return hashlib.sha256(source.read_bytes()).hexdigest()[:12]


@contextmanager
def stage_run_dir(result: Path) -> Iterator[Path]:
    """The run directory of the stage whose result is ``result`` (beside it, ``.run``): where a stopped stage resumes
    from. The pipeline locks it for the stage; it is unlocked when the stage ends, removed once the stage has saved
    its result, and kept after a failure only if the stage left more than its lock there (a checkpoint to resume)."""
    run_dir = result.with_suffix(".run")
    try:
        yield run_dir
    except BaseException:
        unlock_run_dir(run_dir)
        if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= {RUN_LOCK}:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    unlock_run_dir(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


class OutOfTime(Exception):
    """The run's time limit is reached; everything finished so far is on disk."""


class RunStages:
    """The state of one run of a profile into ``out_dir`` and what each stage does with it (its settings, cached
    result, claim and progress); :class:`~learngene.bench.protocol.BenchRun` is the whole run."""

    ancestry_key: str  # the cache key of the ancestry the genes are condensed from (set by stage 1)
    teacher: Ancestry  # that ancestry, the teacher of a distilling fine-tune (set by stage 1)

    def __init__(
        self,
        profile: Profile,
        out_dir: str | Path,
        data_dir: str | None = None,
        device: str = "auto",
        progress: bool = True,
        time_limit: float | None = None,
        plots: bool = True,
        command: str | None = None,
        reporter: Callable[..., None] = write_report,
        shared: bool = False,
        log: tuple[Logger, ...] = (),
    ):
        self.profile, self.out, self.data_dir, self.device = profile, Path(out_dir), data_dir, device
        self.log = TrainConfig(log=log).log  # (checks that the loggers' packages are there before a stage runs)
        self.out_given = out_dir
        self.reporter = reporter  # writes report.md, results.csv and plots from the rows (bench's, or compare's)
        self.teacher_outputs: dict[str, dict[str, Any]] = {}  # task -> kind -> fine-tuning data with them
        self.progress, self.time_limit, self.plots = progress, time_limit, plots
        # the long stages' own bars show under the run's bar on a terminal; in a log only the run's bar
        self.inner_progress = progress and on_terminal()
        self.methods = list(profile.methods or list_methods())
        self.started = time.perf_counter()
        self.bar: RunProgress | None = None
        # ``command``: what the report names as the command that reproduces it
        self.meta: dict[str, Any] = {"command": command} if command else {}
        self.meta["ancestries"] = {}
        self.given: Ancestry | None = None  # the profile's ancestry file, once loaded
        # the image size the data are loaded at where it is not the ancestry spec's (a RADIO's pretrained input)
        self.fed_size: int | None = None
        # ``shared``: any number of processes may work on ``out_dir`` at once, each taking the units no other has
        # (learngene.bench.workers); else this run holds the folder alone
        self.shared = shared
        self.claims = Claims()
        self.computing = True  # False: a walk that only reads what every worker has finished
        self.blocked = 0  # units of this walk that another worker holds (or, reading only, that are not done)
        self.progressed = False  # this walk computed a unit
        self.counted: set[str] = set()  # the units the run's bar has counted as done
        self.rows: list[Row] = []  # the last walk's, in the grid's order

    # ---- helpers -------------------------------------------------------------------------------------
    def _cfg(self, logs_at: Path | None = None, **changes: Any) -> TrainConfig:
        """A stage's settings: the profile's shared ones, then the stage's ``changes`` (:meth:`Profile.stage_config`);
        with ``--log``, its curves go under ``OUT/logs/``, at the stage's path there (its run directory is removed once
        the stage is done)."""
        cfg = self.profile.stage_config(**{"device": self.device, "progress": False, **changes})
        if self.log and logs_at is not None:
            where = self.out / "logs" / logs_at.relative_to(self.out).with_suffix("")
            cfg = cfg.replace(log=self.log, log_dir=str(where))
        return cfg

    def _budget_key(self) -> dict[str, Any]:
        return self.profile.training_key()

    def _fed_key(self) -> dict[str, Any]:
        """The data's image size, in the keys of stages that read data, where it is not the spec's (older keys
        stay valid)."""
        return {"img_size": self.fed_size} if self.fed_size is not None else {}

    def _check_time(self) -> None:
        if self.computing and self.time_limit is not None and time.perf_counter() - self.started > self.time_limit:
            raise OutOfTime

    @contextmanager
    def _stage(self, work: float, what: str, unit: str | None = None) -> Iterator[None]:
        """A stage of the run's bar: named while it runs, moving with its training steps. ``unit`` (default
        ``what``) names it among the walks of the grid: its work counts once, when it is done (by any worker)."""
        unit = unit or what
        if self.bar is None or not self.computing or unit in self.counted:
            yield
            return
        busy = False
        try:
            with self.bar.stage(what, work):
                yield
        except Busy:
            busy = True
            self.bar.cached -= work  # another worker's: counted when it is done
            raise
        finally:
            if not busy:
                self.counted.add(unit)

    def _result(self, path: Path, load: Callable[[Path], T], compute: Callable[[], T], record: bool = True) -> T:
        """The cached result at ``path``, else ``compute()``'s under this worker's claim on it: :class:`Busy` when
        another worker holds the claim (or this walk only reads). A :class:`LearngeneError` of ``compute`` is
        recorded (``record``) so that no worker repeats it, and a recorded one is raised again."""
        unit = path.relative_to(self.out).as_posix()
        cached = self._done(path, load, unit)
        if cached is not None:
            return cached
        if not self.computing:
            raise Busy(unit)
        with self.claims.hold(unit):
            cached = self._done(path, load, unit)  # another worker may have finished it before the claim
            if cached is not None:
                return cached
            self.progressed = True
            try:
                return compute()
            except LearngeneError as exc:
                if record:
                    self.claims.fail(unit, str(exc))
                raise

    def _done(self, path: Path, load: Callable[[Path], T], unit: str) -> T | None:
        """The cached result at ``path``, None when there is none; a failure a worker recorded is raised again."""
        cached = load_cached(path, load)
        if cached is None and (why := self.claims.failure(unit)) is not None:
            raise LearngeneError(why)
        return cached

    def _methods(self, upstream: Upstream) -> list[str]:
        return [m for m in self.methods if upstream.methods is None or m in upstream.methods]
