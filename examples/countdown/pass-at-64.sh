#!/bin/sh
# pass@k up to k = 64 for the comparison's final checkpoints and the base policy: 64 samples per
# validation prompt at temperature 0.6, top-p 0.95, each seed's run and the base with seeds 1-5.
# Run after compare.sh (13.5 minutes here); prints a table of means with 95 % intervals.
#   sh examples/countdown/pass-at-64.sh [RUNS_DIR]
set -eu
here=$(dirname "$0")
runs=${1:-runs/compare}
out="$runs/pass-at-64"
mkdir -p "$out"
for seed in 1 2 3 4 5; do
  [ -s "$out/base-seed$seed.json" ] || npx flowrl eval "$here/flowrl.yaml" trainer.seed=$seed \
    actor_rollout_ref.rollout.val_kwargs.n=64 > "$out/base-seed$seed.json.part"
  [ -s "$out/base-seed$seed.json" ] || mv "$out/base-seed$seed.json.part" "$out/base-seed$seed.json"
done
for checkpoint in "$runs"/*-seed*/checkpoints/global_step_*; do
  name=$(basename "$(dirname "$(dirname "$checkpoint")")")
  [ -s "$out/$name.json" ] && continue
  npx flowrl eval "$checkpoint" actor_rollout_ref.rollout.val_kwargs.n=64 > "$out/$name.json.part"
  mv "$out/$name.json.part" "$out/$name.json"
done
npx tsx "$here/pass-at-k-table.ts" "$out"
