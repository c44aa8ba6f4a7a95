#!/usr/bin/env bash
# The README's first command: installs dependencies, builds, and trains a model.
# On a machine without a GPU it trains the small CPU demo (configs/tiny-reverse-cpu.json).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"

bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)" --target nmt-train

echo "quickstart: training the CPU demo (sequence reversal, 2+2 layers, d_model 64)"
"$BUILD_DIR/apps/nmt-train/nmt-train" --config configs/tiny-reverse-cpu.json "$@"
