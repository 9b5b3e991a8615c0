#!/usr/bin/env bash
# Issue 3's check on Fashion-MNIST, CPU: an ancestry, TLEG / Share-Init / WAVE genes condensed through an
# L4-D64-H4 aux net, descendants of depth 2, 4, 6, 8 (and WAVE at width 128 via adapt) fine-tuned for one
# epoch each (on FINETUNE_IMAGES training images, test on all 10k), next to scratch descendants of the same
# sizes after the same epoch.
#
#   bash benchmarks/tleg_wave_check.sh [OUT_DIR]      (default runs/tleg_wave_check; finished steps are skipped)
#   DATA_FLAGS="--train-images 300" ANCESTRY_EPOCHS=1 CONDENSE_EPOCHS=1 bash benchmarks/tleg_wave_check.sh /tmp/dry
#                                                       (a pipeline check in minutes; its numbers mean nothing)
#
# Every step is a `learngene` command; the table at the end is read from the runs' log.jsonl files.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src
OUT=${1:-runs/tleg_wave_check}
LG="python -m learngene"
ANCESTRY_EPOCHS=${ANCESTRY_EPOCHS:-4}
CONDENSE_EPOCHS=${CONDENSE_EPOCHS:-2}
FINETUNE_IMAGES=${FINETUNE_IMAGES:-15000}
read -r -a DATA <<< "${DATA_FLAGS:-}"
ADAPT=(--train-images 5000 --max-steps 200)
AUX=(--opt aux_depth=4 --opt aux_embed_dim=64 --opt aux_num_heads=4)
mkdir -p "$OUT"/models "$OUT"/runs

run() {  # run OUTPUT_FILE COMMAND...: skip when the output exists
  local target=$1; shift
  if [[ -e $target ]]; then echo "have $target"; return; fi
  echo "+ $*" | tee -a "$OUT"/commands.txt
  "$@"
}

# 1. ancestry: cpu_small (L6-D96-H6) on the 60k training images
run "$OUT"/ancestry.safetensors $LG ancestry --preset cpu_small --epochs "$ANCESTRY_EPOCHS" "${DATA[@]}" --quiet \
  --run-dir "$OUT"/runs/ancestry --out "$OUT"/ancestry.safetensors

# 2. genes: TLEG and Share-Init with the authors' λ = 1 (pure KL), WAVE with KL + CE (λ = 0.5); scratch is empty
for method in tleg share_init wave; do
  lam=1.0; [[ $method == wave ]] && lam=0.5
  run "$OUT"/$method.safetensors $LG condense --method $method --ancestry "$OUT"/ancestry.safetensors "${AUX[@]}" \
    --epochs "$CONDENSE_EPOCHS" "${DATA[@]}" --distill-lambda $lam --quiet --run-dir "$OUT"/runs/condense-$method \
    --out "$OUT"/$method.safetensors
done
run "$OUT"/scratch.safetensors $LG condense --method scratch --ancestry "$OUT"/ancestry.safetensors --quiet \
  --out "$OUT"/scratch.safetensors

# 3. descendants: expand (WAVE: adapt its scalers on 5000 images for 200 steps), then one epoch of fine-tuning
descend() {  # descend NAME SIZE_FLAGS...
  local name=$1; shift
  local method=${name%%-*}
  if [[ $method == wave ]]; then
    run "$OUT"/models/$name.init.safetensors $LG adapt "$OUT"/wave.safetensors "$@" "${ADAPT[@]}" --quiet \
      --run-dir "$OUT"/runs/adapt-$name --gene-out "$OUT"/models/$name.gene.safetensors \
      --out "$OUT"/models/$name.init.safetensors
  else
    run "$OUT"/models/$name.init.safetensors $LG expand "$OUT"/$method.safetensors "$@" --quiet \
      --out "$OUT"/models/$name.init.safetensors
  fi
  run "$OUT"/models/$name.ft.safetensors $LG train "$OUT"/models/$name.init.safetensors --epochs 1 \
    --train-images "$FINETUNE_IMAGES" "${DATA[@]}" --quiet \
    --run-dir "$OUT"/runs/train-$name --out "$OUT"/models/$name.ft.safetensors
}
for depth in 2 4 6 8; do
  for method in scratch tleg share_init wave; do
    descend $method-L$depth --depth $depth --embed-dim 64 --num-heads 4
  done
done
for method in scratch wave; do
  descend $method-L4-D128 --depth 4 --embed-dim 128 --num-heads 8
done

# 4. the table: test accuracy at initialization and after the epoch, gene sizes (also in $OUT/results.md)
python benchmarks/tleg_wave_table.py "$OUT"
