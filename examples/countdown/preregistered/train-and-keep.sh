#!/bin/sh
# One pre-registered run: CONFIG (a file of examples/countdown) for 150 steps on prompts.jsonl (the
# test set), validated once with 64 samples at T = 1.0, one thread (../collapse/train-run.sh), into
# OUT/ARM-betaBETA-seedSEED; its validated step-150 line kept in RESULTS/that name/metrics.jsonl. A
# run already kept there is skipped, so the callers resume, across machines too.
#   sh examples/countdown/preregistered/train-and-keep.sh RESULTS OUT ARM CONFIG BETA SEED [key=value ...]
set -eu
here=$(dirname "$0")
results=$1 out=$2 arm=$3 config=$4 beta=$5 seed=$6
shift 6
run=$arm-beta$beta-seed$seed
[ -f "$results/$run/metrics.jsonl" ] && exit 0
if PROMPTS="$here/prompts.jsonl" sh "$here/../collapse/train-run.sh" "$here/../$config.yaml" "$seed" "$out/$run" "$@" > "$out/$run.log" 2>&1; then
  mkdir -p "$results/$run"
  grep "\"step\":150,.*val/accuracy" "$out/$run/metrics.jsonl" > "$results/$run/metrics.jsonl.tmp" && mv "$results/$run/metrics.jsonl.tmp" "$results/$run/metrics.jsonl"
  echo "[preregistered] $arm beta $beta seed $seed done"
else
  echo "[preregistered] $arm beta $beta seed $seed FAILED (see $out/$run.log)"
fi
