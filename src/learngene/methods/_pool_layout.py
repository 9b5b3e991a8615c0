"""Learngene Pool's options and the layout of its gene: which instance each tensor belongs to, how a descendant's
layers are shared among the instances, and the text of a stitch (:mod:`learngene.methods.pool` explains the method;
this module holds what its condensation, expansion and stitched descendants all read)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from ..errors import LearngeneError, assigned
from ..gene import Learngene
from ..settings import field
from ..training.auxnet import AuxConfig
from ..validate import CONDENSE
from ..vit.transfer import StateDict, stretch


@dataclass(frozen=True)
class PoolConfig(AuxConfig):
    design: Literal["equal_width", "authors"] = field(
        "equal_width", phase=CONDENSE, help="authors: instances of other widths, linear stitches"
    )
    instance_depths: str = field(
        "", phase=CONDENSE, help='equal_width: blocks of each small aux model, e.g. "1,2"; "": ⌈L/4⌉ and ⌈L/2⌉'
    )
    widths: str = field(
        "", phase=CONDENSE, help='authors: width of each instance, e.g. "8,16,32"; "": ¼, ½ and 1 of the aux width'
    )
    instance_depth: int = field(
        0, phase=CONDENSE, help="authors: blocks of every instance; 0: ⌈L/2⌉ of the aux spec (their 6 of 12)"
    )
    joint_epochs: int = field(
        0,
        phase=CONDENSE,
        help="authors: epochs of their third step, the whole pool trained on randomly drawn stitches "
        "(theirs: 50); 0: off",
        at_least=0,
    )
    # the paper's stated contribution is the start from the learned maps; least squares is SN-Net's rule, which the
    # only public port also ships (its snnet mode)
    stitch_init: Literal["learned", "least_squares"] = field(
        "learned",
        phase=CONDENSE,
        help="authors: stitches start as the mean of each instance's three learned teacher→student maps, transposed "
        "(the paper), or as least-squares fits on 100 images (SN-Net)",
    )

    def __post_init__(self) -> None:
        # an option of the other design would change nothing, yet be recorded: refused when the method is made
        others = {
            "equal_width": ("widths", "instance_depth", "joint_epochs", "stitch_init"),
            "authors": ("instance_depths",),
        }
        for name in others.get(self.design, ()):
            value = getattr(self, name)  # a negative count is left to the range check that follows
            if value != PoolConfig.__dataclass_fields__[name].default and not (isinstance(value, int) and value < 0):
                other = "authors" if self.design == "equal_width" else "equal_width"
                raise LearngeneError(
                    f"pool option {name} applies to design={other}, not {self.design}; leave it out, or pass "
                    f"{assigned('design', other, flag='--opt')}"
                )


def instance_key(index: int, key: str) -> str:
    return f"instance{index}.{key}"


def share(total: int, weights: list[int]) -> list[int]:
    """``total`` layers split in proportion to ``weights``, largest remainders first (ties: the later instance)."""
    exact = [total * w / sum(weights) for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], -i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def stitched_layers(depths: list[int], total: int) -> list[tuple[int, int]]:
    """(instance, block) of each of ``total`` descendant layers, from the smallest instance to the largest."""
    out: list[tuple[int, int]] = []
    last = len(depths) - 1
    for i, (depth, n) in enumerate(zip(depths, share(total, depths))):
        if n >= depth or 0 < i < last:
            blocks = stretch(depth, n).tolist()
        elif i == 0:
            blocks = list(range(n))  # the first blocks follow the embeddings they were trained with
        else:
            blocks = list(range(depth - n, depth))  # the last blocks precede the final norm and head
        out += [(i, b) for b in blocks]
    return out


def instance_state(gene: Learngene, index: int) -> StateDict:
    prefix = instance_key(index, "")
    return {k[len(prefix) :]: v for k, v in gene.tensors.items() if k.startswith(prefix)}


# how a message names a stitched descendant to ask for, for both callers
STITCH = "output=('stitch', 'F:J-E:K') (learngene expand GENE --stitch F:J-E:K)"


def parse_stitch(text: str) -> tuple[int, int, int, int]:
    """``F:J-E:K`` (``learngene expand --stitch``) -> ``(front, end, cut_front, cut_end)``."""
    match = re.fullmatch(r"(\d+):(\d+)-(\d+):(\d+)", text.strip())
    if match is None:
        raise LearngeneError(
            f"stitch (--stitch) {text!r} is not FRONT:BLOCK-END:BLOCK; e.g. 0:1-2:0 runs instance 0 through block 1, "
            f"then instance 2 from block 0"
        )
    front, cut_front, end, cut_end = map(int, match.groups())
    return front, end, cut_front, cut_end
