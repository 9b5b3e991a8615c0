"""The commands that train: ``ancestry``, ``condense``, ``adapt`` and ``train``."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..ancestry import ancestry_preprocessing, feed_size, load_ancestry
from ..data import preprocessing_cfg
from ..descendant import load_gene, make_descendant
from ..errors import LearngeneError
from ..formats.labels import choose_head
from ..formats.model_file import STITCHED_MODEL_FORMAT, build_model, load_model_file, model_preprocessing, save_model
from ..formats.weights import digest, read_safetensors
from ..method import AdaptInputs, CondenseInputs
from ..registry import get_method
from ..training import distributed as dist
from ..training.distill import cache_teacher_outputs, setup_distillation
from ..training.loop import seed_everything, train
from ..validate import ADAPT, parse_assignment
from ..vit.stitched import StitchedViT, read_stitched
from .options import check_outputs, load_data_from_args, parse_options, say, spec_from_args, train_config_from_args


def cmd_ancestry(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out])
    train_cfg = train_config_from_args(args, "ancestry")
    train_data, test_data = load_data_from_args(args)
    spec = spec_from_args(args, data=train_data)
    seed_everything(args.seed)
    model = spec.create_model()
    train_cfg.identity = {"command": "ancestry", "spec": spec.to_dict()}
    say(
        args,
        f"ancestry {spec.short()} ({spec.num_params:,} params) on {train_data.name}: {len(train_data)} images",
        banner=True,
    )
    result = train(model, train_data, train_cfg, eval_data=test_data, run_dir=args.run_dir, resume=args.resume)
    dist.on_main(
        lambda: save_model(
            args.out,
            model,
            spec,
            overwrite=args.overwrite,
            origin={
                "kind": "ancestry",
                "data": train_data.name,
                "epochs": args.epochs,
                "eval_acc": result.final_acc,
                "label_space": train_data.label_space,
                **license_entry(args.license),
            },
            preprocessing=preprocessing_cfg(train_data),
        )
    )
    say(args, f"wrote {args.out}: test accuracy {result.final_acc:.4f}")


def _load_ancestry_args(args: argparse.Namespace):
    kwargs: dict[str, Any] = {}
    if args.timm_model:
        for name in ("num_classes", "img_size", "in_chans"):
            if getattr(args, name, None) is not None:
                kwargs[name] = getattr(args, name)
        for item in getattr(args, "timm_arg", None) or []:
            key, value = parse_assignment(item, None, "--timm-arg {item} is not KEY=VALUE, e.g. --timm-arg depth=6")
            kwargs[key] = value
    elif getattr(args, "timm_arg", None):
        raise LearngeneError("--timm-arg needs --timm-model: it is passed to timm.create_model for the checkpoint")
    return load_ancestry(args.ancestry, args.timm_model, drop_head=getattr(args, "drop_head", False), **kwargs)


def cmd_condense(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out], [args.ancestry])
    method_cls = get_method(args.method)
    method = method_cls(**parse_options(method_cls.Config, args.opt or []))
    if args.distill_lambda is None:
        args.distill_lambda = method_cls.distill_lambda
    train_cfg = train_config_from_args(args, f"condense {args.method}")  # checked even where unused
    ancestry = _load_ancestry_args(args)
    inputs = None
    preprocessing = ancestry_preprocessing(args.ancestry, args.timm_model, ancestry)
    if method_cls.needs_data:
        model_in = ancestry.spec  # None for a non-ViT teacher: the data keep their own size unless flags say
        train_data, test_data = load_data_from_args(
            args, feed_size(ancestry, preprocessing), model_in.in_chans if model_in else None, preprocessing
        )
        if model_in and train_data.in_chans != model_in.in_chans:
            raise LearngeneError(
                f"--in-chans {train_data.in_chans}: condensing feeds the data to the ancestry, which reads "
                f"{model_in.in_chans}-channel images; leave --in-chans out (the data follow the ancestry)"
            )
        if args.run_dir:  # what a resumed run must share with this one, besides what the loop sees
            train_cfg.identity = {
                "command": "condense",
                "method": args.method,
                "options": dataclasses.asdict(method.config),
                "ancestry weights": digest(ancestry.model.state_dict()),
            }
        inputs = CondenseInputs(
            train=train_data, eval=test_data, train_cfg=train_cfg, run_dir=args.run_dir, resume=args.resume
        )
        preprocessing = preprocessing_cfg(train_data)  # what the gene's tensors were trained on
    seed_everything(args.seed)
    gene = dataclasses.replace(method.condense(ancestry, inputs), preprocessing=preprocessing)
    gene.label_space = ancestry.label_space
    gene.license = args.license or ancestry.license
    gene.ancestry_source = ancestry.source
    dist.on_main(lambda: gene.save(args.out, overwrite=args.overwrite))
    say(args, f"wrote {args.out}: {gene.method} learngene, {gene.num_stored_params:,} stored parameters")
    note = method.condense_note(gene)
    if note:
        say(args, note)


def license_entry(license: str | None) -> dict[str, str]:
    """A model file's origin entry for the weights' licence (none when it is not known)."""
    return {"license": license} if license else {}


def head_label_space(gene, provided: list[str]) -> dict[str, Any] | None:
    """The label space a descendant's head means: the gene's when the gene gave the head, else none (untrained)."""
    return gene.label_space if "head.weight" in provided else None


def cmd_adapt(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out, args.gene_out], [args.gene])
    train_cfg = train_config_from_args(args, "adapt")
    gene = load_gene(args.gene)
    method_cls = get_method(gene.method)
    options = parse_options(method_cls.Config, args.opt or [])
    method = method_cls.from_gene(gene, ADAPT, **options)
    base = gene.ancestry
    train_data, test_data = load_data_from_args(
        args, (base.img_size if base else None), (base.in_chans if base else None), gene.preprocessing
    )
    spec = spec_from_args(args, base=base, data=train_data)
    train_cfg.identity = {
        "command": "adapt",
        "method": gene.method,
        "options": dataclasses.asdict(method.config),
        "spec": spec.to_dict(),
        "gene": digest(gene.tensors) if args.run_dir else None,
    }
    adapted, result = method.adapt(
        gene,
        spec,
        AdaptInputs(
            train_data,
            train_cfg.replace(desc=f"adapt {gene.method}"),
            eval=test_data,
            run_dir=args.run_dir,
            resume=args.resume,
        ),
    )
    adapted.license = args.license or gene.license
    model, provided = make_descendant(adapted, spec, seed=args.seed, return_keys=True)

    def write() -> None:
        if args.gene_out:
            adapted.save(args.gene_out, overwrite=args.overwrite)
        save_model(
            args.out,
            model,
            spec,
            overwrite=args.overwrite,
            origin={
                "kind": "descendant",
                "method": gene.method,
                "gene": str(args.gene),
                "adapted_on": train_data.name,
                "adapt_steps": result.steps,
                "options": options,
                "label_space": head_label_space(gene, provided),
                **license_entry(adapted.license),
            },
            preprocessing=preprocessing_cfg(train_data),
        )

    dist.on_main(write)
    say(
        args,
        f"wrote {args.out}: {spec.short()} timm ViT adapted for {result.steps} steps"
        + (f", accuracy {result.final_acc:.4f}" if result.final_acc is not None else ""),
    )


def cmd_train(args: argparse.Namespace) -> None:
    check_outputs(args, [args.out], [args.model, args.teacher])
    if args.teacher_timm_model and not args.teacher:
        raise LearngeneError(
            "--teacher-timm-model names the architecture of a --teacher checkpoint; pass --teacher too"
        )
    if args.distill_lambda is None:
        args.distill_lambda = 0.5 if args.teacher else 0.0
    elif args.distill_lambda > 0 and not args.teacher:
        raise LearngeneError("--distill-lambda needs a teacher to distil from; pass --teacher ANCESTRY")
    train_cfg = train_config_from_args(args, "train")
    stitched: StitchedViT | None = None
    if read_safetensors(args.model, lazy=True)[1].get("format") == STITCHED_MODEL_FORMAT:
        stitched, origin = read_stitched(args.model)  # trained as it is: two instances' parts and their stitch
        model: Any = stitched
        state, spec, classes = stitched.state_dict(), stitched.specs[0], stitched.num_classes
    else:
        state, spec, origin = load_model_file(args.model)
        model, classes = build_model(spec, state, source=str(args.model)), spec.num_classes
    train_data, test_data = load_data_from_args(args, spec.img_size, spec.in_chans, model_preprocessing(args.model))
    head = choose_head(
        origin.get("label_space"),
        classes,
        train_data.label_space,
        train_data.num_classes,
        force_new=args.new_head,
    )
    if head.fresh:
        seed_everything(args.seed)
        model.reset_classifier(train_data.num_classes)  # a timm model, or a StitchedViT's end
        spec = spec.replace(num_classes=train_data.num_classes)
    train_cfg.identity = {
        "command": "train",
        "model weights": digest(state) if args.run_dir else None,
        "new head": head.fresh,
    }
    student, teacher, data, loss = model, None, train_data, None
    if args.teacher:
        ancestry = load_ancestry(args.teacher, args.teacher_timm_model)
        kd = setup_distillation(model, ancestry.model, train_data, ancestry.label_space)
        say(args, f"distilling from {args.teacher} with λ = {train_cfg.distill_lambda:g}: {kd.why}")
        train_cfg.identity.update(teacher=str(args.teacher), distilled=kd.kind)
        student, loss = kd.student, kd.loss
        data, teacher = cache_teacher_outputs(train_data, kd.teacher, train_cfg)
    result = train(
        student,
        data,
        train_cfg,
        eval_data=test_data,
        teacher=teacher,
        run_dir=args.run_dir,
        resume=args.resume,
        loss=loss,
    )
    record = {
        **origin,
        "finetuned_on": train_data.name,
        "epochs": args.epochs,
        "eval_acc": result.final_acc,
        "label_space": train_data.label_space,
        "new_head": head.fresh,
        **license_entry(args.license),
    }
    if stitched is not None:
        dist.on_main(
            lambda: stitched.save(
                args.out, origin=record, overwrite=args.overwrite, preprocessing=preprocessing_cfg(train_data)
            )
        )
    else:
        dist.on_main(
            lambda: save_model(
                args.out,
                model,
                spec,
                overwrite=args.overwrite,
                origin=record,
                preprocessing=preprocessing_cfg(train_data),
            )
        )
    say(args, f"wrote {args.out}: test accuracy {result.final_acc:.4f}; {head.why}")
