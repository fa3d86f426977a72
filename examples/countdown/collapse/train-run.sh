#!/bin/sh
# One collapse-experiment run as tune-baselines.sh and ablations.sh train it: CONFIG for 150 steps on
# the 24 prompts, validated once at the end with 64 samples at temperature 1.0, one thread, into DIR;
# skipped when DIR already holds its step-150 checkpoint (so the callers resume). PROMPTS (default
# the 24 prompts) is the file trained and validated on.
#   [PROMPTS=FILE] sh examples/countdown/collapse/train-run.sh CONFIG SEED DIR [key=value ...]
set -eu
here=$(dirname "$0")
config=$1 seed=$2 dir=$3
prompts=${PROMPTS:-$here/prompts.jsonl}
shift 3
if [ -d "$dir/checkpoints/global_step_150" ]; then echo "[collapse] $dir done"; exit 0; fi
rm -rf "$dir"
echo "[collapse] $dir: $*"
npx flowrl train "$config" \
  data.train_files="$prompts" data.val_files="$prompts" \
  actor_rollout_ref.rollout.val_kwargs.n=64 actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
  actor_rollout_ref.rollout.val_kwargs.top_p=1.0 \
  trainer.total_training_steps=150 trainer.test_freq=150 trainer.save_freq=150 trainer.val_before_train=false \
  engine.workers=1 trainer.seed="$seed" trainer.default_local_dir="$dir" trainer.experiment_name="$(basename "$dir")" \
  "$@" </dev/null
