#!/usr/bin/env bash
# Installs the build and test dependencies on Debian 12 or Ubuntu 24.04 (run as root or with sudo).
# The CUDA toolkit with NCCL is a prerequisite this script checks for but does not install.
set -euo pipefail

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

. /etc/os-release
case "${ID}:${VERSION_ID:-}" in
  debian:12 | ubuntu:24.04) ;;
  *) echo "install-deps: untested distribution ${PRETTY_NAME:-unknown}; trying anyway" >&2 ;;
esac

PACKAGES=(build-essential cmake ninja-build pkg-config git
          catch2 libcli11-dev nlohmann-json3-dev
          libsentencepiece-dev sentencepiece
          libopenmpi-dev openmpi-bin
          python3 python3-pip)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python oracles used by tests (sacreBLEU, TensorBoard reader, safetensors; CTranslate2 and
# SentencePiece for the export round trip, CPU wheels) and by scripts (matplotlib:
# scripts/plot-metrics.py; ctranslate2: scripts/ct2_nmt_converter.py).
PY_PACKAGES=(sacrebleu==2.* safetensors numpy tensorboard matplotlib "ctranslate2>=4,<5" sentencepiece)
if ! python3 -c "import sacrebleu, safetensors, numpy, tensorboard, matplotlib, ctranslate2, sentencepiece" >/dev/null 2>&1; then
  echo "install-deps: installing Python packages ${PY_PACKAGES[*]}"
  python3 -m pip install -q "${PY_PACKAGES[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${PY_PACKAGES[@]}"
fi

# CUDA toolkit and NCCL: prerequisites (NVIDIA's repository), checked here.
problems=()
NVCC=$(command -v nvcc || true)
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
[[ -z "$NVCC" ]] && problems+=("nvcc not found: install the CUDA toolkit (package cuda-toolkit-13-0 from NVIDIA's repository) and put /usr/local/cuda/bin on PATH")
nccl_found=0
for dir in /usr/local/cuda/include /usr/include /usr/local/include; do
  [[ -f "$dir/nccl.h" ]] && nccl_found=1
done
if ((nccl_found == 0)); then
  problems+=("nccl.h not found: install libnccl-dev (NVIDIA's repository)")
fi
if ((${#problems[@]})); then
  printf 'install-deps: missing prerequisite: %s\n' "${problems[@]}" >&2
  exit 1
fi
echo "install-deps: all dependencies present ($("$NVCC" --version | tail -1))"
