// Per-arm mean and 95 % t interval over seeds, and paired differences, from results.tsv
// (arm, seed, wall_s, steps, val_accuracy, pass@8). usage: node stats.mjs RESULTS.tsv BASELINE_ARM...
import fs from 'node:fs';
import { tInterval } from '../../dist/core-adapters/report/statistics.js';

const [file, first, ...others] = process.argv.slice(2);
const rows = fs.readFileSync(file, 'utf8').trim().split('\n').slice(1).map((l) => l.split('\t'));
const arms = [...new Set(rows.map((r) => r[0]))];
const get = (arm, col) => new Map(rows.filter((r) => r[0] === arm).map((r) => [r[1], Number(r[col])]));
const fmt = (i, d = 3) => (i.low === null ? `${i.mean.toFixed(d)} [–]` : `${i.mean.toFixed(d)} [${i.low.toFixed(d)}, ${i.high.toFixed(d)}]`);
console.log('| arm | seeds | wall s (mean) | steps | val accuracy (mean [95 % t]) | pass@8 |');
console.log('|---|---|---|---|---|---|');
for (const arm of arms) {
  const acc = [...get(arm, 4).values()], p8 = [...get(arm, 5).values()];
  console.log(`| ${arm} | ${acc.length} | ${tInterval([...get(arm, 2).values()]).mean.toFixed(1)} | ${[...new Set(get(arm, 3).values())].join('/')} | ${fmt(tInterval(acc))} | ${fmt(tInterval(p8))} |`);
}
console.log('\n| paired difference (same seed) | metric | mean [95 % t] | significant at 5 % |');
console.log('|---|---|---|---|');
for (const other of others) {
  for (const [col, name] of [[4, 'val accuracy'], [5, 'pass@8']]) {
    const a = get(first, col), b = get(other, col);
    const diffs = [...a.keys()].filter((s) => b.has(s)).map((s) => a.get(s) - b.get(s));
    const i = tInterval(diffs);
    const sig = i.low !== null && (i.low > 0 || i.high < 0);
    console.log(`| ${first} − ${other} (n=${diffs.length}) | ${name} | ${fmt(i)} | ${sig ? 'yes' : 'no'} |`);
  }
}
