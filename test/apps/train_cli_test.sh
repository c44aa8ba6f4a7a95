#!/usr/bin/env bash
# nmt-train's user errors: one clear message naming the problem and a non-zero exit, never a crash.
set -uo pipefail
train=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

expect_error() {  # expect_error <description> <regex> <args...>
  local what=$1 pattern=$2
  shift 2
  local out rc
  out=$("$train" "$@" 2>&1)
  rc=$?
  if ((rc == 0)) || ! grep -Eq "$pattern" <<<"$out" || (($(wc -l <<<"$out") != 1)); then
    echo "FAIL: $what: exit $rc, output:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok: $what -> $out"
  fi
}

echo '{"model": {"d_modle": 64}}' >"$tmp/typo.json"
expect_error "misspelt key" "model.d_modle.*did you mean model.d_model" --config "$tmp/typo.json"
echo '{"model": {"dropout": 1.5}}' >"$tmp/range.json"
expect_error "out of range" "model.dropout.*1.5" --config "$tmp/range.json"
echo '{"model": {' >"$tmp/broken.json"
expect_error "invalid JSON" "broken.json.*line" --config "$tmp/broken.json"
expect_error "missing file" "not found.*nope.json" --config "$tmp/nope.json"
expect_error "bad --set key" "train.max_stesp.*did you mean train.max_steps" \
  --config configs/tiny-reverse-cpu.json --set train.max_stesp=3
echo '{"data": {"train": "'"$tmp"'/no-such-dir"}, "train": {"device": "cpu", "precision": "fp32"}}' >"$tmp/data.json"
expect_error "missing data directory" "no-such-dir" --config "$tmp/data.json"

out=$("$train" --config configs/tiny-reverse-cpu.json --print-config)
if ! grep -q '"d_model": 64' <<<"$out"; then
  echo "FAIL: --print-config did not print the resolved config"
  failures=$((failures + 1))
fi
echo "$((6 + 1 - failures)) passed, $failures failed"
((failures == 0))
