"""One binding of a gene to its method: the registry lookup, the option phases, the config and the shape check, once.

:func:`bind_gene` finds the gene's method in the registry, refuses an option the step does not read
(:func:`~learngene.method.refuse_unread`), builds the method once from the options stored in the gene and
the caller's, and expands the gene on the ``meta`` device to check that the method can read it. Everything
after takes the :class:`BoundMethod`: :func:`~learngene.descendant.make_descendant`,
:func:`~learngene.descendant.fit_gene_to_budget`, the pipeline's use cases (:mod:`learngene.pipeline`) and
``learngene inspect``.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode  # no public alias: the path torch's own dispatch docs use

from .errors import GeneFormatError, LearngeneError, first_line, require_argument
from .gene import Learngene, check_values, invalid_gene
from .method import Method, config_from_dict, option_phases, refuse_unread
from .registry import get_method
from .validate import EXPAND
from .vit.spec import ViTSpec, check_state_shapes
from .vit.transfer import StateDict

# the size a gene without a layout is expanded to before it is saved: small, and every method's expansion takes it
SAVE_PROBE = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=2)


class BoundMethod:
    """A gene and its method, built once with the gene's options and the caller's (``options``) for ``step``.

    ``seed`` is the descendant seed its method's ``seed_option`` was set from (None: not set by a seed).
    :meth:`check` expands on ``meta`` (once per size) and gives the keys the expansion fills.
    """

    def __init__(
        self,
        gene: Learngene,
        method: Method,
        step: str = EXPAND,
        source: str | os.PathLike | None = None,
        options: dict[str, Any] | None = None,
        seed: int | None = None,
    ):
        self.gene, self.method, self.step, self.source = gene, method, step, source
        self.options = dict(options or {})
        self.seed = seed
        self._keys: dict[ViTSpec, list[str]] = {}

    @property
    def judges_unused(self) -> bool:
        """Whether an expansion into the gene's own layout must read every floating tensor it holds: true unless the
        caller changed an option expansion reads (e.g. tleg's ``modules``, which then reads fewer)."""
        seed_option = type(self.method).seed_option
        phases = [option_phases(type(self.method), k) for k in self.options if k != seed_option]
        return all(p and EXPAND not in p for p in phases)

    def check(self, spec: ViTSpec) -> list[str]:
        """The keys ``expand`` gives for ``spec``, found on ``meta`` (nothing allocated) and kept for the next call.

        The method's own refusal of the size passes through; tensors it cannot read or that come out in other
        shapes than ``spec``'s refuse the gene (one line naming its file). Expanded into its own layout, a gene must
        use every floating tensor it holds but its method's ``record_tensors`` (:attr:`judges_unused`): one it never
        uses is e.g. another method's tensor under this method's name, which would be dropped without a word. Tensors
        of dtypes the real expansion cannot compute with refuse the gene too (:meth:`_dtype_refusal`).
        """
        if spec in self._keys:
            return self._keys[spec]
        gene, used, mixed = self.gene, set[str](), _MixedDtypes()
        try:
            with mixed:
                state = self.expand_on_meta(spec, used)
        except LearngeneError:
            raise
        except Exception as exc:  # noqa: BLE001  tensors the method's code cannot read: missing, misnamed, misshapen
            raise invalid_gene(gene, self.source, exc) from None
        try:
            check_state_shapes(state, spec, "its tensors")
        except LearngeneError as exc:
            raise invalid_gene(gene, self.source, exc) from None
        unused = sorted(
            k
            for k, t in gene.tensors.items()
            if t.is_floating_point() and k not in used and not self.method.kept_for_record(k)
        )
        if self.judges_unused and spec == gene.layout and unused:
            raise invalid_gene(
                gene,
                self.source,
                f"its expansion does not use {len(unused)} of its tensors, e.g. "
                f"{unused[0]!r}: the header's method does not match its tensors",
            )
        misread = self._dtype_refusal(spec, mixed.found)
        if misread:
            raise invalid_gene(gene, self.source, misread)
        self._keys[spec] = list(state)
        return self._keys[spec]

    def expand_on_meta(self, spec: ViTSpec, used: set[str] | None = None) -> dict[str, Tensor]:
        """``method.expand(gene, spec)`` on ``meta`` tensors: the shapes it gives, without allocating their memory.

        A method that must read the gene's values (e.g. Cluster-Learngene's centroids) is expanded for real.
        ``used``, when given, receives the names of the gene's tensors the output depends on: expansion is
        differentiable in them (:meth:`~learngene.method.Method.expand`), so on ``meta`` they are autograd leaves
        and the output's graph reaches exactly those (no memory either way); expanded for real, all are counted.
        """
        gene, track = self.gene, used is not None
        leaves = {k: v.to("meta").requires_grad_(track and v.is_floating_point()) for k, v in gene.tensors.items()}
        try:
            with torch.set_grad_enabled(track):
                state = spec.join_layers(self.method.expand(dataclasses.replace(gene, tensors=leaves), spec))
        except (RuntimeError, NotImplementedError) as exc:
            if "meta" not in str(exc):
                raise
            spec.require_memory()
            with torch.no_grad():
                state = spec.join_layers(self.method.expand(gene, spec))
            if used is not None:
                used.update(gene.tensors)
            return state
        if used is not None:
            used.update(_graph_leaves(state, leaves))
            state = {k: v.detach() for k, v in state.items()}
        return state

    def _dtype_refusal(self, spec: ViTSpec, mixed: tuple[str, list[torch.dtype]] | None) -> str | None:
        """Why the expansion into ``spec`` cannot compute with the gene's tensors in their dtypes, or None: it computed
        floating tensors of two dtypes together (``mixed``, :class:`_MixedDtypes`: tal's decoder bias as float64
        beside float32, a float16 peg gene beside the float32 φ its method makes), or computes with a non-floating
        tensor as a number (:meth:`_computed_as_floats`). ``meta``'s kernels do not compare dtypes, so the shape check
        passes both, and the real expansion failed deep in a matmul."""
        tensors = self.gene.tensors
        if mixed is not None:
            op, dtypes = mixed
            where = f"its method computes {dtypes[0]} and {dtypes[1]} tensors together ({op})"
            floats = Counter(t.dtype for t in tensors.values() if t.is_floating_point()).most_common()
            if len(floats) > 1:
                odd = min(k for k, t in tensors.items() if t.dtype == floats[-1][0])
                return f"{where}; its tensor {odd!r} is {floats[-1][0]}, the rest {floats[0][0]}"
            return f"{where}; its tensors are {floats[0][0]}" if floats else where
        ints = self._computed_as_floats(spec)
        return (
            f"its tensor {ints[0]!r} is {tensors[ints[0]].dtype}, where its method computes in floats" if ints else None
        )

    def _computed_as_floats(self, spec: ViTSpec) -> list[str]:
        """The gene's non-floating tensors that its expansion into ``spec`` computes with as numbers: given to it as
        floating leaves on ``meta``, one at a time, the output's graph reaches them; one read as an integer (an index,
        which a floating tensor cannot be) or by value is not among these."""
        found, on_meta = [], {k: v.to("meta") for k, v in self.gene.tensors.items()}
        for key, tensor in self.gene.tensors.items():
            if tensor.is_floating_point():
                continue
            leaves = {**on_meta, key: torch.empty(tensor.shape, device="meta", requires_grad=True)}
            try:
                with torch.enable_grad():
                    state = self.method.expand(dataclasses.replace(self.gene, tensors=leaves), spec)
            except Exception:  # noqa: BLE001  not readable as a float: the method reads it otherwise
                continue
            if key in _graph_leaves(state, leaves):
                found.append(key)
        return found

    def expand(self, spec: ViTSpec, own: StateDict | None = None) -> StateDict:
        """The method's expansion of the gene into ``spec``'s timm keys, for real (no gradients); what timm stacks
        across layers (mixed RoPE's frequencies) stacked, the layers the gene leaves out from ``own`` (the model's
        state_dict; :meth:`~learngene.vit.spec.ViTSpec.join_layers`)."""
        with torch.no_grad():
            return spec.join_layers(self.method.expand(self.gene, spec), own)

    def keeping(self, layers: list[int]) -> BoundMethod:
        """This binding with its gene reduced to ancestry layers ``layers``
        (:meth:`~learngene.method.Method.keep_layers`): what a descendant of that depth keeping them expands."""
        gene = self.method.keep_layers(self.gene, layers)
        return BoundMethod(gene, self.method, self.step, self.source, self.options, self.seed)

    def seeded(self, seed: int) -> BoundMethod:
        """This binding with its method's draws seeded by ``seed`` (mimetic's, a descendant's seed), unless the caller
        gave the seed option itself; itself when nothing changes."""
        option = type(self.method).seed_option
        if not option or option in self.options or self.seed == seed:
            return self
        method = type(self.method)(self.method.config, **{option: seed})
        return BoundMethod(self.gene, method, self.step, self.source, self.options, seed)


class _MixedDtypes(TorchDispatchMode):
    """Notes the first operation, other than a pointwise one (those promote dtypes, on every device), that is given
    floating tensors of more than one dtype (``found``: its name and the dtypes): on ``meta`` it passes, for real it
    fails (a matmul, a layer norm)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: tuple[str, list[torch.dtype]] | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.found is None and torch.Tag.pointwise not in func.tags:
            given = [t for a in (*args, *kwargs.values()) for t in (a if isinstance(a, list | tuple) else [a])]
            dtypes = sorted({t.dtype for t in given if isinstance(t, Tensor) and t.is_floating_point()}, key=str)
            if len(dtypes) > 1:
                self.found = (func.overloadpacket.__name__, dtypes)
        return func(*args, **kwargs)


def bind_gene(
    gene: Learngene,
    step: str = EXPAND,
    *,
    source: str | os.PathLike | None = None,
    method: Method | type[Method] | None = None,
    seed: int | None = None,
    at: ViTSpec | None = None,
    check: bool = True,
    options: Mapping[str, Any] | None = None,
) -> BoundMethod:
    """``gene`` bound to its method for ``step`` (``expand`` or ``adapt``), with the caller's ``options`` (a dict, so
    that an option may share a name with an argument here, such as tal's and front's ``seed``).

    The method is looked up once in the registry (one that this version does not know is refused by
    :func:`~learngene.registry.get_method`) and built once: an option ``step`` does not read is refused, naming
    the step that reads it; a stored option the method refuses refuses the gene (one line naming ``source``, its
    file). ``seed`` sets the method's ``seed_option`` (what ``expand`` draws) unless ``options`` give it. The gene
    is then expanded on ``meta`` (:meth:`BoundMethod.check`) into ``at``, or, by default, into its own layout,
    where a size the method refuses in its own words passes (it is refused when a descendant of it is asked for).

    ``method``: the gene's method class, already looked up (built here, not looked up again), or the method as
    already built (e.g. the one that condensed it: only the check runs). ``check=False`` leaves the check to the
    first :meth:`BoundMethod.check` (e.g. :func:`~learngene.descendant.make_descendant`'s, at the size it makes).
    """
    require_argument(gene, Learngene, "gene", "a Learngene (learngene.Learngene.load(PATH))")
    require_argument(options, (dict, Mapping, type(None)), "options", "a dict of the method's options or None")
    options = dict(options or {})
    if isinstance(method, Method):
        if options or seed is not None:
            raise LearngeneError("a method already made carries its options; bind the gene's method class instead")
    else:
        cls = method or get_method(gene.method)
        refuse_unread(cls, options, step)
        try:  # made with the gene's stored options first: one the method refuses refuses the gene
            stored = cls.checked_config(config_from_dict(cls.Config, gene.config))
        except (LearngeneError, TypeError) as exc:
            raise invalid_gene(gene, source, exc) from None
        if seed is not None and cls.seed_option and cls.seed_option not in options:
            method = cls(stored, **{cls.seed_option: seed}, **options)
        else:
            seed, method = None, cls(stored, **options)
    if method.name != gene.method:
        raise LearngeneError(f"a {gene.method} gene cannot be bound to method {method.name}; pass its own method")
    bound = BoundMethod(gene, method, step, source, options, seed)
    if check:
        _check_bound(bound, at)
    return bound


def _check_bound(bound: BoundMethod, at: ViTSpec | None) -> None:
    """Expand ``bound`` on ``meta`` into ``at``, or else into its gene's own layout, where a size the method refuses
    in its own words passes."""
    if at is not None:
        bound.check(at)
    elif bound.gene.layout is not None:
        try:
            bound.check(bound.gene.layout)
        except GeneFormatError:
            raise
        except LearngeneError:
            # the method refuses this size in its own words (e.g. a PEG gene whose φ was adapted to another size
            # than its layout): expanding to the size asked for says so in one line
            pass


def check_before_saving(gene: Learngene, method: Method | None = None) -> BoundMethod:
    """A gene is saved only if its method can read it: a registered method whose options it takes and whose
    expansion uses its tensors (:func:`bind_gene`); a gene without a layout must expand (on ``meta``) to a small
    size, which refuses e.g. a tleg gene of no tensors."""
    bound = bind_gene(gene, source="the gene to save", method=method)
    check_values(gene, "the gene to save")
    if gene.layout is None:
        try:
            bound.expand_on_meta(SAVE_PROBE)
        except GeneFormatError:
            raise
        except (LearngeneError, KeyError, IndexError) as exc:
            why = first_line(exc, 120)
            raise GeneFormatError(
                f"this {gene.method} gene cannot be expanded ({why}); make it with the method's condense "
                f"(learngene condense)"
            ) from None
    return bound


def _graph_leaves(state: dict[str, Tensor], leaves: dict[str, Tensor]) -> set[str]:
    """Names of ``leaves`` that the tensors of ``state`` depend on (passed through, or through their graph)."""
    reached = {id(t) for t in state.values()}
    # Python wrappers of graph nodes are made on access and freed with their last reference, so an id is only
    # unique while its wrapper lives: ``seen`` holds every visited node alive, or a freed node's id could be
    # handed to the next one and that node (and the leaves below it) skipped (seen with torch 2.11)
    seen: dict[int, Any] = {}
    stack: list[Any] = [t.grad_fn for t in state.values() if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn
        if hasattr(fn, "variable"):  # AccumulateGrad: a leaf
            reached.add(id(fn.variable))
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return {k for k, v in leaves.items() if id(v) in reached}
