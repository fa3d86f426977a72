// The one update loop every trainer here runs (the actor, the critic, SFT, flow pretraining):
// epochs x mini-batches, each mini-batch's gradient the sum of its micro-batches', then one clipped
// optimizer step (a non-finite norm skips it). What a micro-batch's loss is stays with the caller.
import * as tf from '@tensorflow/tfjs-core';
import type { Metrics } from '../metrics.js';
import type { Rng } from '../random.js';
import { clippedStep, type AdamW } from './optim.js';

/**
 * Averages of metric values collected over micro-batches, each weighted (default 1). A piece of a
 * mini-batch weighs its share of the rows, so pieces of uneven size (threads, ranks, a short last
 * micro-batch) average to what the mini-batch whole gives: the sum of the pieces' losses.
 */
export class MetricAverager {
  private readonly sums = new Map<string, { total: number; count: number }>();

  add(metrics: Metrics, weight = 1): void {
    for (const [k, v] of Object.entries(metrics)) {
      const entry = this.sums.get(k) ?? { total: k.endsWith('_min') ? Infinity : k.endsWith('_max') ? -Infinity : 0, count: 0 };
      // A range's ends (verl's MIN and MAX aggregations, *_min and *_max) are the extremes, not means.
      entry.total = k.endsWith('_min') ? Math.min(entry.total, v) : k.endsWith('_max') ? Math.max(entry.total, v) : entry.total + v * weight;
      entry.count += weight;
      this.sums.set(k, entry);
    }
  }

  result(): Metrics {
    return Object.fromEntries([...this.sums].map(([k, { total, count }]) => [k, k.endsWith('_min') || k.endsWith('_max') ? total : total / count]));
  }
}

/** A micro-batch's place in the loop. */
export interface MicroBatchPlace<T> {
  mini: T;
  /** Its first row within the mini-batch. */
  firstRow: number;
  /** Optimizer steps taken before this mini-batch's (the optimizer's count, restored on resume). */
  step: number;
  /** This mini-batch's step within this loop, counting skipped ones. */
  index: number;
}

/** One role's updates; T is the caller's batch type (a Batch, a list of examples). */
export interface UpdateLoop<T> {
  /** The mini-batches of one epoch, in order. */
  miniBatches: T[];
  epochs?: number;
  /** A mini-batch's micro-batches (default: the mini-batch whole). */
  microBatches?(mini: T): T[];
  /** Rows of a micro-batch (for firstRow). */
  rows(micro: T): number;
  /** Adds one micro-batch's gradients into grads (its loss is its part of the mini-batch loss). */
  accumulate(micro: T, place: MicroBatchPlace<T>, grads: Map<string, tf.Tensor>, averages: MetricAverager): void | Promise<void>;
  optimizer: AdamW;
  params: Map<string, tf.Variable>;
  /** Global-norm clip (0: none). */
  maxGradNorm: number;
  /** The lr of the step about to be taken. */
  lr(step: number): number;
  /** Called with each mini-batch after its gradients, before its step. */
  beforeStep?(mini: T, averages: MetricAverager): void | Promise<void>;
  /** Data-parallel ranks: the other ranks' gradients added into grads, before the step (all ranks call it every step). */
  sumGradients?(grads: Map<string, tf.Tensor>): void | Promise<void>;
  /** Called after each step, applied or skipped. */
  afterStep?(mini: T, applied: boolean, step: number): void;
  /** Metric prefix of `<prefix>/grad_norm`, `/lr` and `/skipped_updates`. */
  prefix: string;
}

/** Runs the loop; returns the micro-batch metrics averaged, the step metrics, skipped steps and the time summing over ranks. */
export async function runUpdateLoop<T>(loop: UpdateLoop<T>): Promise<Metrics> {
  const averages = new MetricAverager();
  let skipped = 0;
  let step = 0;
  let summing = 0;
  for (let epoch = 0; epoch < (loop.epochs ?? 1); epoch++) {
    for (const mini of loop.miniBatches) {
      const grads = new Map<string, tf.Tensor>();
      let firstRow = 0;
      for (const micro of loop.microBatches?.(mini) ?? [mini]) {
        await loop.accumulate(micro, { mini, firstRow, step: loop.optimizer.step, index: step }, grads, averages);
        firstRow += loop.rows(micro);
      }
      await loop.beforeStep?.(mini, averages);
      if (loop.sumGradients) {
        const t = performance.now();
        await loop.sumGradients(grads);
        summing += (performance.now() - t) / 1000;
      }
      const { norm, applied } = await clippedStep(loop.optimizer, loop.params, grads, loop.maxGradNorm, loop.lr(step));
      tf.dispose([...grads.values()]);
      if (applied) averages.add({ [`${loop.prefix}/grad_norm`]: norm, [`${loop.prefix}/lr`]: loop.optimizer.lr });
      else skipped += 1;
      loop.afterStep?.(mini, applied, step);
      step += 1;
    }
  }
  const timing = loop.sumGradients ? { [`timing_s/${loop.prefix}_rank_sum`]: summing } : {};
  return { ...averages.result(), [`${loop.prefix}/skipped_updates`]: skipped, ...timing };
}

/**
 * `total` batches of `size` items in epochs: each epoch a fresh shuffle of all items, cut into
 * consecutive batches (the last of an epoch may be short). For step-based loops (SFT, flow pretraining).
 */
export function shuffledBatches<T>(items: T[], size: number, total: number, rng: Rng): T[][] {
  const perEpoch = Math.ceil(items.length / size);
  const batches: T[][] = [];
  let order: T[] = [];
  for (let step = 0; step < total; step++) {
    if (step % perEpoch === 0) order = rng.shuffle([...items]);
    const offset = (step % perEpoch) * size;
    batches.push(order.slice(offset, offset + size));
  }
  return batches;
}
