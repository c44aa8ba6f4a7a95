#!/usr/bin/env bash
# GPU-machine check of the CUDA kernels in one call: configures and builds (sm_90a, ninja, -j16)
# only what is needed (nmt_kernels, the suites labelled cuda, bench-kernels), runs `ctest -L cuda`,
# bench-kernels and bench/compare_torch.py, keeps every log under $OUT when set (else under the
# build folder), and prints a short table last.
# Environment: BUILD_DIR (build-gpu), JOBS (16), RUNS (benchmark runs, 30), GPU_CHECK_SUBDIRS (the
# folders of apps/, bench/ and test/ to configure, default "cuda;bench-kernels"; empty for all),
# SANITIZE=1 (also run test_cuda_kernels under compute-sanitizer memcheck).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-16}
RUNS=${RUNS:-30}
SUBDIRS=${GPU_CHECK_SUBDIRS-cuda;bench-kernels}
LOG_DIR=${OUT:-$BUILD_DIR/gpu-check-logs}
mkdir -p "$LOG_DIR"

seconds() { date +%s; }
start=$(seconds)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv >"$LOG_DIR/gpu.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "gpu-check: ${gpu:-no GPU found} on $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

configure=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a
           -DNMT_SKIP_INCOMPLETE_TESTS=ON)
[[ -n "$SUBDIRS" ]] && configure+=("-DNMT_ONLY_SUBDIRS=$SUBDIRS")
if ! cmake "${configure[@]}" >"$LOG_DIR/configure.log" 2>&1; then
  tail -40 "$LOG_DIR/configure.log"
  echo "gpu-check: configure FAILED (log: $LOG_DIR/configure.log)"
  exit 1
fi
mapfile -t cuda_tests < <(cd "$BUILD_DIR" && ctest -N -L cuda | sed -n 's/^ *Test *#[0-9]*: *//p')
targets=(nmt_kernels bench-kernels "${cuda_tests[@]}")
[[ -z "$SUBDIRS" ]] && targets=(all)  # everything: also the CPU suites and nmt-train
# -k 0: a suite that does not compile must not stop the others from being built and run.
cmake --build "$BUILD_DIR" --target "${targets[@]}" -j "$JOBS" -- -k 0 >"$LOG_DIR/build.log" 2>&1
build_rc=$?
build_done=$(seconds)
if ((build_rc != 0)); then
  grep -E -A6 "error|FAILED" "$LOG_DIR/build.log" | head -60
fi

(cd "$BUILD_DIR" && ctest -L cuda --output-on-failure --timeout 300) >"$LOG_DIR/ctest.log" 2>&1
test_rc=$?
tests_done=$(seconds)
if ((test_rc != 0)); then
  echo "---- failures (full log: $LOG_DIR/ctest.log) ----"
  grep -E -B3 -A14 "FAILED:|failed with|Exception|Not Run|SEGFAULT|Subprocess aborted" \
    "$LOG_DIR/ctest.log" | head -200
fi

sanitize_rc=0
if [[ "${SANITIZE:-0}" == 1 ]]; then
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$BUILD_DIR/test/cuda/test_cuda_kernels" >"$LOG_DIR/sanitizer.log" 2>&1
  sanitize_rc=$?
  grep -E "ERROR SUMMARY|Invalid|out of bounds" "$LOG_DIR/sanitizer.log" | head -20
fi
sanitized=$(seconds)

bench_rc=1
torch_rc=1
if [[ -x "$BUILD_DIR/bench/bench-kernels/bench-kernels" ]]; then
  "$BUILD_DIR/bench/bench-kernels/bench-kernels" --runs "$RUNS" >"$LOG_DIR/bench-kernels.txt" 2>&1
  bench_rc=$?
fi
PYTHONUNBUFFERED=1 python3 bench/compare_torch.py --runs "$RUNS" >"$LOG_DIR/compare-torch.txt" 2>&1
torch_rc=$?

# With everything built: the CPU suites too (Catch2 3 here), and the demo trained on the GPU.
cpu_rc=0
train_rc=0
if [[ -z "$SUBDIRS" ]]; then
  (cd "$BUILD_DIR" && ctest -L cpu -E demo -j 8 --output-on-failure --timeout 300) >"$LOG_DIR/ctest-cpu.log" 2>&1
  cpu_rc=$?
  "$BUILD_DIR/apps/nmt-train/nmt-train" --config configs/tiny-reverse-cpu.json \
    --set train.device=cuda >"$LOG_DIR/train-gpu.log" 2>&1
  train_rc=$?
fi
end=$(seconds)

echo "---- ctest -L cuda ----"
grep -E "tests passed|tests failed|Total Test time|\(Failed\)|\(Not Run\)|\*\*\*" "$LOG_DIR/ctest.log" | tail -15
if [[ -z "$SUBDIRS" ]]; then
  echo "---- ctest -L cpu ----"
  grep -E "tests passed|tests failed|\(Failed\)|\*\*\*" "$LOG_DIR/ctest-cpu.log" | tail -8
  echo "---- tiny reverse demo trained on the GPU (fp32) ----"
  grep -E "^model|^step (50|400|800) |^eval|^done|error" "$LOG_DIR/train-gpu.log" | tail -8
fi
echo "---- timings: build $((build_done - start)) s, tests $((tests_done - build_done)) s, sanitizer $((sanitized - tests_done)) s, benchmarks $((end - sanitized)) s"
((bench_rc != 0)) && tail -5 "$LOG_DIR/bench-kernels.txt"
((torch_rc != 0)) && tail -5 "$LOG_DIR/compare-torch.txt"
# The two tables side by side, joined on op and shape (columns: ms and rate of each).
python3 - "$LOG_DIR/bench-kernels.txt" "$LOG_DIR/compare-torch.txt" <<'PY'
import re, sys
row = re.compile(r"^(\S.{25}) (.{24}) +([0-9.]+) ms +([0-9.]+) (\S+)$")
def table(path):
    rows = {}
    try:
        for line in open(path):
            m = row.match(line.rstrip("\n"))
            if m:
                key = (m.group(1).strip().replace(" (fused)", ""), m.group(2).strip())
                rows[key] = (float(m.group(3)), float(m.group(4)), m.group(5))
    except OSError:
        pass
    return rows
ours, torch = table(sys.argv[1]), table(sys.argv[2])
print(f"{'op':<26} {'shape':<20} {'ours ms':>9} {'torch ms':>9} {'ours':>9} {'torch':>9} unit")
for (op, shape), (ms, rate, unit) in ours.items():
    t = torch.get((op, shape))
    t_ms = f"{t[0]:9.4f}" if t else f"{'-':>9}"
    t_rate = f"{t[1]:9.1f}" if t else f"{'-':>9}"
    print(f"{op:<26} {shape:<20} {ms:9.4f} {t_ms} {rate:9.1f} {t_rate} {unit}")
PY
echo "gpu-check: build rc=$build_rc, ctest rc=$test_rc, cpu rc=$cpu_rc, train rc=$train_rc, sanitizer rc=$sanitize_rc, bench rc=$bench_rc, torch rc=$torch_rc"
((build_rc == 0 && test_rc == 0 && cpu_rc == 0 && train_rc == 0 && sanitize_rc == 0 && bench_rc == 0))
