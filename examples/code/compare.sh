#!/bin/sh
# The comparison in README.md: FlowRL and GRPO at one budget, seeds 1-5, paired against grpo.
# About 30 minutes on a 2-core CPU. Extra arguments go to flowrl compare (e.g. --resume).
#   sh examples/code/compare.sh
set -eu
here=$(dirname "$0")
exec npx flowrl compare "$here/grpo.yaml" "$here/flowrl.yaml" --seeds 5 --baseline grpo --out runs/compare-code "$@"
