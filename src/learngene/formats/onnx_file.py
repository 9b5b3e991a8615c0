"""A model to ONNX through torch's dynamo exporter, checked against PyTorch by onnxruntime before it is written.

Why the dynamo exporter (``torch.onnx.export(..., dynamo=True)``): it exports from ``torch.export``'s graph, so every
family learngene builds goes through it, RoPE and DINOv3 (timm's Eva) included. The legacy TorchScript exporter traces
Python and fails on Eva's attention (``is_causal must be bool, not Tensor``: the traced value of a flag becomes a
tensor), and TorchScript is deprecated.

The export runs onnxruntime on a seeded probe batch (two batch sizes when the batch is dynamic) and compares its
outputs with PyTorch's: the largest absolute difference is said, recorded in the ONNX file's ``metadata_props``
(:data:`METADATA_KEY`, a JSON object, with the opset, batch mode, input shape, bound and library versions), and a
difference above :func:`parity_bound` is refused in one line, before anything is written. The file is written
atomically (:func:`learngene.formats.atomic.write_bytes_atomic`).

``onnx``, ``onnxscript`` and ``onnxruntime`` are the optional extra ``onnx``; without them the export refuses in one
line that names it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import LearngeneError, first_line, require_argument
from .atomic import library_version, write_bytes_atomic

# Opset 18 is the dynamo exporter's own: it translates torch's ops into opset-18 ONNX functions and converts to other
# opsets with onnx's version converter afterwards. onnxruntime runs it since 1.14 (2023).
DEFAULT_OPSET = 18
# The oldest opset onnxruntime runs; the newest is the one the installed onnx knows (onnx.defs.onnx_opset_version()).
MIN_OPSET = 7
MAX_OPSET = 1000  # no ONNX release comes near it: the range the command line's flag allows
METADATA_KEY = "learngene_export"
INPUT_NAME = "pixel_values"  # transformers' and Optimum's name for an image model's input
EXTRA = 'pip install "learngene-vit[onnx]"'
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
# The example batch the graph is exported at when the batch is dynamic: torch.export specializes a dimension of size 1
# (it would be fixed to 1), so the example has 2; the probes then run at two other sizes, 1 among them.
DYNAMIC_EXAMPLE_BATCH = 2
DYNAMIC_PROBE_BATCHES = (1, 3)
MAX_BATCH = 65536  # a fixed batch beyond any deployment's, refused before a probe of that size is drawn
# A protobuf message cannot exceed 2 GiB: a larger ONNX file keeps its weights in external data files, which are not
# written here.
MAX_PROTO_BYTES = 2**31 - 2**20

# Why 1e-4: onnxruntime and PyTorch compute the same fp32 graph with different kernels (summation order, fused
# attention and LayerNorm, erf approximations). Each reordered reduction of K terms moves a result by at most about
# K * 2^-24 relative to the sum of the terms' magnitudes, and in practice by about sqrt(K) * 2^-24 (rounding errors of
# random sign): for a ViT-B/16 (K up to 3072 in the MLP), 55 * 6e-8 = 3.3e-6 relative per reduction. A block has about
# six reductions in sequence (qkv, scores, attention-weighted sum, projection, fc1, fc2) and residuals add rather than
# compound their errors, so twelve blocks give about 72 * 3.3e-6 = 2.4e-4 in the worst alignment and a few 1e-6
# typically (measured, docs/guides/export.md: 3e-8 to 1e-6 on outputs of magnitude up to 2.6 for the depth-2 models of
# every family the tests build, 2.3e-6 for a ViT-B/16 at 224 px). 1e-4 of the outputs' scale keeps about two orders of
# magnitude of margin over what is measured and still catches a real translation fault (a wrong op or constant moves
# outputs by 1e-2 and more of their scale).
RELATIVE_BOUND = 1e-4


def parity_bound(reference_scale: float) -> float:
    """The largest difference accepted between onnxruntime's and PyTorch's outputs: :data:`RELATIVE_BOUND` times the
    outputs' scale, the largest |output| of PyTorch on the probe batch, at least 1 (an fp32 rounding error is relative
    to the values that are summed, which near-zero outputs understate)."""
    return RELATIVE_BOUND * max(1.0, reference_scale)


def require_onnx() -> None:
    """Refuse in one line, naming the extra, when a package the ONNX export needs is not installed."""
    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise LearngeneError(f"ONNX export needs {', '.join(missing)}, which is not installed; {EXTRA}")


def check_opset(opset: Any) -> int:
    """``opset``: an integer from :data:`MIN_OPSET` to the newest opset the installed onnx knows (to
    :data:`MAX_OPSET` without onnx, where no ONNX file is written)."""
    require_argument(opset, int, "opset", "an ONNX opset number (an int)")
    newest = MAX_OPSET
    if importlib.util.find_spec("onnx") is not None:
        import onnx

        newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= newest:
        raise LearngeneError(
            f"opset (--opset) {opset} is outside {MIN_OPSET}..{newest}, the opsets onnxruntime runs and the "
            f"installed onnx knows; give one in that range (default {DEFAULT_OPSET})"
        )
    return opset


@dataclass(frozen=True)
class OnnxRequest:
    """What to export: the input's ``(channels, height, width)``, the ``opset``, a ``dynamic_batch`` (else the graph
    takes batches of ``batch_size`` only), the probe's ``seed`` and the output's name (``logits``, or ``embedding``
    for a model without a classifier)."""

    input_size: tuple[int, int, int]
    opset: int = DEFAULT_OPSET
    dynamic_batch: bool = False
    batch_size: int = 1
    seed: int = 0
    output_name: str = "logits"

    @property
    def example_batch(self) -> int:
        return DYNAMIC_EXAMPLE_BATCH if self.dynamic_batch else self.batch_size

    @property
    def probe_batches(self) -> tuple[int, ...]:
        return DYNAMIC_PROBE_BATCHES if self.dynamic_batch else (self.batch_size,)

    def probe(self, batch: int) -> torch.Tensor:
        """A probe batch of ``batch`` images: standard normal values, as normalized pixels are, drawn from a generator
        seeded by ``seed`` and the batch size (the same probe on every run)."""
        generator = torch.Generator().manual_seed(self.seed * 1000 + batch)
        return torch.randn((batch, *self.input_size), generator=generator)


def export_onnx(
    path: str | os.PathLike,
    model: nn.Module,
    request: OnnxRequest,
    overwrite: bool = False,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Export ``model`` to ONNX at ``path`` (atomically) once onnxruntime's outputs match PyTorch's on the probe
    batches within :func:`parity_bound`; the record written to the file's ``metadata_props`` (:data:`METADATA_KEY`),
    which also holds ``metadata`` (e.g. the preprocessing the model expects), is returned."""
    require_onnx()
    check_opset(request.opset)
    proto = _exported_proto(model, request)
    if proto.ByteSize() > MAX_PROTO_BYTES:
        raise LearngeneError(
            f"the ONNX model is {proto.ByteSize() / 2**30:.1f} GiB, over protobuf's 2 GiB limit; a model this large "
            f"needs ONNX external data, which learngene does not write: export it as a hub folder (--format hub)"
        )
    record = {**_parity(model, proto.SerializeToString(), request), **(metadata or {})}
    del proto.metadata_props[:]
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(record, sort_keys=True)
    write_bytes_atomic(path, proto.SerializeToString(), overwrite)
    return record


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode (dropout off, as ONNX inference runs it), its own mode restored afterwards: the caller's
    model is not changed."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes.items():
            module.training = training


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter's progress lines (printed), notes and warnings, held back: the command says one line of its own."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _exported_proto(model: nn.Module, request: OnnxRequest) -> Any:
    """The ONNX ``ModelProto`` of ``model`` from torch's dynamo exporter, or one line saying why torch cannot export
    it."""
    example = request.probe(request.example_batch)
    dynamic = ({0: "batch"},) if request.dynamic_batch else None
    try:
        with _eval_mode(model), torch.no_grad(), _quiet_exporter():
            program = torch.onnx.export(
                model,
                (example,),
                dynamo=True,
                opset_version=request.opset,
                dynamic_shapes=dynamic,
                input_names=[INPUT_NAME],
                output_names=[request.output_name],
            )
    except Exception as exc:  # noqa: BLE001  torch.export and the translation raise many kinds; all say the same
        raise LearngeneError(
            f"torch's ONNX exporter cannot export this {type(model).__name__} at opset {request.opset} "
            f"({first_line(exc)}); try another opset (--opset), or export a hub folder or timm state dict "
            f"(--format hub, --format timm)"
        ) from None
    if program is None:  # only the legacy exporter returns None
        raise LearngeneError("torch's ONNX exporter returned no program; upgrade torch")
    return program.model_proto


