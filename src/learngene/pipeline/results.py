"""What the use cases return: objects that save themselves, atomically, in the file formats the command line writes.

A result holds what its file records (a model's origin and preprocessing, a gene's label space, licence and
preprocessing), so that the file a Python call saves is, byte for byte, the one the command writes (the creation
time aside). Under torchrun the command line saves on rank 0 only (:func:`learngene.training.distributed.on_main`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ..binding import check_before_saving
from ..data import preprocessing_cfg
from ..errors import LearngeneError
from ..formats.export import export_hub_folder, wants_folder
from ..formats.model_file import write_model
from ..gene import Learngene
from ..method import Method
from ..training.loop import TrainResult
from ..vit.spec import ViTSpec


def license_entry(license: str | None) -> dict[str, str]:
    """A model file's origin entry for the weights' licence (none when it is not known)."""
    return {"license": license} if license else {}


def head_label_space(gene: Learngene, provided: list[str]) -> dict[str, Any] | None:
    """The label space a descendant's head means: the gene's when the gene gave the head, else none (untrained)."""
    return gene.label_space if "head.weight" in provided else None


def save_gene(gene: Learngene, path: str | os.PathLike, overwrite: bool = False, method: Method | None = None) -> None:
    """Save ``gene`` once its method can read it (:func:`learngene.binding.check_before_saving`: a registered method
    that takes its options and whose expansion uses its tensors), so that no invalid gene file is ever written.
    ``method``: the gene's method as already built (not looked up again)."""
    check_before_saving(gene, method)
    gene.save(path, overwrite=overwrite)


@dataclass
class Condensed:
    """A gene condensed by :func:`learngene.pipeline.condense`, checked against its method, and what to tell about it.

    Attributes:
        gene: the learngene, with the ancestry's label space, licence and the preprocessing its tensors expect.
        note: the method's hint about it (e.g. an option its descendants may need), or None.
    """

    gene: Learngene
    note: str | None = None

    @property
    def summary(self) -> str:
        return f"{self.gene.method} learngene, {self.gene.num_stored_params:,} stored parameters"

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the gene (:meth:`learngene.Learngene.save`; it was checked when it was made)."""
        self.gene.save(path, overwrite=overwrite)


@dataclass
class ModelOutput:
    """A model and what its file records: the spec (None for a model no spec describes, e.g. a stitched ViT), the
    origin and the preprocessing its inputs expect; ``summary``: one line on what it is."""

    model: nn.Module
    spec: ViTSpec | None
    origin: dict[str, Any]
    preprocessing: dict[str, Any] | None
    summary: str = ""

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write it atomically in the file format of its kind (:func:`learngene.formats.model_file.write_model`)."""
        write_model(
            path, self.model, self.spec, origin=self.origin, overwrite=overwrite, preprocessing=self.preprocessing
        )


@dataclass
class Descendant(ModelOutput):
    """A descendant made by :func:`learngene.pipeline.expand`: ``provided`` are the timm keys its gene filled;
    ``card`` the facts of its model card when it is saved as a timm hub folder."""

    provided: list[str] = field(default_factory=list)
    card: dict[str, Any] = field(default_factory=dict)

    def save(self, path: str | os.PathLike, overwrite: bool = False, format: str | None = None) -> None:
        """Write it as a learngene model file, or as timm's hub folder (``format="hub"``, or a ``path`` that ends in
        ``/`` or is a folder; :func:`learngene.formats.export.export_hub_folder`)."""
        if not wants_folder(path, format):
            return super().save(path, overwrite)
        if self.spec is None:
            raise LearngeneError(
                f"a {self.origin.get('kind', 'model')} is not a timm ViT, so it has no timm hub folder; give a "
                f"file path (.safetensors)"
            )
        data_config = None
        if self.preprocessing is not None:  # the gene's, at the descendant's input size
            data_config = preprocessing_cfg(self.preprocessing, self.spec.img_size, self.spec.in_chans)
        export_hub_folder(path, self.model, self.spec, self.card, data_config=data_config, overwrite=overwrite)


@dataclass
class Trained(ModelOutput):
    """A model trained by :func:`learngene.pipeline.train` or :func:`learngene.pipeline.train_ancestry`: ``result`` is
    the run's history (``result.final_acc``: its last test accuracy); ``head`` why its head was kept or replaced."""

    result: TrainResult = field(default_factory=TrainResult)
    head: str = ""


@dataclass
class Adapted:
    """A gene adapted to one size by :func:`learngene.pipeline.adapt` and its descendant of that size."""

    gene: Learngene
    descendant: ModelOutput
    result: TrainResult
    method: Method | None = None  # the adapted gene's method, as built to expand it

    def save(
        self, path: str | os.PathLike, overwrite: bool = False, gene_path: str | os.PathLike | None = None
    ) -> None:
        """Write the descendant to ``path`` and, with ``gene_path``, the adapted gene there first (checked against its
        method, :func:`save_gene`)."""
        if gene_path:
            save_gene(self.gene, gene_path, overwrite=overwrite, method=self.method)
        self.descendant.save(path, overwrite=overwrite)
