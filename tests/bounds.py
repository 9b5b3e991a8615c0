"""How far two float computations of one value may lie apart when only the order of their operations differs
(another CPU, thread count, BLAS build or process count): the bounds the tests' tolerances are derived from.

Higham, *Accuracy and Stability of Numerical Algorithms* (2nd ed., 2002), §3.1 and §3.5: a sum of n floats,
added in any order, lies within γ(n−1)·Σ|xᵢ| of the exact sum, and a dot product of length n within γ(n)·Σ|xᵢyᵢ|,
where γ(n) = n·u / (1 − n·u) and u is the unit roundoff (2⁻²⁴ for float32, 2⁻⁵³ for float64). Two orders are
each that close to the exact value, hence within twice that of each other. A result made of k such steps in a row
(layer after layer) carries up to k of them, each relative to the magnitude flowing through that step.
"""

from __future__ import annotations

U32, U64 = 2.0**-24, 2.0**-53  # unit roundoff: half the machine epsilon (torch.finfo(dtype).eps / 2)


def gamma(n: int, u: float = U32) -> float:
    """Higham's γ(n): the relative error bound of n floating-point operations in a row."""
    return n * u / (1 - n * u)


def order_bound(terms: int, magnitude: float, steps: int = 1, u: float = U32) -> float:
    """How far two evaluations of ``steps`` reductions in a row, each summing ``terms`` products whose absolute
    values add up to ``magnitude``, may differ when their order of operations differs: ``2·steps·γ(terms)·magnitude``."""
    return 2 * steps * gamma(terms, u) * magnitude


def forward_steps(depth: int) -> int:
    """Reductions in a row in a ViT's forward pass: the patch embedding, 8 per block (two LayerNorms, q·kᵀ, the
    softmax's sum, the attention-weighted sum, the projection, the MLP's two layers) and the head."""
    return 2 + 8 * depth


def assert_same_forward(got, expected, depth: int, widest: int, msg=None) -> None:
    """Two forward passes of one function of the input computed in other orders (another implementation, channels
    permuted, heads split otherwise): within :func:`order_bound` of ``forward_steps(depth)`` reductions of at most
    ``widest`` terms, relative to the larger of 1 (LayerNorm's unit scale inside) and the output's largest value."""
    import torch

    magnitude = max(1.0, float(expected.detach().abs().max()))
    atol = order_bound(widest, magnitude, forward_steps(depth))
    torch.testing.assert_close(got, expected, rtol=0, atol=atol, msg=msg)


def assert_same_training(got: dict, expected: dict, lr: float, steps: int, terms: int, depth: int) -> None:
    """The weights of two trainings of one model that differ only in the order of their float32 sums (another batch
    split, kernel or attention implementation), ``steps`` AdamW steps at peak ``lr``.

    AdamW's step lr·m̂/(√v̂ + ε) is scale-free, so a gradient off by a relative r (its sums of ``terms`` products through
    the ``forward_steps(depth)`` layers, twice: forward and backward, r ≤ 4·forward_steps·γ(terms)) moves a weight by
    about 2·r·lr per step (m̂ and √v̂ each). Where a gradient cancels to its own rounding level its sign, and so a
    whole step of up to lr, may differ: every weight stays within 2·lr·steps, and at most :data:`RARE_SHARE` of them
    beyond the rounding bound (measured: ≤ 5 in 50,000). A wrong batch split, a dropped average or a kernel that
    computes something else moves nearly every weight by a good share of lr per step instead."""
    import torch

    assert got.keys() == expected.keys() and got
    noise = steps * lr * 2 * order_bound(terms, 1.0, 2 * forward_steps(depth))
    floats = [k for k in expected if expected[k].is_floating_point()]
    assert all(torch.equal(got[k], expected[k]) for k in expected if k not in floats)
    diffs = torch.cat([(got[k].double() - expected[k].double()).abs().flatten() for k in floats])
    assert diffs.max() <= 2 * lr * steps, f"a weight moved by {diffs.max():.2e}, more than AdamW's steps can"
    beyond = int((diffs > noise).sum())
    assert beyond <= RARE_SHARE * len(diffs), f"{beyond} of {len(diffs)} weights differ by more than {noise:.1e}"


RARE_SHARE = 0.01  # weights whose gradient cancels to rounding, whose step's sign may differ: at most 1 in 100
