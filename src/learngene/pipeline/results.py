"""What the use cases return: objects that save themselves, atomically, in the file formats the command line writes.

A result holds what its file records (a model's origin and preprocessing, a gene's label space, licence and
preprocessing), so that the file a Python call saves is, byte for byte, the one the command writes (the creation
time aside). Under torchrun the command line saves on rank 0 only (:func:`learngene.training.distributed.on_main`).

A result also remembers the files and folders its call read (``inputs``), and ``save`` keeps the command line's
guarantees: it never writes over one of them, ``overwrite`` or not, never replaces a FIFO, a device or a folder
where a file goes, and refuses a bad argument in one line before anything is written
(:func:`check_destination`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ..binding import check_before_saving
from ..data import preprocessing_cfg
from ..errors import LearngeneError, named, require_argument
from ..formats.atomic import check_not_input, check_outputs, quote
from ..formats.cards import card_from_origin
from ..formats.export import check_output_folder, export_hub_folder, wants_folder
from ..formats.labels import HeadChoice
from ..formats.model_file import save_model
from ..gene import Learngene, check_values
from ..method import Method
from ..training.loop import TrainResult
from ..vit.spec import ViTSpec
from .requests import check_request


def license_entry(license: str | None) -> dict[str, str]:
    """A model file's origin entry for the weights' licence (none when it is not known)."""
    return {"license": license} if license else {}


def descendant_origin(
    gene: Learngene,
    source: str | os.PathLike | None,
    license: str | None,
    facts: dict[str, Any],
    kind: str = "descendant",
) -> dict[str, Any]:
    """What a descendant's model file records of where it comes from: its ``kind``, the gene's method and file (None
    for a gene made in Python), the ``facts`` of the use case that made it, and its licence."""
    return {
        "kind": kind,
        "method": gene.method,
        "gene": str(source) if source is not None else None,
        **facts,
        **license_entry(license),
    }


def head_label_space(gene: Learngene, provided: list[str]) -> dict[str, Any] | None:
    """The label space a descendant's head means: the gene's when the gene gave the head, else none (untrained)."""
    return gene.label_space if "head.weight" in provided else None


def check_destination(
    path: Any, overwrite: Any, inputs: tuple[str, ...] = (), folder: bool = False, name: str = "path"
) -> None:
    """Refuse, before anything is written, an output ``path`` that is no path, an ``overwrite`` that is not True or
    False, an output that is (or, as a ``folder``, holds) one of ``inputs``, ``overwrite`` or not, or one that cannot
    be written (it exists without ``overwrite``; a folder, FIFO or device where a file goes; no such directory)."""
    require_argument(path, (str, os.PathLike), name, "a file path (str or pathlib.Path)")
    require_argument(overwrite, bool, "overwrite", "True or False")
    if not str(path).strip():
        raise LearngeneError(f"{name} is an empty path; give a file path")
    if folder:
        check_not_input(path, inputs, folder_output=True)
        check_output_folder(path, overwrite)
    else:
        check_outputs([path], inputs, overwrite)


def save_gene(gene: Learngene, path: str | os.PathLike, overwrite: bool = False, method: Method | None = None) -> None:
    """Save ``gene`` once its method can read it (:func:`learngene.binding.check_before_saving`: a registered method
    that takes its options and whose expansion uses its tensors), so that no invalid gene file is ever written.
    ``method``: the gene's method as already built (not looked up again)."""
    check_destination(path, overwrite)
    check_before_saving(gene, method)
    gene.save(path, overwrite=overwrite)


