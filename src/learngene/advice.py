"""Which method first, before spending compute: the methods that can reach a size from a gene or an ancestry, why
each other cannot, and what stored measurements say about that regime (``learngene methods --for SIZE``).

Reach is each method's own declaration (:meth:`learngene.method.Method.cannot_reach`, held to ``expand`` by
tests/test_advice.py); for a gene, its own method's answer is its expansion tried on ``meta``, as ``compare`` and
``fit`` decide it. The "try first" lines come from ``evidence.json`` beside this module: rows that
``tools/advice_table.py`` computes from the compare reports stored in the project's docs (each row names its run,
none is typed by hand), ranked by mean final top-1, with the paired, Holm-corrected decision of each start against the
best reference of that run (:mod:`learngene.bench.findings`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .errors import LearngeneError, assigned, named, require_argument
from .gene import Learngene
from .registry import get_method, list_methods
from .vit.spec import ViTSpec, parse_size

FEW_LABELS = 20  # images per class at or below which a run counts as "few labels" (the stored runs: 20 and 100)
EVIDENCE = "evidence.json"
SHOWN = 3  # starts named per "try first" line


@dataclass(frozen=True)
class Reach:
    """One method at the asked size: ``reason`` is why it cannot make it ("" where it can; None where it is not
    known, without a gene's or ancestry's size)."""

    method: str
    reason: str | None


@dataclass(frozen=True)
class Advice:
    """What :func:`methods_for` found for a size.

    Attributes:
        size: the asked size, e.g. ``L2-D32-H2``.
        based_on: what reach was decided from, in words (``gene g.lg (tleg, condensed from L4-D64-H4)``).
        reach: every method considered, those that can first.
        gene: the gene's method and why it cannot make the size ("" where it can), when a gene was given.
        evidence: the "try first" lines, one per stored regime that matches (few and many labels).
        regime: the size's depth and width against the ancestry's (None without a gene or ancestry).
    """

    size: str
    based_on: str
    reach: tuple[Reach, ...]
    gene: tuple[str, str] | None = None
    evidence: tuple[str, ...] = field(default_factory=tuple)
    regime: tuple[str, str] | None = None

    @property
    def can(self) -> list[str]:
        return [r.method for r in self.reach if r.reason == ""]

    @property
    def cannot(self) -> dict[str, str]:
        return {r.method: r.reason for r in self.reach if r.reason}

    @property
    def text(self) -> str:
        """What ``learngene methods --for`` prints."""
        lines = [f"methods for {self.size} from {self.based_on}:"]
        if self.gene is not None:
            method, why = self.gene
            lines.append(
                f"this gene ({method}) can make {self.size}"
                if not why
                else f"this gene ({method}) cannot make {self.size}: {why}"
            )
        if any(r.reason is None for r in self.reach):
            lines += [f"reach (give {named('gene')} or {named('ancestry')} to decide it for a size):"]
            lines += [f"  {r.method:18s} {get_method(r.method).expands_to}" for r in self.reach]
        else:
            lines.append(f"can make it: {', '.join(self.can) or 'none'}")
            lines += [f"  cannot: {name}: {why}" for name, why in self.cannot.items()]
        lines += [f"try first: {line}" for line in self.evidence] or [f"try first: {self.unmeasured()}"]
        return "\n".join(lines)

    def unmeasured(self) -> str:
        """What is said where no stored run measured this regime: which regimes they did measure."""
        measured = ", ".join(dict.fromkeys(f"{r['depth']} at {r['width']}" for r in evidence_rows()))
        asked = f"a {', '.join(self.regime)} size" if self.regime else "this regime"
        return f"no stored run measured {asked} (they measured: {measured}); compare the methods that can on your data"


def target_spec(base: ViTSpec, size: str | ViTSpec) -> ViTSpec:
    """``size`` in ``base``'s family (its input, patch and MLP ratio); one line where the family has no such size."""
    if isinstance(size, ViTSpec):
        return size
    depth, width, heads = parse_size(size)
    try:
        return base.replace(depth=depth, embed_dim=width, num_heads=heads)
    except LearngeneError as exc:
        raise LearngeneError(f"no method can make size {size.strip()}: {exc}") from None


