// The async comparison's table from async-results.tsv (async_summary.mjs's lines under a header).
// Per mode: means over seeds (steps per wall second is each run's steps over its wall, averaged; correct
// training samples per wall second with its 95 % t interval), the staleness metrics' mean (max over
// runs), and the rollout's counters summed over runs. Then the paired (same seed) differences of
// correct samples per wall second against the first mode given.
// usage: node async_table.mjs ASYNC-RESULTS.tsv [MODE...]   (default: sync one-step-off async)
import fs from 'node:fs';
import { tInterval } from '../../dist/core-adapters/report/statistics.js';

const [file, ...given] = process.argv.slice(2);
const modes = given.length ? given : ['sync', 'one-step-off', 'async'];
const [header, ...lines] = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => l.split('\t'));
const rows = lines.map((l) => Object.fromEntries(header.map((k, i) => [k, l[i]])));
const values = (r, k) => r.map((x) => x[k]).filter((v) => v !== undefined && v !== 'NA').map(Number);
const avg = (r, k, d) => { const v = values(r, k); return v.length ? (v.reduce((a, b) => a + b, 0) / v.length).toFixed(d) : '–'; };
const top = (r, k) => { const v = values(r, k); return v.length ? String(Math.max(...v)) : '–'; };
const total = (r, k) => { const v = values(r, k); return v.length ? String(v.reduce((a, b) => a + b, 0)) : '–'; };
const fmt = (i, d) => (i.low === null ? i.mean.toFixed(d) : `${i.mean.toFixed(d)} [${i.low.toFixed(d)}, ${i.high.toFixed(d)}]`);

console.log('| mode | seeds | wall s | steps | steps / wall s | correct train samples / wall s (mean [95 % t]) | train score | val accuracy | pass@8 | staleness mean (max) | worst mean (max) | rollout/staleness | gen s / step s | ejections, retries, redraws, dropped |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const mode of modes) {
  const r = rows.filter((x) => x.mode === mode);
  if (!r.length) continue;
  console.log(`| ${mode} | ${r.length} | ${avg(r, 'wall_s', 1)} | ${[...new Set(r.map((x) => x.steps))].join('/')} | ${(r.reduce((a, x) => a + x.steps / x.wall_s, 0) / r.length).toFixed(2)} | ${fmt(tInterval(values(r, 'correct_per_s')), 2)} | ${avg(r, 'train_score', 3)} | ${avg(r, 'val_accuracy', 3)} | ${avg(r, 'pass8', 3)} | ${avg(r, 'staleness_mean', 2)} (${top(r, 'staleness_max')}) | ${avg(r, 'staleness_worst_mean', 2)} (${top(r, 'staleness_worst_max')}) | ${avg(r, 'rollout_staleness', 2)} | ${avg(r, 'gen_s', 2)} / ${avg(r, 'step_s', 2)} | ${['ejections', 'retries', 'update_redraws', 'dropped_groups'].map((k) => total(r, k)).join(', ')} |`);
}
console.log('\n| paired difference (same seed) | correct train samples / wall s, mean [95 % t] | significant at 5 % |');
console.log('|---|---|---|');
const bySeed = (mode) => new Map(rows.filter((x) => x.mode === mode).map((x) => [x.seed, Number(x.correct_per_s)]));
for (const other of modes.slice(1)) {
  const a = bySeed(other), b = bySeed(modes[0]);
  const diffs = [...a.keys()].filter((s) => b.has(s)).map((s) => a.get(s) - b.get(s));
  if (!diffs.length) continue;
  const i = tInterval(diffs);
  const sig = i.low !== null && (i.low > 0 || i.high < 0);
  console.log(`| ${other} − ${modes[0]} (n=${diffs.length}) | ${fmt(i, 2)} | ${sig ? 'yes' : 'no'} |`);
}
