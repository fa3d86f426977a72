// Reading tensors back to the host. A GPU backend can only read asynchronously (in Node tfjs's
// webgpu dataSync needs a canvas), so every read on a run's path is awaited here, and on webgpu each
// read is also where Dawn's errors since the last one surface (checkGpuErrors).
import * as tf from '@tensorflow/tfjs-core';
import type { Metrics } from '../metrics.js';
import { checkGpuErrors } from './webgpu.js';

/** Whether the active backend can read a tensor synchronously (not webgpu, whose reads only resolve later). */
export function readsSynchronously(): boolean {
  return tf.getBackend() !== 'webgpu';
}

/** A tensor's values (its own typed array), then the device's error check; `operation` names the read in any error. */
export async function readValues(t: tf.Tensor, operation: string): Promise<Float32Array | Int32Array | Uint8Array> {
  const values = (await t.data()) as Float32Array | Int32Array | Uint8Array;
  await checkGpuErrors(operation);
  return values;
}

/** A float tensor's values. */
export async function readFloat32(t: tf.Tensor, operation: string): Promise<Float32Array> {
  return (await readValues(t, operation)) as Float32Array;
}

/** A scalar's value. */
export async function readScalar(t: tf.Tensor, operation: string): Promise<number> {
  return (await readValues(t, operation))[0];
}

/** Several float tensors read together (one wait for the device). */
export async function readAllFloat32(tensors: tf.Tensor[], operation: string): Promise<Float32Array[]> {
  const values = await Promise.all(tensors.map((t) => t.data() as Promise<Float32Array>));
  await checkGpuErrors(operation);
  return values;
}

/**
 * Metrics a loss reports from inside a gradient closure, where nothing can be read: scalars kept
 * past the closure's tidy, and plain numbers. readMetrics reads them after the gradients.
 */
export type PendingMetrics = Record<string, number | tf.Scalar>;

/**
 * Copies of the scalars of `stats`, kept past the enclosing tidy (for a PendingMetrics record).
 * Copies, so that reading the metrics never frees a tensor the caller still uses (the loss itself).
 */
export function keepMetrics(stats: Record<string, tf.Tensor | number>): PendingMetrics {
  return Object.fromEntries(Object.entries(stats).map(([k, v]) => [k, typeof v === 'number' ? v : tf.keep(tf.clone(v as tf.Scalar))]));
}

/** The numbers of pending metrics, read with one stacked read; their scalars are disposed. */
export async function readMetrics(pending: PendingMetrics, operation: string): Promise<Metrics> {
  const names = Object.keys(pending).filter((k) => typeof pending[k] !== 'number');
  const out: Metrics = {};
  if (names.length) {
    const stacked = tf.tidy(() => tf.stack(names.map((k) => tf.reshape(pending[k] as tf.Scalar, []))));
    try {
      const values = await readValues(stacked, operation);
      names.forEach((k, i) => (out[k] = values[i]));
    } finally {
      stacked.dispose();
      tf.dispose(names.map((k) => pending[k] as tf.Scalar));
    }
  }
  for (const [k, v] of Object.entries(pending)) if (typeof v === 'number') out[k] = v;
  // The pending record's key order, so callers see the order the loss reported.
  return Object.fromEntries(Object.keys(pending).map((k) => [k, out[k]]));
}

/** Disposes the scalars of metrics that will not be read (a failed step). */
export function disposeMetrics(pending: PendingMetrics): void {
  tf.dispose(Object.values(pending).filter((v): v is tf.Scalar => typeof v !== 'number'));
}
