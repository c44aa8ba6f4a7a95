#!/usr/bin/env bash
# scripts/plot-metrics.py on a handwritten metrics.jsonl: the resume rule drops the interrupted
# run's lines above the resume step, NaN (null) points are left out, and a PNG is written.
# Skipped (77) when matplotlib is not installed for python3.
set -uo pipefail
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  echo "SKIPPED: matplotlib is not installed for python3 (pip install matplotlib)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
script=scripts/plot-metrics.py
fixture=test/reporting/metrics_fixture.jsonl
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

python3 "$script" "$fixture" -o "$tmp/plot.png" --print-series >"$tmp/series.json" || fail "exit $?"
python3 - "$tmp/series.json" <<'PY' || fail "series differ from the resume rule's"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["dev BLEU"] == {"steps": [20, 40], "values": [1.5, 4.25]}, s["dev BLEU"]
train = s["train loss (label-smoothed, per target token)"]
assert train == {"steps": [10, 20, 30], "values": [5.0, 4.0, 3.0]}, train  # 40 is null
assert s["dev loss"]["values"] == [4.5, 3.5], s["dev loss"]
assert s["learning rate"]["steps"] == [10, 20, 30, 40], s["learning rate"]
PY
if [[ "$(head -c 8 "$tmp/plot.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]]; then
  fail "plot.png is not a PNG"
fi

echo '{"event": "train", "step": 1' >"$tmp/bad.jsonl"
echo '{"event": "eval", "step": 2, "loss": 1.0}' >>"$tmp/bad.jsonl"
out=$(python3 "$script" "$tmp/bad.jsonl" -o "$tmp/bad.png" 2>&1)
if (($? == 0)) || ! grep -q "bad.jsonl line 1" <<<"$out" || [[ -e "$tmp/bad.png" ]]; then
  fail "a broken line: $out"
fi
out=$(python3 "$script" "$tmp/missing.jsonl" 2>&1)
(($? != 0)) && grep -q "cannot read.*missing.jsonl" <<<"$out" || fail "a missing file: $out"
echo "$((4 - failures)) passed, $failures failed"
((failures == 0))
