#!/usr/bin/env bash
# The run card end to end on a short real-corpus run (a slice of ../shared/data/bible-en-es):
#   run_card_test.sh cpu NMT_PREP NMT_TRAIN NMT_REPORT   one process; nmt-train writes the card
#   run_card_test.sh mpi NMT_PREP NMT_TRAIN NMT_REPORT   mpiexec -n 2; nmt-report writes it
# Checks that card.md and card.html exist with every section and numbers in each, the trainer's
# records behind them (cluster, telemetry, per-rank report), a crashed run's card naming what is
# missing, and that a missing card script never fails the training. Skipped (77) without the
# corpus or python3.
set -uo pipefail
mode=$1 prep=$2 train=$3 report=$4
corpus=${NMT_DATA_ROOT:-../shared/data}/bible-en-es
if [[ ! -f $corpus/train.en ]] || ! command -v python3 >/dev/null; then
  echo "SKIPPED: needs $corpus and python3"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 checks=0
check() {  # check DESCRIPTION COMMAND...
  checks=$((checks + 1))
  if ! "${@:2}"; then
    echo "FAIL: $1"
    failures=$((failures + 1))
  fi
}

head -n 3000 $corpus/train.en >"$tmp/train.en"
head -n 3000 $corpus/train.es >"$tmp/train.es"
head -n 100 $corpus/dev.en >"$tmp/dev.en"
head -n 100 $corpus/dev.es >"$tmp/dev.es"
"$prep" --train-src "$tmp/train.en" --train-tgt "$tmp/train.es" --dev-src "$tmp/dev.en" \
  --dev-tgt "$tmp/dev.es" --out "$tmp/prep" --vocab-size 600 >"$tmp/prep.log" 2>&1 ||
  { cat "$tmp/prep.log"; exit 1; }

run=$tmp/run
args=(--config configs/bible-en-es-cpu.json --set data.train="$tmp/prep" --set data.dev="$tmp/prep"
  --set train.max_steps=30 --set log.every_steps=5 --set eval.every_steps=10
  --set eval.max_sentences=16 --set eval.samples=0 --set checkpoint.every_steps=15
  --set checkpoint.dir="$run/ckpt" --set log.dir="$run/log" --set model.d_model=64
  --set model.ffn_dim=128 --set train.batch_tokens=768 --set data.max_src_len=40
  --set data.max_tgt_len=40 --set lr_schedule.warmup_steps=10 --set train.threads=1
  --set dist.probe_mb=4)
if [[ $mode == mpi ]]; then
  # A card script that cannot run must not fail the training; nmt-report writes the card after.
  NMT_RUN_CARD_SCRIPT=$tmp/missing.py mpiexec -n 2 --oversubscribe --allow-run-as-root \
    "$train" "${args[@]}" >"$tmp/train.log" 2>&1
  status=$?
  check "nmt-train under mpiexec: exit status $status" test $status -eq 0
  check "nmt-train names the unwritten card" grep -q "run card: not written" "$tmp/train.log"
  "$report" "$run/log" --quiet >"$tmp/report.log" 2>&1
  status=$?
  check "nmt-report: exit status $status" test $status -eq 0
else
  "$train" "${args[@]}" >"$tmp/train.log" 2>&1
  status=$?
  check "nmt-train: exit status $status" test $status -eq 0
  check "nmt-train wrote the card itself" grep -q "run card: .*card.md" "$tmp/train.log"
fi
[[ $failures -gt 0 ]] && tail -n 30 "$tmp/train.log"

python3 - "$run/log" "$mode" <<'PY' || { echo "FAIL: card contents"; failures=$((failures + 1)); }
import json, os, re, sys
log, mode = sys.argv[1], sys.argv[2]
ranks = 2 if mode == "mpi" else 1
card = open(os.path.join(log, "card.md"), encoding="utf-8").read()
page = open(os.path.join(log, "card.html"), encoding="utf-8").read()
questions = ["How long did training take?", "Is the model fully trained?", "Was it overfitting?",
             "Were the GPUs fully utilised?", "Was the network the bottleneck?",
             "What does the learning rate do, and why?", "How big was the training set?",
             "Which files make up a checkpoint, and how big is it?",
             "How long did an average step take"]
sections = re.split(r"^## ", card, flags=re.M)[1:]
assert len(sections) == len(questions), [s.splitlines()[0] for s in sections]
for question, section in zip(questions, sections):
    assert section.startswith(question), (question, section[:80])
    body = section.split("\n", 1)[1]
    assert re.search(r"\d", body), f"no numbers under {question!r}"
    assert f"<h2>{question}" in page.replace("&#x27;", "'"), question
