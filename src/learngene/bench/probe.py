"""Whether two descendants compute the same function as fine-tuning begins: their outputs on a fixed probe batch.

A digest of the weights tells apart starts that compute the same function: front and pretrained at the ancestry's
own size differ by float rounding in most tensors, importance reorders heads and MLP neurons (a permutation inside a
block that the block's output does not see). Their outputs on any input are equal up to rounding, so a report that
counts them as one start asks the probe, not the weights.

The fingerprint (:func:`fingerprint`) is the outputs' norm and their projections on :data:`DIRECTIONS` fixed random
unit directions (pre-logits features and logits of :data:`PROBE_IMAGES` fixed random images, in float64). Two starts
are one (:func:`same_function`) when every projection differs by at most :data:`RTOL` times the larger norm. Why
that sees rounding: by Cauchy–Schwarz a projection on a unit direction moves by at most the norm of the outputs'
difference, so outputs that differ by rounding of relative size ≤ RTOL always match. Why it sees a different
function: a difference of norm δ projects on a random unit direction of n dimensions to about δ/√n, and all
:data:`DIRECTIONS` of them fall under the tolerance together only for a difference near the rounding.
"""

from __future__ import annotations

import math
from typing import Any

import torch

PROBE_IMAGES = 4
DIRECTIONS = 8
SEED = 0
# float32 sums of a few thousand terms round at ~1e-6 relative (eps 6e-8 × √terms); front and pretrained, whose
# weights differ by ≤ 1.2e-7, differ far less at the output; 1e-4 leaves that a hundredfold margin, while starts that
# differ differ in their outputs at 1e-2 or more (another random draw, another layer)
RTOL = 1e-4
PREFIX = "probe:"


def fingerprint(model: torch.nn.Module, img_size: int, in_chans: int) -> str:
    """``probe:NORM:P1 ... P8`` (no commas: a CSV cell anyone can split) of ``model``'s outputs on the probe batch (in eval mode, no gradients; its mode is
    restored)."""
    gen = torch.Generator().manual_seed(SEED)
    images = torch.randn(PROBE_IMAGES, in_chans, img_size, img_size, generator=gen)
    param = next(model.parameters(), None)
    if param is not None:
        images = images.to(device=param.device, dtype=param.dtype)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            outputs = _outputs(model, images)
    finally:
        model.train(training)
    flat = outputs.detach().double().cpu().flatten()
    directions = torch.randn(DIRECTIONS, flat.numel(), generator=gen, dtype=torch.float64)
    directions /= directions.norm(dim=1, keepdim=True)
    projections = directions @ flat
    return f"{PREFIX}{flat.norm().item():.9g}:" + " ".join(f"{p:.9g}" for p in projections.tolist())


def _outputs(model: Any, images: torch.Tensor) -> torch.Tensor:
    """Pre-logits features and logits, side by side: a zero-initialized head would make every logit 0 alike."""
    if hasattr(model, "forward_features") and hasattr(model, "forward_head"):
        features = model.forward_features(images)
        pooled = model.forward_head(features, pre_logits=True)
        logits = model.get_classifier()(pooled) if hasattr(model, "get_classifier") else model.forward_head(features)
        return torch.cat([pooled.flatten(1), logits.flatten(1)], dim=1)
    return model(images)


def parse(text: str) -> tuple[float, list[float]] | None:
    """(norm, projections) of a fingerprint; None for a text that is none (rows from before probes)."""
    if not text.startswith(PREFIX):
        return None
    norm, values = text[len(PREFIX) :].split(":")
    return float(norm), [float(v) for v in values.split()]


def same_function(a: str, b: str) -> bool:
    """Whether two fingerprints are of one function, up to rounding of relative size :data:`RTOL`."""
    pa, pb = parse(a), parse(b)
    if pa is None or pb is None or len(pa[1]) != len(pb[1]):
        return False
    scale = max(pa[0], pb[0])
    if not math.isfinite(scale):
        return False
    return all(abs(x - y) <= RTOL * scale for x, y in zip(pa[1], pb[1], strict=True))
