#!/bin/sh
# pass@k up to K on held-out prompts for the collapse experiment's final checkpoints and the base:
# the first 128 problems of data/val.jsonl (none of them trained on), K samples each at temperature
# 1.0 (pass-at-k.sh with these prompts). Run after compare.sh; prints means with 95 % intervals
# over seeds into RUNS_DIR/pass-at-K-p128.
#   sh examples/countdown/collapse/held-out.sh [RUNS_DIR] [K]     # defaults: runs/collapse 128
set -eu
here=$(dirname "$0")
configs=$(dirname "$here")
exec sh "$configs/pass-at-k.sh" "${1:-runs/collapse}" "${2:-128}" 128 data.val_files="$configs/data/val.jsonl" \
  actor_rollout_ref.rollout.val_kwargs.temperature=1.0 actor_rollout_ref.rollout.val_kwargs.top_p=1.0
