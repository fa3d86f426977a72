// The pre-registered experiment's analysis, exactly as PROTOCOL.md fixes it: A* (the grpo-kl runs'
// mean accuracy), each arm's distinct correct answers at A* per seed (interpolated along its beta
// curve, clamped at the ends and counted), FlowRL arms against grpo-kl paired by seed with 95 % t
// intervals, two-sided p-values, Holm over the primary table, and the verdict against the 1.0 margin.
// Secondary tables: accuracy per beta, and matching entropy and KL at A*, Holm within each.
//   npx tsx examples/countdown/preregistered/table.ts [RUNS_DIR]
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { formatInterval, formatSigned, InputError, tCdf, tInterval } from '../../../core-adapters/index.js';
import { finalLine } from '../collapse/ablation-table.js';

/** One pre-registered experiment's runs: arms x betas x seeds; A* and every comparison come from `baseline`. */
export interface Design {
  arms: readonly string[];
  baseline: string;
  betas: number[];
  seeds: number[];
}

export const ARMS = ['flowrl-recipe', 'flowrl-matching', 'flowrl-no-log-z', 'grpo-kl'] as const;
export const BASELINE = 'grpo-kl';
export const BETAS = [7, 10, 15];
export const SEEDS = [21, 22, 23, 24, 25];
/** This folder's experiment (PROTOCOL.md). */
export const EXPERIMENT: Design = { arms: ARMS, baseline: BASELINE, betas: BETAS, seeds: SEEDS };
/** The margin of PROTOCOL.md, in distinct correct answers per prompt. */
export const MARGIN = 1.0;
const ALPHA = 0.05;

type Line = Record<string, number>;

/**
 * `metric` at accuracy `target` along one seed's beta curve: the points sorted by accuracy and
 * linearly interpolated; outside their range the nearest end (clamped: true).
 */
export function atAccuracy(points: { accuracy: number; value: number }[], target: number): { value: number; clamped: boolean } {
  const sorted = [...points].sort((a, b) => a.accuracy - b.accuracy);
  const first = sorted[0];
  const last = sorted[sorted.length - 1];
  if (target <= first.accuracy) return { value: first.value, clamped: target < first.accuracy };
  if (target >= last.accuracy) return { value: last.value, clamped: target > last.accuracy };
  for (let i = 1; i < sorted.length; i++) {
    const [a, b] = [sorted[i - 1], sorted[i]];
    if (target <= b.accuracy) return { value: b.accuracy === a.accuracy ? (a.value + b.value) / 2 : a.value + ((target - a.accuracy) / (b.accuracy - a.accuracy)) * (b.value - a.value), clamped: false };
  }
  return { value: last.value, clamped: true };
}

/** Two-sided p-value of a paired t test that the differences' mean is 0 (n - 1 degrees of freedom). */
export function pairedPValue(differences: number[]): number {
  const n = differences.length;
  const mean = differences.reduce((a, b) => a + b, 0) / n;
  const sd = Math.sqrt(differences.reduce((a, d) => a + (d - mean) ** 2, 0) / (n - 1));
  if (sd === 0) return mean === 0 ? 1 : 0;
  return 2 * (1 - tCdf(Math.abs(mean / (sd / Math.sqrt(n))), n - 1));
}

/** Holm's step-down: whether each hypothesis is rejected at family-wise level alpha. */
export function holm(pValues: number[], alpha = ALPHA): boolean[] {
  const order = pValues.map((p, i) => ({ p, i })).sort((a, b) => a.p - b.p);
  const rejected = pValues.map(() => false);
  for (const [rank, { p, i }] of order.entries()) {
    if (p > alpha / (pValues.length - rank)) break;
    rejected[i] = true;
  }
  return rejected;
}

/** The verdict PROTOCOL.md fixes for one comparison. */
export function verdict(interval: { low: number; high: number }, rejected: boolean): string {
  if (rejected && interval.low > 0) return 'more distinct answers';
  if (rejected && interval.high < 0) return 'fewer distinct answers';
  if (interval.low >= -MARGIN && interval.high <= MARGIN) return `equivalent (within ±${MARGIN})`;
  return 'not shown either way';
}

type Runs = Map<string, Line>;

function key(arm: string, beta: number, seed: number): string {
  return `${arm}-beta${beta}-seed${seed}`;
}

function readRuns(dir: string, design: Design): Runs {
  const runs: Runs = new Map();
  for (const arm of design.arms) for (const beta of design.betas) for (const seed of design.seeds) {
    const line = finalLine(path.join(dir, key(arm, beta, seed)));
    if (line) runs.set(key(arm, beta, seed), line);
  }
  if (!runs.size) throw new InputError(`${dir}: no finished run (run runs.sh first)`);
  return runs;
}

