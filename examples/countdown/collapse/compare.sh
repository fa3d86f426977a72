#!/bin/sh
# The collapse experiment (README.md, "Does FlowRL match the reward distribution?"): grpo, ppo,
# flowrl (verl's recipe) and flowrl-matching train 150 steps on the 24 prompts of prompts.jsonl
# (each has 16-18 correct answers) and are validated on the same prompts with 64 samples at
# temperature 1.0, seeds 1-5, each paired against grpo. About 30 minutes on a 2-core CPU. Extra
# arguments go to flowrl compare (e.g. --resume after an interruption).
#   sh examples/countdown/collapse/compare.sh
set -eu
here=$(dirname "$0")
configs=$(dirname "$here")
exec npx flowrl compare \
  "$configs/grpo.yaml" "$configs/ppo.yaml" "$configs/flowrl.yaml" "$configs/flowrl-matching.yaml" \
  --seeds 5 --baseline grpo --out runs/collapse \
  data.train_files="$here/prompts.jsonl" data.val_files="$here/prompts.jsonl" \
  actor_rollout_ref.rollout.val_kwargs.n=64 actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
  actor_rollout_ref.rollout.val_kwargs.top_p=1.0 \
  trainer.total_training_steps=150 trainer.test_freq=50 trainer.save_freq=150 "$@"
