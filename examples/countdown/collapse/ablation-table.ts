// The runs ablations.sh leaves: each row's mean over its finished seeds with a 95 % Student-t
// interval (seed 1 alone: the value), at step 150 on the collapse prompts. --versus A:B[,C:D]
// prints B minus A instead, paired by seed over the seeds both rows finished: what one change does.
//   npx tsx examples/countdown/collapse/ablation-table.ts [RUNS_DIR] [--versus A:B,...]
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { formatDifferenceInterval, formatInterval, formatSigned, InputError, tInterval } from '../../../core-adapters/index.js';

const STEPS = 150;
const METRICS: [string, string][] = [
  ['val/accuracy', 'accuracy'],
  ['val/matching/entropy', 'entropy over all correct'],
  ['val/matching/kl', 'KL to the reference over correct'],
  ['val/matching/tv', 'TV'],
];

/** A run's validation line at the last step, or undefined while it trains. */
export function finalLine(dir: string): Record<string, number> | undefined {
  const file = path.join(dir, 'metrics.jsonl');
  if (!fs.existsSync(file)) return undefined;
  return fs
    .readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>)
    .find((l) => l.step === STEPS && 'val/accuracy' in l);
}

type Seeds = { seed: number; line: Record<string, number> }[];

/** Each row's finished runs in RUNS_DIR (directories ROW-seedN), in name order. */
function finishedRows(runs: string): Map<string, Seeds> {
  const byRow = new Map<string, Seeds>();
  for (const name of fs.existsSync(runs) ? fs.readdirSync(runs).sort() : []) {
    const m = /^(.+)-seed(\d+)$/.exec(name);
    const line = m && finalLine(path.join(runs, name));
    if (!m || !line) continue;
    byRow.set(m[1], [...(byRow.get(m[1]) ?? []), { seed: Number(m[2]), line }]);
  }
  if (!byRow.size) throw new InputError(`${runs}: no finished run (run ablations.sh first)`);
  return byRow;
}

const header = (first: string) => [`| ${first} | seeds | ${METRICS.map(([, label]) => label).join(' | ')} |`, `|---|---|${METRICS.map(() => '---|').join('')}`];

/**
 * The Markdown table of RUNS_DIR's rows; with `versus` (pairs [A, B]) the table of B minus A
 * instead, paired by seed over the seeds both finished.
 */
export function ablationTable(runs: string, versus: string[][] = []): string {
  const byRow = finishedRows(runs);
  for (const pair of versus) {
    if (pair.length !== 2 || pair.some((row) => !byRow.has(row))) throw new InputError(`--versus ${pair.join(':')}: give A:B with two rows of ${runs} (${[...byRow.keys()].join(', ')})`);
  }
  if (versus.length) {
    const rows = versus.map(([a, b]) => {
      const bySeed = new Map(byRow.get(a)!.map((s) => [s.seed, s.line]));
      const both = byRow.get(b)!.filter((s) => bySeed.has(s.seed));
      if (!both.length) throw new InputError(`--versus ${a}:${b}: no seed has finished both`);
      const cells = METRICS.map(([key]) => {
        const i = tInterval(both.map((s) => s.line[key] - bySeed.get(s.seed)![key]));
        return `${formatSigned(i.mean)} ${formatDifferenceInterval(i.low, i.high)}`;
      });
      return `| ${b} − ${a} | ${both.map((s) => s.seed).join(', ')} | ${cells.join(' | ')} |`;
    });
    return [...header('B minus A (paired by seed)'), ...rows].join('\n');
  }
  const cell = (values: number[]) => formatInterval(tInterval(values), { markdown: true });
  const rows = [...byRow].map(([row, seeds]) => `| ${row} | ${seeds.map((s) => s.seed).join(', ')} | ${METRICS.map(([key]) => cell(seeds.map((s) => s.line[key]))).join(' | ')} |`);
  return [...header('row'), ...rows].join('\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const args = process.argv.slice(2);
  const versusAt = args.indexOf('--versus');
  const versus = versusAt < 0 ? [] : (args.splice(versusAt, 2)[1] ?? '').split(',').map((pair) => pair.split(':'));
  try {
    console.log(ablationTable(path.resolve(args[0] ?? 'runs/collapse-ablations'), versus));
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    console.error(e.message);
    process.exit(2);
  }
}
