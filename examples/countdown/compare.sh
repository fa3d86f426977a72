#!/bin/sh
# The comparison in README.md: six configs at one budget, seeds 1-5, paired against flowrl.
# About 35 minutes on a 2-core CPU. Extra arguments go to flowrl compare (e.g. --seeds 8, or
# --resume to go on after an interruption).
#   sh examples/countdown/compare.sh
set -eu
here=$(dirname "$0")
exec npx flowrl compare \
  "$here/grpo.yaml" "$here/ppo.yaml" "$here/reinforce_plus_plus.yaml" \
  "$here/flowrl.yaml" "$here/rlfr.yaml" "$here/flowrl-rlfr.yaml" \
  --seeds 5 --baseline flowrl --out runs/compare \
  trainer.total_training_steps=100 trainer.test_freq=100 "$@"
