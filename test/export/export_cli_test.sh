#!/usr/bin/env bash
# nmt-export and nmt-average user errors: one message naming the problem and the documented exit
# code (2 usage, 1 runtime), never a crash or a partial output directory.
# Usage: export_cli_test.sh NMT_EXPORT NMT_AVERAGE
set -uo pipefail
export_bin=$1 average_bin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 passed=0

expect() {  # expect <exit code> <regex> <command...>
  local code=$1 pattern=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if ((rc != code)) || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok: exit $rc: $(head -1 <<<"$out")"
    passed=$((passed + 1))
  fi
}

mkdir "$tmp/taken"
expect 2 "--checkpoint is required" "$export_bin" --format marian --out "$tmp/x"
expect 2 "--format fairseq: unknown" "$export_bin" --checkpoint "$tmp/c" --format fairseq --out "$tmp/x"
expect 2 "taken exists" "$export_bin" --checkpoint "$tmp/c" --format marian --out "$tmp/taken"
expect 1 "checkpoint .*/nope is not a directory" "$export_bin" --checkpoint "$tmp/nope" --format marian --out "$tmp/x"
expect 2 "--out is required" "$average_bin" --checkpoints "$tmp/c"
expect 2 "give --checkpoints" "$average_bin" --out "$tmp/x"
expect 2 "excludes" "$average_bin" --checkpoints "$tmp/c" --last 2 --dir "$tmp" --out "$tmp/x"
expect 2 "fewer than the 2" "$average_bin" --last 2 --dir "$tmp" --out "$tmp/x"
expect 1 "checkpoint .*/nope is not a directory" "$average_bin" --checkpoints "$tmp/nope" --out "$tmp/x"
if [[ -e $tmp/x ]] || compgen -G "$tmp/x.tmp-*" >/dev/null; then
  echo "FAIL: a failed run left $tmp/x behind"
  failures=$((failures + 1))
fi
echo "$passed passed, $failures failed"
((failures == 0))
