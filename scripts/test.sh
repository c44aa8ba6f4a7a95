#!/usr/bin/env bash
# Builds everything and runs the whole test suite (ctest). Extra arguments go to ctest,
# e.g. `scripts/test.sh -L cuda` on the GPU machine, `scripts/test.sh -L cpu` for CPU only.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
export PATH="/usr/local/cuda/bin:$PATH"
JOBS=${JOBS:-$(nproc)}

GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS" --timeout 900 "$@"
