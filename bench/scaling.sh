#!/usr/bin/env bash
# Weak-scaling runs of nmt-train over 1, 2, 4 and 8 GPUs of one host (issue 19), in one call:
# Transformer-base and -big in bf16 at 16k and 32k target tokens per GPU, the exchange overlapped
# with backward or not, fp32 or bf16 on the wire, over NVLink and over NCCL forced onto TCP
# sockets (the two-node emulation); then bench-allreduce's bucketed exchange per GPU count. Each
# run trains STEPS steps on the prepared Bible corpus (no evaluation, no checkpoint) and the table
# reads tokens/s, ms/step and exposed communication from the run's own report.json.
#
# usage: bench/scaling.sh [--gpus "1 2 4 8"] [--models "base big"] [--tokens "16384 32768"]
#                         [--steps 200] [--corpus DIR] [--quick]
#   --quick: base, 16k, overlap on, bf16 wire, NVLink only (a smoke run).
#   With no GPU (or SCALING_DEVICE=cpu) it runs the same matrix on the CPU backend over MPI with
#   the tiny model: a dry run of the script and of mpirun, not a measurement.
# Environment: BUILD_DIR (build), RUNS_DIR (runs: the prepared corpus and each run's directory),
# OUT (logs; else $RUNS_DIR/scaling). NCCL_NVLS_ENABLE=0 is forced
# everywhere, also under mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
export NCCL_NVLS_ENABLE=0
GPUS_LIST="1 2 4 8"
MODELS="base big"
TOKENS="16384 32768"
STEPS=
CORPUS=../shared/data/bible-en-es
QUICK=0
while (($#)); do
  case "$1" in
    --gpus) GPUS_LIST=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --corpus) CORPUS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "scaling: unknown argument $1" >&2; exit 2 ;;
  esac
done
RUNS_DIR=${RUNS_DIR:-runs}
LOG_DIR=${OUT:-$RUNS_DIR/scaling}
mkdir -p "$LOG_DIR"
RESULTS=$LOG_DIR/scaling.jsonl
: >"$RESULTS"

available=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l || true)
DEVICE=${SCALING_DEVICE:-$( ((available > 0)) && echo cuda || echo cpu)}
WIRE=bf16
if [[ $DEVICE == cpu ]]; then
  MODELS=tiny; TOKENS=2048; STEPS=${STEPS:-10}; available=8; WIRE=fp32
  echo "scaling: no GPU: dry run on the CPU backend (tiny model, $STEPS steps); not a measurement"
fi
STEPS=${STEPS:-200}
echo "scaling: $available GPU(s) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)," \
  "$(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

PREP=$RUNS_DIR/prep/bible-en-es-8000
if [[ ! -f "$PREP/report.json" ]]; then
  "$BUILD_DIR/apps/nmt-prep/nmt-prep" --quiet --train-src "$CORPUS/train.en" --train-tgt "$CORPUS/train.es" \
    --dev-src "$CORPUS/dev.en" --dev-tgt "$CORPUS/dev.es" --out "$PREP" --vocab-size 8000 --max-len 128
fi

model_sets() {  # the model section for base, big or tiny
  case "$1" in
    base) echo "--config configs/bible-en-es.json" ;;
    big) echo "--config configs/bible-en-es.json --set model.d_model=1024 --set model.num_heads=16 --set model.ffn_dim=4096" ;;
    tiny) echo "--config configs/bible-en-es.json --set model.d_model=64 --set model.num_heads=4 --set model.ffn_dim=128 --set model.encoder_layers=2 --set model.decoder_layers=2 --set train.device=cpu --set train.precision=fp32" ;;
  esac
}

