// flowrl compare's statistics: per config, the final validation metrics as a mean with a 95 %
// Student-t interval over seeds; per pair of configs, the paired difference over the same seeds and
// validation prompts (val_prompts.jsonl), with a bootstrap over seeds × prompts and a paired t over
// seeds. Shared by the command's table and the HTML report.
import { InputError } from '../errors.js';
import { passAtJOf, passAtJs, passAtK } from '../trainer/pass-at-k.js';
import { readValPrompts, type ValPromptRecord } from '../trainer/val-prompts.js';
import { finalValidation, readReportRun, type ReportStepRecord } from './runs.js';
import { crossedBootstrap, mean, percentileInterval, tInterval, type Interval } from './statistics.js';

export const LEVEL = 0.95;
const RESAMPLES = 2000;
const BOOTSTRAP_SEED = 2024;

/** A config's runs, one per seed. */
export interface CompareGroup {
  name: string;
  dirs: string[];
}

export interface ComparedMetric {
  key: string;
  label: string;
}

export interface GroupSummary {
  name: string;
  dirs: string[];
  /** Runs with a final validation. */
  runs: number;
  /** Metric key → mean with its t interval over seeds (absent: no run logged it). */
  final: Map<string, Interval>;
  /** Metric key → mean with its t interval at step 0, for metrics every run validated there. */
  before: Map<string, Interval>;
}

export interface PairedMetric extends ComparedMetric {
  /** Mean over seeds of (config − baseline). */
  difference: number;
  /** Percentile interval of the bootstrap over seeds × prompts. */
  bootstrap: { low: number; high: number };
  /** t interval of the per-seed differences; low/high null with one seed. */
  t: Interval;
  /** Both intervals exclude 0 (the bootstrap alone with one seed). */
  significant: boolean;
}

export interface PairedComparison {
  name: string;
  baseline: string;
  /** Why no comparison could be made (e.g. no per-prompt results); metrics is then empty. */
  skipped?: string;
  seeds: (number | string)[];
  prompts: number;
  metrics: PairedMetric[];
}

export interface Comparison {
  metrics: ComparedMetric[];
  groups: GroupSummary[];
  pairs: PairedComparison[];
  resamples: number;
}

type Run = ReturnType<typeof readReportRun>;

/** The matching metrics compared (validation averages them over prompts with a correct set). */
const MATCHING_METRICS = [
  ['val/matching/entropy', 'entropy over all correct'],
  ['val/matching/kl', 'KL to ref (correct set)'],
  ['val/matching/tv', 'TV to ref (correct set)'],
] as const;
const MATCHING_FIELDS: Record<string, 'entropy' | 'kl' | 'tv'> = { 'val/matching/entropy': 'entropy', 'val/matching/kl': 'kl', 'val/matching/tv': 'tv' };

/** Metrics in display order: accuracy, pass@j by j (pass@k only when no pass@j was logged), diversity. */
function comparedMetrics(finals: ReportStepRecord[]): ComparedMetric[] {
  const ks = new Set(finals.map((v) => v.get('val/k')));
  const k = ks.size === 1 ? [...ks][0] : undefined;
  const js = [...new Set(finals.flatMap((v) => passAtJs(v.keys())))].sort((a, b) => a - b);
  const has = (key: string) => finals.some((v) => v.has(key));
  const metrics: ComparedMetric[] = [{ key: 'val/accuracy', label: k ? `Avg@${k} (accuracy)` : 'accuracy (Avg@k)' }];
  metrics.push(...js.map((j) => ({ key: `val/pass@${j}`, label: `pass@${j}` })));
  if (!js.length && has('val/pass@k')) metrics.push({ key: 'val/pass@k', label: k ? `pass@${k}` : 'pass@k' });
  if (has('val/distinct_correct')) metrics.push({ key: 'val/distinct_correct', label: 'distinct correct' });
  if (has('val/correct_entropy')) metrics.push({ key: 'val/correct_entropy', label: 'correct entropy' });
  for (const [key, label] of MATCHING_METRICS) if (has(key)) metrics.push({ key, label });
  return metrics;
}

