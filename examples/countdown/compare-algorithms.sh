#!/bin/sh
# Issue 33's comparison (README.md, "All algorithms on countdown"): FlowRL (verl's recipe, and
# flowrl-matching) against GRPO, GRPO with a KL-in-reward penalty of 1/beta, GRPO with
# flowrl-matching's replay and exploration (each also as collapse/tune-baselines.sh tuned it), DAPO,
# GSPO, CISPO, GMPO, REINFORCE++ and PPO, at compare.sh's budget (100 steps, validation before and
# after), paired against the recipe (flowrl).
# Each config differs from grpo.yaml only in its algorithm keys.
#
# Seeds 11-15: fresh ones (flowrl-matching's keys were chosen on seeds 1-5 of the collapse prompts
# and 1-2 of this task). One thread a run (engine.workers=1), so every run computes alike whatever
# the machine; two comparisons can share a 2-core machine.
#
# 65 runs. Extra arguments go to flowrl compare: --resume goes on after an interruption (and
# reprints the tables of a finished comparison); --seeds 3 then --seeds 5 --resume gives every
# config 3 seeds first.
#   sh examples/countdown/compare-algorithms.sh --resume
set -eu
here=$(dirname "$0")
exec npx flowrl compare \
  "$here/flowrl.yaml" "$here/flowrl-matching.yaml" "$here/grpo.yaml" "$here/grpo-kl-reward.yaml" "$here/grpo-replay.yaml" \
  "$here/dapo.yaml" "$here/gspo.yaml" "$here/cispo.yaml" "$here/gmpo.yaml" \
  "$here/reinforce_plus_plus.yaml" "$here/ppo.yaml" "$here/grpo-kl-reward-tuned.yaml" "$here/grpo-replay-tuned.yaml" \
  --seeds 5 --first-seed 11 --baseline flowrl --out runs/compare-algorithms \
  trainer.total_training_steps=100 trainer.test_freq=100 engine.workers=1 "$@"
