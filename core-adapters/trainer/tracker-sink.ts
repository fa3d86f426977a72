// The trainer's sink for a tracker that speaks a server's API (MLflow, W&B): it hands every call to
// the tracker's client (mlflow-client.ts, wandb-client.ts) on a thread of its own
// (tracker-thread.ts), so requests advance while the trainer's thread computes and a step never
// waits for one; the client's warnings and notes are printed on the trainer's thread.
import { Worker } from 'node:worker_threads';
import type { Config } from '../config/load.js';
import type { Metrics } from '../contracts/index.js';
import { threadEntrySource } from '../thread-entry.js';
import type { RunAwareSink } from './metrics.js';
import type { TrackerKind, TrackerMessage } from './tracker-client.js';

/** One tracker's client on its own thread; flush waits for the thread to have sent what it was given, then ends it. */
export class ThreadedTrackerSink implements RunAwareSink {
  private readonly thread: Worker;
  private readonly flushes = new Map<number, () => void>();
  private nextFlush = 0;
  private ended = false;

  constructor(kind: TrackerKind, label: string, config: Config) {
    this.thread = new Worker(threadEntrySource(new URL('./tracker-thread.js', import.meta.url)), { eval: true, workerData: { kind, config } });
    this.thread.on('message', (m: { type: 'warn'; line: string } | { type: 'say'; line: string } | { type: 'flushed'; id: number }) => {
      if (m.type === 'warn') console.warn(m.line);
      else if (m.type === 'say') console.error(m.line);
      else this.flushes.get(m.id)?.();
    });
    const gone = (why: string) => {
      if (!this.ended) console.warn(`[flowrl] trainer.logger ${kind}: its thread stopped (${why}); the run goes on without ${label}`);
      this.ended = true;
      for (const done of this.flushes.values()) done();
    };
    this.thread.on('error', (e) => gone(e.message));
    this.thread.on('exit', (code) => gone(`exit code ${code}`));
    // It does not keep the process up (a command that never flushes, flowrl eval, must end); flush
    // holds it while it waits. (After the listeners: adding one refs the thread again.)
    this.thread.unref();
  }

  private post(message: TrackerMessage): void {
    if (!this.ended) this.thread.postMessage(message);
  }

  begin(): void {
    this.post({ type: 'begin' });
  }

  log(step: number, metrics: Metrics): void {
    this.post({ type: 'log', step, metrics, timestamp: Date.now() });
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

  protected logGenerationsOnThread(step: number, generations: { prompt: string; response: string; score: number }[]): void {
    this.post({ type: 'generations', step, generations });
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    void this.thread.terminate();
  }
}
