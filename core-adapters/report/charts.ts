// The report's plots: Vega-Lite specs compiled by vega-lite and rendered to SVG strings by vega in
// Node (renderer 'none': no canvas, no DOM), so the HTML needs no script to show them.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import vm from 'node:vm';
import type { TopLevelSpec } from 'vega-lite';
import { passAtJs } from '../trainer/pass-at-k.js';
import { finalValidation, seriesOf, type ReportRun } from './runs.js';
import { mean, tInterval } from './statistics.js';

export interface PlotDef {
  /** Section id in the HTML (stable: tests and links rely on it). */
  id: string;
  title: string;
  /** What the y axis shows. */
  axis: string;
  /** The metric keys this plot can show; `keyFor` picks one per run. */
  keys: string[];
  /** Validation metrics: logged at some steps only, drawn with points, and summarised per algorithm. */
  validation: boolean;
  /** The key a run contributes (the first of `keys` it logged, by default). */
  keyFor?: (run: ReportRun, logged: (key: string) => boolean) => string | null;
  help?: string;
  /** A heading that depends on the runs (pass@k names k when every run used the same). */
  titleFor?: (runs: ReportRun[]) => string;
}

/** k of pass@k when every run that logged val/k used the same one. */
function passAtKTitle(runs: ReportRun[]): string {
  const ks = new Set(runs.flatMap((r) => seriesOf(r, 'val/k').map((p) => p.value)));
  return ks.size === 1 ? `pass@k (k = ${[...ks][0]})` : 'pass@k';
}

const FLOWRL_LOSS_FIRST = ['actor/final_loss', 'actor/pg_loss'];

export const PLOTS: PlotDef[] = [
  { id: 'plot-reward', title: 'Reward', axis: 'mean score', keys: ['critic/score/mean'], validation: false, help: 'mean reward score of the training rollouts' },
  { id: 'plot-val-accuracy', title: 'Validation accuracy', axis: 'accuracy', keys: ['val/accuracy'], validation: true },
  {
    id: 'plot-val-pass-at-k',
    title: 'pass@k',
    axis: 'pass@k',
    keys: ['val/pass@k'],
    validation: true,
    help: 'share of validation prompts with at least one correct sample among k',
    titleFor: passAtKTitle,
  },
  {
    id: 'plot-val-distinct-correct',
    title: 'Distinct correct solutions',
    axis: 'distinct correct / prompt',
    keys: ['val/distinct_correct'],
    validation: true,
    help: 'distinct correct responses per validation prompt',
  },
  {
    id: 'plot-val-correct-entropy',
    title: 'Entropy over correct solutions',
    axis: 'entropy (nats)',
    keys: ['val/correct_entropy'],
    validation: true,
    help: 'entropy of the distribution over the correct responses (higher: more diverse)',
  },
  {
    id: 'plot-val-matching-kl',
    title: 'Distance to the reference over correct answers',
    axis: 'KL (nats)',
    keys: ['val/matching/kl'],
    validation: true,
    help:
      "KL(pi(.|correct) || pi_ref(.|correct)) per validation prompt, averaged: 0 when the policy keeps the reference's shares among its correct answers " +
      "(FlowRL's target with outcome rewards); exact where the task lists every correct answer (val/matching/exact = 1), else over the distinct correct samples",
  },
  {
    id: 'plot-val-matching-entropy',
    title: 'Entropy over all correct answers',
    axis: 'entropy (nats)',
    keys: ['val/matching/entropy'],
    validation: true,
    help: "entropy of the policy's distribution over each prompt's correct answers, computed from their probabilities (not from samples); the reference's is val/matching/ref_entropy",
  },
  { id: 'plot-response-length', title: 'Response length', axis: 'mean tokens', keys: ['response_length/mean'], validation: false },
  {
    id: 'plot-actor-loss',
    title: 'Actor loss',
    axis: 'loss',
    keys: ['actor/pg_loss', 'actor/final_loss'],
    validation: false,
    help: 'actor/pg_loss for ppo, grpo and reinforce_plus_plus; actor/final_loss for flowrl',
    keyFor: (run, logged) => (run.algorithm === 'flowrl' ? FLOWRL_LOSS_FIRST : ['actor/pg_loss', 'actor/final_loss']).find(logged) ?? null,
  },
  { id: 'plot-log-z', title: 'log Z', axis: 'log Z', keys: ['actor/log_z'], validation: false, help: 'the learned log partition function (FlowRL)' },
  {
    id: 'plot-importance-weight',
    title: 'Importance weight',
    axis: 'importance weight',
    keys: ['actor/importance_weight'],
    validation: false,
    help: 'mean clipped importance weight (FlowRL)',
  },
  { id: 'plot-grad-norm', title: 'Gradient norm', axis: 'grad norm', keys: ['actor/grad_norm'], validation: false },
  { id: 'plot-throughput', title: 'Throughput', axis: 'tokens/s', keys: ['perf/throughput'], validation: false, help: 'prompt and response tokens per second of a training step' },
];

