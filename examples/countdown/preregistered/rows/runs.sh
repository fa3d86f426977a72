#!/bin/sh
# The second pre-registered experiment's 45 runs (PROTOCOL.md here): 3 arms x beta 7, 10, 15 x
# seeds 31-35, each 150 steps on ../prompts.jsonl (the first experiment's test set), validated once
# with 64 samples at T = 1.0, one thread. JOBS runs at a time (default 2). Each finished run's
# validated step-150 line is kept in results/RUN/metrics.jsonl (committed: the table's input); a run
# kept there or finished in OUT is skipped, so the script resumes (../train-and-keep.sh).
#   [JOBS=2] sh examples/countdown/preregistered/rows/runs.sh [OUT]
set -eu
here=$(dirname "$0")
out=${1:-runs/preregistered-rows}
[ -f "$here/../prompts.jsonl" ] || { echo "no $here/../prompts.jsonl: run prepare (../PROTOCOL.md)" >&2; exit 2; }
mkdir -p "$out"
for seed in 31 32 33 34 35; do
  for beta in 7 10 15; do
    kl=$(node -e "console.log(1 / $beta)")
    echo "flowrl-matching flowrl-matching $beta $seed flowrl.beta=$beta"
    echo "grpo-replay-tuned grpo-replay-tuned $beta $seed algorithm.kl_ctrl.kl_coef=$kl"
    echo "grpo-kl grpo-kl-reward $beta $seed algorithm.kl_ctrl.kl_coef=$kl"
  done
done | xargs -P "${JOBS:-2}" -L 1 sh "$here/../train-and-keep.sh" "$here/results" "$out"