/** A metric over prompts as Σ numerator / Σ denominator of per-prompt values (0 when Σ den = 0, as validate does). */
function perPrompt(key: string, r: ValPromptRecord): [number, number] | null {
  const j = passAtJOf(key);
  if (j !== null) return j <= r.k ? [passAtK(r.k, r.correct, j), 1] : null;
  switch (key) {
    case 'val/accuracy':
      return [r.correct / r.k, 1];
    case 'val/pass@k':
      return [r.correct > 0 ? 1 : 0, 1];
    case 'val/distinct_correct':
      return [r.distinct, 1];
    case 'val/correct_entropy':
      // The mean over prompts with a correct response.
      return [r.entropy, r.correct > 0 ? 1 : 0];
    default: {
      const field = MATCHING_FIELDS[key];
      if (!field) return null;
      return r.matching ? [r.matching[field], 1] : [0, 0];
    }
  }
}

function ratio(num: Float64Array, den: Float64Array, weights?: Float64Array): number {
  let n = 0;
  let d = 0;
  for (let p = 0; p < num.length; p++) {
    const w = weights ? weights[p] : 1;
    n += w * num[p];
    d += w * den[p];
  }
  return d ? n / d : 0;
}

function seedOf(run: Run, i: number): number | string {
  return run.seed ?? `run ${i + 1}`;
}

/** The paired comparison of `group` against `baseline` over their shared seeds and prompts. */
function pair(group: { name: string; runs: Run[] }, baseline: { name: string; runs: Run[] }, metrics: ComparedMetric[], resamples: number): PairedComparison {
  const out: PairedComparison = { name: group.name, baseline: baseline.name, seeds: [], prompts: 0, metrics: [] };
  const bySeed = (runs: Run[]) => new Map(runs.map((r, i) => [seedOf(r, i), r]));
  const a = bySeed(baseline.runs);
  const b = bySeed(group.runs);
  const seeds = [...a.keys()].filter((s) => b.has(s));
  if (!seeds.length) return { ...out, skipped: 'no seed in common' };
  // Per seed, the per-prompt records of the final validation of both runs.
  const records: [ValPromptRecord[], ValPromptRecord[]][] = [];
  let reference: ValPromptRecord[] | undefined;
  for (const seed of seeds) {
    const sides = [a.get(seed)!, b.get(seed)!].map((run) => {
      const final = finalValidation(run);
      const byPrompt = final ? readValPrompts(run.dir, final.step) : null;
      return { run, records: byPrompt ? [...byPrompt.values()].sort((x, y) => x.prompt - y.prompt) : null, step: final?.step };
    });
    for (const side of sides) {
      if (!side.records?.length) return { ...out, skipped: `no per-prompt validation results (val_prompts.jsonl) for step ${side.step ?? '-'} in ${side.run.dir}` };
    }
    reference ??= sides[0].records!;
    for (const side of sides) {
      const same = side.records!.length === reference.length && side.records!.every((r, p) => r.prompt === reference![p].prompt && r.hash === reference![p].hash && r.k === reference![p].k);
      if (!same) return { ...out, skipped: `${side.run.dir} validated other prompts or another k than ${a.get(seeds[0])!.dir}` };
    }
    records.push([sides[0].records!, sides[1].records!]);
  }
  const P = reference!.length;
  const S = seeds.length;
  // Per metric and seed: numerators and denominators over prompts, for the baseline and the config.
  const usable = metrics.filter((m) => reference!.every((r) => perPrompt(m.key, r) !== null));
  const arrays = usable.map((m) =>
    records.map((sides) =>
      sides.map((rs) => {
        const num = new Float64Array(P);
        const den = new Float64Array(P);
        rs.forEach((r, p) => ([num[p], den[p]] = perPrompt(m.key, r)!));
        return { num, den };
      }),
    ),
  );
  const perSeedDifferences = arrays.map((bySeedSides) => bySeedSides.map(([base, other]) => ratio(other.num, other.den) - ratio(base.num, base.den)));
  // Seeds and prompts are crossed (every seed validated the same prompts), so the bootstrap
  // resamples both, independently; the paired t over seeds guards against the bootstrap's too
  // narrow spread with few seeds. Significant: both intervals exclude 0.
  const replicates = crossedBootstrap(
    S,
    P,
    (rows, weights) =>
      arrays.map((bySeedSides) => {
        const d = bySeedSides.map(([base, other]) => ratio(other.num, other.den, weights) - ratio(base.num, base.den, weights));
        return mean(rows.map((s) => d[s]));
      }),
    { resamples, seed: BOOTSTRAP_SEED },
  );
  out.metrics = usable.map((m, i) => {
    const difference = mean(perSeedDifferences[i]);
    const bootstrap = percentileInterval(replicates[i], LEVEL);
    const t = tInterval(perSeedDifferences[i], LEVEL);
    const excludes = (low: number | null, high: number | null) => low !== null && high !== null && (low > 0 || high < 0);
    const significant = excludes(bootstrap.low, bootstrap.high) && (t.low === null || excludes(t.low, t.high));
    return { ...m, difference, bootstrap, t, significant };
  });
  return { ...out, seeds, prompts: P };
}

