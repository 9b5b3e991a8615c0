"""Learngene Pool (Shi, Xia, Yang, Chen, Kou & Geng, "Building Variable-sized Models via Learngene Pool",
AAAI 2024, arXiv 2312.05743), as far as a plain timm ViT can hold it.

The ancestry is distilled into several small auxiliary models with fewer blocks (``instance_depths``;
each trained in its own aux net by the one distillation loop); their blocks are the learngene instances
of the pool. A descendant of depth ``L`` is stitched sequentially from the smaller instance to the larger
(the paper's stitching direction): its layers are shared among the instances in proportion to their
depths (largest remainders), the smallest instance gives its first blocks and the embeddings, the
largest its last blocks, final norm and head, the ones between evenly spaced blocks; an instance asked
for more layers than it has repeats its blocks in order.

What the paper has that a plain timm ViT cannot hold, and is therefore left out (so this is the pool at
one width, not the full method): instances of reduced width (the paper's second group of aux models),
the learnable transformation matrices that stitch instances of different widths, and the dense
distillation of block and attention outputs through such matrices; here every instance has the aux net's
width, stitching is the identity, and each instance distils the ancestry's logits (or, for a headless
ancestry, its pooled features) like the other aux-net methods. The paper's own sizes of the aux models
could not be read (no public code: the authors' repository holds only a README); ours are
``⌈L/4⌉`` and ``⌈L/2⌉`` blocks of an ``L``-block aux spec.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..auxnet import AuxConfig, AuxNetMethod, condense_through_aux, resolve_aux_spec
from ..errors import LearngeneError
from ..gene import Learngene
from ..method import Ancestry, CondenseInputs, Paper
from ..registry import register_method
from ..vit.spec import ViTSpec
from ..vit.transfer import StateDict, inherit_non_block, part_of, place_blocks, require_block_shape, stretch


@dataclass(frozen=True)
class PoolConfig(AuxConfig):
    instance_depths: str = ""  # blocks of each small aux model, e.g. "1,2"; "": ⌈L/4⌉ and ⌈L/2⌉ of the aux spec


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


@register_method
class LearngenePool(AuxNetMethod):
    name = "pool"
    stores = "the blocks of several small aux models, each distilled from the ancestry"
    expands_to = "any depth at their width, stitched from the smallest instance to the largest"
    summary = "blocks of several small distilled aux models, stitched smallest to largest; any depth at their width"
    paper = Paper(
        "Building Variable-sized Models via Learngene Pool",
        "Shi, Xia, Yang, Chen, Kou & Geng",
        "AAAI",
        2024,
        "2312.05743",
    )
    Config = PoolConfig
    needs_data = True
    needs_vit_ancestry = False
    distill_lambda = 1.0

    def depths(self, aux: ViTSpec) -> list[int]:
        text = self.config.instance_depths
        try:
            depths = (
                [int(x) for x in str(text).split(",")]
                if text
                else sorted({math.ceil(aux.depth / 4), math.ceil(aux.depth / 2)})
            )
        except ValueError:
            raise LearngeneError(
                f"pool instance_depths={text!r} is not comma-separated block counts, e.g. 1,2"
            ) from None
        if not depths or min(depths) < 1:
            raise LearngeneError(f"pool instance_depths={text!r} needs positive block counts")
        return sorted(depths)

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        aux = resolve_aux_spec(self.config, ancestry, inputs, self.name)
        depths = self.depths(aux)
        source = ancestry.spec if ancestry is not None else None
        tensors: StateDict = {}
        cost: dict = {"steps": 0, "seconds": 0.0, "instances": []}
        for i, depth in enumerate(depths):
            torch.manual_seed((inputs.train_cfg.seed if inputs is not None else 0) + i)
            spec = aux.replace(depth=depth)
            start = {instance_key(i, k): v.detach().clone() for k, v in spec.create_model().state_dict().items()}
            own = inputs
            if inputs is not None and inputs.run_dir is not None:  # each instance checkpoints apart
                own = dataclasses.replace(inputs, run_dir=Path(inputs.run_dir) / f"instance{i}")
            trained = condense_through_aux(
                self, self.new_gene(start, spec, source), self.require_ancestry(ancestry), own
            )
            # a descendant reads the smallest instance's embeddings and the largest's final norm and head: only those
            for key, tensor in trained.tensors.items():
                name = key.split(".", 1)[1]
                embed = part_of(name) == "embed"
                if name.startswith("blocks.") or (embed and i == 0) or (not embed and i == len(depths) - 1):
                    tensors[key] = tensor
            for key in ("steps", "seconds"):
                cost[key] += trained.cost.get(key, 0)
            cost["instances"].append({"depth": depth, **trained.cost})
        config = dataclasses.replace(self.config, instance_depths=",".join(map(str, depths)))
        gene = Learngene(
            method=self.name,
            tensors=tensors,
            config=dataclasses.asdict(config),
            layout=aux.replace(depth=sum(depths)),
            ancestry=source,
            cost=cost,
        )
        return gene

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        layout = gene.require_layout()
        present = sorted({int(k.split(".", 1)[0][len("instance") :]) for k in gene.tensors})
        depths = self.depths(layout)
        if len(present) == 1 and spec == layout:  # one instance in its own aux net (condensation): its weights
            i = present[0]
            return {k[len(instance_key(i, "")) :]: v for k, v in gene.tensors.items()}
        if present != list(range(len(depths))):
            raise LearngeneError(
                f"this pool gene holds instances {present} but its config names {len(depths)}; "
                f"create it again with `learngene condense`"
            )
        require_block_shape(layout, spec, self.name)
        states = [
            {k[len(instance_key(i, "")) :]: v for k, v in gene.tensors.items() if k.startswith(instance_key(i, ""))}
            for i in range(len(depths))
        ]
        out: StateDict = {}
        for layer, (i, block) in enumerate(stitched_layers(depths, spec.depth)):
            out.update(place_blocks(states[i], {layer: block}))
        first, last = states[0], states[-1]
        ends = {
            k: (first if part_of(k) == "embed" else last)[k]
            for k in set(first) | set(last)
            if not k.startswith("blocks.") and k in (first if part_of(k) == "embed" else last)
        }
        out.update(inherit_non_block(ends, layout.replace(depth=depths[-1]), spec))
        return out

    def describe(self, gene: Learngene) -> list[str]:
        layout = gene.require_layout()
        return [
            f"pool of {len(self.depths(layout))} instances of {', '.join(map(str, self.depths(layout)))} blocks "
            f"(width {layout.embed_dim}), stitched smallest to largest"
        ]
