"""The rows of a benchmark: one descendant's results (:class:`Row`), how rows group by method and size, and
``results.csv`` (one line per descendant and evaluation point)."""

from __future__ import annotations

import csv
import dataclasses
import io
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LearngeneError, shown
from ..formats.atomic import write_text_atomic
from ..validate import refusal


@dataclass
class Row:
    """One descendant: a method at a size, on a task, with a seed and a budget (× the task's epochs)."""

    method: str
    task: str
    size: str
    depth: int
    embed_dim: int
    num_heads: int
    seed: int
    budget: int = 1
    params: int = 0
    stored_params: int = 0
    condense_seconds: float = 0.0
    condense_steps: int = 0
    adapt_seconds: float = 0.0
    train_seconds: float = 0.0
    accs: list[float] = field(default_factory=list)  # top-1 at every evaluation point
    note: str = ""  # why the cell is n/a
    upstream: str = ""  # which ancestry (profiles with several upstreams)
    variant: str = ""  # an ablation's change to how the descendant is made (e.g. "+mimetic")
    eval_epochs: list[int] = field(default_factory=list)  # the fine-tuning epoch of every entry of accs
    cell_seconds: float = 0.0  # wall time of the whole cell: expansion, fine-tuning, evaluation, saving
    start: str = ""  # the digest of the descendant's weights as fine-tuning begins (rows from before: "")
    probe: str = ""  # its outputs on the probe batch then (:mod:`learngene.bench.probe`; rows from before: "")
    # what the gene's condensation read and computed (:func:`learngene.bench.gene_stages.condense_work`; None: not
    # known, e.g. rows from before these were recorded)
    condense_images: int | None = None  # images seen, every epoch's counted (0: condensed on no data)
    condense_gflop: float | None = None
    # the fine-tuning's protocol: its training images and, for a few-shot task, the labelled images per class
    # (None with train_images given: every image of the data; both None: rows from before)
    train_images: int | None = None
    labels_per_class: int | None = None

    def __post_init__(self) -> None:
        """A row is also read back from a cell's JSON file and from ``results.csv``: a field of the wrong kind (an
        edited or damaged file) fails here, where the cache takes it for damaged and computes the cell again, not in
        the report's arithmetic."""
        bad = refusal(self)
        if bad is None and self.eval_epochs and len(self.eval_epochs) != len(self.accs):
            bad_text = f"{len(self.eval_epochs)} evaluation epochs for {len(self.accs)} accuracies"
        else:
            bad_text = f"{bad.name} is not {bad.wanted} (got {shown(bad.value)})" if bad is not None else ""
        if bad_text:
            raise LearngeneError(f"a result row of {self.method!r} at {self.size!r}: {bad_text}; compute it again")

    @property
    def ok(self) -> bool:
        return bool(self.accs)

    @property
    def acc(self) -> float:
        return self.accs[-1]

    @property
    def label(self) -> str:
        """The method (and variant), or e.g. ``scratch ×10`` for a longer budget."""
        name = f"{self.method} {self.variant}" if self.variant else self.method
        return name if self.budget == 1 else f"{name} ×{self.budget}"

    @property
    def epochs(self) -> list[int]:
        """The fine-tuning epoch of every accuracy (rows from before eval points existed: every epoch)."""
        return self.eval_epochs or list(range(1, len(self.accs) + 1))


CSV_FIELDS = (
    "upstream",
    "method",
    "variant",
    "budget",
    "task",
    "size",
    "depth",
    "embed_dim",
    "num_heads",
    "seed",
    "params",
    "stored_params",
    "condense_seconds",
    "condense_steps",
    "adapt_seconds",
    "train_seconds",
    "epoch",
    "acc",
    "note",
    "start",
    "probe",
    "group",  # the labels that share this row's start at its size, e.g. "front = pretrained" (:func:`same_starts`)
    # last, so that readers of the columns before them by position read what they did
    "condense_images",
    "condense_gflop",
    "train_images",
    "labels_per_class",
)


