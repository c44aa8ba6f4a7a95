#!/usr/bin/env bash
# bench/decode-compare.sh's CPU smoke mode end to end (nmt-prep on a slice of the Bible corpus, a
# few training steps of a tiny model, bench-decode's real-data mode, torch_decode.py where python3
# has torch), then bench-decode's messages for bad input. Skipped (77) without the corpus.
#   bench_decode_compare_test.sh BUILD_DIR
set -uo pipefail
build=$1
corpus=${NMT_DATA_ROOT:-../shared/data}/bible-en-es
if [[ ! -f $corpus/train.en ]] || ! command -v python3 >/dev/null; then
  echo "SKIPPED: needs $corpus and python3"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

bench/decode-compare.sh --device cpu --corpus "$corpus" --steps 10 --max-sentences 12 --latency-sentences 4 \
  --batches 1,4,all --build-dir "$build" --prep "$tmp/prep" --out "$tmp/out" >"$tmp/log" 2>&1
status=$?
check "decode-compare.sh --device cpu: exit status $status" test $status -eq 0
[[ $status -eq 0 ]] || tail -n 30 "$tmp/log"
check "the tables come last" grep -q "^ours (bench-decode, BeamSearch) on cpu, f32" "$tmp/out/tables.txt"
python3 - "$tmp/out" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in ("ours", "torch"):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        assert name == "torch", path  # torch_decode.py is skipped without torch
        continue
    doc = json.load(open(path))
    got = [(r["beam"], r["batch"]) for r in doc["rows"]]
    assert got == [(b, n) for b in (1, 4) for n in ("1", "4", "all")], got
    for r in doc["rows"]:
        assert r["sentences"] == (4 if r["batch"] == "1" else 12), r
        assert r["seconds"] > 0 and r["bleu"] is not None and r["target_tokens"] >= 0, r
        assert (r["latency_p50_ms"] is None) == (r["batch"] != "1"), r
    print(f"ok   {name}.json: {len(got)} rows with BLEU, latency on the batch-1 rows")
PY
check "the JSON rows" test $? -eq 0

# Bad input: one message naming the thing, exit 1.
bench=$build/bench/bench-decode/bench-decode
ckpt=$(ls -d "$tmp"/out/ckpt/ckpt-* | tail -n 1)
message() {  # message EXPECTED-TEXT ARGS...
  local text
  text=$("$bench" "${@:2}" 2>&1 >/dev/null)
  local code=$?
  [[ $code -eq 1 && "$text" == *"$1"* ]] || { echo "  got exit $code: $text"; return 1; }
}
check "missing checkpoint" message "$tmp/none" --checkpoint "$tmp/none" --source $corpus/dev.en
check "missing source" message "--source $tmp/none.en" --checkpoint "$ckpt" --source "$tmp/none.en"
check "bad batch size" message "--batches: 'x'" --checkpoint "$ckpt" --source $corpus/dev.en \
  --batches 1,x
printf 'ok\n\xff\xfe\n' >"$tmp/bad.en"
check "invalid UTF-8" message "bad.en line 2: invalid UTF-8" --checkpoint "$ckpt" --source "$tmp/bad.en"
printf 'one\ntwo\n' >"$tmp/two.en"
echo uno >"$tmp/one.es"
check "short reference" message "1 lines for 2 source lines" --checkpoint "$ckpt" \
  --source "$tmp/two.en" --reference "$tmp/one.es"
check "beam 0" message "--beams: 0 is below 1" --checkpoint "$ckpt" --source "$tmp/two.en" --beams 0
"$bench" --source $corpus/dev.en >/dev/null 2>&1
status=$?
check "--source without --checkpoint: a usage error (CLI11's exit code $status)" test $status -gt 1
echo "$failures failed"
exit $((failures > 0))
