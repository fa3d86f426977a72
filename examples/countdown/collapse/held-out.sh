#!/bin/sh
# pass@k up to 64 on held-out prompts for the collapse experiment's final checkpoints and the base:
# the first 128 problems of data/val.jsonl (none of them trained on), 64 samples each at
# temperature 1.0, every run of compare.sh and the base with seeds 1-5. Run after compare.sh
# (about 10 minutes here); prints means with 95 % intervals over seeds.
#   sh examples/countdown/collapse/held-out.sh [RUNS_DIR]
set -eu
here=$(dirname "$0")
configs=$(dirname "$here")
runs=${1:-runs/collapse}
out="$runs/held-out"
mkdir -p "$out"
set -- data.val_files="$configs/data/val.jsonl" data.val_max_samples=128 actor_rollout_ref.rollout.val_kwargs.n=64 \
  actor_rollout_ref.rollout.val_kwargs.temperature=1.0 actor_rollout_ref.rollout.val_kwargs.top_p=1.0
for seed in 1 2 3 4 5; do
  [ -s "$out/base-seed$seed.json" ] && continue
  npx flowrl eval "$configs/flowrl.yaml" trainer.seed=$seed "$@" > "$out/base-seed$seed.json.part"
  mv "$out/base-seed$seed.json.part" "$out/base-seed$seed.json"
done
for checkpoint in "$runs"/*-seed*/checkpoints/global_step_*; do
  name=$(basename "$(dirname "$(dirname "$checkpoint")")")
  [ -s "$out/$name.json" ] && continue
  npx flowrl eval "$checkpoint" "$@" > "$out/$name.json.part"
  mv "$out/$name.json.part" "$out/$name.json"
done
npx tsx "$configs/pass-at-k-table.ts" "$out"
