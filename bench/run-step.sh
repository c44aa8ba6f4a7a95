#!/usr/bin/env bash
# GPU-machine cycle of the whole-step benchmark (issue 4): builds bench-step (sm_90a) unless
# BENCH_STEP_BIN names a binary that runs here, times ours (bf16, fp16, fp32 base; bf16 big) and
# bench/torch_step.py (its own layers eager and compiled, base, with a profiler table; nn.Transformer's
# layers compiled, base and big) in the same
# call, and prints the step-time table, then where one step's GPU time goes: a per-kernel table
# (kernel, kind, launches, ms per step, share, DRAM MB a launch and the TB/s they moved at;
# bench/step_kernels.py) from ncu over timed steps of
# ours in bf16 base (bench-step brackets its timed steps with cudaProfilerStart/Stop, so set-up and
# warmup are left out). $OUT (else $BUILD_DIR/step-logs) gets: step.log (every stage's output),
# results.jsonl (one JSON line per config), gpu.txt, and with the profile ncu-ours.csv, ncu-ours.log,
# kernels-ours.md and .json (and ncu-baseline.* for the baseline), and with PROFILE_SOURCE
# sass-ours.csv, sass-ours.md and ncu-source.log (the report itself stays in $BUILD_DIR).
# Environment: BUILD_DIR (build-step), JOBS (16), WARMUP (10), STEPS (50), BUDGET_S (0 = no limit:
# otherwise stages are cut short so the tables still print within that many seconds), LARGE=1
# (also ours and torch.compile at 256 x 64), TORCH=0 (skip the PyTorch peers), PROFILE=0 (skip
# the ncu profile; it needs ncu on PATH, in /usr/local/cuda*/bin or /opt/nvidia/nsight-compute,
# and GPU performance counters open to this user), PROFILE_STEPS (2), PROFILE_ARGS (bench-step
# arguments of the profiled config; "--precision bf16 --model base"), BASELINE_BIN (a bench-step
# binary of another build, e.g. main's: timed as "baseline bf16 base" and profiled too, and the
# kernel table gains its ms per step and the change), PROFILE_SOURCE (a kernel-name regex: ncu's
# source counters of the first launch it matches in the profiled config, summed by
# bench/sass_hotspots.py into sass-ours.md: instructions and stall samples by opcode, by phase,
# and the lines that wait most).
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
baseline=${BASELINE_BIN:-}
if [[ -n "$baseline" ]] && ! "$baseline" --help >/dev/null 2>&1; then
  echo "run-step: BASELINE_BIN=$baseline does not run here; no baseline"
  baseline=""
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
if [[ -n "$baseline" ]]; then  # the same config of the other build, named apart in the table
  stage "baseline-bf16-base" 120 "$baseline" --precision bf16 --model base --warmup "$WARMUP" \
    --steps "$STEPS"
  python3 - "$JSON_DIR/baseline-bf16-base.json" <<'EOF' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1])); r["config"] = "baseline bf16 base"; r["impl"] = "baseline"
json.dump(r, open(sys.argv[1], "w"))
EOF
fi
ours fp16 base
ours fp32 base
ours bf16 big
[[ "${LARGE:-0}" == 1 ]] && ours bf16 base --batch 256
if [[ "${TORCH:-1}" != 0 ]]; then
  torch_step eager base
  torch_step compile base --profile 3
  # nn.Transformer's own layers + compile: the fastest setup a user would pick (DEVICE.md)
  torch_step compile base --impl nn
  torch_step compile big --impl nn
  [[ "${LARGE:-0}" == 1 ]] && torch_step compile base --batch 256 --impl nn
fi

PROFILE_STEPS=${PROFILE_STEPS:-2}
read -r -a profile_args <<<"${PROFILE_ARGS:---precision bf16 --model base}"
ncu_bin=""
if [[ "${PROFILE:-1}" != 0 ]]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null |
    head -1)
  [[ -z "$ncu_bin" ]] &&
    echo "run-step: no ncu here (PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-compute); no per-kernel table"
