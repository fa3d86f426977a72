// Which latents RLFR's flow reads and how it scores them (README "RLFR flow rewards": latents).
// Latents are residual-stream outputs of decoder layers (before the final norm), stop-gradient.
import * as tf from '@tensorflow/tfjs-core';
import { positionsFromMask, readAllFloat32, readFloat32, type CausalLM, type Rng, type SequenceBatch } from '../../core-adapters/index.js';
import type { VelocityField } from './velocity-field.js';

export const CONTEXT_MODES = ['token_post', 'token_pre', 'identity'] as const;
export type ContextMode = (typeof CONTEXT_MODES)[number];

/** Python's round (half to even), which the reference uses to place its hooks. */
function roundHalfEven(x: number): number {
  const floor = Math.floor(x);
  const diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}

/** Decoder layers (0-based) at the given depth fractions: round(p * L), the last layer at most. */
export function hookLayers(percentiles: number[], numLayers: number): number[] {
  return percentiles.map((p) => Math.min(roundHalfEven(p * numLayers), numLayers - 1));
}

/**
 * Pairs each target latent with its context within one layer, for a [batch, length] layout:
 * token_post conditions position i on i - 1 (the causal choice, used for both pre-training and
 * rewards here), token_pre on i + 1, identity on itself. Returns the row index of each target's
 * context (-1 where there is none: the first position for token_post, the last for token_pre).
 */
export function contextRows(batch: number, length: number, mode: ContextMode): Int32Array {
  const out = new Int32Array(batch * length);
  const shift = mode === 'token_post' ? -1 : mode === 'token_pre' ? 1 : 0;
  for (let b = 0; b < batch; b++) {
    for (let i = 0; i < length; i++) {
      const j = i + shift;
      out[b * length + i] = j >= 0 && j < length ? b * length + j : -1;
    }
  }
  return out;
}

export interface TokenLatents {
  /** Latent size d. */
  size: number;
  /** Rows: one per selected response token, in [B, R] order. */
  rows: number;
  /** Index of each row in the [B, R] response grid. */
  positions: Int32Array;
  /** Response row (sequence) of each row. */
  sequence: Int32Array;
  /** Per read layer: target latents x1 and their contexts, [rows, d] each (context 0 where none). */
  targets: Float32Array[];
  contexts: Float32Array[];
}

/**
 * Residual-stream latents of the selected response tokens at `layers`, with their contexts, read
 * from one no-gradient forward per chunk of `microBatch` sequences. A context is the latent of
 * the neighbouring sequence position (token_post: the previous one, which for the first response
 * token is the last prompt token); it is 0 where that position is padding or outside the sequence.
 */
export async function responseLatents(
  lm: CausalLM,
  seq: SequenceBatch,
  layers: number[],
  mode: ContextMode,
  select: ArrayLike<number>,
  microBatch: number,
): Promise<TokenLatents> {
  const { batch: B, promptLength: P, responseLength: R } = seq;
  const L = P + R;
  const d = lm.config.hiddenSize;
  const positions: number[] = [];
  for (let i = 0; i < B * R; i++) if (select[i]) positions.push(i);
  const rows = positions.length;
  const targets = layers.map(() => new Float32Array(rows * d));
  const contexts = layers.map(() => new Float32Array(rows * d));
  const sequence = Int32Array.from(positions, (i) => Math.floor(i / R));
  let row = 0;
  for (let start = 0; start < B && row < rows; start += microBatch) {
    if (sequence[row] >= start + microBatch) continue;
    const count = Math.min(microBatch, B - start);
    const mask = seq.attentionMask.subarray(start * L, (start + count) * L);
    const outputs = tf.tidy(() =>
      lm.forward({ ids: seq.inputIds.subarray(start * L, (start + count) * L), batch: count, attentionMask: mask, positions: positionsFromMask(mask, count), outputLayers: layers }).layerOutputs,
    );
    let host: Float32Array[];
    try {
      host = await readAllFloat32(outputs, 'RLFR latents');
    } finally {
      tf.dispose(outputs);
    }
    const neighbours = contextRows(count, L, mode);
    while (row < rows && sequence[row] < start + count) {
      const b = sequence[row] - start;
      const at = b * L + P + (positions[row] % R);
      const from = neighbours[at];
      layers.forEach((_, l) => {
        targets[l].set(host[l].subarray(at * d, (at + 1) * d), row * d);
        if (from >= 0 && mask[from]) contexts[l].set(host[l].subarray(from * d, (from + 1) * d), row * d);
      });
      row += 1;
    }
  }
  return { size: d, rows, positions: Int32Array.from(positions), sequence, targets, contexts };
}

/** The debiasing weight of a rewarding time: t / (1 - t) (4 at t = 0.8). */
export function deviationWeight(t: number): number {
  return t / (1 - t);
}

/**
 * Per-row flow deviation: mean over the rewarding times t of w(t) * mean_d (v(x_t) - (x1 - eps))^2,
 * with one fresh eps per row shared by the times (each time weighted by its own w; the reference
 * weights every time by the last one's, which matters only with several). Higher means the latent
 * follows the flow less well. Rows are scored in chunks of `chunk`.
 */
export async function flowDeviation(field: VelocityField, x1: tf.Tensor2D, context: tf.Tensor2D, layer: number, rng: Rng, timesteps: number[] = [0.8], chunk = 4096): Promise<Float32Array> {
  const [N, d] = x1.shape;
  const out = new Float32Array(N);
  for (let start = 0; start < N; start += chunk) {
    const n = Math.min(chunk, N - start);
    const scores = tf.tidy(() => {
      const target = x1.slice([start, 0], [n, d]);
      const ctx = context.slice([start, 0], [n, d]);
      const noise = tf.tensor2d(Float32Array.from({ length: n * d }, () => rng.normal()), [n, d]);
      const velocity = tf.sub(target, noise);
      let total: tf.Tensor = tf.zeros([n]);
      for (const t of timesteps) {
        const xt = tf.add(tf.mul(target, t), tf.mul(noise, 1 - t)) as tf.Tensor2D;
        const v = field.forward({ x: xt, t: new Float32Array(n).fill(t), context: ctx, layer: new Float32Array(n).fill(layer) });
        total = tf.add(total, tf.mul(tf.mean(tf.square(tf.sub(v, velocity)), 1), deviationWeight(t) / timesteps.length));
      }
      return total;
    });
    try {
      out.set(await readFloat32(scores, 'RLFR flow deviation'), start);
    } finally {
      scores.dispose();
    }
  }
  return out;
}
