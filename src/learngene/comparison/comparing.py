"""``compare`` in one call: which start wins for an ancestry, data and sizes (``learngene compare``), as a result that
holds the per-size table, the statistics and the recommendation, and saves the report.

It runs :mod:`learngene.comparison.profile`'s profile (:func:`~learngene.comparison.profile.compare_profile`) with the
bench engine (:func:`~learngene.comparison.profile.start_compare`), as the command does: for the same arguments the two
write the same ``results.csv``, but for the measured seconds.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bench.findings import family
from ..bench.profiles import Profile
from ..bench.rows import Row
from ..errors import ArgumentTypeError, LearngeneError, named, require_argument
from ..formats.atomic import check_not_input
from ..formats.export import check_output_folder
from ..pipeline.inputs import Say, TrainArg, check_flag, input_paths, optional_path, quiet, speaker, train_config
from ..pipeline.requests import AncestryRequest, DataRequest, check_request
from ..training.config import TrainConfig
from ..vit.spec import ViTSpec
from .choices import TASK, CompareChoices
from .launches import launch_compare
from .launching import CompareWorker, Launcher
from .profile import compare_profile, start_compare
from .report import compare_text, recommendation_lines
from .report import write_compare_report as write_report


@dataclass
class Comparison:
    """What :func:`compare` found: every fine-tuned descendant (``rows``), per size a table and a recommendation.

    Attributes:
        rows: one :class:`~learngene.bench.rows.Row` per method (or reference) × size × seed, with its accuracy curve.
        profile: what was compared (:func:`~learngene.comparison.profile.compare_profile`).
        meta: what the run recorded about itself (the ancestry's accuracy, the planned work, its wall time).
        inputs: the ancestry's file or folder and the data's folder: never saved over.
    """

    rows: list[Row]
    profile: Profile
    meta: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_request(self)  # each field holds what it names: a wrong one fails here by name, not in save

    @property
    def table(self) -> list[dict[str, Any]]:
        """One record per size and method (references included), in the report's order: its final top-1 over seeds
        (mean and standard deviation), the seeds, stored parameters, condensation seconds, steps, images seen and
        GFLOP (None where not known: :func:`learngene.bench.gene_stages.condense_work`), fine-tuning epochs, images,
        labels per class (None: not a few-shot task) and seconds;
        ``pandas.DataFrame(comparison.table)`` takes it."""
        records = []
        for size, groups in self._groups().items():
            for label, group in groups.items():
                accs = [r.acc for r in group]
                records.append(
                    {
                        "size": size,
                        "method": label,
                        "top1": statistics.fmean(accs),
                        "top1_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                        "seeds": len(accs),
                        "stored_params": group[0].stored_params,
                        "condense_seconds": group[0].condense_seconds,
                        "condense_steps": group[0].condense_steps,
                        "condense_images": group[0].condense_images,
                        "condense_gflop": group[0].condense_gflop,
                        "fine_tune_epochs": group[0].epochs[-1],
                        "fine_tune_images": group[0].train_images,
                        "labels_per_class": group[0].labels_per_class,
                        "fine_tune_seconds": statistics.fmean(r.train_seconds for r in group),
                    }
                )
        return records

    @property
    def statistics(self) -> list[dict[str, Any]]:
        """One record per size, start and reference start it is set against, as the report's ``vs`` columns decide
        them (:func:`learngene.bench.findings.family`): methods whose descendants start from the same weights are one
        start (``start``: their names joined, ``front = pretrained``); the paired difference of final top-1 over the
        seeds both have (``difference``, its 95 % t interval ``low``..``high``, ``p``), the Holm-corrected
        ``decision`` (``+`` better, ``−`` worse, ``=`` not resolved, ``?`` too few seeds) and, for ``=``, about how
        many seeds would resolve it."""
        records = []
        for size, groups in self._groups().items():
            fam = family(groups, self.profile.references, size)
            for (start, ref), verdict in fam.verdicts.items():
                diff = verdict.diff
                records.append(
                    {
                        "size": size,
                        "start": start,
                        "reference": ref,
                        "difference": diff.mean,
                        "low": diff.low,
                        "high": diff.high,
                        "p": diff.p,
                        "seeds": diff.n,
                        "decision": verdict.mark,
                        "seeds_to_resolve": verdict.seeds,
                        "comparisons": fam.m,
                    }
                )
        return records

    @property
    def recommendations(self) -> dict[str, str]:
        """Per size, the recommendation line of the report (which start to use, or which reference no method beats)."""
        sizes = dict.fromkeys(r.size for r in self.rows if r.task == TASK)
        return dict(zip(sizes, recommendation_lines(self.rows, self.profile), strict=True))

    @property
    def text(self) -> str:
        """What ``learngene compare`` prints: per size the table and its recommendation, then the refusals."""
        return compare_text(self.rows, self.profile)

    def save(self, path: str | os.PathLike, overwrite: bool = False, plots: bool = True) -> None:
        """Write the report into folder ``path``: ``results.csv``, ``report.md`` and (with ``plots``) ``plots/``, as
        ``learngene compare --out`` does; ``path`` holds none of the inputs, and an existing folder needs
        ``overwrite`` (its other files are left alone)."""
        require_argument(path, (str, os.PathLike), "path", "a folder path (str or pathlib.Path)")
        check_flag(overwrite, "overwrite")
        check_flag(plots, "plots")
        check_not_input(path, self.inputs, folder_output=True)
        folder = check_output_folder(path, overwrite)
        folder.mkdir(exist_ok=True)
        write_report(self.rows, self.profile, folder, self.meta, plots=plots)

    def _groups(self) -> dict[str, dict[str, list[Row]]]:
        """size -> label -> the finished rows of the compared data, in the rows' order."""
        groups: dict[str, dict[str, list[Row]]] = defaultdict(dict)
        for r in self.rows:
            if r.task == TASK and r.ok:
                groups[r.size].setdefault(r.label, []).append(r)
        return groups


def compare(
    ancestry: str | os.PathLike | AncestryRequest,
    data: str | DataRequest,
    sizes: Sequence[str | ViTSpec],
    *,
    train_cfg: TrainArg | None = None,
    out: str | os.PathLike | None = None,
    time_limit: float | None = None,
    plots: bool = True,
    command: str | None = None,
    say: Say = quiet,
    launcher: Launcher | str | None = None,
    **choices: Any,
) -> Comparison:
    """Every method (and the references: scratch, scratch ×10, mimetic, structured) condensed from ``ancestry``,
    expanded to each of ``sizes`` and fine-tuned on ``data`` with the same budget and seeds, as ``learngene compare``
    does; the result holds the table, the statistics and one recommendation per size.

    Args:
        ancestry: the ancestry's file, folder or Hub name, or an :class:`~learngene.pipeline.requests.AncestryRequest`
            (a checkpoint's ``timm_model``, ``drop_head``).
        data: a data source's name, or a :class:`~learngene.pipeline.requests.DataRequest` (its ``data_dir``,
            ``few_shot`` and ``train_images``); descendants take the ancestry's input size.
        sizes: the descendants' sizes, as ``"L4-D192-H3"`` (depth, width, heads) or ViTSpecs of the ancestry's
            family.
        train_cfg: the fine-tuning's settings, a TrainConfig or a dict by name (not given: ``learngene compare``'s, 5
            epochs in batches of 64); its ``device``, ``progress`` and ``log`` are the run's.
        out: the folder the run computes in and reports to (its cache: the same call continues an interrupted run;
            several processes on one folder share the work); None: a temporary folder, removed afterwards (save the
            result with :meth:`Comparison.save`).
        time_limit: minutes after which no new stage starts: the report then holds what finished, and the same call
            on the same ``out`` continues (None: no limit).
        plots: write the report's PNG plots into ``out`` (its ``plots/``).
        command: what the report names as the command that made it (``learngene compare`` gives its command line;
            default: this call, ``learngene.compare(...)``).
        say: called with the line that says where the report is, e.g. ``print`` (and, with a launcher, with its
            progress lines while it waits).
        launcher: where the cells run: ``"inprocess"`` (default: this process), ``"local"`` or ``"slurm"`` (workers
            submitted through submitit, which share ``out``), or a :class:`~learngene.comparison.launching.Launcher`
            with their settings (workers, Slurm partition, time, GPUs and CPUs per task, ...).
        **choices: the fields of :class:`~learngene.comparison.choices.CompareChoices` by name: ``methods``,
            ``seeds``, ``references``, ``classes``, ``kd_lambda``, ``condense_data``, ``condense_epochs``, ...
    """
    request, data_request, texts = _ancestry(ancestry), _data(data), _sizes(sizes)
    chosen = CompareChoices.of_call(choices, request, data_request)
    cfg = train_config(train_cfg, "compare", "compare")
    launch = Launcher.of(launcher)
    run = CompareRun(out, time_limit, plots, command)
    say = speaker(say)
    inputs = input_paths(request, DataRequest(data_request.source))
    run.check_out(inputs)
    spec = request.load().spec  # the descendants' family, read before anything trains
    profile = compare_profile(spec, str(request.path), data_request.source, texts, cfg, chosen)
    for name, why in profile.left_out:
        say(f"learngene compare: {name} left out, before condensing anything: {why}")
    data_dir = None if data_request.data_dir is None else str(data_request.data_dir)
    if launch.kind == "inprocess":
        rows, meta = run.in_process(profile, cfg, data_dir, say)
    else:
        worker = CompareWorker(compare, request, data, tuple(texts), cfg, run.shared(launch), choices, launch.threads)
        rows, meta = launch_compare(launch, worker, profile, say, data_dir)
    return Comparison(rows, profile, meta, inputs)


@dataclass(frozen=True)
class CompareRun:
    """How :func:`compare` runs, as its arguments of those names say: the folder ``out`` (None: a temporary one), its
    ``time_limit`` in minutes, whether the report has ``plots``, and the ``command`` it names; checked when made."""

    out: str | os.PathLike | None = None
    time_limit: float | None = None
    plots: bool = True
    command: str | None = None

    def __post_init__(self) -> None:
        optional_path(self.out, "out")
        check_flag(self.plots, "plots")
        limit = self.time_limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < math.inf
        ):
            raise LearngeneError(
                f"{named('time_limit')} must be a positive number of minutes, got {limit!r}; pass e.g. "
                f"time_limit=30 (--time-limit 30), or None for no limit"
            )
        if self.command is not None:
            require_argument(self.command, str, "command", "a text (what the report names as the command)")
            if not self.command.strip():
                raise LearngeneError("command is empty; give what the report names as the command, or leave it out")

    def check_out(self, inputs: tuple[str, ...]) -> None:
        """``out``, where given, is none of the ``inputs`` and, where it exists, a folder."""
        if self.out is None:
            return
        check_not_input(self.out, inputs, folder_output=True)
        if Path(self.out).exists() and not Path(self.out).is_dir():
            raise LearngeneError(
                f"out {str(self.out)!r} is not a folder; give the report folder (new, or a run's to continue)"
            )

    def shared(self, launcher: Launcher) -> CompareRun:
        """This run as ``launcher``'s workers share it: on ``out``, absolute (a task may start in another folder),
        under the command this call names."""
        if self.out is None:
            raise LearngeneError(
                f"launcher {launcher.kind} runs workers that share the folder out; give out (--out), e.g. runs/compare"
            )
        return dataclasses.replace(self, out=os.path.abspath(self.out), command=self.report_command)

    @property
    def report_command(self) -> str:
        """The command the report names: ``command``, else this call."""
        return self.command or "learngene.compare(...)"

    def in_process(
        self, profile: Profile, cfg: TrainConfig, data_dir: str | None, say: Say
    ) -> tuple[list[Row], dict[str, Any]]:
        """Every cell of ``profile`` computed in this process (:func:`~learngene.comparison.profile.start_compare`)
        with settings ``cfg`` on the data in ``data_dir``, into ``out`` (whose report ``say`` names) or a temporary
        folder, removed afterwards; (rows, meta)."""
        options: dict[str, Any] = {
            "device": cfg.device,
            "data_dir": data_dir,
            "progress": cfg.progress,
            "log": cfg.log,
            "time_limit": None if self.time_limit is None else 60 * self.time_limit,
            "command": self.report_command,
        }
        if self.out is not None:
            started = start_compare(profile, Path(self.out), plots=self.plots, **options)
            rows = started.run()
            say(f"learngene compare: report in {Path(self.out) / 'report.md'}")
            return rows, dict(started.meta)
        with tempfile.TemporaryDirectory(prefix="learngene-compare-") as folder:
            started = start_compare(profile, folder, plots=False, **options)
            return started.run(), dict(started.meta)


