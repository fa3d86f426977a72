// The data-parallel thread pool (engine.workers): worker_threads, each with its own tfjs wasm
// backend and a replica of the trainable parameters (not to be confused with verl's worker roles
// in workers/). The main thread stays synchronous: it posts a task to each pool thread, does its
// own share, then blocks (Atomics.wait) until every thread has written its gradients into a
// SharedArrayBuffer. Parameters travel the other way through a shared buffer,
// copied into the replicas only when their version changes (after an optimizer step).
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads';
import { threadEntrySource } from '../thread-entry.js';
import * as tf from '@tensorflow/tfjs-core';
import type { NativeChoice } from '../config/choices.js';
import type { ReplicaSpec } from './replica.js';

export type { Replica, ReplicaSpec } from './replica.js';
import { shardRanges } from '../arrays.js';
import { accumulateGradients } from './ops.js';
import { blasThreads, loadNativeKernels } from './native.js';
import { coresForThisRank } from './mpi.js';

export interface PoolOptions {
  /** Threads in all, the main one included (>= 2). */
  size: number;
  spec: ReplicaSpec;
  /** Name and shape of every parameter, in a fixed order (the main module's). */
  params: Map<string, tf.Variable>;
  native: NativeChoice;
}

/** How long the main thread waits for one worker's task (FLOWRL_WORKER_TIMEOUT_S, default 600). */
const WORKER_TIMEOUT_MS = 1000 * (Number(process.env.FLOWRL_WORKER_TIMEOUT_S) > 0 ? Number(process.env.FLOWRL_WORKER_TIMEOUT_S) : 600);

// Control words: [0] params version, then per worker: task sequence number, done sequence number.
const VERSION = 0;
const taskSlot = (w: number) => 1 + 2 * w;
const doneSlot = (w: number) => 2 + 2 * w;

/**
 * Threads for `engine.workers`: FLOWRL_WORKERS when set, auto = the available cores (at most 8;
 * shared among the data-parallel ranks mpirun started on this machine), else that number.
 */
export function resolveThreadCount(setting: string | number): number {
  const chosen = process.env.FLOWRL_WORKERS ?? setting;
  if (chosen === 'auto') return Math.min(coresForThisRank(), 8);
  const n = Number(chosen);
  return Number.isInteger(n) && n >= 1 ? n : 1;
}

/** The pool thread's entry (pool-thread.ts beside this file), with the parent's preloads: see thread-entry.ts. */
function workerEntry(): string {
  return threadEntrySource(new URL('./pool-thread.js', import.meta.url));
}

/** Pool threads with policy replicas: row shards of gradients, log-probs and sampling, synchronously. */
export class ThreadPool {
  readonly size: number;
  private readonly names: string[];
  private readonly shapes: number[][];
  private readonly offsets: number[];
  private readonly total: number;
  private readonly control: Int32Array;
  private readonly paramBuffer: Float32Array;
  private readonly gradBuffers: Float32Array[];
  private readonly ports: MessagePort[] = [];
  private readonly threads: Worker[] = [];
  private sequence = 0;
  private version = 0;

  private constructor(options: PoolOptions) {
    this.size = options.size;
    this.names = [...options.params.keys()];
    this.shapes = this.names.map((name) => [...options.params.get(name)!.shape]);
    this.offsets = [];
    let total = 0;
    for (const name of this.names) {
      this.offsets.push(total);
      total += options.params.get(name)!.size;
    }
    this.total = total;
    const workers = options.size - 1;
    this.control = new Int32Array(new SharedArrayBuffer(4 * (1 + 2 * workers)));
    this.paramBuffer = new Float32Array(new SharedArrayBuffer(4 * total));
    this.gradBuffers = Array.from({ length: workers }, () => new Float32Array(new SharedArrayBuffer(4 * total)));
  }

  /** Starts size - 1 worker threads and waits until each has built its replica. */
  static async create(options: PoolOptions): Promise<ThreadPool> {
    if (!(options.size >= 2)) throw new Error('ThreadPool: size must be at least 2 (the main thread and one worker)');
    const pool = new ThreadPool(options);
    const layout = pool.names.map((name, i) => ({ name, offset: pool.offsets[i], shape: [...options.params.get(name)!.shape] }));
    await Promise.all(
      Array.from({ length: options.size - 1 }, (_, w) => {
        const { port1, port2 } = new MessageChannel();
        const worker = new Worker(workerEntry(), {
          eval: true,
          workerData: { index: w, port: port2, spec: options.spec, control: pool.control, params: pool.paramBuffer, grads: pool.gradBuffers[w], layout, native: options.native },
          transferList: [port2],
        });
        worker.unref();
        pool.threads.push(worker);
        pool.ports.push(port1);
        return new Promise<void>((resolve, reject) => {
          worker.once('error', reject);
          worker.once('exit', (code) => reject(new Error(`worker ${w} exited with code ${code} while starting`)));
          port1.once('message', (m: { ready?: boolean; error?: string }) => (m.ready ? resolve() : reject(new Error(`worker ${w}: ${m.error}`))));
        });
      }),
    );
    for (const worker of pool.threads) worker.removeAllListeners('exit').removeAllListeners('error');
    return pool;
  }

