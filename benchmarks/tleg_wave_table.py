"""The table of ``benchmarks/tleg_wave_check.sh``: genes (size, cost) and descendants (accuracy vs scratch).

PYTHONPATH=src python benchmarks/tleg_wave_table.py runs/tleg_wave_check
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from learngene.data import fashion_mnist
from learngene.formats.model_file import build_model, load_model_file
from learngene.gene import Learngene
from learngene.training.loop import evaluate


def final_acc(out: Path, name: str) -> float | None:
    log = out / "runs" / f"train-{name}" / "log.jsonl"
    return json.loads(log.read_text().splitlines()[-1])["eval_acc"] if log.exists() else None


def main(out: Path) -> None:
    test = fashion_mnist("test")
    _, anc_spec, anc_origin = load_model_file(out / "ancestry.safetensors")
    lines = [
        f"ancestry {anc_spec.short()} ({anc_spec.num_params:,} params): test accuracy {anc_origin['eval_acc']:.4f}",
        "",
        "| gene | stored params | file KB | condensation | aux net test acc |",
        "|---|---|---|---|---|",
    ]
    for method in ("tleg", "share_init", "wave"):
        path = out / f"{method}.safetensors"
        gene = Learngene.load(path)
        c = gene.cost
        lines.append(
            f"| {method} | {gene.num_stored_params:,} | {path.stat().st_size / 1e3:.0f} | {c['aux']}, "
            f"{c['epochs']} epochs, {c['steps']} steps, {c['seconds']:.0f} s | {c.get('aux_eval_acc', 0):.4f} |"
        )
    lines += [
        "",
        "| descendant | params | test acc at init | after 1 epoch | scratch after 1 epoch | beats scratch |",
        "|---|---|---|---|---|---|",
    ]
    models = sorted(
        (out / "models").glob("*.init.safetensors"),
        key=lambda p: (p.name.split("-", 1)[1].removesuffix(".init.safetensors"), p.name),
    )
    for path in models:
        name = path.name.removesuffix(".init.safetensors")
        size = name.split("-", 1)[1]
        state, spec, _ = load_model_file(path)
        init_acc = evaluate(build_model(spec, state), test)["acc"]
        acc, scratch = final_acc(out, name), final_acc(out, f"scratch-{size}")
        show = lambda v: "not run" if v is None else f"{v:.4f}"  # noqa: E731
        beats = "-" if name.startswith("scratch") or None in (acc, scratch) else ("yes" if acc > scratch else "NO")
        lines.append(f"| {name} | {spec.num_params:,} | {init_acc:.4f} | {show(acc)} | {show(scratch)} | {beats} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/tleg_wave_check"))
