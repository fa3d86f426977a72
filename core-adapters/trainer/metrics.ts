// Metrics sinks: one JSON object per line in <default_local_dir>/metrics.jsonl, and the console
// (a progress bar with ETA and a line of key numbers).
import fs from 'node:fs';
import path from 'node:path';
import { inject, injectable } from 'inversify';
import type { Config } from '../config/load.js';
import type { Metrics, MetricsSink } from '../contracts/index.js';
import { TOKENS } from '../tokens.js';

export const METRICS_FILE = 'metrics.jsonl';

/** Sinks that want to know where the run starts (fresh or resumed) and how long it is. */
export interface RunAwareSink extends MetricsSink {
  /** stepMetrics: the resumed checkpoint's own metrics line (see TrainerState.metrics). */
  begin(info: { startStep: number; totalSteps: number; resumed: boolean; stepMetrics?: Metrics }): void;
}

/** Config keys whose values are secrets (the servers' api_key, admin_api_key): trackers get '(set)', never the value. */
export const SECRET_KEY = /(api_key|token|password|secret)$/i;

/** A copy of a config tree with every secret's value (when set) replaced by '(set)'. */
export function redactSecrets(tree: unknown): unknown {
  if (Array.isArray(tree)) return tree.map(redactSecrets);
  if (!tree || typeof tree !== 'object') return tree;
  return Object.fromEntries(Object.entries(tree).map(([key, value]) => [key, SECRET_KEY.test(key) && value !== null && value !== undefined && typeof value !== 'object' ? '(set)' : redactSecrets(value)]));
}

export function isRunAware(sink: MetricsSink): sink is RunAwareSink {
  return typeof (sink as RunAwareSink).begin === 'function';
}

@injectable()
export class JsonlMetricsSink implements RunAwareSink {
  constructor(@inject(TOKENS.Config) private readonly config: Config) {}

  get file(): string {
    return path.join(this.config.trainer.default_local_dir!, METRICS_FILE);
  }

  /**
   * A fresh run starts an empty file; a resumed one keeps the lines up to the resumed step, and
   * gets that step's line back from the checkpoint when a kill came between the two writes.
   */
  begin(info: { startStep: number; resumed: boolean; stepMetrics?: Metrics }): void {
    restartStepLog(this.file, info, (kept) =>
      info.resumed && info.stepMetrics && !kept.some((line) => (JSON.parse(line) as { step: number }).step === info.startStep)
        ? [JSON.stringify({ step: info.startStep, ...info.stepMetrics })]
        : [],
    );
  }

  log(step: number, metrics: Metrics): void {
    fs.appendFileSync(this.file, JSON.stringify({ step, ...metrics }) + '\n');
  }

  close(): void {}
}

function formatSeconds(s: number): string {
  if (!Number.isFinite(s)) return '--';
  const m = Math.floor(s / 60);
  return m > 0 ? `${m}m${String(Math.round(s % 60)).padStart(2, '0')}s` : `${Math.round(s)}s`;
}

/** Key numbers shown on the console, in order, when present. */
const CONSOLE_KEYS: [string, string][] = [
  ['critic/score/mean', 'score'],
  ['val/accuracy', 'val_acc'],
  ['val/pass@k', 'pass@k'],
  ['val/distinct_correct', 'distinct'],
  ['actor/pg_loss', 'pg_loss'],
  ['actor/grad_norm', 'grad'],
  ['response_length/mean', 'len'],
];

@injectable()
export class ConsoleMetricsSink implements RunAwareSink {
  private total = 0;
  private start = 0;
  private startStep = 0;

  constructor(@inject(TOKENS.Config) private readonly config: Config) {}

  begin(info: { startStep: number; totalSteps: number }): void {
    this.total = info.totalSteps;
    this.startStep = info.startStep;
    this.start = Date.now();
  }

  log(step: number, metrics: Metrics): void {
    if (!this.config.trainer.progress) return;
    const done = Math.max(0, step - this.startStep);
    const elapsed = (Date.now() - this.start) / 1000;
    const eta = done > 0 ? (elapsed / done) * (this.total - step) : NaN;
    const width = 20;
    const filled = this.total > 0 ? Math.round((width * step) / this.total) : 0;
    const bar = `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
    const values = CONSOLE_KEYS.filter(([k]) => k in metrics).map(([k, label]) => `${label} ${Number(metrics[k]).toFixed(3)}`);
    process.stderr.write(`${bar} step ${step}/${this.total} eta ${formatSeconds(eta)}  ${values.join('  ')}\n`);
  }

  close(): void {}
}

/**
 * Opens a JSONL file of per-step records for appending: empty for a fresh run; for a resumed one
 * the lines up to `startStep` (unreadable ones dropped), plus whatever `extra` adds after them.
 * It is replaced whole, so a kill here leaves the old file or the new one.
 */
export function restartStepLog(file: string, start: { startStep: number; resumed: boolean }, extra: (kept: string[]) => string[] = () => []): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const kept =
    start.resumed && fs.existsSync(file)
      ? fs
          .readFileSync(file, 'utf8')
          .split('\n')
          .filter((line) => {
            try {
              return line.trim() !== '' && (JSON.parse(line) as { step: number }).step <= start.startStep;
            } catch {
              return false;
            }
          })
      : [];
  kept.push(...extra(kept));
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, kept.map((l) => l + '\n').join(''));
  fs.renameSync(tmp, file);
}