def method_reach(name: str, ancestry: ViTSpec, target: ViTSpec, options: dict[str, Any] | None = None) -> str:
    """Why method ``name``, condensed from an ancestry of ``ancestry``'s size with the options ``compare`` gives it
    for ``target`` (its ``bench_options``) and ``options``, cannot make ``target``; "" where it can."""
    cls = get_method(name)
    config = cls.checked_config(**{**cls.bench_options([target]), **(options or {})})
    return cls.cannot_reach(config, ancestry, target)


def gene_reach(gene: Learngene, target: ViTSpec) -> str:
    """Why ``gene`` cannot expand to ``target`` (its expansion tried on ``meta``, no weights made); "" where it can."""
    from .binding import bind_gene
    from .vit.spec import check_state_shapes

    try:
        bound = bind_gene(gene)
        check_state_shapes(bound.expand_on_meta(target), target, f"the {gene.method} gene")
    except LearngeneError as exc:
        return " ".join(str(exc).split())
    return ""


def methods_for(
    size: str | ViTSpec,
    *,
    gene: Learngene | str | os.PathLike | None = None,
    ancestry: ViTSpec | str | os.PathLike | None = None,
    methods: Sequence[str] | None = None,
) -> Advice:
    """The methods that can make ``size`` (``"L2-D32-H2"`` or a ViTSpec), why each other cannot, and the stored
    measurements of that regime.

    Args:
        size: the descendant's size, as ``learngene compare --sizes`` takes it.
        gene: a learngene (or its file): its own method is asked by expanding it on ``meta``; the others by their
            declared reach from the ancestry the gene records.
        ancestry: the ancestry's size (a ViTSpec) or file, when no gene is given.
        methods: the methods considered (None: every registered one).
    Without either, no size decides reach: each method's ``expands_to`` is listed.
    """
    names = list(methods) if methods is not None else list_methods()
    for name in names:
        get_method(name)  # an unknown method is one line
    based_on, base, own = _base(gene, ancestry)
    if base is None:
        if not isinstance(size, ViTSpec):
            parse_size(size)
        shown = size if isinstance(size, str) else size.short()
        return Advice(shown, based_on, tuple(Reach(n, None) for n in names), evidence=evidence_lines(None, None, names))
    target = target_spec(base, size)
    reach = [Reach(n, method_reach(n, base, target)) for n in names]
    gene_line = None
    if own is not None:
        why = gene_reach(own, target)
        gene_line = (own.method, why)
        reach = [Reach(r.method, why if r.method == own.method else r.reason) for r in reach]
    reach.sort(key=lambda r: bool(r.reason))
    can = [r.method for r in reach if not r.reason]
    evidence = evidence_lines(base, target, can)
    return Advice(target.short(), based_on, tuple(reach), gene_line, evidence, regime(base, target))


def left_out(ancestry: ViTSpec, specs: Sequence[ViTSpec], methods: Sequence[str]) -> dict[str, str]:
    """The methods of ``methods`` that can make none of ``specs`` from an ancestry of ``ancestry``'s size, condensed
    with the options ``compare`` gives them for these sizes (their ``bench_options``), each with why in one line."""
    out = {}
    for name in methods:
        cls = get_method(name)
        config = cls.checked_config(**cls.bench_options(list(specs)))
        reasons = [" ".join(cls.cannot_reach(config, ancestry, s).split()) for s in specs]
        if specs and all(reasons):
            others = f" (nor {', '.join(s.short() for s in specs[1:])})" if len(specs) > 1 else ""
            out[name] = reasons[0] + others
    return out


