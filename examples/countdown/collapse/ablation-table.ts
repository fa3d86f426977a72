// The runs ablations.sh leaves: each row's mean over its finished seeds with a 95 % Student-t
// interval (seed 1 alone: the value), at step 150 on the collapse prompts.
//   npx tsx examples/countdown/collapse/ablation-table.ts [RUNS_DIR]
import fs from 'node:fs';
import path from 'node:path';
import { formatInterval, tInterval } from '../../../core-adapters/index.js';

const runs = path.resolve(process.argv[2] ?? 'runs/collapse-ablations');
const STEPS = 150;
const METRICS: [string, string][] = [
  ['val/accuracy', 'accuracy'],
  ['val/matching/entropy', 'entropy over all correct'],
  ['val/matching/kl', 'KL to the reference over correct'],
  ['val/matching/tv', 'TV'],
];

/** A run's validation line at the last step, or undefined while it trains. */
function finalLine(dir: string): Record<string, number> | undefined {
  const file = path.join(dir, 'metrics.jsonl');
  if (!fs.existsSync(file)) return undefined;
  return fs
    .readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>)
    .find((l) => l.step === STEPS && 'val/accuracy' in l);
}

const byRow = new Map<string, { seed: number; line: Record<string, number> }[]>();
for (const name of fs.existsSync(runs) ? fs.readdirSync(runs).sort() : []) {
  const m = /^(.+)-seed(\d+)$/.exec(name);
  const line = m && finalLine(path.join(runs, name));
  if (!m || !line) continue;
  byRow.set(m[1], [...(byRow.get(m[1]) ?? []), { seed: Number(m[2]), line }]);
}
if (!byRow.size) throw new Error(`${runs}: no finished run (run ablations.sh first)`);

const cell = (values: number[]) => formatInterval(tInterval(values), { markdown: true });
console.log(`| row | seeds | ${METRICS.map(([, label]) => label).join(' | ')} |`);
console.log(`|---|---|${METRICS.map(() => '---|').join('')}`);
for (const [row, seeds] of byRow) {
  console.log(`| ${row} | ${seeds.map((s) => s.seed).join(', ')} | ${METRICS.map(([key]) => cell(seeds.map((s) => s.line[key]))).join(' | ')} |`);
}
