#!/usr/bin/env bash
# Whole training steps under two or more environment settings or builds, compared in one call:
# bench-step runs every config under every variant, round after round (the variants interleaved,
# so that a clock or thermal drift over the call weighs on all of them alike), and a markdown table
# of the median step ms (and MFU) of each round comes last. For the engine's A/B switches
# (NMT_LAYERNORM_KEEP_BITS, NMT_CROSS_ENTROPY_SMEM, NMT_ATTENTION_BIAS_SUMS, ...), or for a change
# against the tree before it (a variant that names another build's bench-step): compare only
# numbers of the same table.
#
# usage: bench/ab-step.sh [--bin PATH] [--rounds N] [--configs "base/post base/pre big/post
#                         base/post/256"] [--steps N] [--warmup N] [--precision P] [--device D]
#                         VARIANT [VARIANT ...]
#   VARIANT: LABEL=SETTING[,SETTING...] or LABEL= (--bin, the environment as it is); a SETTING is
#   VAR=VALUE (set for that variant's runs) or bin:PATH (that variant runs the bench-step at PATH)
#   a config: MODEL/NORM[/BATCH[/LEN[/VOCAB]]] (bench-step's --model, --norm, --batch, --src-len
#   and --tgt-len from LEN = N or SRCxTGT, --vocab), e.g. base/pre/512/32/8000 for the Bible run's
#   shapes
# Examples: bench/ab-step.sh --rounds 2 "drawn=NMT_LAYERNORM_KEEP_BITS=0" "bits="
#           bench/ab-step.sh "before=bin:/tmp/base/build/bench/bench-step/bench-step" "after="
# Environment: BENCH_STEP_BIN (the default of --bin: build/bench/bench-step/bench-step), OUT (each
# run's full output goes to $OUT/ab-step-*.log where set).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BENCH_STEP_BIN:-build/bench/bench-step/bench-step}
ROUNDS=2
CONFIGS="base/post base/pre big/post"
STEPS=40
WARMUP=10
PRECISION=bf16
DEVICE=cuda
VARIANTS=()
usage() { sed -n '2,19p' "$0"; }
while (($#)); do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --precision) PRECISION=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "ab-step: unknown option $1" >&2; exit 2 ;;
    *) VARIANTS+=("$1"); shift ;;
  esac
done
fail() { echo "ab-step: $*" >&2; exit 2; }
((${#VARIANTS[@]} >= 2)) || fail "give at least two variants (LABEL= or LABEL=VAR=VALUE,...)"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || fail "--rounds must be a positive number, not '$ROUNDS'"
needs_default_bin=0
for v in "${VARIANTS[@]}"; do
  [[ $v == *=* && ${v%%=*} != "" ]] || fail "variant '$v' is not LABEL= or LABEL=VAR=VALUE,..."
  settings=${v#*=} own_bin=0
  if [[ -n $settings ]]; then
    IFS=, read -ra pairs <<<"$settings"
    for pair in "${pairs[@]}"; do
      if [[ $pair == bin:* ]]; then
        ((own_bin == 0)) || fail "variant '$v' names more than one bench-step"
        [[ -x ${pair#bin:} ]] || fail "variant '$v': no bench-step at ${pair#bin:}"
        own_bin=1
        continue
      fi
      [[ $pair =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] ||
        fail "variant '$v': '$pair' is not VAR=VALUE or bin:PATH"
    done
  fi
  ((own_bin)) || needs_default_bin=1
done
((needs_default_bin == 0)) || [[ -x $BIN ]] || fail "no bench-step at $BIN (build it, or give --bin)"
for config in $CONFIGS; do
  [[ $config =~ ^[a-z]+/(pre|post)(/[1-9][0-9]*(/[1-9][0-9]*(x[1-9][0-9]*)?(/[1-9][0-9]*)?)?)?$ ]] ||
    fail "config '$config' is not MODEL/NORM[/BATCH[/LEN[/VOCAB]]] (LEN: N or SRCxTGT)"
done

# One bench-step run of `config` under the variant's settings: prints "median MFU".
run_one() {  # variant config round
  local variant=$1 config=$2 round=$3 model norm batch len vocab label=${1%%=*} settings=${1#*=}
  IFS=/ read -r model norm batch len vocab <<<"$config"
  local args=(--device "$DEVICE" --precision "$PRECISION" --model "$model" --norm "$norm"
              --steps "$STEPS" --warmup "$WARMUP")
  [[ -n $batch ]] && args+=(--batch "$batch")
  [[ -n $len ]] && args+=(--src-len "${len%x*}" --tgt-len "${len#*x}")
  [[ -n $vocab ]] && args+=(--vocab "$vocab")
  local env=() pairs=() bin=$BIN
  if [[ -n $settings ]]; then IFS=, read -ra pairs <<<"$settings"; fi
  for pair in "${pairs[@]}"; do
    if [[ $pair == bin:* ]]; then bin=${pair#bin:}; else env+=("$pair"); fi
  done
  local output
  output=$(env "${env[@]}" "$bin" "${args[@]}" 2>&1) || {
    echo "ab-step: bench-step failed for $label on $config:" >&2
    echo "$output" | tail -5 >&2
    exit 1
  }
  [[ -n ${OUT:-} ]] && echo "$output" >"$OUT/ab-step-${label}-${config//\//-}-r$round.log"
  local median mfu
  median=$(grep -oE "step ms: median [0-9.]+" <<<"$output" | grep -oE "[0-9.]+$" || true)
  mfu=$(grep -oE "MFU [0-9.]+%" <<<"$output" | grep -oE "[0-9.]+%" || true)
  [[ -n $median ]] || { echo "ab-step: no step time in bench-step's output ($label, $config)" >&2; exit 1; }
  echo "$median ${mfu:-?}"
}

declare -A cell
for ((round = 1; round <= ROUNDS; round++)); do
  for config in $CONFIGS; do
    for v in "${VARIANTS[@]}"; do
      result=$(run_one "$v" "$config" "$round") || exit 1
      read -r median mfu <<<"$result"
      key="$config|${v%%=*}"
      cell[$key]="${cell[$key]:+${cell[$key]}, }$median"
      cell[$key.mfu]=$mfu
    done
  done
done

echo "bench-step $PRECISION on $DEVICE, $STEPS steps after $WARMUP, median ms of each round (MFU of the last):"
header="| config |" rule="|---|"
for v in "${VARIANTS[@]}"; do
  label=${v%%=*} settings=${v#*=}
  header+=" $label${settings:+ ($settings)} |"
  rule+="---:|"
done
echo "$header"
echo "$rule"
for config in $CONFIGS; do
  row="| ${config//\// } |"
  for v in "${VARIANTS[@]}"; do
    key="$config|${v%%=*}"
    row+=" ${cell[$key]} (${cell[$key.mfu]}) |"
  done
  echo "$row"
done
