// Means with 95 % t intervals over seeds of the flowrl eval results in a directory: one JSON file
// per run, named CONFIG-seedN.json (pass-at-k.sh and collapse/held-out.sh write them).
// --markdown: the README's table instead, one row per config (the base first), a few pass@j columns.
//   npx tsx examples/countdown/pass-at-k-table.ts runs/compare-algorithms/pass-at-128-p128 [--markdown]
import fs from 'node:fs';
import path from 'node:path';
import { formatInterval, tInterval } from '../../core-adapters/index.js';

const args = process.argv.slice(2);
const markdown = args.includes('--markdown');
const dir = args.find((a) => a !== '--markdown') ?? 'runs/compare-algorithms/pass-at-128-p128';
const byConfig = new Map<string, Record<string, number>[]>();
for (const file of fs.readdirSync(dir).filter((f) => /-seed\d+\.json$/.test(f)).sort()) {
  const config = file.replace(/-seed\d+\.json$/, '');
  const metrics = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8')) as Record<string, number>;
  byConfig.set(config, [...(byConfig.get(config) ?? []), metrics]);
}
if (!byConfig.size) throw new Error(`${dir}: no CONFIG-seedN.json files`);
const first = [...byConfig.values()][0][0];
const ks = Object.keys(first)
  .map((key) => /^val\/pass@(\d+)$/.exec(key)?.[1])
  .filter((k): k is string => k !== undefined)
  .map(Number)
  .sort((a, b) => a - b);
const rows: [string, string][] = [
  [`Avg@${first['val/k']}`, 'val/accuracy'],
  ...ks.map((k): [string, string] => [`pass@${k}`, `val/pass@${k}`]),
  ['distinct correct', 'val/distinct_correct'],
  ['correct entropy', 'val/correct_entropy'],
  // Over every correct answer (trainer.val_matching), when the evaluations logged it.
  ...(['val/matching/entropy', 'val/matching/kl'] as const).filter((key) => key in first).map((key): [string, string] => [key === 'val/matching/kl' ? 'KL to ref (correct)' : 'entropy, all correct', key]),
];
if (markdown) {
  const k = first['val/k'];
  const wanted = new Set([`Avg@${k}`, 'pass@8', 'pass@32', `pass@${k}`, 'distinct correct', 'entropy, all correct', 'KL to ref (correct)']);
  const columns = rows.filter(([label]) => wanted.has(label));
  const configs = [...byConfig].sort(([a], [b]) => Number(b === 'base') - Number(a === 'base'));
  const cell = (values: number[]) => formatInterval(tInterval(values), { markdown: true });
  console.log(`| | seeds | ${columns.map(([label]) => label).join(' | ')} |`);
  console.log(`|---|---|${columns.map(() => '---').join('|')}|`);
  for (const [config, runs] of configs) console.log(`| ${config === 'base' ? 'base policy' : config} | ${runs.length} | ${columns.map(([, key]) => cell(runs.map((m) => m[key]))).join(' | ')} |`);
} else {
  const headers = [...byConfig].map(([config, runs]) => `${config} (${runs.length} seeds)`);
  const column = Math.max(24, ...headers.map((h) => h.length + 2));
  console.log(['metric'.padEnd(22), ...headers.map((h) => h.padEnd(column))].join('').trimEnd());
  for (const [label, key] of rows) {
    const cells = [...byConfig.values()].map((runs) => formatInterval(tInterval(runs.map((m) => m[key]))).padEnd(column));
    console.log([label.padEnd(22), ...cells].join('').trimEnd());
  }
}
