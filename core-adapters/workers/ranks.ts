// Data-parallel ranks (mpirun): every rank holds the whole step's batch, so advantages, losses'
// normalisers, metrics and checkpoints are the same everywhere; what costs time per row (sampling,
// forward passes, the update's gradients) is split by rows, its results gathered back in row order
// and its gradients summed. One process is the case of one rank.
import v8 from 'node:v8';
import * as tf from '@tensorflow/tfjs-core';
import { Batch } from '../batch.js';
import type { RankWorld } from '../engine/mpi.js';
import { readFloat32 } from '../engine/readback.js';
import type { Metrics } from '../metrics.js';
import { concatRollouts } from './sequences.js';

/** The rows [start, end) of `rows` that `rank` of `size` works on (contiguous; may be empty). */
export function rankRows(ranks: Pick<RankWorld, 'rank' | 'size'>, rows: number): [number, number] {
  return [Math.round((ranks.rank * rows) / ranks.size), Math.round(((ranks.rank + 1) * rows) / ranks.size)];
}

/** Every rank's rollout rows as one batch in rank order (prompts re-aligned to the widest); `local` undefined for an empty share. */
export function gatherBatch(ranks: RankWorld, local: Batch | undefined, padId: number): Batch {
  const parts = ranks.allgather(local ? v8.serialize(local.toPlain()) : new Uint8Array(0));
  const batches = parts.filter((bytes) => bytes.length > 0).map((bytes) => Batch.fromPlain(v8.deserialize(bytes) as ReturnType<Batch['toPlain']>));
  const merged = batches.length === 1 ? batches[0] : concatRollouts(batches, padId);
  const metrics = batches.map((b) => b.meta.metrics as Metrics | undefined);
  if (metrics.some(Boolean)) merged.meta = { ...merged.meta, metrics: mergeRowMetrics(metrics, batches.map((b) => b.size)) };
  return merged;
}

/**
 * Rollout metrics of several shares as the whole batch's: a key ending /min or /max the extreme,
 * any other the mean weighted by each share's rows (the rollouts' metrics are row means).
 */
export function mergeRowMetrics(parts: (Metrics | undefined)[], rows: number[]): Metrics {
  const out: Metrics = {};
  const keys = new Set(parts.flatMap((m) => Object.keys(m ?? {})));
  for (const key of keys) {
    const present = parts.map((m, i) => ({ value: m?.[key], rows: rows[i] })).filter((p): p is { value: number; rows: number } => p.value !== undefined);
    if (key.endsWith('/min')) out[key] = Math.min(...present.map((p) => p.value));
    else if (key.endsWith('/max')) out[key] = Math.max(...present.map((p) => p.value));
    else out[key] = present.reduce((s, p) => s + p.value * p.rows, 0) / present.reduce((s, p) => s + p.rows, 0);
  }
  return out;
}

/** Every rank's float rows, concatenated in rank order. */
export function gatherFloats(ranks: RankWorld, local: Float32Array): Float32Array {
  const parts = ranks.allgather(new Uint8Array(local.buffer, local.byteOffset, local.byteLength));
  const out = new Float32Array(parts.reduce((n, p) => n + p.byteLength / 4, 0));
  let offset = 0;
  for (const p of parts) {
    // A copy: the gathered bytes need not be 4-byte aligned.
    out.set(new Float32Array(p.slice().buffer), offset);
    offset += p.byteLength / 4;
  }
  return out;
}

/** Every rank's value (structured-cloned: NaN, typed arrays and nesting kept; undefined stays undefined), in rank order. */
export function gatherValues<T>(ranks: RankWorld, local: T): T[] {
  return ranks.allgather(local === undefined ? new Uint8Array(0) : v8.serialize(local)).map((bytes) => (bytes.length ? (v8.deserialize(bytes) as T) : (undefined as T)));
}

/**
 * `compute` on this rank's rows of `batch`, each array it returns gathered over the ranks (an
 * absent one stays absent). Every rank calls it with the same batch, or the gathers do not meet.
 */
export async function onRankRows<T extends Record<string, Float32Array | undefined>>(ranks: RankWorld, batch: Batch, compute: (part: Batch) => T | Promise<T>): Promise<T> {
  // Fewer rows than ranks (never in a step, whose batch has rollout.n rows a prompt): every rank computes them all.
  if (ranks.size === 1 || batch.size < ranks.size) return compute(batch);
  const [start, end] = rankRows(ranks, batch.size);
  const local = await compute(batch.slice(start, end));
  return Object.fromEntries(Object.entries(local).map(([key, value]) => [key, value && gatherFloats(ranks, value)])) as T;
}

/**
 * The ranks' gradient sums summed, in place in `grads`: packed in `params` order, with one more
 * slot per parameter counting the ranks that have a gradient for it (every rank packs every
 * parameter, so the sums line up), all-reduced, unpacked; a parameter no rank has a gradient for
 * stays absent, as in one process. Every rank calls it for every optimizer step.
 */
export async function sumGradientsOverRanks(ranks: RankWorld, grads: Map<string, tf.Tensor>, params: Map<string, tf.Variable>): Promise<void> {
  if (ranks.size === 1) return;
  let total = 0;
  for (const p of params.values()) total += p.size;
  const flat = new Float32Array(total + params.size);
  let offset = 0;
  let index = 0;
  for (const [name, p] of params) {
    const g = grads.get(name);
    if (g) {
      flat.set(await readFloat32(g, `the gradient of ${name} for the all-reduce`), offset);
      flat[total + index] = 1;
    }
    offset += p.size;
    index += 1;
  }
  ranks.allreduceSum(flat);
  offset = 0;
  index = 0;
  for (const [name, p] of params) {
    grads.get(name)?.dispose();
    grads.delete(name);
    if (flat[total + index] > 0) grads.set(name, tf.tensor(flat.slice(offset, offset + p.size), p.shape, 'float32'));
    offset += p.size;
    index += 1;
  }
}

/**
 * The ranks run one command: a rank whose resolved config differs from rank 0's would train
 * something else in lock-step with it. Returns the first difference (key and both values), if any.
 */
export function configDifference(ranks: RankWorld, config: unknown, what = 'config'): string | undefined {
  const all = gatherValues(ranks, config);
  for (let r = 1; r < all.length; r++) {
    const diff = firstDifference(all[0], all[r], '');
    if (diff) return `rank ${r}'s ${what} differs from rank 0's at ${diff.key || `(the whole ${what})`} (rank 0: ${JSON.stringify(diff.first)}, rank ${r}: ${JSON.stringify(diff.other)})`;
  }
  return undefined;
}

function firstDifference(first: unknown, other: unknown, key: string): { key: string; first: unknown; other: unknown } | undefined {
  if (first && other && typeof first === 'object' && typeof other === 'object' && Array.isArray(first) === Array.isArray(other)) {
    for (const k of new Set([...Object.keys(first), ...Object.keys(other)])) {
      const diff = firstDifference((first as Record<string, unknown>)[k], (other as Record<string, unknown>)[k], key ? `${key}.${k}` : k);
      if (diff) return diff;
    }
    return undefined;
  }
  return JSON.stringify(first) === JSON.stringify(other) ? undefined : { key, first, other };
}
