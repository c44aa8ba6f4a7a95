#!/usr/bin/env bash
# GPU-machine cycle for the communication layer: builds comm/ with its tests and bench-allreduce
# (sm_90a, -j16), runs every comm suite (cuda, mpi, and the multi-GPU ones when there are 2+
# GPUs), then bench-allreduce under mpirun over NCCL (and, with 2+ GPUs, NCCL forced onto TCP
# sockets to emulate two nodes) and over MPI on the CPU. Logs go to $OUT (else the build folder).
# Environment: BUILD_DIR (build-gpu-comm), JOBS (16).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=${BUILD_DIR:-build-gpu-comm}
JOBS=${JOBS:-16}
LOG_DIR=${OUT:-$BUILD_DIR/comm-logs}
mkdir -p "$LOG_DIR"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
echo "comm run-gpu: $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)," \
     "$(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
     -DNMT_SKIP_INCOMPLETE_TESTS=ON "-DNMT_ONLY_SUBDIRS=comm;bench-allreduce" \
     >"$LOG_DIR/configure.log" 2>&1; then
  tail -30 "$LOG_DIR/configure.log"
  exit 1
fi
targets=(test_comm_cpu test_comm_mpi test_comm_nccl test_comm_nccl_mpi comm_failure_probe
         bench-allreduce)
if ! cmake --build "$BUILD_DIR" --target "${targets[@]}" -j "$JOBS" >"$LOG_DIR/build.log" 2>&1; then
  grep -E -A6 "error|FAILED" "$LOG_DIR/build.log" | head -60
  exit 1
fi

(cd "$BUILD_DIR" && ctest -R comm --output-on-failure --timeout 180) >"$LOG_DIR/ctest.log" 2>&1
test_rc=$?
grep -E "Test +#|tests passed|Skipped|Failed" "$LOG_DIR/ctest.log"

bench="$BUILD_DIR/bench/bench-allreduce/bench-allreduce"
mpi=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE=0)
np=$((gpus >= 2 ? gpus : 1))
NCCL_NVLS_ENABLE=0 "${mpi[@]}" -np "$np" "$bench" --backend nccl >"$LOG_DIR/bench-nccl.txt" 2>&1
if ((gpus >= 2)); then
  "${mpi[@]}" -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 -np "$np" "$bench" --backend nccl \
    --max-bytes 268435456 --dtypes f32 --models base --exchange-iters 3 \
    >"$LOG_DIR/bench-nccl-sockets.txt" 2>&1
fi
"${mpi[@]}" -np 2 "$bench" --backend mpi --models base --bucket-mb 25 \
  >"$LOG_DIR/bench-mpi.txt" 2>&1

for f in "$LOG_DIR"/bench-*.txt; do
  echo "==== $(basename "$f")"
  cat "$f"
done
exit $test_rc
