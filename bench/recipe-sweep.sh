#!/usr/bin/env bash
# Trains one short run per variant of a recipe on a real corpus and prints, per variant, the mean
# training loss of the log interval ending at each evaluation, and the dev loss and greedy dev
# BLEU there, with the wall time from process start: the per-step study behind `model.init` and the
# shipped recipes (docs/perf.md, "Initialisation study").
#
# usage: bench/recipe-sweep.sh [--corpus DIR] [--config FILE] [--steps N] [--eval-every N]
#                              LABEL=KEY=VALUE[,KEY=VALUE...] ...
#   e.g. bench/recipe-sweep.sh --corpus .gpudata/bible-en-es xavier=model.init=xavier \
#          torch=model.init=torch torch-lr3=model.init=torch,lr_schedule.learning_rate=0.003
# The corpus folder holds train.{src,tgt} and dev.{src,tgt} under the language suffixes the
# config's pair uses (bible-en-es: en/es, lohelp-en-de: en/de); it is prepared once with nmt-prep
# (8k joint BPE, as the shipped configs expect) into runs/prep/. Environment: BUILD_DIR (build),
# OUT (logs; else runs/sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CORPUS=../shared/data/bible-en-es
CONFIG=configs/bible-en-es.json
STEPS=1500
EVAL_EVERY=500
variants=()
while (($#)); do
  case "$1" in
    --corpus) CORPUS=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --eval-every) EVAL_EVERY=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) variants+=("$1"); shift ;;
  esac
done
((${#variants[@]})) || { echo "recipe-sweep: name at least one LABEL=KEY=VALUE variant" >&2; exit 2; }
LOG_DIR=${OUT:-runs/sweep}
mkdir -p "$LOG_DIR"

name=$(basename "$CORPUS")
src=${name#*-}; src=${src%%-*}
tgt=${name##*-}
PREP=runs/prep/$name-8000
if [[ ! -f "$PREP/report.json" ]]; then
  "$BUILD_DIR/apps/nmt-prep/nmt-prep" --quiet --train-src "$CORPUS/train.$src" \
    --train-tgt "$CORPUS/train.$tgt" --dev-src "$CORPUS/dev.$src" --dev-tgt "$CORPUS/dev.$tgt" \
    --out "$PREP" --vocab-size 8000 --max-len 128
fi

for variant in "${variants[@]}"; do
  label=${variant%%=*}
  sets=()
  IFS=',' read -ra pairs <<<"${variant#*=}"
  for pair in "${pairs[@]}"; do sets+=(--set "$pair"); done
  run=runs/sweep-$name-$label
  rm -rf "$run"
  start=$(date +%s.%N)
  "$BUILD_DIR/apps/nmt-train/nmt-train" --config "$CONFIG" --set "data.train=$PREP" \
    --set "data.dev=$PREP" --set "train.max_steps=$STEPS" --set "eval.every_steps=$EVAL_EVERY" \
    --set "eval.samples=0" --set "checkpoint.dir=$run/ckpt" --set "log.dir=$run" "${sets[@]}" \
    >"$LOG_DIR/$name-$label.log" 2>&1 || { echo "recipe-sweep: $label failed:"; tail -5 "$LOG_DIR/$name-$label.log"; continue; }
  cp "$run/metrics.jsonl" "$LOG_DIR/$name-$label.jsonl"
  echo "$start" >"$LOG_DIR/$name-$label.start"
done

python3 - "$LOG_DIR" "$name" "${variants[@]}" <<'PY'
import json, sys
log_dir, corpus, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"corpus {corpus}: train loss (mean of the last log interval) | dev loss | greedy dev BLEU | seconds since process start")
for variant in variants:
    label = variant.split("=", 1)[0]
    try:
        records = [json.loads(l) for l in open(f"{log_dir}/{corpus}-{label}.jsonl")]
        start = float(open(f"{log_dir}/{corpus}-{label}.start").read())
    except OSError:
        print(f"{label:<16} (no run)")
        continue
    cells, losses = [], []
    for r in records:
        if r.get("event") == "train":
            losses.append(r["loss"])
        elif r.get("event") == "eval":
            train = losses[-1] if losses else float("nan")  # the last 100-step interval's mean
            bleu = r.get("bleu", float("nan"))
            cells.append(f"@{r['step']}: {train:.3f} | {r['loss']:.3f} | {bleu:5.2f} | {r['time'] - start:5.1f}s")
    tokens = [r["tokens_per_s"] for r in records if r.get("event") == "train"]
    speed = f"{sorted(tokens)[len(tokens) // 2] / 1e3:.0f}k tok/s" if tokens else ""
    print(f"{label:<16} " + "  ".join(cells) + f"  ({speed})")
PY
