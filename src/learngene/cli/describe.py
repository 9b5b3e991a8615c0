"""Human-readable summaries of learngene and model files and of model folders (``learngene inspect``)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from ..binding import BoundMethod, bind_gene
from ..errors import GeneFormatError
from ..formats.atomic import quote
from ..formats.convert import CONFIG, is_model_folder, read_config
from ..formats.hub import describe_source
from ..formats.model_file import MODEL_FORMAT, load_model_file, model_format, model_preprocessing
from ..formats.weights import is_regular_file, read_safetensors
from ..gene import GENE_FORMAT, Learngene
from ..method import ModelFormat
from ..vit.spec import ViTSpec


def describe_spec(spec: ViTSpec) -> str:
    return (
        f"{spec.short()} (depth {spec.depth}, width {spec.embed_dim}, {spec.num_heads} heads, mlp x{spec.mlp_ratio:g}, "
        f"{spec.img_size}px/{spec.patch_size}, {spec.in_chans} ch, {spec.num_classes} classes, "
        f"{spec.global_pool} pool): {spec.num_params:,} params, {spec.flops / 1e6:,.1f} MFLOPs/image; "
        f"{spec.arch_label()}, family {spec.family.short()}"
    )


def describe_preprocessing(pre: dict | None) -> str:
    """One line for what a model's inputs expect (:func:`learngene.data.preprocessing_cfg`)."""
    if pre is None:
        return "preprocessing not recorded"
    c, h, w = pre["input_size"]
    return (
        f"{c}x{h}x{w}, {pre['interpolation']} resize, {pre['crop_mode']} crop {pre['crop_pct']:g}, "
        f"mean {tuple(round(m, 4) for m in pre['mean'])}, std {tuple(round(v, 4) for v in pre['std'])}"
    )


def describe_file(path: str | os.PathLike, show_tensors: bool = False) -> str:
    if is_model_folder(path):
        return describe_folder(path, show_tensors)
    _, meta = read_safetensors(path)
    fmt = meta.get("format")
    size = Path(path).stat().st_size
    if fmt == GENE_FORMAT:
        return describe_gene(bind_gene(Learngene.load(path), source=path), size, show_tensors)
    if fmt == MODEL_FORMAT:
        state, spec, origin = load_model_file(path)
        lines = [
            f"learngene model file {path} ({size / 1e6:.2f} MB)",
            f"  spec:    {describe_spec(spec)}",
            f"  origin:  {json.dumps(origin, sort_keys=True)}",
            f"  input:   {describe_preprocessing(model_preprocessing(path))}",
            f"  created: {meta.get('created', '?')} by learngene {meta.get('library_version', '?')}",
        ]
        if show_tensors:
            lines += [f"    {k:40s} {tuple(v.shape)}" for k, v in state.items()]
        return "\n".join(lines)
    own = model_format(fmt)
    if own is not None:
        return describe_own_format(path, size, meta, own, show_tensors)
    raise GeneFormatError(f"{quote(path)} is neither a learngene nor a learngene model file")


def describe_own_format(path: str | os.PathLike, size: int, meta: dict, own: ModelFormat, show_tensors: bool) -> str:
    """A model in the file format of the one method that makes it (pool's stitched descendants): its parts as the
    format describes them, its input, origin and creation."""
    model, _, origin = own.read(path)
    lines = [
        f"learngene {own.what} {path} ({size / 1e6:.2f} MB): not a timm ViT ({type(model).__name__})",
        *own.describe(model),
        f"  input:   {describe_preprocessing(model_preprocessing(path))}",
        f"  origin:  {json.dumps(origin, sort_keys=True)}",
        f"  created: {meta.get('created', '?')} by learngene {meta.get('library_version', '?')}",
    ]
    if show_tensors:
        lines += [f"    {k:40s} {tuple(v.shape)}" for k, v in model.state_dict().items()]
    return "\n".join(lines)


def describe_folder(path: str | os.PathLike, show_tensors: bool = False) -> str:
    """A timm hub folder (what ``learngene expand --out DIR/`` writes) or a transformers ViT/DeiT/DINOv2 folder: its
    config, the model it builds (spec, parameters, FLOPs), its preprocessing, its model card's facts and tensors."""
    from ..ancestry import load_ancestry
    from ..data import preprocessing_cfg

    path = Path(path)
    ancestry = load_ancestry(path)  # reads the config first: one line for a bad one
    config = read_config(path / CONFIG)  # checks the folder as condense would: config, weights, shapes, dtypes, values
    kind = (
        f"timm hub folder, architecture {config['architecture']}"
        if "architecture" in config
        else f"transformers {config.get('model_type')} folder"
    )
    files = ", ".join(f"{p.name} ({p.stat().st_size / 1e6:.2f} MB)" for p in sorted(path.iterdir()) if p.is_file())
    lines = [f"{kind}: {path}", f"  files:   {files}"]
    if ancestry.spec is not None:
        lines.append(f"  spec:    {describe_spec(ancestry.spec)}")
    else:
        lines.append(
            f"  model:   {sum(p.numel() for p in ancestry.model.parameters()):,} params ({ancestry.unsupported})"
        )
    lines.append(f"  input:   {describe_preprocessing(preprocessing_cfg(ancestry.model))}")
    if "model_args" in config:
        lines.append(f"  config:  model_args {json.dumps(config['model_args'], sort_keys=True)}")
    card = path / "README.md"
    facts = (
        [
            line[2:].replace("**", "")
            for line in card.read_text(errors="replace").splitlines()
            if line.startswith("- **")
        ]
        if is_regular_file(card)
        else []
    )
    lines += [f"  card:    {fact}" for fact in facts] or ["  card:    none (no README.md with facts)"]
    if show_tensors:
        lines += [f"    {k:40s} {tuple(v.shape)}" for k, v in ancestry.model.state_dict().items()]
    return "\n".join(lines)


def describe_gene(gene: Learngene | BoundMethod, file_size: int | None = None, show_tensors: bool = False) -> str:
    """What ``learngene inspect`` prints for a gene (bound to its method, or bound here)."""
    bound = gene if isinstance(gene, BoundMethod) else bind_gene(gene)
    gene, method = bound.gene, bound.method
    lines = [
        f"learngene: method {gene.method}" + (f" ({file_size / 1e6:.2f} MB on disk)" if file_size else ""),
        f"  stored parameters: {gene.num_stored_params:,} in {len(gene.tensors)} tensors",
        f"  options:  {json.dumps(gene.config, sort_keys=True)}",
        f"  layout:   {describe_spec(gene.layout) if gene.layout else 'no ViT tensors'}",
        f"  ancestry: {describe_spec(gene.ancestry) if gene.ancestry else 'not a ViT / none'}",
    ]
    if gene.ancestry_source:
        lines.append(f"  from:     {describe_source(gene.ancestry_source)}")
    if gene.ancestry:
        lines.append(f"  stored / ancestry parameters: {gene.num_stored_params / gene.ancestry.num_params:.3f}")
    lines.append(f"  input:    {describe_preprocessing(gene.preprocessing)}")
    lines.append(f"  licence:  {gene.license or 'not recorded'}")
    if gene.cost:
        lines.append(f"  condensation cost: {json.dumps(gene.cost, sort_keys=True)}")
    lines.append(f"  created: {gene.created} by learngene {gene.library_version}")
    lines += ["  " + line for line in method.describe(gene)]
    if show_tensors:
        lines += [f"    {k:40s} {tuple(v.shape)}  ({math.prod(v.shape):,})" for k, v in gene.tensors.items()]
    return "\n".join(lines)
