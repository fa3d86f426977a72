#!/bin/sh
# The pre-registered experiment's 60 runs (PROTOCOL.md): 4 arms x beta 7, 10, 15 x seeds 21-25, each
# 150 steps on prompts.jsonl (the test set), validated once with 64 samples at T = 1.0, one thread.
# JOBS runs at a time (default 2). Each finished run's validated step-150 line is kept in
# results/RUN/metrics.jsonl (committed: the table's input); a run kept there or finished in OUT is skipped, so the
# script resumes, across machines too (train-and-keep.sh).
#   [JOBS=2] sh examples/countdown/preregistered/runs.sh [OUT]
set -eu
here=$(dirname "$0")
out=${1:-runs/preregistered}
[ -f "$here/prompts.jsonl" ] || { echo "no $here/prompts.jsonl: run prepare (PROTOCOL.md)" >&2; exit 2; }
mkdir -p "$out"
for seed in 21 22 23 24 25; do
  for beta in 7 10 15; do
    kl=$(node -e "console.log(1 / $beta)")
    echo "flowrl-recipe flowrl $beta $seed flowrl.beta=$beta actor_rollout_ref.actor.ppo_mini_batch_size=8"
    echo "flowrl-matching flowrl-matching $beta $seed flowrl.beta=$beta"
    echo "flowrl-no-log-z flowrl $beta $seed flowrl.beta=$beta flowrl.log_z=none actor_rollout_ref.actor.ppo_mini_batch_size=8"
    echo "grpo-kl grpo-kl-reward $beta $seed algorithm.kl_ctrl.kl_coef=$kl"
  done
done | xargs -P "${JOBS:-2}" -L 1 sh "$here/train-and-keep.sh" "$here/results" "$out"