/** Per arm and seed (all three betas finished), the metric at A*. */
function atTarget(runs: Runs, design: Design, metric: string, target: number): Map<string, Map<number, { value: number; clamped: boolean }>> {
  const out = new Map<string, Map<number, { value: number; clamped: boolean }>>();
  for (const arm of design.arms) {
    const bySeed = new Map<number, { value: number; clamped: boolean }>();
    for (const seed of design.seeds) {
      const lines = design.betas.map((beta) => runs.get(key(arm, beta, seed)));
      if (lines.some((l) => !l)) continue;
      bySeed.set(seed, atAccuracy(lines.map((l) => ({ accuracy: l!['val/accuracy'], value: l![metric] })), target));
    }
    out.set(arm, bySeed);
  }
  return out;
}

/** The other arms against the baseline, paired by seed: rows of a Markdown table with Holm over them. */
function comparisonTable(values: Map<string, Map<number, { value: number; clamped: boolean }>>, design: Design, label: string, withVerdict: boolean): string[] {
  const baseline = design.baseline;
  const base = values.get(baseline)!;
  const rows = design.arms.filter((a) => a !== baseline).map((arm) => {
    const mine = values.get(arm)!;
    const seeds = design.seeds.filter((s) => mine.has(s) && base.has(s));
    const differences = seeds.map((s) => mine.get(s)!.value - base.get(s)!.value);
    return { arm, seeds, differences, clamped: [...mine.values()].filter((v) => v.clamped).length, p: differences.length >= 2 ? pairedPValue(differences) : NaN };
  });
  const rejected = holm(rows.map((r) => (Number.isNaN(r.p) ? 1 : r.p)));
  const baseMean = tInterval([...base.values()].map((v) => v.value));
  const lines = [
    `| arm | seeds | ${label} at A* | minus ${baseline} (95 % t) | p | Holm | clamped |${withVerdict ? ' verdict |' : ''}`,
    `|---|---|---|---|---|---|---|${withVerdict ? '---|' : ''}`,
    `| ${baseline} | ${base.size} | ${formatInterval(baseMean)} | | | | ${[...base.values()].filter((v) => v.clamped).length} |${withVerdict ? ' |' : ''}`,
  ];
  rows.forEach((r, i) => {
    const own = tInterval([...values.get(r.arm)!.values()].map((v) => v.value));
    const t = tInterval(r.differences);
    const diff = t.low !== null && t.high !== null ? { mean: t.mean, low: t.low, high: t.high } : undefined;
    const diffText = diff ? `${formatSigned(diff.mean)} [${formatSigned(diff.low)}, ${formatSigned(diff.high)}]` : 'n/a';
    const v = withVerdict ? (diff ? ` ${verdict(diff, rejected[i])} |` : ' n/a |') : '';
    lines.push(`| ${r.arm} | ${r.seeds.length} | ${formatInterval(own)} | ${diffText} | ${Number.isNaN(r.p) ? 'n/a' : r.p.toFixed(4)} | ${rejected[i] ? 'rejects' : 'no'} | ${r.clamped} |${v}`);
  });
  return lines;
}

export function preregisteredTables(dir: string, design: Design = EXPERIMENT): string {
  const { arms, baseline, betas, seeds } = design;
  const runs = readRuns(dir, design);
  const baselineRuns = betas.flatMap((beta) => seeds.map((seed) => runs.get(key(baseline, beta, seed)))).filter((l): l is Line => !!l);
  if (!baselineRuns.length) throw new InputError(`${dir}: no finished ${baseline} run, so A* is not defined yet`);
  const target = baselineRuns.reduce((a, l) => a + l['val/accuracy'], 0) / baselineRuns.length;
  const out = [
    `# Pre-registered experiment: results (${runs.size} of ${arms.length * betas.length * seeds.length} runs finished)`,
    '',
    `Produced by \`table.ts\` from the runs, as PROTOCOL.md fixes the analysis. A* = ${target.toFixed(4)} (mean accuracy of ${baselineRuns.length} ${baseline} runs).`,
    '',
    '## Primary: distinct correct answers per prompt (64 samples at T = 1.0) at A*',
    '',
    ...comparisonTable(atTarget(runs, design, 'val/distinct_correct', target), design, 'distinct correct', true),
    '',
    '## Secondary: entropy over all correct answers at A* (T = 1.0)',
    '',
    ...comparisonTable(atTarget(runs, design, 'val/matching/entropy', target), design, 'entropy', false),
    '',
    '## Secondary: KL to the base over correct answers at A* (T = 1.0)',
    '',
    ...comparisonTable(atTarget(runs, design, 'val/matching/kl', target), design, 'KL', false),
    '',
    `## Secondary: accuracy (Avg@64) per beta, paired against ${baseline} at the same beta`,
    '',
  ];
  for (const beta of betas) {
    const values = new Map(arms.map((arm) => [arm, new Map(seeds.filter((s) => runs.has(key(arm, beta, s))).map((s) => [s, { value: runs.get(key(arm, beta, s))!['val/accuracy'], clamped: false }]))]));
    out.push(`### beta ${beta}`, '', ...comparisonTable(values, design, 'accuracy', false).map((l) => l.replace(' at A*', '')), '');
  }
  return out.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  try {
    console.log(preregisteredTables(process.argv[2] ?? 'runs/preregistered'));
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    console.error(e.message);
    process.exitCode = 2;
  }
}