# The answers rest on this run's numbers.
assert "30 steps (finished (max_steps))" in card, card[:800]
assert "3,000 sentence pairs (lines)" in card
assert re.search(r"model\.safetensors \| [\d,]+ \|", card)
assert "median" in card and "p95" in card and f"{ranks} rank(s)" in card
assert "Inverse square root" in card and "peak 0.002 at step 10" in card
for verdict in ("still improving", "plateaued", "getting worse", "uncertain"):
    if f"**{verdict}**" in card.split("## Is the model fully trained?")[1].split("##")[0]:
        break
else:
    raise AssertionError("no fully-trained verdict")
try:
    import matplotlib  # noqa: F401
    assert page.count("data:image/png;base64,") >= 5, "plots not embedded"
    for png in ("card-progress.png", "card-overfitting.png", "card-gpu.png", "card-lr.png"):
        assert open(os.path.join(log, png), "rb").read(8) == b"\x89PNG\r\n\x1a\n", png
except ImportError:
    assert "matplotlib is not installed" in card
# The trainer's records behind the card.
records = [json.loads(line) for line in open(os.path.join(log, "metrics.jsonl"))]
start = next(r for r in records if r["event"] == "start")
assert start["config"]["train"]["max_steps"] == 30
cluster = next(r for r in records if r["event"] == "cluster")
assert cluster["world_size"] == ranks and len(cluster["ranks"]) == ranks
telemetry = [r for r in records if r["event"] == "telemetry"]
assert [t["step"] for t in telemetry] == [5, 10, 15, 20, 25, 30], [t["step"] for t in telemetry]
assert all(len(t["step_ms"]) == 5 and len(t["ranks"]) == ranks for t in telemetry)
assert all(r["ms_per_step"] > 0 and r["data_ms"] >= 0 for t in telemetry for r in t["ranks"])
assert all(len(t["nodes"]) == 1 for t in telemetry)  # one host
ckpt = [r for r in records if r["event"] == "checkpoint"][-1]
required = {"model.safetensors", "optimizer.safetensors", "state.json"}
# Plus the vocabulary the checkpoint carries (docs/checkpoints.md), when the run had one.
assert required <= set(ckpt["files"]) and len(set(ckpt["files"]) - required) <= 1, ckpt["files"]
assert sum(ckpt["files"].values()) == ckpt["bytes"]
report = json.load(open(os.path.join(log, "report.json")))
assert [r["rank"] for r in report["ranks"]] == list(range(ranks))
assert report["mean_data_ms"] >= 0
if mode == "mpi":
    probe = cluster["probe"]
    assert probe["bytes"] == 4 << 20 and probe["busbw_gb_per_s"] > 0, probe
    assert "start-up probe: 4.2 MB all-reduce" in card, card
    assert all(r["comm_bytes_per_step"] > 0 for r in report["ranks"])
    assert re.search(r"\| 1 \| [^|]+ \| n/a \| n/a \| [\d.]+ \|", card), "rank 1's row"
else:
    assert cluster["probe"] is None and "single process" in cluster["probe_reason"]
    assert "No network: a single process" in card
PY
checks=$((checks + 1))

# A crashed run: no report.json, no end event, the last line cut short.
crashed=$tmp/crashed
mkdir -p "$crashed"
grep -v '"event":"end"' "$run/log/metrics.jsonl" | head -n 14 >"$crashed/metrics.jsonl"
grep '"event":"train"' "$run/log/metrics.jsonl" | tail -n 1 | head -c 40 >>"$crashed/metrics.jsonl"
"$report" "$crashed" --no-plots --quiet >"$tmp/crashed.log" 2>&1
status=$?
check "nmt-report on a crashed run: exit status $status" test $status -eq 0
check "the crashed run's card says it did not finish" grep -q "did not finish" "$crashed/card.md"
check "the crashed run's card names report.json as missing" \
  grep -q "report.json and the end event" "$crashed/card.md"
check "every section of the crashed run's card" test "$(grep -c '^## ' "$crashed/card.md")" -eq 9
"$report" "$tmp/nothing" >"$tmp/nothing.log" 2>&1
status=$?
check "nmt-report on a directory without metrics: exit status $status" test $status -eq 1
check "and says why" grep -q "no metrics.jsonl" "$tmp/nothing.log"

echo "$((checks - failures)) passed, $failures failed"
((failures == 0))