  /** Publishes the current parameters (call after every change: an optimizer step, a load). */
  publish(params: Map<string, tf.Variable>): void {
    this.names.forEach((name, i) => this.paramBuffer.set(params.get(name)!.dataSync() as Float32Array, this.offsets[i]));
    this.version += 1;
    Atomics.store(this.control, VERSION, this.version);
  }

  /**
   * Runs tasks[w] on worker w (tasks.length <= size - 1) while `local` runs here; returns the local
   * value and each worker's result. Worker gradients are added into `grads` (created where absent).
   */
  async run<T>(tasks: unknown[], local: () => T | Promise<T>, grads?: Map<string, tf.Tensor>): Promise<{ local: T; results: unknown[] }> {
    if (tasks.length > this.size - 1) throw new Error(`ThreadPool.run: ${tasks.length} tasks for ${this.size - 1} workers`);
    const seq = ++this.sequence;
    tasks.forEach((task, w) => {
      this.ports[w].postMessage({ seq, task });
      Atomics.store(this.control, taskSlot(w), seq);
      Atomics.notify(this.control, taskSlot(w));
    });
    let value: T;
    try {
      value = await local();
    } catch (e) {
      // Collect every worker's reply even so, so that the next run starts clean.
      tasks.forEach((_, w) => this.awaitReply(w, seq));
      throw e;
    }
    const replies = tasks.map((_, w) => this.awaitReply(w, seq));
    const results: unknown[] = [];
    replies.forEach((message, w) => {
      if (message.error) throw new Error(`worker ${w}: ${message.error}`);
      results.push(message.result);
      if (grads && message.gradNames) this.addGradients(grads, this.gradBuffers[w], new Set(message.gradNames));
    });
    return { local: value, results };
  }

  /**
   * Rows [0, rows) split into `parts` contiguous shards: this thread runs `local` on the first,
   * worker w the task built for shard w + 1. Returns each shard's result in row order.
   */
  async runOnRowShards<T>(rows: number, task: (start: number, end: number) => unknown, local: (start: number, end: number) => T | Promise<T>, parts = this.size): Promise<T[]> {
    const [mine, ...theirs] = shardRanges(rows, Math.min(parts, this.size));
    const out = await this.run(
      theirs.map(([a, b]) => task(a, b)),
      () => local(mine[0], mine[1]),
    );
    return [out.local, ...(out.results as T[])];
  }

  /** Blocks until worker w has answered task `seq` (bounded: a dead worker is an error, not a hang). */
  private awaitReply(w: number, seq: number): { seq: number; result?: unknown; error?: string; gradNames?: string[] } {
    const deadline = Date.now() + WORKER_TIMEOUT_MS;
    for (;;) {
      const done = Atomics.load(this.control, doneSlot(w));
      if (done === seq) break;
      if (Date.now() > deadline) {
        throw new Error(`worker ${w} did not finish task ${seq} within ${WORKER_TIMEOUT_MS / 1000} s (out of memory or crashed?); set engine.workers=1 to run without workers`);
      }
      Atomics.wait(this.control, doneSlot(w), done, 1000);
    }
    // Replies are tagged: drop any left over from an earlier, interrupted run.
    for (;;) {
      const message = receiveMessageOnPort(this.ports[w])?.message as { seq: number; result?: unknown; error?: string; gradNames?: string[] } | undefined;
      if (!message) throw new Error(`worker ${w} finished task ${seq} without a reply`);
      if (message.seq === seq) return message;
    }
  }

  /** Adds a worker's gradients (only the parameters it had gradients for, as locally). */
  private addGradients(grads: Map<string, tf.Tensor>, buffer: Float32Array, present: Set<string>): void {
    const remote = new Map<string, tf.Tensor>();
    this.names.forEach((name, i) => {
      if (!present.has(name)) return;
      const size = (this.offsets[i + 1] ?? this.total) - this.offsets[i];
      remote.set(name, tf.tensor(buffer.slice(this.offsets[i], this.offsets[i] + size), this.shapes[i]));
    });
    accumulateGradients(grads, remote);
  }

  /** Stops the workers. */
  async close(): Promise<void> {
    for (const port of this.ports) {
      port.postMessage({ stop: true });
      port.close();
    }
    this.threads.forEach((_, w) => {
      Atomics.store(this.control, taskSlot(w), -1);
      Atomics.notify(this.control, taskSlot(w));
    });
    await Promise.all(this.threads.map((t) => t.terminate()));
    // The workers set the process-wide BLAS to one thread; restore the configured count.
    loadNativeKernels().kernels?.setThreads(blasThreads());
  }
}