def _ancestry(ancestry: Any) -> AncestryRequest:
    """The ancestry as a request: compare's workers read it from its file (a loaded ancestry is refused)."""
    if not isinstance(ancestry, AncestryRequest):
        require_argument(
            ancestry, (str, os.PathLike), "ancestry", "the ancestry's path or Hub name, or an AncestryRequest"
        )
        ancestry = AncestryRequest(ancestry)
    if ancestry.timm_kwargs:
        raise LearngeneError(
            f"compare reads a checkpoint with {named('timm_model')} alone; {named('timm_kwargs', '--timm-arg')} "
            f"do not apply: save the ancestry as a model file (learngene ancestry, train) and compare that"
        )
    return ancestry


def _data(data: Any) -> DataRequest:
    """The data as a request, without the choices compare makes itself (the input size, the augmentation)."""
    if isinstance(data, str):
        data = DataRequest(data)
    require_argument(data, DataRequest, "data", "a data source's name (e.g. 'digits') or a DataRequest")
    fixed = [f for f in ("img_size", "in_chans", "workers") if getattr(data, f) is not None] + (
        ["aug"] if data.aug != "none" else []
    )
    if fixed:
        raise LearngeneError(
            f"compare fine-tunes every descendant at the ancestry's input size without augmentation; leave "
            f"{named(fixed[0])} out of the DataRequest"
        )
    return data


def _sizes(sizes: Any) -> list[str]:
    """``sizes`` as ``L<depth>-D<width>-H<heads>`` texts (a single text is refused: give a list)."""
    if isinstance(sizes, (str, ViTSpec)) or not isinstance(sizes, (list, tuple)):
        shown = repr(sizes) if len(repr(sizes)) <= 40 else repr(sizes)[:37] + "..."
        raise ArgumentTypeError(
            f"sizes must be a list of sizes, e.g. ['L4-D192-H3', 'L6-D192-H3'] or ViTSpecs, got "
            f"{type(sizes).__name__} {shown}"
        )
    texts = []
    for size in sizes:
        if isinstance(size, ViTSpec):
            size = f"L{size.depth}-D{size.embed_dim}-H{size.num_heads}"
        require_argument(size, str, "each of sizes", "a size such as 'L4-D192-H3' or a ViTSpec")
        texts.append(size)
    return texts