/** The key each run contributes to a plot (null: the run logged none of the plot's keys). */
export function plotKeyFor(plot: PlotDef, run: ReportRun): string | null {
  const logged = (key: string) => run.steps.some((s) => s.values.has(key));
  return plot.keyFor ? plot.keyFor(run, logged) : (plot.keys.find(logged) ?? null);
}

export interface PerRunRow {
  step: number;
  value: number;
  run: string;
  metric: string;
}

export interface BandRow {
  step: number;
  group: string;
  mean: number;
  min: number;
  max: number;
  n: number;
}

const WIDTH = 440;
const HEIGHT = 210;
const FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

function palette(n: number): string {
  return n <= 10 ? 'tableau10' : 'tableau20';
}

const BASE_CONFIG = {
  font: FONT,
  background: 'white',
  view: { stroke: '#ddd' },
  axis: { labelFontSize: 11, titleFontSize: 12, gridColor: '#eee' },
  legend: { labelFontSize: 11, titleFontSize: 11, labelLimit: 220, symbolStrokeWidth: 3, symbolSize: 120, symbolOpacity: 1 },
};

const X_STEP = { field: 'step', type: 'quantitative', title: 'step', axis: { format: 'd', tickMinStep: 1 } } as const;

/** One coloured line per run; every run keeps its colour across plots (`labels` fixes the domain). */
export function perRunSpec(plot: PlotDef, rows: PerRunRow[], labels: string[]): TopLevelSpec {
  const longest = new Map<string, number>();
  for (const r of rows) longest.set(r.run, (longest.get(r.run) ?? 0) + 1);
  // Training metrics are lines; points too for validation metrics and for runs with a single value.
  const points = plot.validation || [...longest.values()].some((n) => n < 2);
  const drawn = labels.filter((l) => longest.has(l));
  return {
    description: `${plot.title} over training steps, one line per run`,
    width: WIDTH,
    height: HEIGHT,
    data: { values: rows as unknown as Record<string, unknown>[] },
    mark: { type: 'line', strokeWidth: 1.8, point: points ? { filled: true, size: 36 } : false },
    encoding: {
      x: X_STEP,
      y: { field: 'value', type: 'quantitative', title: plot.axis, scale: { zero: false } },
      color: {
        field: 'run',
        type: 'nominal',
        title: 'run',
        scale: { domain: labels, scheme: palette(labels.length) },
        // The domain keeps each run's colour across plots; the legend lists the runs drawn here.
        legend: { orient: 'bottom', columns: 3, symbolType: 'stroke', values: drawn, description: `runs: ${drawn.join(', ')}` },
      },
    },
    config: BASE_CONFIG,
  } as TopLevelSpec;
}

/** Per algorithm: the mean over its runs as a line, and a min–max band around it. */
export function bandSpec(plot: PlotDef, rows: BandRow[], groups: string[]): TopLevelSpec {
  const color = {
    field: 'group',
    type: 'nominal',
    title: 'algorithm',
    scale: { domain: groups, scheme: 'set1' },
    legend: { orient: 'bottom', columns: 3, symbolType: 'stroke' },
  } as const;
  return {
    description: `${plot.title}: mean over seeds with the min-max spread, per algorithm`,
    width: WIDTH,
    height: HEIGHT,
    data: { values: rows as unknown as Record<string, unknown>[] },
    encoding: { x: X_STEP, color },
    layer: [
      {
        mark: { type: 'errorband', opacity: 0.22 },
        encoding: {
          y: { field: 'min', type: 'quantitative', title: `${plot.axis} (mean, min–max)`, scale: { zero: false } },
          y2: { field: 'max' },
        },
      },
      {
        mark: { type: 'line', strokeWidth: 2, point: { filled: true, size: 36 } },
        encoding: { y: { field: 'mean', type: 'quantitative' } },
      },
    ],
    config: BASE_CONFIG,
  } as TopLevelSpec;
}