fi
# profile NAME BINARY: ncu over PROFILE_STEPS timed steps (after 2 warmup steps) of BINARY into
# $LOG_DIR/ncu-NAME.csv; says why not when it fails. Clocks and caches are left as they are
# (never lock clocks here), and each kernel is timed alone, so the sum is GPU time, not wall time.
# The DRAM bytes are the kernel's with L2 as the kernel before it (or ncu's replay) left it: what
# an L2 hit saved is not in them, so a kernel whose inputs were just written reads low.
profile() {
  local name=$1 binary=$2 rc=0 csv="$LOG_DIR/ncu-$1.csv" log="$LOG_DIR/ncu-$1.log"
  rm -f "$csv"
  timeout "$(stage_timeout 240)" "$ncu_bin" --profile-from-start off --clock-control none \
    --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --csv --print-units base \
    --log-file "$csv" "$binary" "${profile_args[@]}" --warmup 2 --steps "$PROFILE_STEPS" \
    >"$log" 2>&1 || rc=$?
  if grep -q -s "ERR_NVGPUCTRPERM" "$csv" "$log"; then
    echo "run-step: ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM: run as" \
      "root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0); no kernel table for $name"
    return 1
  fi
  if ! grep -q -s '^"ID"' "$csv" && grep -q -s '^"ID"' "$log"; then
    cp "$log" "$csv"  # an ncu that kept the report on stdout
  fi
  if ! grep -q -s '^"ID"' "$csv"; then
    echo "run-step: ncu gave no kernel table for $name (rc $rc); the last lines of its output:"
    tail -n 5 "$log" "$csv" 2>/dev/null
    return 1
  fi
  ((rc)) && echo "run-step: ncu exited with $rc for $name (timed out?); its table may be partial"
  return 0
}
profiled=0
baseline_profiled=0
if [[ -n "$ncu_bin" ]]; then
  echo "==== ncu: ${profile_args[*]}, $PROFILE_STEPS steps" >>"$LOG"
  profile ours "$bin" && profiled=1
  [[ -n "$baseline" ]] && profile baseline "$baseline" && baseline_profiled=1
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

if ((profiled)); then
  echo
  echo "Where one step's GPU time goes: ours, ${profile_args[*]}, $PROFILE_STEPS steps under ncu" \
    "(each kernel timed alone)${baseline:+, against the baseline build}:"
  baseline_args=()
  ((baseline_profiled)) && baseline_args=(--baseline "$LOG_DIR/ncu-baseline.csv")
  python3 bench/step_kernels.py "$LOG_DIR/ncu-ours.csv" --steps "$PROFILE_STEPS" \
    "${baseline_args[@]}" --json "$LOG_DIR/kernels-ours.json" | tee "$LOG_DIR/kernels-ours.md" |
    tee -a "$LOG"
fi

if [[ -n "$ncu_bin" && -n "${PROFILE_SOURCE:-}" ]]; then
  echo
  echo "Where one launch of ${PROFILE_SOURCE} spends its instructions and stalls (ncu source counters):"
  report="$BUILD_DIR/sass-ours"
  if timeout "$(stage_timeout 240)" "$ncu_bin" --profile-from-start off --clock-control none \
       -k "regex:$PROFILE_SOURCE" --launch-count 1 --section SourceCounters -f -o "$report" \
       "$bin" "${profile_args[@]}" --warmup 2 --steps 1 >"$LOG_DIR/ncu-source.log" 2>&1 &&
     "$ncu_bin" -i "$report.ncu-rep" --page source --csv --print-source sass \
       >"$LOG_DIR/sass-ours.csv" 2>>"$LOG_DIR/ncu-source.log"; then
    python3 bench/sass_hotspots.py "$LOG_DIR/sass-ours.csv" | tee "$LOG_DIR/sass-ours.md" |
      tee -a "$LOG"
  else
    echo "run-step: ncu gave no source counters for $PROFILE_SOURCE; the last lines of its output:"
    tail -n 5 "$LOG_DIR/ncu-source.log"
  fi
fi
