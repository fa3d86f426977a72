#!/bin/sh
# The pre-registered experiment's 60 runs (PROTOCOL.md): 4 arms x beta 7, 10, 15 x seeds 21-25, each
# 150 steps on prompts.jsonl (the test set), validated once with 64 samples at T = 1.0, one thread.
# JOBS runs at a time (default 2). Each finished run's validated step-150 line is kept in
# results/RUN/metrics.jsonl (committed: the table's input); a run kept there or finished in OUT is
# skipped, so the script resumes, across machines too.
#   [JOBS=2] sh examples/countdown/preregistered/runs.sh [OUT]
set -eu
here=$(dirname "$0")
configs=$(dirname "$here")
out=${1:-runs/preregistered}
[ -f "$here/prompts.jsonl" ] || { echo "no $here/prompts.jsonl: run prepare (PROTOCOL.md)" >&2; exit 2; }
mkdir -p "$out"
for seed in 21 22 23 24 25; do
  for beta in 7 10 15; do
    kl=$(node -e "console.log(1 / $beta)")
    echo "flowrl-recipe|flowrl|$beta|$seed|flowrl.beta=$beta actor_rollout_ref.actor.ppo_mini_batch_size=8"
    echo "flowrl-matching|flowrl-matching|$beta|$seed|flowrl.beta=$beta"
    echo "flowrl-no-log-z|flowrl|$beta|$seed|flowrl.beta=$beta flowrl.log_z=none actor_rollout_ref.actor.ppo_mini_batch_size=8"
    echo "grpo-kl|grpo-kl-reward|$beta|$seed|algorithm.kl_ctrl.kl_coef=$kl"
  done
done | xargs -P "${JOBS:-2}" -I{} sh -c '
  IFS="|" read -r arm config beta seed overrides <<LINE
{}
LINE
  run=$arm-beta$beta-seed$seed
  [ -f "$0/results/$run/metrics.jsonl" ] && exit 0
  # shellcheck disable=SC2086 # the overrides are words
  if PROMPTS="$0/prompts.jsonl" sh "$1/collapse/train-run.sh" "$1/$config.yaml" "$seed" "$2/$run" $overrides > "$2/$run.log" 2>&1; then
    mkdir -p "$0/results/$run"
    grep "\"step\":150,.*val/accuracy" "$2/$run/metrics.jsonl" > "$0/results/$run/metrics.jsonl.tmp" && mv "$0/results/$run/metrics.jsonl.tmp" "$0/results/$run/metrics.jsonl"
    echo "[preregistered] $arm beta $beta seed $seed done"
  else
    echo "[preregistered] $arm beta $beta seed $seed FAILED (see its .log)"
  fi
' "$here" "$configs" "$out"