@dataclass
class Condensed:
    """A gene condensed by :func:`learngene.pipeline.condense`, checked against its method, and what to tell about it.

    Attributes:
        gene: the learngene, with the ancestry's label space, licence and the preprocessing its tensors expect.
        note: the method's hint about it (e.g. an option its descendants may need), or None.
        inputs: the files and folders it was made from (the ancestry, the data's folder): never saved over.
    """

    gene: Learngene
    note: str | None = None
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_request(self)  # each field holds what it names: a wrong one fails here by name, not in save

    @property
    def summary(self) -> str:
        return f"{self.gene.method} learngene, {self.gene.num_stored_params:,} stored parameters"

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the gene (:meth:`learngene.Learngene.save`; it was checked when it was made) to ``path``, which is none
        of its inputs (:func:`check_destination`)."""
        check_destination(path, overwrite, self.inputs)
        check_values(self.gene, "the gene to save")  # changed since it was made: what reading it would refuse
        self.gene.save(path, overwrite=overwrite)


@dataclass
class ModelOutput:
    """A model and what its file records: the spec (None for a model no spec describes, e.g. a stitched ViT), the
    origin and the preprocessing its inputs expect; ``summary``: one line on what it is; ``inputs``: the files and
    folders it was made from, never saved over; ``trained_in_place``: its module was then fine-tuned by
    ``learngene.train(..., inplace=True)``, so its record no longer describes it and it cannot be saved (the result
    that call returned can)."""

    model: nn.Module
    spec: ViTSpec | None
    origin: dict[str, Any]
    preprocessing: dict[str, Any] | None
    summary: str = ""
    inputs: tuple[str, ...] = field(default=(), kw_only=True)
    trained_in_place: bool = field(default=False, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        check_request(self)  # each field holds what it names: a wrong one fails here by name, not in save

    def check_savable(self) -> None:
        """Refuse in one line a result whose module was trained in place: saved, its file would label fine-tuned
        weights as what it was."""
        if self.trained_in_place:
            raise LearngeneError(
                f"this {self.origin.get('kind', 'model')}'s module was fine-tuned by learngene.train(..., "
                f"inplace=True), so it no longer is what this result records; save the result that call returned"
            )

    def save(self, path: str | os.PathLike, overwrite: bool = False, format: str | None = None) -> None:
        """Write it atomically to ``path``, which is none of its inputs (:func:`check_destination`): in the file format
        of its kind (:func:`learngene.formats.model_file.save_model`), or as timm's hub folder with a model card
        (``format="hub"``, or a ``path`` that ends in ``/`` or is a folder,
        :func:`learngene.formats.export.wants_folder`; :func:`learngene.formats.export.export_hub_folder`)."""
        folder = is_folder_output(path, format)
        self.check_savable()
        if not folder:
            check_destination(path, overwrite, self.inputs)
            save_model(
                path, self.model, self.spec, origin=self.origin, overwrite=overwrite, preprocessing=self.preprocessing
            )
            return
        check_destination(path, overwrite, self.inputs, folder=True)
        if self.spec is None or getattr(self.model, "file_format", None) is not None:
            raise LearngeneError(
                f"a {self.origin.get('kind', 'model')} is not a timm ViT, so it has no timm hub folder; give a "
                f"file path (.safetensors)"
            )
        data_config = None
        if self.preprocessing is not None:  # what it was trained with (a descendant: the gene's), at its input size
            data_config = preprocessing_cfg(self.preprocessing, self.spec.img_size, self.spec.in_chans)
        space = self.origin.get("label_space")  # what the head's outputs mean, where the file records it
        names = space.get("classes") if isinstance(space, dict) else None
        export_hub_folder(
            path, self.model, self.spec, self.hub_card(), data_config, overwrite, label_names=names or None
        )

    def hub_card(self) -> dict[str, Any]:
        """The facts of its hub folder's model card: those its file records
        (:func:`learngene.formats.cards.card_from_origin`)."""
        assert self.spec is not None  # a timm ViT's (save checked)
        return card_from_origin(self.origin, self.spec)


def is_folder_output(path: Any, format: Any) -> bool:
    """Whether a result's ``save(path, format=format)`` writes a timm hub folder (the one rule,
    :func:`learngene.formats.export.wants_folder`), once both arguments are checked."""
    require_argument(path, (str, os.PathLike), "path", "a file or folder path (str or pathlib.Path)")
    if format not in (None, "file", "hub"):
        raise LearngeneError(f"format must be 'file', 'hub' or None, got {format!r}")
    return wants_folder(path, format)


def check_gene_beside_folder(folder: str | os.PathLike, gene_path: str | os.PathLike) -> None:
    """Refuse a gene file to be written inside the hub folder its descendant goes to (the folder is the model's)."""
    if Path(os.path.abspath(gene_path)).parent == Path(os.path.abspath(folder)):
        raise LearngeneError(
            f"{named('gene_path', '--gene-out')} {quote(gene_path)} is inside the hub folder {quote(folder)}, which "
            f"holds the model's files only; save the gene beside it"
        )


@dataclass
class Descendant(ModelOutput):
    """A descendant made by :func:`learngene.pipeline.expand`: ``provided`` are the timm keys its gene filled;
    ``card`` the facts of its model card when it is saved as a timm hub folder."""

    provided: list[str] = field(default_factory=list)
    card: dict[str, Any] = field(default_factory=dict)

    def hub_card(self) -> dict[str, Any]:
        """The facts expand gathered (the gene's and the ancestry's, more than its file records)."""
        return {"kind": "descendant", **self.card}


@dataclass
class Trained(ModelOutput):
    """A model trained by :func:`learngene.pipeline.train` or :func:`learngene.pipeline.train_ancestry`: ``result`` is
    the run's history (``result.final_acc``: its last test accuracy); ``head`` why its head was kept or replaced."""

    result: TrainResult = field(default_factory=TrainResult)
    head: str = ""

    @classmethod
    def of_run(
        cls,
        model: nn.Module,
        spec: ViTSpec,
        data: Any,
        result: TrainResult,
        origin: dict[str, Any],
        *,
        license: str | None,
        head: HeadChoice | None = None,
        inputs: tuple[str, ...] = (),
    ) -> Trained:
        """``model`` (of ``spec``) after run ``result`` on ``data``, with what its file records: ``origin`` (what it is
        and what it was trained on), then the run's epochs, cost and accuracy, the data's label space, for a fine-tune
        whether its ``head`` is new (then its spec has the data's classes), and ``license``; and the data's
        preprocessing."""
        record = {
            **origin,
            "epochs": len(result.history),  # those run: max_steps may end the run before cfg.epochs
            **result.cost,  # how long (a fine-tune's replace an ancestry's own, as its epochs do): a hub card says it
            "eval_acc": result.final_acc,
            "label_space": data.label_space,
            **({} if head is None else {"new_head": head.fresh}),
            **license_entry(license),
        }
        accuracy = (
            "no test accuracy (no test images)" if result.final_acc is None else f"test accuracy {result.final_acc:.4f}"
        )
        summary, why = (accuracy, "") if head is None else (f"{accuracy}; {head.why}", head.why)
        if head is not None and head.fresh:
            spec = spec.replace(num_classes=data.num_classes)
        return cls(model, spec, record, preprocessing_cfg(data), summary, result, why, inputs=inputs)


@dataclass
class Adapted:
    """A gene adapted to one size by :func:`learngene.pipeline.adapt` and its descendant of that size."""

    gene: Learngene
    descendant: ModelOutput
    result: TrainResult
    method: Method | None = None  # the adapted gene's method, as built to expand it

    def __post_init__(self) -> None:
        check_request(self)  # each field holds what it names: a wrong one fails here by name, not in save

    def save(
        self,
        path: str | os.PathLike,
        overwrite: bool = False,
        gene_path: str | os.PathLike | None = None,
        format: str | None = None,
    ) -> None:
        """Write the descendant to ``path`` (a file, or a timm hub folder as :meth:`ModelOutput.save` decides) and,
        with ``gene_path``, the adapted gene there first (checked against its method, :func:`save_gene`); neither is
        one of the inputs, nor both one file, nor the gene in the folder."""
        inputs = self.descendant.inputs
        folder = is_folder_output(path, format)
        check_destination(path, overwrite, inputs, folder=folder)
        if gene_path is not None:
            check_destination(gene_path, overwrite, inputs, name="gene_path")
            if folder:
                check_gene_beside_folder(path, gene_path)
            else:
                check_outputs([path, gene_path], inputs, overwrite)
            save_gene(self.gene, gene_path, overwrite=overwrite, method=self.method)
        self.descendant.save(path, overwrite=overwrite, format=format)
