#!/bin/sh
# Step time, synchronous against trainer.one_step_off_policy, with servers that take DELAY_MS of
# wall time per sample without using this machine's cores (flowrl serve's test-only delay fault),
# as engines on other machines would; DELAY_MS=0 shares this machine's cores with the trainer.
# 40 steps of seed 1 each, no validation; then step-times.ts.
#   DELAY_MS=1000 sh examples/countdown/one-step-off/overlap.sh
set -eu
here=$(dirname "$0")
delay=${DELAY_MS:-1000}
out=runs/overlap-$delay
mkdir -p runs
rm -rf "$out"
pids=""
for port in 30101 30102; do
  npx flowrl serve --model "$here/../base-model" --port "$port" --enable-admin --weights-root "$PWD/runs" --test-faults > "runs/serve-$port.log" 2>&1 &
  pids="$pids $!"
done
trap 'kill $pids 2>/dev/null' EXIT INT TERM
node -e '
  const until = Date.now() + 60000;
  const delay = Number(process.argv[1]);
  const up = (port) => fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false);
  (async () => {
    for (const port of [30101, 30102]) {
      while (!(await up(port))) {
        if (Date.now() > until) { console.error("the servers did not start: see runs/serve-*.log"); process.exit(1); }
        await new Promise((r) => setTimeout(r, 500));
      }
      const r = await fetch(`http://127.0.0.1:${port}/_flowrl/faults`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ delay_ms: delay }) });
      if (!r.ok) { console.error(`port ${port}: ${r.status} ${await r.text()}`); process.exit(1); }
    }
  })();' "$delay"
for config in sync one-step-off; do
  npx flowrl train "$here/$config.yaml" trainer.default_local_dir="$out/$config-seed1" trainer.total_training_steps=40 trainer.test_freq=-1 trainer.val_before_train=false trainer.save_freq=-1 trainer.progress=false > /dev/null
done
npx tsx "$here/step-times.ts" "$out"
