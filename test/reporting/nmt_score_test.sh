#!/usr/bin/env bash
# nmt-score on a checkpoint of a short CPU run of configs/tiny-reverse-cpu.json: the JSON holds
# the batch loss (label smoothing 0: loss = nll), and the logits decode_last_logits gives after a
# full target agree with evaluate: with empty targets every sentence's loss is its eos term alone.
# User errors give one message and no output file. The run's metrics.jsonl is also plotted by
# scripts/plot-metrics.py when matplotlib is installed.
set -uo pipefail
train=$1
score=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

OMP_NUM_THREADS=2 "$train" --config configs/tiny-reverse-cpu.json --set train.max_steps=30 \
  --set eval.every_steps=0 --set log.every_steps=10 --set "log.dir=$tmp/log" \
  --set "checkpoint.dir=$tmp/ckpt" >"$tmp/train.log" 2>&1 || {
  cat "$tmp/train.log"
  echo "FAIL: training"
  exit 1
}
ckpt=$tmp/ckpt/ckpt-30
printf '4 5 6 7\n8 9 10\n11 12 13 14 15 16 17 18 19\n' >"$tmp/src.ids"
printf '7 6 5 4\n10 9 8\n19 18 17 16 15 14 13 12 11\n' >"$tmp/tgt.ids"
"$score" --checkpoint "$ckpt" --src "$tmp/src.ids" --tgt "$tmp/tgt.ids" --ids --device cpu \
  --out "$tmp/full.json" || fail "nmt-score exit $?"
printf '\n\n\n' >"$tmp/empty.ids"
"$score" --checkpoint "$ckpt" --src "$tmp/src.ids" --tgt "$tmp/empty.ids" --ids --device cpu \
  --out "$tmp/eos.json" || fail "nmt-score (empty targets) exit $?"
python3 - "$tmp/full.json" "$tmp/eos.json" <<'PY' || fail "result JSON"
import json, math, sys
full, eos = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert full["sentences"] == 3 and full["tokens"] == 4 + 3 + 9 + 3, full["tokens"]
assert full["vocab_size"] == 20 and full["step"] == 30
assert full["loss"] == full["nll"] and 0 < full["loss"] < 1e4
assert len(full["last_logits"]) == 3 and all(len(r) == 20 for r in full["last_logits"])
assert all(math.isfinite(x) for r in full["last_logits"] for x in r)
assert full["tgt_ids"][2] == [19, 18, 17, 16, 15, 14, 13, 12, 11]
# Empty targets: the loss of each sentence is -log p(eos | bos), which eos_nll recomputes from the
# decode path's logits (sources padded alone there, in a batch of three in evaluate).
assert eos["tokens"] == 3
assert abs(sum(eos["eos_nll"]) - eos["nll"]) <= 1e-4 * max(1.0, eos["nll"]), (eos["eos_nll"], eos["nll"])
print(f"ok: loss {full['loss']:.4f} over {full['tokens']} tokens; eos terms {eos['nll']:.5f}")
PY

expect_error() {  # expect_error <description> <regex> <args...>
  local what=$1 pattern=$2
  shift 2
  local out
  out=$("$score" --checkpoint "$ckpt" --device cpu --out "$tmp/err.json" "$@" 2>&1)
  if (($? == 0)) || ! grep -Eq "$pattern" <<<"$out" || (($(wc -l <<<"$out") != 1)) ||
    [[ -e "$tmp/err.json" ]]; then
    fail "$what: $out"
  fi
}
printf '4 5\n' >"$tmp/one.ids"
expect_error "line counts" "src.ids has 3 lines but .*one.ids has 1" --src "$tmp/src.ids" \
  --tgt "$tmp/one.ids" --ids
printf '4 5\n4 99\n' >"$tmp/bad.ids"
expect_error "id outside the vocabulary" "bad.ids line 2: id 99" --src "$tmp/bad.ids" \
  --tgt "$tmp/bad.ids" --ids
expect_error "text without vocabulary" "records no vocabulary" --src "$tmp/src.ids" \
  --tgt "$tmp/src.ids"

if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 scripts/plot-metrics.py "$tmp/log/metrics.jsonl" -o "$tmp/plot.png" 2>/dev/null &&
    [[ -s "$tmp/plot.png" ]] || fail "plot-metrics.py on the run's metrics.jsonl"
else
  echo "note: matplotlib missing, the run's metrics.jsonl is not plotted"
fi
echo "$((6 - failures)) passed, $failures failed"
((failures == 0))
