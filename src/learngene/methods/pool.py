"""Learngene Pool (Shi, Xia, Yang, Chen, Kou & Geng, "Building Variable-sized Models via Learngene Pool",
AAAI 2024, arXiv 2312.05743), as far as a plain timm ViT can hold it.

The ancestry is distilled into several small auxiliary models with fewer blocks (``instance_depths``;
each trained in its own aux net by the one distillation loop); their blocks are the learngene instances
of the pool. A descendant of depth ``L`` is stitched sequentially from the smaller instance to the larger
(the paper's stitching direction): its layers are shared among the instances in proportion to their
depths (largest remainders), the smallest instance gives its first blocks and the embeddings, the
largest its last blocks, final norm and head, the ones between evenly spaced blocks; an instance asked
for more layers than it has repeats its blocks in order.

Two designs (``design``):

``authors``: the pool as the authors' code builds it (github.com/ZhenuYang/Yuanmou, read at b3e20a0,
``learngene_methods/learngene_pool``; a PyTorch port of the authors' MindSpore superselll/learngenepool):
instances of **different widths** and equal depth (theirs: DeiT-Ti,
-S and -B-like nets of 6 or 9 blocks, 192/384/768 wide, heads of 64, distilled from a 12-block DeiT-B),
joined by linear stitch layers. Ours: ``widths`` (default ¼, ½ and 1 of the aux width, as theirs of
DeiT-B's), heads scaled with the width (at least one), ``instance_depth`` blocks (default ⌈L/2⌉ of an
``L``-block aux spec: their 6 of 12). Stitches as their ``paired_stitching`` (window of two blocks, stride
one): front block ``j`` may feed end block ``k`` for ``|j − k| ≤ 1``, the pairs of one window sharing one
stitch layer; one set per pair of instances, narrower to wider. How a stitch layer starts (``stitch_init``):
``learned``, the default and the paper's stated contribution (their code's ``mode='ours'``): each instance also
distils the ancestry's hidden states at the ends of its thirds through three learned teacher→student maps, and a
stitch starts as the mean of the front instance's maps, transposed, with no bias
(:mod:`learngene.methods._pool_maps`); ``least_squares``: the least-squares affine map from the front block's output
tokens to the tokens entering the end block, on up to 100 training images (their ``snnet`` initialization, which
the port runs by default, ``stitch_init_bs`` 100), the fits of the window's pairs averaged. A stitched
descendant is a ``StitchedViT``
(:func:`stitched_descendant`; ``learngene expand GENE --stitch F:J-E:K`` writes one); a plain timm ViT from
this gene is the instance of its width, its blocks spread over the asked depth (``⌊t·d/L⌋``, ours: their
unstitched configurations are the instances as they are).

Their third step (``main.py`` with ``conf_build.yaml``) trains the whole pool at once: each step runs one
configuration drawn uniformly from the narrowest instance, the widest and every stitch from the narrowest into
the widest (their configurations 0, 2 and 19–34 of 6-block instances; the middle instance and its stitches are
not drawn), distilling the teacher's logits, ``(1−α)·CE + α·τ²·KL`` at α = 0.5, τ = 1, for 50 epochs at lr
1e-4. ``joint_epochs`` does it (:class:`JointPool`, through the one training loop) with the run's λ, τ, learning
rate and batch size (pool's default λ is 1, pure KL; their KL is also divided by the class count, as DeiT's
code does, ours is not). Its default is 0, off: it is their costliest step (50 epochs of the pool after the aux
nets' own training; each step runs one drawn net, as deep as an instance and up to the widest instance's width,
so an epoch costs about as much as one of the instances' own) and it needs the ancestry's logits (a headless
ancestry is refused for it); without it the stitches keep their start (`stitch_init`) and a stitched descendant is
fine-tuned as any other.

Departures: their aux nets (step one, ``distill.py``, ``conf_aux_*.yaml``, 100 epochs) distil dense features
through learned transformation matrices (``trans_layer.py``: ``0.1·CE + 0.9·(logit loss + MSE of hidden states +
MSE of attention outputs)``, student blocks at the end of each third against teacher blocks 4, 8 and 12); ours
distil the logits and, with ``stitch_init=learned``, the hidden states (no attention outputs), with the run's λ. Their stitch fit reads the *last* block's output for an end block 0
(index ``-1``), ours the embedded tokens entering it.

``equal_width`` (the default, our own variant): every instance has the aux net's width, stitching is the
identity, so a descendant is a plain timm ViT of any depth at that width. Instance depths
``instance_depths`` (ours: ``⌈L/4⌉`` and ``⌈L/2⌉`` blocks of an ``L``-block aux spec), each instance
distilling the ancestry's logits (or, for a headless ancestry, its pooled features) like the other aux-net
methods.

Authors' code: github.com/ZhenuYang/Yuanmou at b3e20a0 (``learngene_methods/learngene_pool``, removed from the
repository later); github.com/superselll/learngenepool (commit 4f6bd2f: the MindSpore version, not re-read here).
"""

