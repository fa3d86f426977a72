#!/bin/sh
# Synchronous rollouts against trainer.one_step_off_policy, both on the same two `flowrl serve`
# servers (started here on ports 30101 and 30102, stopped at the end): flowrl compare's tables for
# learning, then step-times.ts for the time per step. Extra arguments go to flowrl compare.
#   sh examples/countdown/one-step-off/compare.sh [--seeds 3]
set -eu
here=$(dirname "$0")
mkdir -p runs
pids=""
for port in 30101 30102; do
  npx flowrl serve --model "$here/../base-model" --port "$port" --enable-admin --weights-root "$PWD/runs" > "runs/serve-$port.log" 2>&1 &
  pids="$pids $!"
done
trap 'kill $pids 2>/dev/null' EXIT INT TERM
node -e '
  const until = Date.now() + 60000;
  const up = (port) => fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false);
  (async () => {
    while (!(await up(30101)) || !(await up(30102))) {
      if (Date.now() > until) { console.error("the servers did not start: see runs/serve-*.log"); process.exit(1); }
      await new Promise((r) => setTimeout(r, 500));
    }
  })();'
npx flowrl compare "$here/sync.yaml" "$here/one-step-off.yaml" --seeds 3 --baseline sync --out runs/compare-one-step-off "$@"
npx tsx "$here/step-times.ts" runs/compare-one-step-off