def _parity(model: nn.Module, proto_bytes: bytes, request: OnnxRequest) -> dict[str, Any]:
    """Run the ONNX model in onnxruntime and ``model`` in PyTorch on the probe batches; the largest absolute
    difference, refused above :func:`parity_bound`, with what the record says of the export."""
    import onnx
    import onnxruntime
    import onnxscript

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = max(1, torch.get_num_threads())  # the thread count torch was given
    session = onnxruntime.InferenceSession(proto_bytes, options, providers=["CPUExecutionProvider"])
    diff, scale = 0.0, 0.0
    with _eval_mode(model), torch.no_grad():
        for batch in request.probe_batches:
            probe = request.probe(batch)
            expected = _first_output(model(probe)).float().numpy()
            got = session.run(None, {INPUT_NAME: probe.numpy()})[0]
            if got.shape != expected.shape or not np.isfinite(got).all():
                what = f"of shape {got.shape}" if got.shape != expected.shape else "not finite"
                raise LearngeneError(
                    f"onnxruntime's output on a batch of {batch} is {what} where PyTorch's is of shape "
                    f"{tuple(expected.shape)}; the export is wrong and nothing was written"
                )
            diff = max(diff, float(np.abs(got - expected).max()))
            scale = max(scale, float(np.abs(expected).max()))
    bound = parity_bound(scale)
    record = {
        "opset": request.opset,
        "batch": "dynamic" if request.dynamic_batch else f"fixed {request.batch_size}",
        "input_name": INPUT_NAME,
        "input_shape": ["batch" if request.dynamic_batch else request.batch_size, *request.input_size],
        "output_name": request.output_name,
        "probe_batches": list(request.probe_batches),
        "probe_seed": request.seed,
        "max_abs_diff": diff,
        "output_scale": scale,
        "bound": bound,
        "learngene": library_version(),
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxscript": onnxscript.__version__,
        "onnxruntime": onnxruntime.__version__,
    }
    if not diff <= bound:  # a NaN difference is refused too
        raise LearngeneError(
            f"onnxruntime's outputs differ from PyTorch's by up to {diff:.3g} on the probe batch, above the bound "
            f"{bound:.3g} ({RELATIVE_BOUND:g} of the outputs' scale {max(1.0, scale):.3g}): the export is not "
            f"faithful and nothing was written; try another opset (--opset), or export a hub folder (--format hub)"
        )
    return record


def _first_output(output: Any) -> torch.Tensor:
    """The tensor a model returns (the first, for a model that returns several)."""
    if isinstance(output, (tuple, list)):
        return _first_output(output[0])
    return output