from __future__ import annotations

import dataclasses
import math
from typing import cast

import torch

from ..errors import LearngeneError, assigned
from ..gene import Learngene, invalid_gene
from ..method import Ancestry, CondenseInputs, ExpandOutput, Paper, config_from_dict, refused_by
from ..registry import register_method
from ..training import distributed as dist
from ..training.auxnet import AuxNetMethod, aux_size, condense_through_aux, is_headless, resolve_aux_spec
from ..vit.spec import ViTSpec
from ..vit.transfer import StateDict, inherit_non_block, part_of, place_blocks, require_block_shape, stretch
from ._option_lists import int_list
from ._pool_layout import STITCH, PoolConfig, instance_key, instance_state, parse_stitch, share, stitched_layers
from ._pool_maps import distil_with_maps, learned_stitches
from ._pool_stitched import build_stitched, require_authors_design, stitched_output, train_jointly
from ._pool_stitched_file import STITCHED_FILE, read_stitched, save_stitched
from ._pool_stitches import (
    JointPool,
    StitchedViT,
    block_tokens,
    fit_stitches,
    least_squares_stitch,
    paired_stitches,
    stitch_key,
)

# the options, the gene's layout, the stitches' parts, the stitched ViT and its file in modules of their own,
# importable from here (tests do)
__all__ = [
    "LearngenePool",
    "PoolConfig",
    "instance_key",
    "parse_stitch",
    "JointPool",
    "StitchedViT",
    "fit_stitches",
    "least_squares_stitch",
    "paired_stitches",
    "read_stitched",
    "save_stitched",
    "share",
    "stitch_choices",
    "stitch_key",
    "stitched_descendant",
    "stitched_layers",
]


