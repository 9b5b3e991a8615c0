"""The learngene: a small set of named tensors plus the metadata to expand them.

On disk a learngene is one ``.safetensors`` file; the header's metadata holds the method name, its
hyper-parameters, the ancestry's spec, the condensation cost, the library version and the creation
time. Loading checks the format tag, the format version and that the method is registered here.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import Tensor

from .errors import GeneFormatError, LearngeneError
from .io import check_state_shapes, library_version, nonfinite_tensor, now_iso, quote, read_safetensors, save_safetensors
from .spec import ViTSpec

if TYPE_CHECKING:
    from .methods.base import Method

GENE_FORMAT = "learngene"
GENE_FORMAT_VERSION = 1


@dataclass
class Learngene:
    """Named tensors + the metadata needed to expand them.

    Attributes:
        method: registered method name (see :func:`get_method`).
        tensors: the stored parameters.
        config: the method's hyper-parameters (JSON-able).
        ancestry: spec of the ViT it was condensed from (None for a non-ViT teacher or no ancestry).
        cost: what condensation cost (e.g. ``{"epochs": 3, "steps": 900, "seconds": 41.2}``).
        library_version, created: provenance, filled in on creation.
    """

    method: str
    tensors: dict[str, Tensor]
    config: dict[str, Any] = field(default_factory=dict)
    ancestry: ViTSpec | None = None
    cost: dict[str, Any] = field(default_factory=dict)
    library_version: str = field(default_factory=library_version)
    created: str = field(default_factory=now_iso)

    @property
    def num_stored_params(self) -> int:
        """Parameters the gene stores (the papers' S-Params)."""
        return sum(math.prod(t.shape) for t in self.tensors.values())

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def save(self, path: str | os.PathLike, overwrite: bool = True) -> None:
        metadata = {
            "format": GENE_FORMAT,
            "format_version": str(GENE_FORMAT_VERSION),
            "method": self.method,
            "config": json.dumps(self.config, sort_keys=True),
            "ancestry": self.ancestry.to_json() if self.ancestry else "null",
            "cost": json.dumps(self.cost, sort_keys=True),
            "library_version": self.library_version,
            "created": self.created,
        }
        save_safetensors(path, self.tensors, metadata, overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Learngene":
        tensors, meta = read_safetensors(path)
        if meta.get("format") != GENE_FORMAT:
            raise GeneFormatError(f"{quote(path)} is a safetensors file but not a learngene (no 'format: {GENE_FORMAT}' "
                                  f"header); create one with `learngene condense`")
        try:
            version = int(meta.get("format_version", "?"))
        except ValueError:
            raise GeneFormatError(f"{quote(path)} has an unreadable learngene format version; create it again with "
                                  f"`learngene condense`") from None
        if version > GENE_FORMAT_VERSION:
            raise GeneFormatError(f"{quote(path)} is learngene format v{version}, newer than this library reads "
                                  f"(v{GENE_FORMAT_VERSION}); upgrade learngene")
        method = meta.get("method", "")
        if method not in list_methods():
            raise GeneFormatError(f"{quote(path)} was made by method {method!r}, which this version of learngene does not "
                                  f"know (known: {', '.join(list_methods())}); upgrade learngene")
        try:
            ancestry = None if meta.get("ancestry", "null") == "null" else ViTSpec.from_json(meta["ancestry"])
            gene = cls(
                method=method,
                tensors=tensors,
                config=json.loads(meta.get("config", "{}")),
                ancestry=ancestry,
                cost=json.loads(meta.get("cost", "{}")),
                library_version=meta.get("library_version", "unknown"),
                created=meta.get("created", "unknown"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise GeneFormatError(f"{quote(path)} has a corrupt learngene header ({str(exc).splitlines()[0][:160]}); create it "
                                  f"again with `learngene condense`") from None
        check_gene(gene, path)
        return gene


def check_gene(gene: Learngene, source: str | os.PathLike) -> None:
    """Refuse a gene whose header or tensors do not fit together, before anything is built from it.

    The header's parts must have their types (config and cost JSON objects, options of the method's
    types), every floating tensor must be finite, and the method must expand the tensors into the one
    size they are shaped for (the net they were trained in, else the ancestry) with that size's shapes.
    That expansion runs on the ``meta`` device, so it allocates nothing; any failure is one line.
    """
    def refuse(why: str) -> GeneFormatError:
        return GeneFormatError(f"{quote(source)} is not a valid {gene.method} learngene ({why}); create it again with "
                               f"`learngene condense`")

    for part in ("config", "cost"):
        if not isinstance(getattr(gene, part), dict):
            raise refuse(f"its {part} is not a JSON object")
    bad = nonfinite_tensor(gene.tensors)
    if bad is not None:
        raise refuse(f"tensor {bad!r} holds NaN or infinite values")
    from .methods.base import expand_on_meta

    try:
        method = get_method(gene.method).from_gene(gene)
        layout = ViTSpec.from_dict(gene.config["trained_spec"]) if "trained_spec" in gene.config else gene.ancestry
    except (LearngeneError, TypeError, ValueError) as exc:
        raise refuse(_one_line(exc)) from None
    if layout is None:
        return
    try:
        state = expand_on_meta(method, gene, layout)
    except LearngeneError:
        # the method refuses this size in its own words (e.g. a PEG gene adapted to another size, whose size
        # the header does not record): expanding to the size asked for says so in one line
        return
    except Exception as exc:  # noqa: BLE001  tensors the method's code cannot read: missing, misnamed, misshapen
        raise refuse(_one_line(exc)) from None
    try:
        check_state_shapes(state, layout, "its tensors")
    except LearngeneError as exc:
        raise refuse(_one_line(exc)) from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


# ---- method registry ----------------------------------------------------------------------------
_METHODS: dict[str, type["Method"]] = {}


def register_method(cls: type["Method"]) -> type["Method"]:
    """Class decorator: make a method discoverable by its ``name`` (CLI, benchmark, gene loading)."""
    if cls.name in _METHODS and _METHODS[cls.name] is not cls:
        raise ValueError(f"method {cls.name!r} is registered twice")
    _METHODS[cls.name] = cls
    return cls


def get_method(name: str) -> type["Method"]:
    from . import methods  # noqa: F401  (importing the package registers every method)

    try:
        return _METHODS[name]
    except KeyError:
        raise GeneFormatError(f"unknown method {name!r}; choose one of: {', '.join(list_methods())}") from None


def list_methods() -> list[str]:
    from . import methods  # noqa: F401

    return sorted(_METHODS)
