#!/usr/bin/env bash
# GPU machine: prepares the Bible corpus and trains configs/bible-en-es.json (or $CONFIG),
# printing BLEU at each evaluation with the elapsed time: the dev BLEU-vs-time curve that
# ../shared/data/README.md gives for PyTorch. Expects an existing build in $BUILD_DIR (build-gpu).
# Environment: NMT_DATA (default ../shared/data/bible-en-es), VOCAB (BPE size, default 8000 as in
# configs/bible-en-es.json; 4000 preps into runs/prep/bible-en-es, the CPU quickstart's folder,
# other sizes into runs/prep/bible-en-es-<VOCAB>; the run is pointed there), BUILD_DIR, CONFIG,
# TRAIN_SECONDS
# (stop the run with SIGTERM after that long: it finishes the step and reports); extra arguments go
# to nmt-train.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
DATA=${NMT_DATA:-../shared/data/bible-en-es}
VOCAB=${VOCAB:-8000}
PREP=runs/prep/bible-en-es
[[ "$VOCAB" != 4000 ]] && PREP=runs/prep/bible-en-es-$VOCAB
LOG_DIR=${OUT:-runs}
mkdir -p "$LOG_DIR"
if [[ ! -f "$PREP/report.json" ]]; then
  "$BUILD_DIR/apps/nmt-prep/nmt-prep" --quiet --train-src "$DATA/train.en" --train-tgt "$DATA/train.es" \
    --dev-src "$DATA/dev.en" --dev-tgt "$DATA/dev.es" --out "$PREP" --vocab-size "$VOCAB" --max-len 128
fi
start=$(date +%s%N)
${TRAIN_SECONDS:+timeout -s TERM "$TRAIN_SECONDS"} "$BUILD_DIR/apps/nmt-train/nmt-train" --config "${CONFIG:-configs/bible-en-es.json}" \
  --set "data.train=$PREP" --set "data.dev=$PREP" "$@" 2>&1 |
  while IFS= read -r line; do
    ms=$((($(date +%s%N) - start) / 1000000))
    printf '[%4d.%d s] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$line"
  done | tee "$LOG_DIR/train-bible.log" | grep -E "^\[.*\] (step [0-9]+00 |eval|BLEU|done|model|data|nmt-train|stopped)" || true