/** Rows of the per-run chart, and the runs that logged none of the plot's keys. */
export function perRunRows(plot: PlotDef, runs: ReportRun[]): { rows: PerRunRow[]; missing: ReportRun[] } {
  const rows: PerRunRow[] = [];
  const missing: ReportRun[] = [];
  for (const run of runs) {
    const key = plotKeyFor(plot, run);
    if (!key) {
      missing.push(run);
      continue;
    }
    for (const { step, value } of seriesOf(run, key)) rows.push({ step, value, run: run.label, metric: key });
  }
  return { rows, missing };
}

/** Mean/min/max per algorithm and step over the runs that logged the metric there. */
export function bandRows(plot: PlotDef, runs: ReportRun[]): { rows: BandRow[]; groups: string[] } | null {
  const byAlgorithm = new Map<string, ReportRun[]>();
  for (const run of runs) {
    if (!run.algorithm || !plotKeyFor(plot, run)) continue;
    byAlgorithm.set(run.algorithm, [...(byAlgorithm.get(run.algorithm) ?? []), run]);
  }
  if (![...byAlgorithm.values()].some((r) => r.length > 1)) return null;
  const rows: BandRow[] = [];
  const groups: string[] = [];
  for (const [algorithm, members] of byAlgorithm) {
    const group = `${algorithm} (${members.length} run${members.length === 1 ? '' : 's'})`;
    groups.push(group);
    const atStep = new Map<number, number[]>();
    for (const run of members) {
      for (const { step, value } of seriesOf(run, plotKeyFor(plot, run)!)) atStep.set(step, [...(atStep.get(step) ?? []), value]);
    }
    for (const [step, values] of [...atStep.entries()].sort((a, b) => a[0] - b[0])) {
      rows.push({
        step,
        group,
        mean: mean(values),
        min: Math.min(...values),
        max: Math.max(...values),
        n: values.length,
      });
    }
  }
  return { rows, groups };
}

export interface PassAtKRow {
  k: number;
  group: string;
  mean: number;
  /** The 95 % t interval over the group's runs; null with one run. */
  low: number | null;
  high: number | null;
  n: number;
}

/** Per group and k: the mean of the final validation's val/pass@k over the group's runs, with its t interval. */
export function passAtKCurveRows(groups: { name: string; runs: ReportRun[] }[]): { rows: PassAtKRow[]; groups: string[]; ks: number[] } {
  const rows: PassAtKRow[] = [];
  const names: string[] = [];
  for (const g of groups) {
    const finals = g.runs.map(finalValidation).filter((f) => f !== null);
    const ks = [...new Set(finals.flatMap((f) => passAtJs(f.values.keys())))].sort((a, b) => a - b);
    if (!ks.length) continue;
    const group = `${g.name} (${finals.length} run${finals.length === 1 ? '' : 's'})`;
    names.push(group);
    for (const k of ks) {
      const values = finals.map((f) => f.values.get(`val/pass@${k}`)).filter((v): v is number => v !== undefined);
      rows.push({ k, group, ...tInterval(values) });
    }
  }
  return { rows, groups: names, ks: [...new Set(rows.map((r) => r.k))].sort((a, b) => a - b) };
}

/** pass@k against k on a log2 axis, one line per group, the t interval as a band where a group has several runs. */
export function passAtKCurveSpec(rows: PassAtKRow[], groups: string[], ks: number[]): TopLevelSpec {
  const color = {
    field: 'group',
    type: 'nominal',
    title: 'config',
    scale: { domain: groups, scheme: palette(groups.length) },
    legend: { orient: 'bottom', columns: 3, symbolType: 'stroke', description: `configs: ${groups.join(', ')}` },
  } as const;
  return {
    description: 'pass@k against k at the final validation, one line per config',
    width: WIDTH,
    height: HEIGHT,
    data: { values: rows as unknown as Record<string, unknown>[] },
    encoding: {
      x: { field: 'k', type: 'quantitative', title: 'k (samples per prompt, log scale)', scale: { type: 'log', base: 2 }, axis: { values: ks, format: 'd' } },
      color,
    },
    layer: [
      {
        transform: [{ filter: 'datum.n > 1' }],
        mark: { type: 'errorband', opacity: 0.2 },
        encoding: { y: { field: 'low', type: 'quantitative', title: 'pass@k (mean, 95 % interval)', scale: { zero: false } }, y2: { field: 'high' } },
      },
      { mark: { type: 'line', strokeWidth: 2, point: { filled: true, size: 36 } }, encoding: { y: { field: 'mean', type: 'quantitative' } } },
    ],
    config: BASE_CONFIG,
  } as TopLevelSpec;
}