/**
 * The comparison of groups of runs: each against `baseline` (a group name; default the first
 * group). Runs without a final validation are left out of their group's intervals.
 */
export function compareRuns(groups: CompareGroup[], options: { baseline?: string; resamples?: number } = {}): Comparison {
  const baseline = options.baseline ?? groups[0]?.name;
  if (!groups.some((g) => g.name === baseline)) throw new InputError(`--baseline: '${baseline}' is not one of the compared configs (${groups.map((g) => g.name).join(', ')})`);
  const resamples = options.resamples ?? RESAMPLES;
  const read = groups.map((g) => ({ name: g.name, dirs: g.dirs, runs: g.dirs.map(readReportRun).filter((r) => finalValidation(r)) }));
  const metrics = comparedMetrics(read.flatMap((g) => g.runs.map((r) => finalValidation(r)!.values)));
  const summaries: GroupSummary[] = read.map((g) => {
    const final = new Map<string, Interval>();
    for (const m of metrics) {
      const values = g.runs.map((r) => finalValidation(r)!.values.get(m.key)).filter((v): v is number => v !== undefined);
      if (values.length) final.set(m.key, tInterval(values, LEVEL));
    }
    const before = new Map<string, Interval>();
    for (const m of metrics) {
      const values = g.runs.map((r) => r.steps.find((s) => s.step === 0)?.values.get(m.key));
      if (values.length && values.every((v) => v !== undefined)) before.set(m.key, tInterval(values as number[], LEVEL));
    }
    return { name: g.name, dirs: g.dirs, runs: g.runs.length, final, before };
  });
  const base = read.find((g) => g.name === baseline)!;
  const pairs = read.filter((g) => g !== base).map((g) => pair(g, base, metrics, resamples));
  return { metrics, groups: summaries, pairs, resamples };
}

/**
 * `mean [low, high]`, `mean (CI n/a)` for one value, or `-` for none; in a Markdown cell
 * (`markdown`) one value is the bare mean and none is `–`.
 */
export function formatInterval(i: Interval | undefined, options: { markdown?: boolean } = {}): string {
  if (!i) return options.markdown ? '–' : '-';
  if (i.low === null) return options.markdown ? i.mean.toFixed(3) : `${i.mean.toFixed(3)} (CI n/a)`;
  return `${i.mean.toFixed(3)} [${i.low.toFixed(3)}, ${i.high!.toFixed(3)}]`;
}

/** A difference with its sign always shown: +0.120, -0.030. */
export function formatSigned(v: number, digits = 3): string {
  return `${v >= 0 ? '+' : '-'}${Math.abs(v).toFixed(digits)}`;
}

/** A difference's interval, both ends signed; "n/a (one seed)" where it cannot be computed. */
export function formatDifferenceInterval(low: number | null, high: number | null): string {
  return low === null || high === null ? 'n/a (one seed)' : `[${formatSigned(low)}, ${formatSigned(high)}]`;
}

