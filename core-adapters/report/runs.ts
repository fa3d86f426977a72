// Reading run directories for `flowrl report`: metrics.jsonl (one JSON object per line with a
// `step`) and, when present, config.yaml (the resolved config: algorithm.name, trainer.seed, ...).
import { readJsonLines } from '../jsonl.js';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { InputError } from '../errors.js';
import { METRICS_FILE } from '../trainer/metrics.js';

/** One logged step: metric key → value (only finite numbers are kept). */
export type ReportStepRecord = Map<string, number>;

export interface ReportRun {
  /** The directory as given. */
  dir: string;
  /** Unique display name: `<algorithm> seed <seed>`, or the directory name without config.yaml. */
  label: string;
  /** algorithm.name from config.yaml; null without one. */
  algorithm: string | null;
  seed: number | null;
  experimentName: string | null;
  /** Logged steps in increasing order (lines with the same step are merged, later keys win). */
  steps: { step: number; values: ReportStepRecord }[];
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function readMetrics(file: string): ReportRun['steps'] {
  const byStep = new Map<number, ReportStepRecord>();
  for (const { value: parsed, where } of readJsonLines(file)) {
    if (!isPlainObject(parsed)) throw new InputError(`${where}: expected a JSON object with a "step" field`);
    const step = parsed.step;
    if (typeof step !== 'number' || !Number.isFinite(step)) throw new InputError(`${where}: no numeric "step" field`);
    let record = byStep.get(step);
    if (!record) byStep.set(step, (record = new Map()));
    for (const [key, value] of Object.entries(parsed)) {
      // NaN and Infinity are written as null by JSON.stringify: treated as not logged.
      if (key !== 'step' && typeof value === 'number' && Number.isFinite(value)) record.set(key, value);
    }
  }
  return [...byStep.entries()].sort((a, b) => a[0] - b[0]).map(([step, values]) => ({ step, values }));
}

function readRunConfig(file: string): { algorithm: string | null; seed: number | null; experimentName: string | null } | null {
  if (!fs.existsSync(file)) return null;
  let tree: unknown;
  try {
    tree = YAML.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new InputError(`${file}: not valid YAML (${(e as Error).message.split('\n')[0]})`);
  }
  if (!isPlainObject(tree)) return { algorithm: null, seed: null, experimentName: null };
  const algorithm = isPlainObject(tree.algorithm) ? tree.algorithm.name : undefined;
  const trainer = isPlainObject(tree.trainer) ? tree.trainer : {};
  return {
    algorithm: typeof algorithm === 'string' && algorithm ? algorithm : null,
    seed: typeof trainer.seed === 'number' ? trainer.seed : null,
    experimentName: typeof trainer.experiment_name === 'string' ? trainer.experiment_name : null,
  };
}

/** Reads one run directory; a missing directory, metrics.jsonl or a bad line is an InputError. */
export function readReportRun(dir: string): Omit<ReportRun, 'label'> & { baseLabel: string } {
  if (!fs.existsSync(dir)) throw new InputError(`${dir}: run directory does not exist`);
  if (!fs.statSync(dir).isDirectory()) throw new InputError(`${dir}: not a directory (expected a run directory with ${METRICS_FILE})`);
  const metricsFile = path.join(dir, METRICS_FILE);
  if (!fs.existsSync(metricsFile)) throw new InputError(`${metricsFile}: not found (is ${dir} a run directory?)`);
  const steps = readMetrics(metricsFile);
  const config = readRunConfig(path.join(dir, 'config.yaml'));
  const dirName = path.basename(path.resolve(dir));
  let baseLabel = dirName;
  if (config?.algorithm) baseLabel = config.seed !== null ? `${config.algorithm} seed ${config.seed}` : config.algorithm;
  return {
    dir,
    baseLabel,
    algorithm: config?.algorithm ?? null,
    seed: config?.seed ?? null,
    experimentName: config?.experimentName ?? null,
    steps,
  };
}

/** Reads every run and gives each a unique label (duplicates get their directory name appended). */
export function readReportRuns(dirs: string[]): ReportRun[] {
  const runs = dirs.map(readReportRun);
  const count = new Map<string, number>();
  for (const r of runs) count.set(r.baseLabel, (count.get(r.baseLabel) ?? 0) + 1);
  const labels = runs.map((r) => {
    const dirName = path.basename(path.resolve(r.dir));
    return (count.get(r.baseLabel) ?? 0) > 1 && dirName !== r.baseLabel ? `${r.baseLabel} (${dirName})` : r.baseLabel;
  });
  // Still equal (same directory name under different parents, or the same directory twice): number them.
  const seen = new Map<string, number>();
  return runs.map(({ baseLabel: _baseLabel, ...r }, i) => {
    let label = labels[i];
    const n = (seen.get(labels[i]) ?? 0) + 1;
    seen.set(labels[i], n);
    if (labels.filter((l) => l === labels[i]).length > 1) label = `${labels[i]} #${n}`;
    return { ...r, label };
  });
}

/** The (step, value) points a run logged for `key`. */
export function seriesOf(run: ReportRun, key: string): { step: number; value: number }[] {
  const out: { step: number; value: number }[] = [];
  for (const { step, values } of run.steps) {
    const v = values.get(key);
    if (v !== undefined) out.push({ step, value: v });
  }
  return out;
}

/** The run's last validation: the last logged step with val/accuracy; null when it never validated. */
export function finalValidation(run: Pick<ReportRun, 'steps'>): { step: number; values: ReportStepRecord } | null {
  for (let i = run.steps.length - 1; i >= 0; i--) if (run.steps[i].values.has('val/accuracy')) return run.steps[i];
  return null;
}
