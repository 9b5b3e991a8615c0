"""The learngene: a small set of named tensors plus the metadata to expand them.

On disk a learngene is one ``.safetensors`` file; the header's metadata holds the method name, its
hyper-parameters, the layout the tensors are shaped for, the ancestry's spec, the condensation cost,
the library version and the creation time. Loading checks the format tag and version (and reads the
older v1 header), the header's parts and the tensors' finiteness; whether the method is known and can read the
gene is checked where the gene is bound to it (:func:`learngene.binding.bind_gene`), which the pipeline does
before it saves one (:func:`learngene.pipeline.save_gene`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from .errors import GeneFormatError, LearngeneError, first_line
from .formats.atomic import library_version, now_iso, quote
from .formats.licenses import check_license
from .formats.preprocessing import check_preprocessing
from .formats.weights import nonfinite_tensor, read_safetensors, save_safetensors
from .settings import field
from .validate import refusal
from .vit.spec import ViTSpec

GENE_FORMAT = "learngene"
# v2: the layout is its own header field; v1 kept it in ``ancestry`` (weight pickers) or in
# ``config["trained_spec"]`` (methods condensed through an aux net).
GENE_FORMAT_VERSION = 2
DESCENDANT = "descendant."  # tensor group: timm tensors of the one descendant a gene was adapted for


@dataclass
class Learngene:
    """Named tensors + the metadata needed to expand them.

    Attributes:
        method: registered method name (see :func:`~learngene.registry.get_method`).
        tensors: the stored parameters. The group ``descendant.*`` (:data:`DESCENDANT`), when present,
            holds timm tensors, by their timm key, of the size the gene was adapted for (e.g. the
            classifier PEG's ``adapt`` trained); see :meth:`descendant_state`.
        config: the method's hyper-parameters (JSON-able).
        layout: the spec the gene's tensors are shaped for: the ancestry for weight pickers, the aux
            net (or the size it was adapted to) for methods condensed through one; None when the gene
            holds no ViT tensors.
        ancestry: spec of the ViT it was condensed from (provenance: the default expansion size and
            the stored/ancestry ratio); None for a non-ViT teacher or no ancestry.
        cost: what condensation cost (e.g. ``{"epochs": 3, "steps": 900, "seconds": 41.2}``).
        label_space: the classes the ancestry was trained on (``{"dataset": ..., "classes": [...]}``,
            None when unknown): a head expanded from the gene means these classes.
        preprocessing: what inputs its tensors expect (timm's data-config keys,
            :func:`learngene.data.preprocessing_cfg`), passed on to every descendant's model file; None: unknown.
        license: the licence of the ancestry's weights (:mod:`learngene.formats.licenses`), named on every descendant's
            model card; None: not recorded.
        ancestry_source: where the ancestry came from when it was read by name from the Hugging Face Hub
            (``{"repo_id": ..., "revision": <commit>}``, :attr:`learngene.Ancestry.source`), named on every
            descendant's model card; None: a local file or folder.
        library_version, created: provenance, filled in on creation.
    """

    method: str = field()
    tensors: dict[str, Tensor] = field()
    config: dict[str, Any] = field(default_factory=dict)
    layout: ViTSpec | None = field(None)
    ancestry: ViTSpec | None = field(None)
    cost: dict[str, Any] = field(default_factory=dict)
    label_space: dict[str, Any] | None = field(None)
    preprocessing: dict[str, Any] | None = field(None)
    license: str | None = field(None)
    ancestry_source: dict[str, str] | None = field(None)
    library_version: str = field(default_factory=library_version)
    created: str = field(default_factory=now_iso)

    def __post_init__(self) -> None:
        """Each field holds what it names, so that a wrong value fails here, by name, not deep in an expansion."""
        bad = refusal(self)
        if bad is not None:
            got = f"{type(bad.value).__name__} {str(bad.value)[:60]!r}"
            raise LearngeneError(f"Learngene {bad.name} is not {bad.wanted}: got {got}; pass {bad.wanted}")

    def require_layout(self) -> ViTSpec:
        """The spec the gene's tensors are shaped for (the aux net, the ancestry, or the size it was adapted to)."""
        if self.layout is None:
            raise GeneFormatError(f"this {self.method} gene records no layout; re-create it with `learngene condense`")
        return self.layout

    @property
    def num_stored_params(self) -> int:
        """Parameters the gene stores (the papers' S-Params)."""
        return sum(math.prod(t.shape) for t in self.tensors.values())

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def descendant_state(self) -> dict[str, Tensor]:
        """The ``descendant.*`` group by timm key: tensors of the size the gene was adapted for."""
        return {k[len(DESCENDANT) :]: v for k, v in self.tensors.items() if k.startswith(DESCENDANT)}

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the learngene to ``path`` as one safetensors file (atomically); an existing file is refused unless
        ``overwrite=True`` (the rule of every writer).

        It only writes: a gene made by hand is checked against its method first by
        :func:`learngene.pipeline.save_gene` (the pipeline's use cases check the genes they make)."""
        metadata = {
            "format": GENE_FORMAT,
            "format_version": str(GENE_FORMAT_VERSION),
            "method": self.method,
            "config": json.dumps(self.config, sort_keys=True),
            "layout": _spec_json(self.layout),
            "ancestry": _spec_json(self.ancestry),
            "cost": json.dumps(self.cost, sort_keys=True),
            "label_space": json.dumps(self.label_space),
            "library_version": self.library_version,
            "created": self.created,
        }
        if self.preprocessing is not None:
            metadata["preprocessing"] = json.dumps(self.preprocessing)
        if self.license is not None:
            metadata["license"] = self.license
        if self.ancestry_source is not None:
            metadata["ancestry_source"] = json.dumps(self.ancestry_source, sort_keys=True)
        save_safetensors(path, self.tensors, metadata, overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Learngene:
        tensors, meta = read_safetensors(path, lazy=True)  # a gene holding a whole ancestry is not read up front
        if meta.get("format") != GENE_FORMAT:
            raise GeneFormatError(
                f"{quote(path)} is a safetensors file but not a learngene (no 'format: {GENE_FORMAT}' "
                f"header); create one with `learngene condense`"
            )
        try:
            version = int(meta.get("format_version", "?"))
        except ValueError:
            raise GeneFormatError(
                f"{quote(path)} has an unreadable learngene format version; create it again with `learngene condense`"
            ) from None
        if version > GENE_FORMAT_VERSION:
            raise GeneFormatError(
                f"{quote(path)} is learngene format v{version}, newer than this library reads "
                f"(v{GENE_FORMAT_VERSION}); upgrade learngene"
            )
        try:
            config = json.loads(meta.get("config", "{}"))
            ancestry = _spec_from_json(meta.get("ancestry", "null"))
            if version >= 2:
                layout = _spec_from_json(meta["layout"])
            else:  # v1: an aux-net gene kept its layout in its config, a weight picker's was its ancestry
                trained = config.pop("trained_spec", None)
                layout = ViTSpec.from_dict(trained) if trained is not None else ancestry
            gene = cls(
                method=meta.get("method", ""),
                tensors=tensors,
                config=config,
                layout=layout,
                ancestry=ancestry,
                cost=json.loads(meta.get("cost", "{}")),
                label_space=json.loads(meta.get("label_space", "null")),
                preprocessing=_preprocessing_from_json(meta.get("preprocessing")),
                license=check_license(meta["license"], "license") if "license" in meta else None,
                ancestry_source=json.loads(meta["ancestry_source"]) if "ancestry_source" in meta else None,
                library_version=meta.get("library_version", "unknown"),
                created=meta.get("created", "unknown"),
            )
        except (ValueError, KeyError, TypeError, AttributeError, LearngeneError) as exc:
            raise GeneFormatError(
                f"{quote(path)} has a corrupt learngene header ({first_line(exc)}); create it "
                f"again with `learngene condense`"
            ) from None
        check_values(gene, path)  # a loaded gene is a memory map: its pages are given back once checked
        return gene


def check_values(gene: Learngene, source: str | os.PathLike | None) -> None:
    """Refuse a gene holding NaN or infinite values (``source``: its file; None: a gene made in this process): what
    :meth:`Learngene.load` checks of a file, and the use cases of a gene given as an object, at the same point."""
    bad = nonfinite_tensor(gene.tensors)
    if bad is not None:
        raise invalid_gene(gene, source, f"tensor {bad!r} holds NaN or infinite values")


def invalid_gene(gene: Learngene, source: str | os.PathLike | None, why: str | BaseException) -> GeneFormatError:
    """The one-line refusal of a gene file (``source``; None: a gene made in this process) and why."""
    name = quote(source) if source is not None else "the gene"
    if isinstance(why, KeyError) and len(why.args) == 1:  # its text is the bare key, which names nothing to the reader
        why = f"it has no {why.args[0]!r}, which its method reads"
    why = first_line(why, 200) if isinstance(why, BaseException) else why
    return GeneFormatError(
        f"{name} is not a valid {gene.method} learngene ({why}); create it again with `learngene condense`"
    )


def _preprocessing_from_json(text: str | None) -> dict[str, Any] | None:
    return None if text is None else check_preprocessing(json.loads(text))


def _spec_json(spec: ViTSpec | None) -> str:
    return spec.to_json() if spec is not None else "null"


def _spec_from_json(text: str) -> ViTSpec | None:
    return None if text == "null" else ViTSpec.from_json(text)
