#!/usr/bin/env bash
# GPU-machine cycle of the whole-step benchmark (issue 4): builds bench-step (sm_90a) unless
# BENCH_STEP_BIN names a binary that runs here, times ours (bf16, fp16, fp32 base; bf16 big) and
# bench/torch_step.py (eager and torch.compile base, with a profiler table; compile big) in the same
# call, and prints one markdown table last. $OUT (else $BUILD_DIR/step-logs) gets few files:
# step.log (every stage's output), results.jsonl (one JSON line per config), gpu.txt.
# Environment: BUILD_DIR (build-step), JOBS (16), WARMUP (10), STEPS (50), BUDGET_S (0 = no limit:
# otherwise stages are cut short so the table still prints within that many seconds), LARGE=1
# (also ours and torch.compile at 256 x 64), PROFILE=1 (also per-kernel GPU times of one bf16
# step of ours under ncu, summed by kernel name: kernels-ours.md, ncu-ours-bf16.csv).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=${BUILD_DIR:-build-step}
JOBS=${JOBS:-16}
WARMUP=${WARMUP:-10}
STEPS=${STEPS:-50}
BUDGET_S=${BUDGET_S:-0}
LOG_DIR=${OUT:-$BUILD_DIR/step-logs}
JSON_DIR="$BUILD_DIR/step-json"  # per-config results, gathered into $LOG_DIR/results.jsonl
mkdir -p "$LOG_DIR" "$JSON_DIR"
rm -f "$JSON_DIR"/*.json
LOG="$LOG_DIR/step.log"
: >"$LOG"
start=$(date +%s)

# stage_timeout MAX: MAX seconds, or less so that 20 s stay for the table within BUDGET_S.
stage_timeout() {
  local max=$1
  ((BUDGET_S <= 0)) && { echo "$max"; return; }
  local left=$((BUDGET_S - ($(date +%s) - start) - 20))
  ((left < max)) && max=$left
  ((max < 1)) && max=1
  echo "$max"
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$LOG_DIR/gpu.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "run-step: ${gpu:-no GPU}, $(date -u +%Y-%m-%dT%H:%MZ), commit" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown), torch" \
  "$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo missing)"

bin=${BENCH_STEP_BIN:-}
if [[ -z "$bin" ]] || ! "$bin" --help >/dev/null 2>&1; then
  [[ -n "$bin" ]] && echo "run-step: $bin does not run here; building"
  bin="$BUILD_DIR/bench/bench-step/bench-step"
  if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
       -DNMT_ONLY_SUBDIRS=bench-step >"$LOG_DIR/configure.log" 2>&1 ||
     ! cmake --build "$BUILD_DIR" --target bench-step -j "$JOBS" >"$LOG_DIR/build.log" 2>&1; then
    tail -40 "$LOG_DIR/configure.log" "$LOG_DIR/build.log" 2>/dev/null | grep -E -B2 -A6 "rror" | head -60
    echo "run-step: build FAILED"
    exit 1
  fi
  echo "run-step: built in $(($(date +%s) - start)) s"
fi

configs=()  # the JSON files, in table order
stage() {  # stage NAME MAX_SECONDS COMMAND...: output appended to the log and echoed
  local name=$1 max=$2 rc=0
  shift 2
  echo "==== $name" >>"$LOG"
  timeout "$(stage_timeout "$max")" "$@" --json "$JSON_DIR/$name.json" >"$JSON_DIR/$name.txt" 2>&1 ||
    rc=$?
  ((rc)) && echo "run-step: $name failed or timed out (rc $rc)" | tee -a "$JSON_DIR/$name.txt"
  grep -v -e "^ *$" -e "Warning" -e "_warn_once" "$JSON_DIR/$name.txt" | tee -a "$LOG"
  configs+=("$JSON_DIR/$name.json")
}
suffix() { local args="$*"; args=${args//--/}; echo "${args:+-${args// /-}}"; }  # "--batch 256" -> -batch-256
ours() {  # ours PRECISION MODEL [extra args]
  stage "ours-$1-$2$(suffix "${@:3}")" 120 "$bin" --precision "$1" --model "$2" --warmup "$WARMUP" \
    --steps "$STEPS" "${@:3}"
}
torch_step() {  # torch_step MODE MODEL [extra args]
  stage "torch-$1-$2$(suffix "${@:3}")" 240 python3 bench/torch_step.py --mode "$1" --model "$2" \
    --warmup "$WARMUP" --steps "$STEPS" "${@:3}"
}

ours bf16 base
ours fp16 base
ours fp32 base
ours bf16 big
[[ "${LARGE:-0}" == 1 ]] && ours bf16 base --batch 256
torch_step eager base
torch_step compile base --profile 3
torch_step compile big
[[ "${LARGE:-0}" == 1 ]] && torch_step compile base --batch 256

if [[ "${PROFILE:-0}" == 1 ]]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [[ -n "$ncu_bin" ]]; then
    # One step; clocks and caches left as they are (never lock clocks here).
    timeout "$(stage_timeout 150)" "$ncu_bin" --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv --print-units base "$bin" --precision bf16 \
      --model base --warmup 0 --steps 1 >"$LOG_DIR/ncu-ours-bf16.csv" 2>"$LOG_DIR/ncu.log" ||
      echo "run-step: ncu failed or timed out (rc $?; $LOG_DIR/ncu.log)"
    python3 bench/step_kernels.py "$LOG_DIR/ncu-ours-bf16.csv" --steps 1 |
      tee "$LOG_DIR/kernels-ours.md" | tee -a "$LOG"
  else
    echo "run-step: no ncu here; no per-kernel times of ours"
  fi
fi

echo
echo "Whole training step, ${gpu:-no GPU}, $WARMUP warmup + $STEPS timed steps, median (CUDA events):"
python3 - "$LOG_DIR/results.jsonl" "${configs[@]}" <<'EOF'
import json, os, sys
rows = [json.load(open(p)) for p in sys.argv[2:] if os.path.exists(p)]
with open(sys.argv[1], "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
shape = lambda r: (r["model"], r["batch"], r["src_len"], r["tgt_len"])
compiled = {shape(r): r for r in rows if r["impl"] == "torch-compile"}
print("| config | ms/step | target tok/s | vs torch.compile | fwd+bwd ms | optimizer ms | TFLOP/s | MFU | device MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    peer = compiled.get(shape(r))
    vs = f"{r['tgt_tokens_per_s'] / peer['tgt_tokens_per_s']:.2f}×" if peer else "—"
    print(f"| {r['config']} | {r['step_ms_median']:.2f} | {r['tgt_tokens_per_s']:,.0f} | {vs} | "
          f"{r['fwd_bwd_ms_median']:.2f} | {r['optimizer_ms_median']:.2f} | {r['tflops_per_s']:.0f} | "
          f"{100 * r['mfu']:.0f}% | {r['device_mem_mib']:,.0f} |")
EOF