/** The comparison as plain-text tables (flowrl compare prints them). */
export function comparisonText(c: Comparison): string[] {
  const width = Math.max(24, ...c.metrics.map((m) => m.label.length + 2));
  const headers = c.groups.map((g) => `${g.name} (${g.runs} seed${g.runs === 1 ? '' : 's'})`);
  const column = Math.max(26, ...headers.map((h) => h.length + 2));
  const table = (title: string, values: (g: GroupSummary) => Map<string, Interval>) => [
    title,
    ['metric'.padEnd(width), ...headers.map((h) => h.padEnd(column))].join('').trimEnd(),
    ...c.metrics.map((m) => [m.label.padEnd(width), ...c.groups.map((g) => formatInterval(values(g).get(m.key)).padEnd(column))].join('').trimEnd()),
  ];
  const lines = table(`final validation: mean and ${LEVEL * 100} % confidence interval over seeds (Student t, mean ± t · s/√N)`, (g) => g.final);
  if (c.groups.some((g) => g.before.size)) lines.push('', ...table('at step 0, before training (the same seeds and prompts)', (g) => g.before));
  for (const p of c.pairs) {
    lines.push('');
    if (p.skipped) {
      lines.push(`${p.name} - ${p.baseline}: no paired comparison (${p.skipped})`);
      continue;
    }
    lines.push(
      `${p.name} - ${p.baseline}, paired over seeds ${p.seeds.join(', ')} and the same ${p.prompts} validation prompts`,
      `(${LEVEL * 100} % intervals: bootstrap over seeds × prompts, ${c.resamples} resamples; paired t over seeds; significant when both exclude 0)`,
    );
    lines.push(['metric'.padEnd(width), 'difference'.padEnd(12), 'bootstrap CI'.padEnd(20), 'paired t CI'.padEnd(20), 'significant at 95 %'].join(''));
    for (const m of p.metrics) {
      lines.push([m.label.padEnd(width), formatSigned(m.difference).padEnd(12), formatDifferenceInterval(m.bootstrap.low, m.bootstrap.high).padEnd(20), formatDifferenceInterval(m.t.low, m.t.high).padEnd(20), m.significant ? 'yes' : 'no'].join(''));
    }
  }
  return lines;
}

/**
 * The comparison as two Markdown tables (flowrl compare --markdown), as the examples' READMEs show
 * them: per config the mean with its interval over seeds, the baseline's step-0 validation as the
 * base policy's row, then each config minus the baseline (bootstrap interval, then paired t;
 * bold where significant). Of the pass@j only the largest j is shown; Avg@k is pass@1.
 */
export function comparisonMarkdown(c: Comparison): string[] {
  const passes = c.metrics.filter((m) => m.key.startsWith('val/pass@'));
  const shown = c.metrics.filter((m) => !passes.includes(m) || m === passes.at(-1));
  const signed = (v: number) => formatSigned(v).replace('-', '−');
  const cell = (i: Interval | undefined) => formatInterval(i, { markdown: true });
  const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
  const lines = [row(['', 'seeds', ...shown.map((m) => m.label)]), row(['---', '---', ...shown.map(() => '---')])];
  for (const g of c.groups) lines.push(row([g.name, g.runs, ...shown.map((m) => cell(g.final.get(m.key)))]));
  const baseline = c.groups.find((g) => g.name === c.pairs[0]?.baseline) ?? c.groups[0];
  if (baseline?.before.size) lines.push(row(['base policy (step 0)', baseline.runs, ...shown.map((m) => cell(baseline.before.get(m.key)))]));
  if (!c.pairs.length) return lines;
  lines.push('', row([`config − ${c.pairs[0].baseline}`, ...shown.map((m) => m.label)]), row(['---', ...shown.map(() => '---')]));
  for (const p of c.pairs) {
    if (p.skipped) {
      lines.push(row([p.name, `no paired comparison (${p.skipped})`, ...shown.slice(1).map(() => '')]));
      continue;
    }
    const cells = shown.map((m) => {
      const d = p.metrics.find((x) => x.key === m.key);
      if (!d) return '–';
      const value = d.significant ? `**${signed(d.difference)}**` : signed(d.difference);
      const t = d.t.low === null ? 'n/a' : `[${signed(d.t.low)}, ${signed(d.t.high!)}]`;
      return `${value} [${signed(d.bootstrap.low)}, ${signed(d.bootstrap.high)}] ${t}`;
    });
    lines.push(row([`${p.name} (seeds ${p.seeds.join(', ')})`, ...cells]));
  }
  return lines;
}
