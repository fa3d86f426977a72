#!/bin/sh
# The tool-use comparison (README.md): GRPO and FlowRL, each with the calculator and without, from
# the same base policy, seeds 2-6 (seed 1 chose the learning rate), paired against GRPO without
# tools. Run prepare.ts first.
#   sh examples/countdown-tools/compare.sh [--resume]
set -eu
here=$(dirname "$0")
exec npx flowrl compare "$here/grpo-no-tools.yaml" "$here/grpo-tools.yaml" "$here/flowrl-no-tools.yaml" "$here/flowrl-tools.yaml" \
  --seeds 5 --first-seed 2 --baseline grpo-no-tools --out runs/countdown-tools engine.workers=1 "$@"
