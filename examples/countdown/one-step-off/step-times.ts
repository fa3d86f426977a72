// Time per training step of each run under a flowrl compare directory (mean over steps 2 to the
// end, so the first, which samples without overlap, is left out), and the part of it spent waiting
// for samples (timing_s/gen): one line per run, then the mean per config.
//   npx tsx examples/countdown/one-step-off/step-times.ts runs/compare-one-step-off
import fs from 'node:fs';
import path from 'node:path';

const root = process.argv[2];
if (!root || !fs.existsSync(root)) {
  console.error('usage: step-times.ts COMPARE_DIR (a flowrl compare --out directory)');
  process.exit(2);
}
const byConfig = new Map<string, { step: number; gen: number }[]>();
for (const run of fs.readdirSync(root).sort()) {
  const file = path.join(root, run, 'metrics.jsonl');
  if (!fs.existsSync(file)) continue;
  const steps = fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, number>)
    .filter((m) => m.step > 1 && m['timing_s/step'] !== undefined);
  // Validation and checkpoint time belong to their steps' lines; the step's own work is the rest.
  const own = (m: Record<string, number>) => m['timing_s/step'] - (m['timing_s/testing'] ?? 0) - (m['timing_s/save_checkpoint'] ?? 0);
  const mean = (f: (m: Record<string, number>) => number) => steps.reduce((s, m) => s + f(m), 0) / steps.length;
  const summary = { step: mean(own), gen: mean((m) => m['timing_s/gen']) };
  console.log(`${run.padEnd(28)} ${summary.step.toFixed(3)} s/step, waiting for samples ${summary.gen.toFixed(3)} s (${steps.length} steps)`);
  const config = run.replace(/-seed\d+$/, '');
  byConfig.set(config, [...(byConfig.get(config) ?? []), summary]);
}
for (const [config, runs] of byConfig) {
  const step = runs.reduce((s, r) => s + r.step, 0) / runs.length;
  const gen = runs.reduce((s, r) => s + r.gen, 0) / runs.length;
  console.log(`${config}: ${step.toFixed(3)} s/step (waiting ${gen.toFixed(3)} s), ${runs.length} runs`);
}
