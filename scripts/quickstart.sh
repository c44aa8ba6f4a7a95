#!/usr/bin/env bash
# The README's first command: installs dependencies, builds, prepares a real corpus (Bible en->es),
# trains a model and prints its BLEU on the dev set. With a GPU it trains Transformer-base on it
# (configs/bible-en-es.json); without one, a small model on the CPU (configs/bible-en-es-cpu.json).
# Environment: NMT_DATA (folder with train.en/es, dev.en/es; default ../shared/data/bible-en-es, or
# else built by scripts/get-bible-corpus.sh into runs/data/bible-en-es),
# BUILD_DIR (build), CONFIG (override the config). Extra arguments go to nmt-train (e.g. --set ...).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"

bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)" --target nmt-prep nmt-train nmt-bleu

DATA=${NMT_DATA:-../shared/data/bible-en-es}
if [[ -z "${NMT_DATA:-}" && ! -f "$DATA/train.en" ]]; then
  # No local copy: build the corpus from Debian's SWORD packages (needs the package archive).
  DATA=runs/data/bible-en-es
  [[ -f "$DATA/train.en" ]] || bash scripts/get-bible-corpus.sh "$DATA"
fi
for f in train.en train.es dev.en dev.es; do
  if [[ ! -f "$DATA/$f" ]]; then
    echo "quickstart: $DATA/$f not found; set NMT_DATA to a folder with train.en, train.es, dev.en, dev.es" >&2
    exit 1
  fi
done
# A GPU trains Transformer-base on an 8k joint BPE (as the PyTorch reference point); the CPU a
# small model on 4k.
if nvidia-smi -L >/dev/null 2>&1; then
  GPU_CONFIG=1 VOCAB=8000 PREP=runs/prep/bible-en-es-8000
else
  GPU_CONFIG=0 VOCAB=4000 PREP=runs/prep/bible-en-es
fi
if [[ ! -f "$PREP/report.json" ]]; then
  echo "quickstart: preparing $DATA (SentencePiece BPE $VOCAB, token shards) into $PREP"
  "$BUILD_DIR/apps/nmt-prep/nmt-prep" --train-src "$DATA/train.en" --train-tgt "$DATA/train.es" \
    --dev-src "$DATA/dev.en" --dev-tgt "$DATA/dev.es" --out "$PREP" --vocab-size "$VOCAB" --max-len 128
fi

if [[ -z "${CONFIG:-}" ]]; then
  if ((GPU_CONFIG)); then CONFIG=configs/bible-en-es.json; else CONFIG=configs/bible-en-es-cpu.json; fi
fi
echo "quickstart: training with $CONFIG"
LOG=runs/quickstart-train.log
"$BUILD_DIR/apps/nmt-train/nmt-train" --config "$CONFIG" "$@" | tee "$LOG"
echo
echo "quickstart: dev BLEU (sacreBLEU-identical, greedy decoding):"
grep "BLEU =" "$LOG" | tail -1
