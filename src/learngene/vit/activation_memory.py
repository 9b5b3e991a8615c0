"""What a ViT's activations take in memory: a training step's lower bound, and the refusal, before anything is
allocated, of a data-driven condensation whose forward passes cannot fit; the spec at the size of the images such a
method feeds its ancestry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import LearngeneError, named
from ..host.memory import require_free_memory

if TYPE_CHECKING:
    from .spec import ViTSpec


def training_activation_bytes(
    tokens: int, width: int, heads: int, hidden: int, depth: int, batch: int, bytes_per_value: int = 4
) -> int:
    """At least what a training step keeps for backward: per block and image, the block's input, q/k/v and the
    attention output (4·N·D values), the MLP's hidden activations (N·hidden) and one N×N attention map per head.
    A lower bound (norms, GELU inputs and the optimizer come on top), so that a size it refuses cannot fit."""
    per_block = tokens * (4 * width + hidden) + heads * tokens * tokens
    return bytes_per_value * batch * depth * per_block


def measured_spec(model: Any, spec: ViTSpec, data: Any) -> ViTSpec:
    """``spec`` at the size of the images a data-driven method feeds ``model``: its own, or, for a model that takes
    any size (a position grid resampled per input, as RADIO's 2048-px grid fed 512-px images), the data's.
    Anything else is one line: the data must be loaded at the ancestry's size and channels."""
    from .naflex import image_input

    expects = image_input(model)
    any_size = bool(expects and expects[2])
    if data.in_chans != spec.in_chans or (data.img_size != spec.img_size and not any_size):
        raise LearngeneError(
            f"{data.name} has {data.in_chans}-channel {data.img_size}px images but the ancestry takes "
            f"{spec.in_chans}-channel {spec.img_size}px ones; load the data at the ancestry's size"
        )
    return spec if data.img_size == spec.img_size else spec.replace(img_size=data.img_size)


def require_inference_memory(
    spec: ViTSpec, batch: int, method: str, kept_images: int = 0, map_bytes: int = 4, device: Any = None
) -> None:
    """Refuse in one line, before anything is allocated, a data-driven condensation whose forward passes cannot fit:
    one block's activations of ``batch`` images (tokens × (4·width + MLP) values, and one N×N attention map per
    head held at ``map_bytes`` per value where a method reads the maps), plus the tokens of ``kept_images`` held
    between blocks. A lower bound, as the aux-net methods' estimate (:func:`training_activation_bytes`)."""
    N, D = spec.num_tokens, spec.embed_dim
    need = 4 * batch * N * (4 * D + spec.mlp_hidden) + map_bytes * batch * spec.num_heads * N * N
    need += 4 * kept_images * N * D
    require_free_memory(
        need,
        f"{method} runs {batch} images of {N:,} tokens ({spec.img_size}px) at a time through {spec.short()}, which",
        f"choose a smaller batch_size (--opt batch_size=N) (and num_images) or a smaller {named('img_size')}",
        device=device,
        lower_bound=True,
    )