type Vega = typeof import('vega');
type VegaLite = typeof import('vega-lite');
let vegaBuilds: { vega: Vega; vegaLite: VegaLite } | undefined;

/**
 * vega and vega-lite from the single-file builds their packages ship (UMD), run as CommonJS: two
 * files to parse instead of the hundreds of ES modules their entries import (about 60 ms against
 * 450 ms, at the end of every run). The versions are the installed packages'; the code is theirs.
 */
function loadVega(): { vega: Vega; vegaLite: VegaLite } {
  if (vegaBuilds) return vegaBuilds;
  // Each entry point lives in the package's build/ folder, beside the single-file builds.
  const build = (name: string) => path.dirname(fileURLToPath(import.meta.resolve(name)));
  const run = <T>(file: string, dependencies: Record<string, unknown>): T => {
    const module = { exports: {} as T };
    const body = vm.compileFunction(fs.readFileSync(file, 'utf8'), ['exports', 'module', 'require'], { filename: file });
    const requireDependency = (name: string) => {
      if (!(name in dependencies)) throw new Error(`${file} requires '${name}', which the report does not provide`);
      return dependencies[name];
    };
    body.call(module.exports, module.exports, module, requireDependency);
    return module.exports;
  };
  const vega = run<Vega>(path.join(build('vega'), 'vega.min.js'), {});
  const vegaLite = run<VegaLite>(path.join(build('vega-lite'), 'vega-lite.min.js'), { vega });
  return (vegaBuilds = { vega, vegaLite });
}

/**
 * Compiles a Vega-Lite spec and renders it to an SVG string. Ids inside the SVG (clip paths,
 * gradients) get `idPrefix` so several inline SVGs can share one document.
 */
export async function renderSvg(spec: TopLevelSpec, idPrefix: string): Promise<string> {
  const { vega, vegaLite } = loadVega();
  const quiet = { level: () => quiet, error: (...args: unknown[]) => { throw new Error(args.map(String).join(' ')); }, warn: () => quiet, info: () => quiet, debug: () => quiet };
  const compiled = vegaLite.compile(spec, { logger: quiet as never }).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none', logLevel: vega.Error });
  try {
    const svg = await view.toSVG();
    const prefix = idPrefix;
    return svg
      .replace(/\sid="([^"]+)"/g, (_m, id: string) => ` id="${prefix}${id}"`)
      .replace(/url\(#([^)]+)\)/g, (_m, id: string) => `url(#${prefix}${id})`)
      .replace(/href="#([^"]+)"/g, (_m, id: string) => `href="#${prefix}${id}"`);
  } finally {
    view.finalize();
  }
}

/** One bar of the correct-answer chart: a model's share of one correct answer of one prompt. */
export interface AnswerShareRow {
  answer: string;
  /** The answer's rank by reference share (the x order). */
  rank: number;
  series: string;
  share: number;
}

/** Grouped bars: each correct answer's share of the correct set under the reference and under each run's final policy. */
export function answerSharesSpec(rows: AnswerShareRow[], series: string[], title: string): TopLevelSpec {
  const answers = new Set(rows.map((r) => r.answer)).size;
  return {
    description: `shares of the correct answers of ${title}: ${series.join(', ')}`,
    title: { text: title, fontSize: 12, anchor: 'start' },
    width: Math.max(160, answers * (12 * series.length + 14)),
    height: 160,
    data: { values: rows as unknown as Record<string, unknown>[] },
    mark: { type: 'bar' },
    encoding: {
      x: { field: 'answer', type: 'nominal', title: null, sort: { field: 'rank', order: 'ascending' }, axis: { labelAngle: -40, labelFont: 'ui-monospace, monospace' } },
      xOffset: { field: 'series', type: 'nominal', sort: series },
      y: { field: 'share', type: 'quantitative', title: 'share of the correct set', scale: { domain: [0, 1] } },
      color: { field: 'series', type: 'nominal', title: null, scale: { domain: series, scheme: palette(series.length) }, legend: { orient: 'bottom', columns: 2 } },
      tooltip: [{ field: 'series' }, { field: 'answer' }, { field: 'share', format: '.3f' }],
    },
    config: BASE_CONFIG,
  } as TopLevelSpec;
}
