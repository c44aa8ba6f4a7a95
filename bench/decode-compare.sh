#!/usr/bin/env bash
# Decoding speed, ours against PyTorch (issue 18), in one call: prepares a raw corpus folder with
# nmt-prep (reused when already prepared), trains a short model with nmt-train (or takes
# --checkpoint), then translates the same dev file with bench-decode's real-data mode (our
# BeamSearch) and with bench/torch_decode.py (the PyTorch twin with a key/value cache), greedy and
# beam 4 at batch sizes 1, 32 and all, and prints both tables last, then the two side by side.
# About 5 minutes on one H200 with a built tree (training 2,500 steps of configs/bible-en-es.json).
#
# usage: bench/decode-compare.sh [options]
#   --corpus DIR[:SRC-TGT]  raw corpus folder with train.SRC, train.TGT, dev.SRC, dev.TGT
#                           (default ../shared/data/bible-en-es, en-es)
#   --checkpoint DIR        decode this ckpt-<step> instead of training (its recorded vocabulary)
#   --config FILE           training recipe (default configs/bible-en-es.json; cpu: the -cpu one)
#   --steps N               training steps (default 2500; cpu 30)
#   --device cuda|cpu       cpu: a smoke test (tiny model, a slice of the corpus) (default cuda)
#   --vocab-size N          joint BPE size for nmt-prep (default 8000; cpu 600)
#   --beams LIST            (default 1,4)      --batches LIST   (default 1,32,all)
#   --latency-sentences N   batch-1 runs decode N dev lines spread over the file (default 200;
#                           0 = all)
#   --max-sentences N       decode the first N dev lines only (default 0 = all; cpu 40)
#   --all-rows N            decoder rows per step of the "all" runs, both systems (default 32768)
#   --ours-dtype f32|bf16   bench-decode's compute dtype (default bf16 on cuda, as PyTorch's)
#   --systems LIST          ours,torch (default both; torch is skipped with a note when PYTHON
#                           cannot import it)
#   --build-dir DIR         where nmt-prep, nmt-train and bench-decode are built (default
#                           $BUILD_DIR, else build-gpu; cpu: build)
#   --prep DIR              the prepared corpus (default runs/prep/decode-compare-<name>-<vocab>)
#   --out DIR               logs and results (default $OUT, else runs/decode-compare/<time>)
#   --threads N             CPU threads of every program (default: cpu 2; cuda: all)
# OUT holds prep.log, train.log, ours.log, torch.log, ours.json, torch.json, tables.txt.
# Exit codes: 0 done; 1 a step failed (its log's tail printed); 2 bad arguments or missing files.
# Environment: OUT, BUILD_DIR, PYTHON (default python3: torch, sentencepiece, sacrebleu, numpy).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "decode-compare: $*" >&2; exit 2; }
fail() { echo "decode-compare: $1 failed; the end of $2:" >&2; tail -n 25 "$2" >&2; exit 1; }

CORPUS=../shared/data/bible-en-es PAIR=en-es CHECKPOINT= CONFIG= STEPS= DEVICE=cuda VOCAB=
BEAMS=1,4 BATCHES=1,32,all LATENCY=200 MAX_SENTENCES= ALL_ROWS=32768 OURS_DTYPE= SYSTEMS=ours,torch
BUILD=${BUILD_DIR:-} PREP= OUT_DIR=${OUT:-} THREADS= PYTHON=${PYTHON:-python3}
while (($#)); do
  case "$1" in
    --corpus) CORPUS=${2:?}; [[ "$2" == *:* ]] && { CORPUS=${2%%:*}; PAIR=${2#*:}; }; shift 2 ;;
    --checkpoint) CHECKPOINT=${2:?}; shift 2 ;;
    --config) CONFIG=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --device) DEVICE=${2:?}; shift 2 ;;
    --vocab-size) VOCAB=${2:?}; shift 2 ;;
    --beams) BEAMS=${2:?}; shift 2 ;;
    --batches) BATCHES=${2:?}; shift 2 ;;
    --latency-sentences) LATENCY=${2:?}; shift 2 ;;
    --max-sentences) MAX_SENTENCES=${2:?}; shift 2 ;;
    --all-rows) ALL_ROWS=${2:?}; shift 2 ;;
    --ours-dtype) OURS_DTYPE=${2:?}; shift 2 ;;
    --systems) SYSTEMS=${2:?}; shift 2 ;;
    --build-dir) BUILD=${2:?}; shift 2 ;;
    --prep) PREP=${2:?}; shift 2 ;;
    --out) OUT_DIR=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

