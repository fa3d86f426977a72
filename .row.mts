import fs from 'node:fs';
import { formatInterval, tInterval } from './core-adapters/index.ts';
const keys = ['val/accuracy', 'val/pass@k', 'val/distinct_correct', 'val/correct_entropy', 'val/matching/entropy', 'val/matching/kl', 'val/matching/tv'];
for (const cfg of process.argv.slice(2)) {
  const lines = [11, 12, 13, 14, 15].map((s) => { const f = `runs/collapse-tuned/${cfg}-seed${s}/metrics.jsonl`; return fs.existsSync(f) ? fs.readFileSync(f, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).find((l) => l.step === 150 && 'val/accuracy' in l) : undefined; }).filter(Boolean);
  console.log(`| ${cfg} | ${lines.length} | ${keys.map((k) => formatInterval(tInterval(lines.map((l) => l[k])))).join(' | ')} |`);
}
