// MLflow (trainer.logger: mlflow): the trainer's sink, which hands every call to an MlflowClient
// (mlflow-client.ts: the REST calls, verl's keys and params, retries) on a thread of its own
// (mlflow-thread.ts), so requests advance while the trainer's thread computes.
import { Worker } from 'node:worker_threads';
import { inject, injectable } from 'inversify';
import type { Config } from '../config/load.js';
import type { Metrics } from '../contracts/index.js';
import { threadEntrySource } from '../thread-entry.js';
import { TOKENS } from '../tokens.js';
import { mlflowBase, type MlflowMessage } from './mlflow-client.js';
import type { RunAwareSink } from './metrics.js';

export { mlflowBase, mlflowKey, mlflowParams } from './mlflow-client.js';

/**
 * The trainer's MLflow sink: hands each call to the MLflow client on its own thread (mlflow-thread.ts),
 * whose warnings it prints; flush waits for the thread to have sent what it was given, then ends it.
 */
@injectable()
export class MlflowSink implements RunAwareSink {
  private readonly thread: Worker;
  private readonly flushes = new Map<number, () => void>();
  private nextFlush = 0;
  private ended = false;

  constructor(@inject(TOKENS.Config) config: Config) {
    mlflowBase(); // a missing or local-store MLFLOW_TRACKING_URI is refused here, before the thread starts
    this.thread = new Worker(threadEntrySource(new URL('./mlflow-thread.js', import.meta.url)), { eval: true, workerData: { config } });
    this.thread.on('message', (m: { type: 'warn'; line: string } | { type: 'flushed'; id: number }) => {
      if (m.type === 'warn') console.warn(m.line);
      else this.flushes.get(m.id)?.();
    });
    const gone = (why: string) => {
      if (!this.ended) console.warn(`[flowrl] trainer.logger mlflow: its thread stopped (${why}); the run goes on without MLflow`);
      this.ended = true;
      for (const done of this.flushes.values()) done();
    };
    this.thread.on('error', (e) => gone(e.message));
    this.thread.on('exit', (code) => gone(`exit code ${code}`));
    // It does not keep the process up (a command that never flushes, flowrl eval, must end); flush
    // holds it while it waits. (After the listeners: adding one refs the thread again.)
    this.thread.unref();
  }

  private post(message: MlflowMessage): void {
    if (!this.ended) this.thread.postMessage(message);
  }

  begin(): void {
    this.post({ type: 'begin' });
  }

  log(step: number, metrics: Metrics): void {
    this.post({ type: 'log', step, metrics, timestamp: Date.now() });
  }

  logGenerations(step: number, generations: { prompt: string; response: string; score: number }[]): void {
    this.post({ type: 'generations', step, generations });
  }

  close(): void {
    this.post({ type: 'close', status: 'FINISHED' });
  }

  fail(): void {
    this.post({ type: 'close', status: 'FAILED' });
  }

  /** Resolves once the thread has sent what it was given; the thread then ends. */
  async flush(): Promise<void> {
    if (this.ended) return;
    const id = this.nextFlush++;
    this.thread.ref();
    await new Promise<void>((resolve) => {
      this.flushes.set(id, resolve);
      this.post({ type: 'flush', id });
    });
    this.flushes.delete(id);
    this.end();
  }

  /** Sends nothing more: the thread (and a request under way) is stopped. */
  abandon(): void {
    this.end();
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    void this.thread.terminate();
  }
}

