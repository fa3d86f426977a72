#!/bin/sh
# The ablations of docs/flowrl.md ("Why it collapses, and what fixes it") at seeds 1-3 each, on
# today's code: every row of its seed-1 table that the current keys express, each a key=value
# change to flowrl.yaml (verl's recipe) or grpo.yaml, trained as collapse/compare.sh trains (150
# steps on the 24 prompts, validated once at the end with 64 samples at temperature 1.0, one
# thread). explore_temperature draws the policy's rows hotter only for prompts already solved (the
# shipped behaviour); the table's rows at temperatures 1.3-3 from before may have drawn every prompt
# hot, and "temperature 2 on every prompt" has no key any more, so it is not rerun.
#   sh examples/countdown/collapse/ablations.sh [SEEDS]        # default: 1 2 3
#   npx tsx examples/countdown/collapse/ablation-table.ts runs/collapse-ablations
# A finished run (its step-150 checkpoint exists) is skipped, so the script resumes; each run is one
# collapse/train-run.sh.
set -eu
here=$(dirname "$0")
configs=$(dirname "$here")
seeds=${1:-1 2 3}
out=runs/collapse-ablations

raw="flowrl.reward_source=score flowrl.length_normalize=false"
v1="$raw flowrl.log_z_lr_scale=30 flowrl.replay_samples=2"
cosine="actor_rollout_ref.actor.optim.lr_scheduler_type=cosine"

# name|base config|overrides
rows="
a01-grpo|grpo|
a02-grpo-cosine|grpo|$cosine
a03-recipe|flowrl|
a04-recipe-replay2|flowrl|flowrl.replay_samples=2
a05-summed-grouplogz|flowrl|flowrl.length_normalize=false flowrl.log_z=group
a06-raw-summed|flowrl|$raw
a07-raw-summed-grouplogz|flowrl|$raw flowrl.log_z=group
a08-raw-summed-projz30|flowrl|$raw flowrl.log_z_lr_scale=30
a09-raw-summed-grouplogz-replay2|flowrl|$raw flowrl.log_z=group flowrl.replay_samples=2
a10-v1|flowrl|$v1
a11-v1-cosine|flowrl|$v1 $cosine
a12-v1-ref1|flowrl|$v1 flowrl.reference_samples=1
a13-v1-replay3|flowrl|$v1 flowrl.replay_samples=3
a14-raw-summed-grouplogz-replay2-ref1|flowrl|$raw flowrl.log_z=group flowrl.replay_samples=2 flowrl.reference_samples=1
a15-raw-summed-grouplogz-ref2|flowrl|$raw flowrl.log_z=group flowrl.reference_samples=2
a16-v1-beta10|flowrl|$v1 flowrl.beta=10
a17-v1-beta5|flowrl|$v1 flowrl.beta=5
a18-v1-beta10-ref1|flowrl|$v1 flowrl.beta=10 flowrl.reference_samples=1
a19-v1-temp1.5|flowrl|$v1 flowrl.explore_temperature=1.5
a20-v1-beta10-temp1.3|flowrl|$v1 flowrl.beta=10 flowrl.explore_temperature=1.3
a21-v1-beta10-temp1.5|flowrl|$v1 flowrl.beta=10 flowrl.explore_temperature=1.5
a22-v1-beta10-temp2-matching|flowrl|$v1 flowrl.beta=10 flowrl.explore_temperature=2
a23-v1-beta10-temp3|flowrl|$v1 flowrl.beta=10 flowrl.explore_temperature=3
a24-v1-beta10-temp1.5-ref1|flowrl|$v1 flowrl.beta=10 flowrl.explore_temperature=1.5 flowrl.reference_samples=1
"

for seed in $seeds; do
  echo "$rows" | while IFS='|' read -r name config overrides; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086 # the overrides are words
    sh "$here/train-run.sh" "$configs/$config.yaml" "$seed" "$out/$name-seed$seed" $overrides
  done
done