def _base(
    gene: Learngene | str | os.PathLike | None, ancestry: ViTSpec | str | os.PathLike | None
) -> tuple[str, ViTSpec | None, Learngene | None]:
    """What reach is decided from: (in words, the ancestry's spec or None, the gene or None)."""
    if gene is not None and ancestry is not None:
        raise LearngeneError("give a gene or an ancestry, not both: a gene records the ancestry it was condensed from")
    if gene is not None:
        if not isinstance(gene, Learngene):
            require_argument(gene, (str, os.PathLike), "gene", "a Learngene or its file's path")
            path, gene = str(gene), Learngene.load(gene)
        else:
            path = "a gene"
        if gene.ancestry is None:
            raise LearngeneError(
                f"{path} records no ancestry, so no method's reach can be set against it; give the ancestry "
                "instead (ancestry=PATH, --ancestry PATH)"
            )
        return f"{path} ({gene.method}, condensed from {gene.ancestry.short()})", gene.ancestry, gene
    if ancestry is None:
        return "no gene or ancestry", None, None
    if isinstance(ancestry, ViTSpec):
        return f"an ancestry of {ancestry.short()}", ancestry, None
    require_argument(ancestry, (str, os.PathLike), "ancestry", "a ViTSpec or the ancestry's path")
    from .ancestry import load_ancestry

    spec = load_ancestry(ancestry).spec
    if spec is None:
        raise LearngeneError(
            f"{ancestry} is not a ViT a spec describes, so no size of its family can be named; methods that distil "
            "any classifier (tleg, wave, ...) take their aux net's size from their options instead: "
            f"{assigned('aux_embed_dim', 64, flag='--opt')}, ..."
        )
    return f"{ancestry} ({spec.short()})", spec, None


# ---- the stored evidence ------------------------------------------------------------------------------------
def regime(ancestry: ViTSpec | tuple[int, int], target: ViTSpec | tuple[int, int]) -> tuple[str, str]:
    """``(depth, width)`` words of ``target`` against ``ancestry``: shallower / same / deeper, narrower / same /
    wider (a size given as ``(depth, width)``)."""
    a = (ancestry.depth, ancestry.embed_dim) if isinstance(ancestry, ViTSpec) else ancestry
    t = (target.depth, target.embed_dim) if isinstance(target, ViTSpec) else target
    depth = "shallower" if t[0] < a[0] else "deeper" if t[0] > a[0] else "same depth"
    width = "narrower" if t[1] < a[1] else "wider" if t[1] > a[1] else "same width"
    return depth, width


def labels_regime(per_class: int | None) -> str:
    """``few labels`` (at most :data:`FEW_LABELS` per class) or ``many labels``."""
    return "few labels" if per_class is not None and per_class <= FEW_LABELS else "many labels"


def evidence_rows() -> list[dict[str, Any]]:
    """The rows of the shipped ``evidence.json`` (``tools/advice_table.py`` writes it)."""
    text = resources.files("learngene").joinpath(EVIDENCE).read_text(encoding="utf-8")
    return list(json.loads(text)["rows"])


def evidence_lines(ancestry: ViTSpec | None, target: ViTSpec | None, methods: Sequence[str]) -> tuple[str, ...]:
    """One "try first" line per stored row of ``target``'s regime against ``ancestry`` (every row without them):
    the best means among ``methods`` there, each with its decision against the run's best reference."""
    wanted = regime(ancestry, target) if ancestry is not None and target is not None else None
    lines = []
    for row in evidence_rows():
        if wanted is not None and (row["depth"], row["width"]) != wanted:
            continue
        line = _evidence_line(row, set(methods))
        if line:
            lines.append(line)
    return tuple(lines)


def _evidence_line(row: dict[str, Any], methods: set[str]) -> str:
    """``few labels, shallower, same width (L2-D64-H4 from L4-D64-H4, 20/class, 3 seeds; docs/...): ...``."""
    starts = []
    for start in row["starts"]:
        kept = [m for m in start["methods"] if m in methods]
        if kept:
            mark = start["vs_best_reference"]
            said = {"+": ", better than", "−": ", worse than", "=": ", not resolved against"}.get(mark, "")
            against = f"{said} {row['best_reference']}" if said else ""
            starts.append(f"{' = '.join(kept)} {start['top1']:.1f}{against}")
        if len(starts) == SHOWN:
            break
    if not starts:
        return ""
    per_class = f"{row['images_per_class']}/class" if row["images_per_class"] else "every image"
    return (
        f"{row['labels']}, {row['depth']}, {row['width']} ({row['size']} from {row['ancestry']}, {per_class}, "
        f"{row['seeds']} seeds, condensed on {row['condensed_on']}; {row['source']}): "
        + "; ".join(starts)
        + f" (best reference {row['best_reference']} "
        f"{row['best_reference_top1']:.1f}; Holm over its run's m = {row['m']})"
    )
