#!/bin/sh
# pass@k up to K for a comparison's final checkpoints and the base policy: K samples for each of the
# first P validation prompts (the configs' val_kwargs: temperature 0.6, top-p 0.95), each run's
# final checkpoint, and the base with every seed the runs have. Run after compare-algorithms.sh
# (or compare.sh); prints a table of means with 95 % intervals; a rerun skips finished evaluations.
# Further key=value arguments go to every flowrl eval (collapse/held-out.sh passes its prompts).
#   sh examples/countdown/pass-at-k.sh [RUNS_DIR] [K] [P] [key=value ...]   # defaults: runs/compare-algorithms 128 128
set -eu
here=$(dirname "$0")
runs=${1:-runs/compare-algorithms}
k=${2:-128}
prompts=${3:-128}
[ $# -gt 3 ] && shift 3 || set --
out="$runs/pass-at-$k-p$prompts"
mkdir -p "$out"
set -- actor_rollout_ref.rollout.val_kwargs.n="$k" data.val_max_samples="$prompts" engine.workers=1 "$@"
seeds=$(ls -d "$runs"/*-seed*/checkpoints | sed 's/.*-seed\([0-9]*\)\/checkpoints$/\1/' | sort -un)
for seed in $seeds; do
  [ -s "$out/base-seed$seed.json" ] && continue
  npx flowrl eval "$here/flowrl.yaml" trainer.seed="$seed" "$@" > "$out/base-seed$seed.json.part"
  mv "$out/base-seed$seed.json.part" "$out/base-seed$seed.json"
done
for checkpoint in "$runs"/*-seed*/checkpoints/global_step_*; do
  name=$(basename "$(dirname "$(dirname "$checkpoint")")")
  [ -s "$out/$name.json" ] && continue
  npx flowrl eval "$checkpoint" "$@" > "$out/$name.json.part"
  mv "$out/$name.json.part" "$out/$name.json"
done
npx tsx "$here/pass-at-k-table.ts" "$out"