[[ "$DEVICE" == cuda || "$DEVICE" == cpu ]] || die "--device $DEVICE: expected cuda or cpu"
SRC=${PAIR%-*} TGT=${PAIR#*-}
if [[ $DEVICE == cpu ]]; then
  CONFIG=${CONFIG:-configs/bible-en-es-cpu.json} STEPS=${STEPS:-30} VOCAB=${VOCAB:-600}
  MAX_SENTENCES=${MAX_SENTENCES:-40} OURS_DTYPE=${OURS_DTYPE:-f32} THREADS=${THREADS:-2}
  BUILD=${BUILD:-build}
  ((LATENCY == 200)) && LATENCY=10
else
  CONFIG=${CONFIG:-configs/bible-en-es.json} STEPS=${STEPS:-2500} VOCAB=${VOCAB:-8000}
  MAX_SENTENCES=${MAX_SENTENCES:-0} OURS_DTYPE=${OURS_DTYPE:-bf16} BUILD=${BUILD:-build-gpu}
fi
for f in "train.$SRC" "train.$TGT" "dev.$SRC" "dev.$TGT"; do
  [[ -f "$CORPUS/$f" ]] || die "--corpus: $CORPUS/$f not found"
done
[[ -f "$CONFIG" ]] || die "--config $CONFIG: not found"
[[ -z "$CHECKPOINT" || -f "$CHECKPOINT/state.json" ]] || die "--checkpoint $CHECKPOINT: no state.json"
for tool in apps/nmt-prep/nmt-prep apps/nmt-train/nmt-train bench/bench-decode/bench-decode; do
  [[ -x "$BUILD/$tool" ]] || die "$BUILD/$tool not built (cmake --build $BUILD --target ${tool##*/})"
done
OUT_DIR=${OUT_DIR:-runs/decode-compare/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
thread_args=()
[[ -n "$THREADS" ]] && { export OMP_NUM_THREADS=$THREADS; thread_args=(--threads "$THREADS"); }
DEV_SRC=$CORPUS/dev.$SRC DEV_REF=$CORPUS/dev.$TGT

# The training corpus (cpu: a slice, so the smoke test takes a minute), prepared once.
if [[ -z "$CHECKPOINT" ]]; then
  name=$(basename "$(cd "$CORPUS" && pwd)")
  PREP=${PREP:-runs/prep/decode-compare-$name-$VOCAB$([[ $DEVICE == cpu ]] && echo -smoke || true)}
  if [[ -f "$PREP/report.json" ]]; then
    echo "decode-compare: reusing $PREP"
  else
    echo "decode-compare: preparing $CORPUS ($PAIR, BPE $VOCAB) into $PREP"
    train_src=$CORPUS/train.$SRC train_tgt=$CORPUS/train.$TGT
    if [[ $DEVICE == cpu ]]; then
      head -n 3000 "$train_src" >"$OUT_DIR/train.$SRC" && train_src=$OUT_DIR/train.$SRC
      head -n 3000 "$train_tgt" >"$OUT_DIR/train.$TGT" && train_tgt=$OUT_DIR/train.$TGT
    fi
    "$BUILD/apps/nmt-prep/nmt-prep" --train-src "$train_src" --train-tgt "$train_tgt" \
      --dev-src "$DEV_SRC" --dev-tgt "$DEV_REF" --out "$PREP" --vocab-size "$VOCAB" \
      >"$OUT_DIR/prep.log" 2>&1 || fail nmt-prep "$OUT_DIR/prep.log"
  fi
  train_args=(--config "$CONFIG" --set data.train="$PREP" --set data.dev="$PREP"
    --set train.max_steps="$STEPS" --set checkpoint.every_steps="$STEPS"
    --set checkpoint.dir="$OUT_DIR/ckpt" --set log.dir="$OUT_DIR/log" --set log.card=false
    --set eval.every_steps=0)
  if [[ $DEVICE == cpu ]]; then
    train_args+=(--set model.d_model=64 --set model.ffn_dim=128 --set train.batch_tokens=1024
      --set train.threads="$THREADS" --set eval.max_sentences=8)
  fi
  echo "decode-compare: training $CONFIG for $STEPS steps on $DEVICE (log $OUT_DIR/train.log)"
  t0=$(date +%s)
  "$BUILD/apps/nmt-train/nmt-train" "${train_args[@]}" >"$OUT_DIR/train.log" 2>&1 ||
    fail nmt-train "$OUT_DIR/train.log"
  CHECKPOINT=$(ls -d "$OUT_DIR"/ckpt/ckpt-* | sort -V | tail -n 1)
  echo "decode-compare: trained in $(($(date +%s) - t0)) s: $CHECKPOINT"
fi

common=(--checkpoint "$CHECKPOINT" --source "$DEV_SRC" --reference "$DEV_REF" --beams "$BEAMS"
  --batches "$BATCHES" --all-rows "$ALL_ROWS" --latency-sentences "$LATENCY")
((MAX_SENTENCES > 0)) && common+=(--max-sentences "$MAX_SENTENCES")
tables=$OUT_DIR/tables.txt
: >"$tables"
if [[ ",$SYSTEMS," == *,ours,* ]]; then
  echo "decode-compare: bench-decode ($DEVICE, $OURS_DTYPE; log $OUT_DIR/ours.log)"
  "$BUILD/bench/bench-decode/bench-decode" --device "$DEVICE" --dtype "$OURS_DTYPE" "${common[@]}" \
    --json "$OUT_DIR/ours.json" 2>&1 | tee "$OUT_DIR/ours.log" || fail bench-decode "$OUT_DIR/ours.log"
  sed -n '/^ours (bench-decode/,$p' "$OUT_DIR/ours.log" >>"$tables"
fi
if [[ ",$SYSTEMS," == *,torch,* ]]; then
  if "$PYTHON" -c 'import torch, sentencepiece, sacrebleu' 2>/dev/null; then
    echo "decode-compare: torch_decode.py ($DEVICE; log $OUT_DIR/torch.log)"
    "$PYTHON" bench/torch_decode.py --device "$DEVICE" "${thread_args[@]}" "${common[@]}" \
      --json "$OUT_DIR/torch.json" 2>&1 | tee "$OUT_DIR/torch.log" || fail torch_decode.py "$OUT_DIR/torch.log"
    sed -n '/^PyTorch /,$p' "$OUT_DIR/torch.log" >>"$tables"
  else
    echo "decode-compare: torch_decode.py skipped: $PYTHON cannot import torch, sentencepiece and sacrebleu" |
      tee -a "$tables"
  fi
fi
if [[ -f "$OUT_DIR/ours.json" && -f "$OUT_DIR/torch.json" ]]; then
  echo >>"$tables"
  "$PYTHON" bench/torch_decode.py --compare "$OUT_DIR/ours.json" "$OUT_DIR/torch.json" >>"$tables"
fi
echo
echo "decode-compare: checkpoint $CHECKPOINT, dev $DEV_SRC; results in $OUT_DIR"
cat "$tables"
