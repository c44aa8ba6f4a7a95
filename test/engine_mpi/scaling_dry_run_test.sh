#!/usr/bin/env bash
# bench/scaling.sh's dry run on the CPU backend over MPI (the tiny model, 1 and 2 ranks, overlap on
# and off, a few steps): the script, the shipped config it overrides and mpirun work together, and
# the table has a row per run. It once failed every run at the config check unseen (the shipped
# cosine decay must end after the warmup). Skipped (77) without the corpus, mpirun or python3.
#   scaling_dry_run_test.sh BUILD_DIR
set -uo pipefail
build=$1
corpus=${NMT_DATA_ROOT:-../shared/data}/bible-en-es
if [[ ! -f $corpus/train.en ]] || ! command -v mpirun >/dev/null || ! command -v python3 >/dev/null; then
  echo "SKIPPED: needs $corpus, mpirun and python3"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SCALING_DEVICE=cpu BUILD_DIR=$build RUNS_DIR=$tmp/runs OUT=$tmp/out \
  bash bench/scaling.sh --gpus "1 2" --steps 2 --corpus "$corpus" >"$tmp/log" 2>&1
status=$?
failures=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}
check "scaling.sh exit status $status" test $status -eq 0
check "no run failed" bash -c "! grep -q 'failed' '$tmp/log'"
for run in tiny-2048-np1 tiny-2048-np2 tiny-2048-np2-serial; do
  check "a table row for $run" grep -q "^$run " "$tmp/log"
done
check "every run wrote its report" test "$(wc -l <"$tmp/out/scaling.jsonl")" -eq 3
((failures == 0)) || { tail -n 30 "$tmp/log"; exit 1; }
