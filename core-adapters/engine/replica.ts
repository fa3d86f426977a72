// What a pool thread builds and runs: apart from thread-pool.ts, which names the thread's entry
// (pool-thread.ts) that needs these types, so neither imports the other.
import type * as tf from '@tensorflow/tfjs-core';

/** What a worker builds its replica from: a module exporting `factory(args)`. */
export interface ReplicaSpec {
  /** File URL of the module (import.meta.url of the caller, usually). */
  module: string;
  factory: string;
  args: unknown;
}

/** A worker's replica: parameters by stable name, and a task runner. */
export interface Replica {
  params: Map<string, tf.Variable>;
  /** Runs one task; gradients (if any) are returned as tensors the pool frees after copying. */
  run(task: unknown): ReplicaResult | Promise<ReplicaResult>;
}

/** A task's gradients (freed by the pool after copying) and its result. */
export interface ReplicaResult {
  grads?: Map<string, tf.Tensor>;
  result?: unknown;
}