run() {  # label np model tokens overlap wire transport
  local label=$1 np=$2 model=$3 tokens=$4 overlap=$5 wire=$6 transport=$7
  local dir=$RUNS_DIR/scaling/$label
  rm -rf "$dir"
  local env=(-x NCCL_NVLS_ENABLE=0)
  [[ $transport == sockets ]] && env+=(-x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1)
  # train.batch_tokens is per GPU: the global batch grows with the ranks (weak scaling). The shipped
  # config's cosine decay must end after its 800 warmup steps; these short runs measure speed only,
  # so they take the schedule without an end (inverse_sqrt).
  # shellcheck disable=SC2046
  if ! mpirun --allow-run-as-root --oversubscribe --bind-to none "${env[@]}" -np "$np" \
    "$BUILD_DIR/apps/nmt-train/nmt-train" $(model_sets "$model") \
    --set "data.train=$PREP" --set "data.dev=" --set "train.max_steps=$STEPS" \
    --set "lr_schedule.policy=inverse_sqrt" \
    --set "train.batch_tokens=$tokens" --set "eval.every_steps=0" \
    --set "checkpoint.dir=$dir/ckpt" --set "checkpoint.every_steps=0" \
    --set "log.dir=$dir" --set "log.every_steps=50" --set "dist.overlap=$overlap" \
    --set "dist.allreduce_dtype=$wire" >"$LOG_DIR/$label.log" 2>&1; then
    echo "scaling: $label failed:"; tail -4 "$LOG_DIR/$label.log"; return 0
  fi
  python3 - "$dir/report.json" "$label" "$np" "$model" "$tokens" "$overlap" "$wire" "$transport" >>"$RESULTS" <<'PY'
import json, sys
path, label, np, model, tokens, overlap, wire, transport = sys.argv[1:]
r = json.load(open(path))
print(json.dumps({"label": label, "gpus": int(np), "model": model, "tokens_per_gpu": int(tokens),
                  "overlap": overlap, "wire": wire, "transport": transport,
                  "tokens_per_s": r["tokens_per_s"], "ms_per_step": r["mean_step_ms"],
                  "exposed_comm_ms": 1000 * r["exposed_comm_seconds"] / max(r["steps"], 1),
                  "comm_algbw_gb_per_s": r["comm_algbw_gb_per_s"], "mfu": r.get("mfu")}))
PY
}

for model in $MODELS; do
  for tokens in $TOKENS; do
    for np in $GPUS_LIST; do
      ((np <= available)) || continue
      run "$model-$tokens-np$np" "$np" "$model" "$tokens" true "$WIRE" nvlink
      ((QUICK)) && continue
      ((np > 1)) || continue
      run "$model-$tokens-np$np-serial" "$np" "$model" "$tokens" false "$WIRE" nvlink
      [[ $DEVICE == cpu ]] && continue  # the CPU backend has one wire dtype and one transport
      run "$model-$tokens-np$np-fp32wire" "$np" "$model" "$tokens" true fp32 nvlink
      run "$model-$tokens-np$np-sockets" "$np" "$model" "$tokens" true bf16 sockets
    done
  done
done

if [[ $DEVICE == cuda && -x $BUILD_DIR/bench/bench-allreduce/bench-allreduce ]]; then
  for np in $GPUS_LIST; do
    ((np > 1 && np <= available)) || continue
    mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE=0 -np "$np" \
      "$BUILD_DIR/bench/bench-allreduce/bench-allreduce" --backend nccl \
      >"$LOG_DIR/allreduce-np$np.txt" 2>&1 || echo "scaling: bench-allreduce on $np GPUs failed"
  done
fi

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
single = {(r["model"], r["tokens_per_gpu"]): r["tokens_per_s"] for r in rows if r["gpus"] == 1}
print(f"{'run':<28} {'GPUs':>4} {'tok/s':>10} {'tok/s/GPU':>10} {'weak scaling':>12} {'ms/step':>8} {'exposed comm ms':>15} {'algbw GB/s':>10}")
for r in rows:
    one = single.get((r["model"], r["tokens_per_gpu"]))
    per_gpu = r["tokens_per_s"] / r["gpus"]
    eff = f"{100 * per_gpu / one:11.1f}%" if one else f"{'-':>12}"
    print(f"{r['label']:<28} {r['gpus']:>4} {r['tokens_per_s']:>10.0f} {per_gpu:>10.0f} {eff} "
          f"{r['ms_per_step']:>8.2f} {r['exposed_comm_ms']:>15.2f} {r['comm_algbw_gb_per_s']:>10.1f}")
PY