@register_method
class LearngenePool(AuxNetMethod):
    name = "pool"
    stores = "the blocks of several small aux models, each distilled from the ancestry (design=authors: of 3 widths, with stitches)"
    expands_to = (
        "any depth at their width, stitched from the smallest instance to the largest; design=authors: an "
        "instance's width, or a StitchedViT (expand's output 'stitch', learngene expand --stitch)"
    )
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
    expand_outputs = (
        ExpandOutput("stitch", "a stitched descendant", "its instances' sizes", parse_stitch, stitched_output),
    )
    model_formats = (STITCHED_FILE,)

    @classmethod
    def cannot_reach(cls, config: PoolConfig, ancestry: ViTSpec, target: ViTSpec) -> str:
        aux = aux_size(config, ancestry)
        if config.design != "authors":
            return refused_by(require_block_shape, aux, target, cls.name, ancestry)
        specs = cls(config).instance_specs(aux)
        source = next((s for s in specs if s.embed_dim == target.embed_dim), None)
        if source is None:
            return (
                f"a pool of the authors' design gives plain ViTs {', '.join(str(s.embed_dim) for s in specs)} "
                f"wide, not {target.embed_dim}; other sizes are stitched (learngene expand --stitch)"
            )
        return refused_by(require_block_shape, source, target, cls.name, ancestry)

    def depths(self, aux: ViTSpec) -> list[int]:
        text = self.config.instance_depths
        malformed = f"pool instance_depths={text!r} is not comma-separated block counts, e.g. 1,2"
        depths = int_list(text, malformed) or sorted({math.ceil(aux.depth / 4), math.ceil(aux.depth / 2)})
        if not depths or min(depths) < 1:
            raise LearngeneError(f"pool instance_depths={text!r} needs positive block counts")
        if len(set(depths)) < len(depths):  # one instance per depth: a repeat trains the same small model again
            raise LearngeneError(f"pool instance_depths={text!r} repeats a depth; give each depth once, e.g. 1,2")
        if max(depths) > aux.depth:
            raise LearngeneError(
                f"pool instance_depths={text!r} asks for instances deeper than the aux net ({aux.depth} blocks); "
                f"give depths up to {aux.depth}"
            )
        return sorted(depths)

    def instance_specs(self, aux: ViTSpec) -> list[ViTSpec]:
        """design=authors: the instances, narrowest first, from the aux spec (or the gene's layout, the widest)."""
        text, width = self.config.widths, aux.embed_dim
        malformed = f"pool widths={text!r} is not comma-separated widths, e.g. 8,16,32"
        widths = int_list(text, malformed) or [width // 4, width // 2, width]
        depth = self.config.instance_depth or math.ceil(aux.depth / 2)
        specs = []
        for w in sorted(set(widths)):
            heads = max(1, round(aux.num_heads * w / width))
            if w < 1 or w % heads:
                raise LearngeneError(
                    f"pool widths={text or 'auto'!r}: an instance {w} wide cannot split into {heads} heads; "
                    f"give widths=(...) (--opt widths=...) as multiples of the head count"
                )
            specs.append(aux.replace(embed_dim=w, num_heads=heads, depth=depth))
        return specs

    def condense(self, ancestry: Ancestry | None, inputs: CondenseInputs | None = None) -> Learngene:
        aux = resolve_aux_spec(self.config, ancestry, inputs, self.name)
        if self.config.design == "authors":
            return self.condense_authors(aux, ancestry, inputs)
        depths = self.depths(aux)
        source = ancestry.spec if ancestry is not None else None
        tensors: StateDict = {}
        cost: dict = {"steps": 0, "seconds": 0.0, "instances": []}
        for i, depth in enumerate(depths):
            torch.manual_seed((inputs.train_cfg.seed if inputs is not None else 0) + i)
            spec = aux.replace(depth=depth)
            start = {
                instance_key(i, k): v.detach().clone()
                for k, v in spec.split_layers(spec.create_model().state_dict()).items()
            }
            own = inputs.part(f"instance{i}") if inputs is not None else None  # each checkpoints apart
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

    def distil_instance(
        self, index: int, spec: ViTSpec, ancestry: Ancestry | None, inputs: CondenseInputs | None
    ) -> Learngene:
        """Instance ``index`` of ``spec``, distilled from the ancestry in its own aux net (its own run folder)."""
        torch.manual_seed((inputs.train_cfg.seed if inputs is not None else 0) + index)
        start = {
            instance_key(index, k): v.detach().clone()
            for k, v in spec.split_layers(spec.create_model().state_dict()).items()
        }
        own = inputs.part(f"instance{index}") if inputs is not None else None  # each instance checkpoints apart
        source = ancestry.spec if ancestry is not None else None
        return condense_through_aux(self, self.new_gene(start, spec, source), self.require_ancestry(ancestry), own)

    def distil_instance_for_stitches(
        self, index: int, spec: ViTSpec, ancestry: Ancestry, inputs: CondenseInputs
    ) -> tuple[Learngene, torch.Tensor | None]:
        """Instance ``index`` distilled as :meth:`distil_instance`, and, for ``stitch_init=learned``, through three
        learned teacher→student maps whose mean it returns (:mod:`learngene.methods._pool_maps`)."""
        if self.config.stitch_init != "learned":
            return self.distil_instance(index, spec, ancestry, inputs), None
        torch.manual_seed(inputs.train_cfg.seed + index)
        start = {
            instance_key(index, k): v.detach().clone()
            for k, v in spec.split_layers(spec.create_model().state_dict()).items()
        }
        source = ancestry.spec
        return distil_with_maps(self, self.new_gene(start, spec, source), ancestry, inputs.part(f"instance{index}"))

    def refuse_for_authors(self, aux: ViTSpec, ancestry: Ancestry | None) -> None:
        """One line for what design=authors cannot do here, before any training: a RoPE family; joint_epochs with a
        headless ancestry, or under DDP."""
        if aux.family.rope:
            raise LearngeneError(
                "pool design=authors stitches instances of other head widths, and a RoPE table depends on the head "
                f"width; use {assigned('design', 'equal_width', flag='--opt')} for this family"
            )
        if self.config.joint_epochs and ancestry is not None and is_headless(ancestry):
            raise LearngeneError(
                "pool joint_epochs distils the ancestry's logits into stitched networks of several widths, and this "
                f"ancestry has no classifier; use {assigned('joint_epochs', 0, flag='--opt')}"
            )
        if self.config.joint_epochs and dist.is_distributed():
            raise LearngeneError(
                "pool joint_epochs trains one drawn part of the pool per step, which DDP cannot synchronize; "
                f"run it as one process (without torchrun) or use {assigned('joint_epochs', 0, flag='--opt')}"
            )

    def condense_authors(self, aux: ViTSpec, ancestry: Ancestry | None, inputs: CondenseInputs | None) -> Learngene:
        if inputs is None or inputs.train is None:
            raise LearngeneError("pool condenses by training aux nets; give training data (--data)")
        specs = self.instance_specs(aux)
        self.refuse_for_authors(aux, ancestry)
        tensors: StateDict = {}
        cost: dict = {"steps": 0, "seconds": 0.0, "instances": []}
        models, maps = [], []
        for i, spec in enumerate(specs):
            trained, mean_map = self.distil_instance_for_stitches(i, spec, self.require_ancestry(ancestry), inputs)
            maps.append(mean_map)
            tensors.update(trained.tensors)
            model = spec.create_model()
            model.load_state_dict(instance_state(trained, i), strict=False)  # a headless ancestry: no head trained
            models.append(model.eval())
            for key in ("steps", "seconds"):
                cost[key] += trained.cost.get(key, 0)
            cost["instances"].append({"width": spec.embed_dim, **trained.cost})
        depth = specs[0].depth
        if self.config.stitch_init == "learned":
            width = cast(ViTSpec, self.require_ancestry(ancestry).spec).embed_dim  # distil_with_maps checked it
            tensors.update(learned_stitches([cast(torch.Tensor, m) for m in maps], width, depth))
        else:
            data = inputs.train
            images = data.get_batch(torch.arange(min(100, len(data))))[0]  # their stitch_init_bs
            with torch.no_grad():
                tokens = [block_tokens(m, images) for m in models]
            tensors.update(fit_stitches(tokens, depth))
        if self.config.joint_epochs:
            cost["joint"] = train_jointly(self, models, tensors, self.require_ancestry(ancestry).model, inputs)
            for key in ("steps", "seconds"):
                cost[key] += cost["joint"][key]
        widths = ",".join(str(spec.embed_dim) for spec in specs)
        config = dataclasses.replace(self.config, widths=widths, instance_depth=depth)
        return Learngene(
            method=self.name,
            tensors={k: v.detach().cpu().contiguous() for k, v in tensors.items()},
            config=dataclasses.asdict(config),
            layout=specs[-1],
            ancestry=ancestry.spec if ancestry is not None else None,
            cost=cost,
        )

    def kept_for_record(self, key: str) -> bool:
        """design=authors: a plain ViT reads one instance; the others and the stitches make stitched descendants."""
        return self.config.design == "authors" or super().kept_for_record(key)

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        if self.config.design == "authors":
            return self.expand_authors(gene, spec)
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
        require_block_shape(layout, spec, self.name, gene.ancestry)
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

    def expand_authors(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        layout = gene.require_layout()
        present = sorted({k.split(".", 1)[0] for k in gene.tensors if k.startswith("instance")})
        if len(present) == 1 and spec == layout:  # one instance in its own aux net (condensation): its weights
            return {k.split(".", 1)[1]: v for k, v in gene.tensors.items()}
        specs = self.instance_specs(layout)
        index = next((i for i, s in enumerate(specs) if s.embed_dim == spec.embed_dim), None)
        if index is None:
            raise LearngeneError(
                f"a pool of the authors' design gives plain ViTs {', '.join(str(s.embed_dim) for s in specs)} wide, "
                f"not {spec.embed_dim}; other sizes are stitched: expand with {STITCH}"
            )
        source = specs[index]
        require_block_shape(source, spec, self.name, gene.ancestry)
        state = instance_state(gene, index)
        out: StateDict = {}
        for layer, block in enumerate(stretch(source.depth, spec.depth).tolist()):
            out.update(place_blocks(state, {layer: block}))
        out.update(inherit_non_block({k: v for k, v in state.items() if not k.startswith("blocks.")}, source, spec))
        return out

    def describe(self, gene: Learngene) -> list[str]:
        layout = gene.require_layout()
        if self.config.design == "authors":
            specs = self.instance_specs(layout)
            last = len(specs) - 1
            example = f"; e.g. 0:{min(1, layout.depth - 1)}-{last}:0" if last else ""
            return [
                f"pool of {len(specs)} instances {', '.join(str(s.embed_dim) for s in specs)} wide "
                f"(0..{last}), {layout.depth} blocks each, joined by linear stitches (the authors' design)",
                f"stitched descendants (expand with {STITCH}): instance F through block J into "
                f"instance E from block K, for F < E and blocks J, K of 0..{layout.depth - 1} with |J - K| <= 1: "
                f"{len(stitch_choices(gene))} in all{example}",
            ]
        return [
            f"pool of {len(self.depths(layout))} instances of {', '.join(map(str, self.depths(layout)))} blocks "
            f"(width {layout.embed_dim}), stitched smallest to largest"
        ]


def stored_pool(gene: Learngene) -> LearngenePool:
    """The pool method with ``gene``'s stored options (one it refuses refuses the gene), made here rather than by
    :func:`learngene.binding.bind_gene`: binding reaches every registered method, this module among them."""
    try:
        return LearngenePool(config_from_dict(LearngenePool.Config, gene.config))
    except (LearngeneError, TypeError) as exc:
        raise invalid_gene(gene, None, exc) from None


def stitch_choices(gene: Learngene) -> list[tuple[int, int, int, int]]:
    """Every stitched descendant a pool of the authors' design makes: (front, end, cut_front, cut_end)."""
    method = stored_pool(gene)
    depth = method.instance_specs(gene.require_layout())[0].depth
    count = len(method.instance_specs(gene.require_layout()))
    return [
        (front, end, j, k)
        for front in range(count)
        for end in range(front + 1, count)
        for j, k, _ in paired_stitches(depth)
    ]


def stitched_descendant(
    gene: Learngene, front: int, end: int, cut_front: int, cut_end: int, method: LearngenePool | None = None
) -> StitchedViT:
    """Instance ``front``'s embeddings and blocks ``0..cut_front``, its stitch, instance ``end``'s blocks from
    ``cut_end`` and head: one of :func:`stitch_choices` (depth ``cut_front + 1 + depth − cut_end``). ``method``: the
    gene's method as already built (:func:`learngene.binding.bind_gene`)."""
    require_authors_design(gene)
    return build_stitched(method or stored_pool(gene), gene, front, end, cut_front, cut_end)