def write_csv(rows: list[Row], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writeheader()
    group = start_names(rows)
    for r in rows:
        base = {k: v for k, v in dataclasses.asdict(r).items() if k in CSV_FIELDS}
        base["group"] = group.get((r.upstream, r.task, r.size, r.label), r.label)
        for epoch, acc in zip(r.epochs, r.accs):
            writer.writerow({**base, "epoch": epoch, "acc": f"{acc:.4f}"})
        if not r.ok:
            writer.writerow({**base, "epoch": "", "acc": ""})
    write_text_atomic(path, buf.getvalue())


_INTS = ("budget", "depth", "embed_dim", "num_heads", "seed", "params", "stored_params", "condense_steps")
_FLOATS = ("condense_seconds", "adapt_seconds", "train_seconds")
_OPTIONAL = {"condense_images": int, "condense_gflop": float, "train_images": int, "labels_per_class": int}


def read_csv(path: Path) -> list[Row]:
    """The rows a ``results.csv`` was written from (:func:`write_csv`), in its order: accuracies as written (4
    decimals), no ``cell_seconds`` (the file has none). How a report is rebuilt with today's tables."""
    rows: dict[tuple[str, ...], Row] = {}
    with open(path, newline="") as fh:
        for line in csv.DictReader(fh):
            key = tuple(line[k] for k in ("upstream", "method", "variant", "budget", "task", "size", "seed"))
            if key not in rows:
                values: dict[str, Any] = {k: line[k] for k in ("upstream", "method", "variant", "task", "size", "note")}
                values["start"] = line.get("start") or ""  # files from before starts were recorded have none
                values["probe"] = line.get("probe") or ""  # nor probes, before those were
                values.update({k: int(line[k]) for k in _INTS}, **{k: float(line[k]) for k in _FLOATS})
                # files from before these columns have none; an empty cell is one not known
                values.update({k: kind(line[k]) if line.get(k) else None for k, kind in _OPTIONAL.items()})
                rows[key] = Row(**values)
            if line["acc"]:
                rows[key].accs.append(float(line["acc"]))
                rows[key].eval_epochs.append(int(line["epoch"]))
    return list(rows.values())


def row_from_dict(values: dict[str, Any]) -> Row:
    known = {f.name for f in dataclasses.fields(Row)}
    return Row(**{k: v for k, v in values.items() if k in known})


# ---- aggregation ---------------------------------------------------------------------------------------
def task_groups(rows: list[Row], task: str) -> dict[tuple[str, str], list[Row]]:
    """Finished rows of ``task`` by (label, size), labels in first-seen order."""
    out: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.task == task and r.ok:
            out[r.label, r.size].append(r)
    return out


def task_labels(rows: list[Row], task: str) -> list[str]:
    return list(dict.fromkeys(r.label for r in rows if r.task == task))


def task_sizes(rows: list[Row], task: str) -> list[str]:
    return list(dict.fromkeys(r.size for r in rows if r.task == task))


def mean_curve(group: list[Row]) -> tuple[list[float], list[float]]:
    """Mean and standard deviation (0 for one seed) of top-1 at every evaluation point, over seeds."""
    epochs = min(len(r.accs) for r in group)
    means = [statistics.fmean(r.accs[e] for r in group) for e in range(epochs)]
    stds = [statistics.stdev([r.accs[e] for r in group]) if len(group) > 1 else 0.0 for e in range(epochs)]
    return means, stds


def same_results(groups: dict[tuple[str, str], list[Row]], labels: list[str], size: str) -> dict[str, str]:
    """``{label: earlier label}`` for methods whose results at ``size`` equal an earlier one's, seed by seed
    (e.g. weight_selection at the ancestry's own width is the ancestry), so their marks would hide each other."""
    seen: dict[tuple, str] = {}
    out = {}
    for label in labels:
        group = groups.get((label, size))
        if not group:
            continue
        key = tuple(sorted((g.seed, tuple(g.epochs), tuple(g.accs)) for g in group))
        if key in seen:
            out[label] = seen[key]
        else:
            seen[key] = label
    return out


@dataclass(frozen=True)
class Start:
    """Methods whose descendants at one size start from the same weights (one of them alone: a start of its own).

    Attributes:
        labels: the labels sharing the start, in the rows' order; its name joins them: ``front = pretrained``.
        rows: each label's finished rows at the size (one per seed).
        recorded: whether the rows recorded their starts; rows that did not (runs from before) share a start when
            their results are the same at every evaluation, seed by seed.
        by: what made them one: ``probe`` (their outputs on the probe batch, :mod:`learngene.bench.probe`),
            ``digest`` (their weights, runs from before probes) or ``results``.
    """

    labels: tuple[str, ...]
    rows: dict[str, list[Row]]
    recorded: bool = True
    by: str = "probe"

    @property
    def name(self) -> str:
        return " = ".join(self.labels)

    @property
    def results(self) -> dict[int, float]:
        """Seed → final top-1 of the first label (the others' are the same run again)."""
        return {r.seed: r.acc for r in self.rows[self.labels[0]]}


def start_rule(rows: list[Row]) -> str:
    """What rows can be matched by: ``probe`` where every one recorded its probe outputs, else ``digest`` where every
    one recorded its weights' digest, else ``results``."""
    return "probe" if all(r.probe for r in rows) else "digest" if all(r.start for r in rows) else "results"


def one_start(a: list[Row], b: list[Row]) -> bool:
    """Whether two labels' rows at a size are one start: the same fine-tuning (budget and variant), the same seeds,
    and for every seed the same function as fine-tuning begins (:func:`learngene.bench.probe.same_function`), or,
    for rows from before probes, the same digest of the weights, or, before digests, the same results."""
    from .probe import same_function

    if (a[0].budget, a[0].variant) != (b[0].budget, b[0].variant):
        return False
    by_a, by_b = {r.seed: r for r in a}, {r.seed: r for r in b}
    if by_a.keys() != by_b.keys():
        return False
    pairs = [(by_a[s], by_b[s]) for s in by_a]
    rule = start_rule(a + b)
    if rule == "probe":
        return all(same_function(x.probe, y.probe) for x, y in pairs)
    if rule == "digest":
        return all(x.start == y.start for x, y in pairs)
    return all((x.epochs, x.accs) == (y.epochs, y.accs) for x, y in pairs)


def same_starts(groups: dict[str, list[Row]]) -> list[Start]:
    """The distinct starts among the finished rows of one size (label → rows), in the labels' order: a label joins
    the first start whose first label it is one start with (:func:`one_start`)."""
    starts: list[list[str]] = []
    for label, group in groups.items():
        if group:
            home = next((s for s in starts if one_start(groups[s[0]], group)), None)
            if home is None:
                starts.append([label])
            else:
                home.append(label)
    out = []
    for labels in starts:
        rows = [r for la in labels for r in groups[la]]
        rule = start_rule(rows)
        out.append(Start(tuple(labels), {la: groups[la] for la in labels}, rule != "results", rule))
    return out


def start_names(rows: list[Row]) -> dict[tuple[str, str, str, str], str]:
    """``(upstream, task, size, label)`` → the name of the start its finished rows share (``results.csv``'s group)."""
    by_size: dict[tuple[str, str, str], dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.ok:
            by_size[r.upstream, r.task, r.size][r.label].append(r)
    return {
        (*where, label): start.name
        for where, groups in by_size.items()
        for start in same_starts(groups)
        for label in start.labels
    }


def sizes_by_note(rows: list[Row]) -> dict[tuple[str, str], list[str]]:
    """``(label, note): sizes`` of the cells that are n/a (a method that could not make or finish a size), in the
    rows' order."""
    sizes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in rows:
        if r.note and r.size not in sizes[r.label, r.note]:
            sizes[r.label, r.note].append(r.size)
    return sizes
