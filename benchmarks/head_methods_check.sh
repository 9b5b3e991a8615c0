#!/usr/bin/env bash
# Issue 4 check: Mimetic, PEG and Cluster-Learngene against scratch on a small Fashion-MNIST ancestry (CPU).
#
# One cpu_tiny ancestry (L4-D64-H4, 3 epochs); each method's learngene; descendants of 2 head counts x 2 depths
# (width = heads x 16, the ancestry's head size), each fine-tuned for ONE epoch on the full training set with the
# same seed and data order, test accuracy on the full test set. PEG's descendants first adapt φ for
# $ADAPT_STEPS steps (reported); "peg_noadapt" is PEG expanded without adapting (φ at its repeat init).
#
# Usage (from the repository root): bash benchmarks/head_methods_check.sh [OUT_DIR]
# (87 min wall on 2 CPU cores shared with other jobs; writes OUT_DIR/results.md and attention_distance.png)
set -euo pipefail

OUT=${1:-runs/head_methods_check}
HEADS=${HEADS:-"2 6"}
DEPTHS=${DEPTHS:-"2 6"}
ADAPT_STEPS=${ADAPT_STEPS:-100}
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
# one thread per process: on shared cores torch's default two threads ran >10x slower (measured 99 vs 1340 img/s)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
lg() { echo "+ learngene $*" >&2; python -m learngene "$@" --quiet; }

mkdir -p "$OUT/genes" "$OUT/models"
ANC="$OUT/ancestry.safetensors"
[ -f "$ANC" ] || lg ancestry --preset cpu_tiny --epochs 3 --seed 0 --out "$ANC"

for method in scratch mimetic peg; do
  lg condense --method "$method" --ancestry "$ANC" --out "$OUT/genes/$method.safetensors" --overwrite
done
lg condense --method cluster --ancestry "$ANC" --data fashion_mnist --opt num_images=512 \
  --out "$OUT/genes/cluster.safetensors" --overwrite
python -m learngene inspect "$OUT/genes/cluster.safetensors" --plot "$OUT/attention_distance.png" \
  | tee "$OUT/cluster_inspect.txt"

for heads in $HEADS; do
  for depth in $DEPTHS; do
    size=(--depth "$depth" --num-heads "$heads" --embed-dim $((heads * 16)))
    tag="L${depth}-H${heads}"
    for method in scratch mimetic peg_noadapt cluster; do
      lg expand "$OUT/genes/${method%_noadapt}.safetensors" "${size[@]}" --seed 0 \
        --out "$OUT/models/$method-$tag.init.safetensors" --overwrite
    done
    lg adapt "$OUT/genes/peg.safetensors" "${size[@]}" --max-steps "$ADAPT_STEPS" --seed 0 \
      --out "$OUT/models/peg-$tag.init.safetensors" --overwrite
    for method in scratch mimetic peg peg_noadapt cluster; do
      lg train "$OUT/models/$method-$tag.init.safetensors" --epochs 1 --seed 0 \
        --out "$OUT/models/$method-$tag.safetensors" --overwrite
    done
  done
done

python - "$OUT" <<'EOF' | tee "$OUT/results.md"
import sys
from pathlib import Path
from learngene.formats.model_file import load_model_file

out = Path(sys.argv[1])
_, _, origin = load_model_file(out / "ancestry.safetensors")
print(f"ancestry cpu_tiny (L4-D64-H4), {origin['epochs']} epochs: test accuracy {origin['eval_acc']:.4f}\n")
methods = ["scratch", "mimetic", "peg", "peg_noadapt", "cluster"]
rows = {}
for path in sorted((out / "models").glob("*.safetensors")):
    if path.name.endswith(".init.safetensors"):
        continue
    method, tag = path.name.removesuffix(".safetensors").split("-", 1)
    _, spec, origin = load_model_file(path)
    rows.setdefault((spec.depth, spec.num_heads, spec.short(), spec.num_params), {})[method] = origin["eval_acc"]
print("| descendant | params | " + " | ".join(methods) + " |")
print("|---|---:|" + "---:|" * len(methods))
for (_, _, short, params), accs in sorted(rows.items()):
    print(f"| {short} | {params:,} | " + " | ".join(f"{accs[m]:.4f}" if m in accs else "-" for m in methods) + " |")
EOF
