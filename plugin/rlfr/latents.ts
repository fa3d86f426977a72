// Which latents RLFR's flow reads and how it scores them (research/rlfr.md 1.2, 1.3, 2.1).
// Latents are residual-stream outputs of decoder layers (before the final norm), stop-gradient.
import * as tf from '@tensorflow/tfjs';
import type { Rng } from '../../core-adapters/index.js';
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

/** The context latents for every row (zeros where a row has no context), [N, d]. */
export function gatherContext(latents: tf.Tensor2D, rows: Int32Array): tf.Tensor2D {
  const N = latents.shape[0];
  const valid = Float32Array.from(rows, (r) => (r >= 0 ? 1 : 0));
  const picked = tf.gather(latents, tf.tensor1d(Int32Array.from(rows, (r) => Math.max(r, 0)), 'int32'));
  return tf.mul(picked, tf.tensor2d(valid, [N, 1])) as tf.Tensor2D;
}

/**
 * Per-row flow deviation at a fixed time t (0.8 by default): w(t) * mean_d (v(x_t) - (x1 - eps))^2
 * with w = t / (1 - t), one fresh eps per row. Higher means the latent follows the flow less well.
 */
export function flowDeviation(field: VelocityField, x1: tf.Tensor2D, context: tf.Tensor2D, layer: number, rng: Rng, t = 0.8): Float32Array {
  const [N, d] = x1.shape;
  const out = tf.tidy(() => {
    const noise = tf.tensor2d(Float32Array.from({ length: N * d }, () => rng.normal()), [N, d]);
    const xt = tf.add(tf.mul(x1, t), tf.mul(noise, 1 - t)) as tf.Tensor2D;
    const v = field.forward({ x: xt, t: new Float32Array(N).fill(t), context, layer: new Float32Array(N).fill(layer) });
    return tf.mul(tf.mean(tf.square(tf.sub(v, tf.sub(x1, noise))), 1), t / (1 - t));
  });
  const values = out.dataSync() as Float32Array;
  out.dispose();
  return values;
}
