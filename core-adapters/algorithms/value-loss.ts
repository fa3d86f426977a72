// The critic's clipped value loss (verl's compute_value_loss in verl/trainer/ppo/core_algos.py).
import * as tf from '@tensorflow/tfjs-core';
import type { LossAggMode } from '../config/choices.js';
import { aggregateLoss, type AggregateLossOptions } from './policy-loss.js';

/**
 * Per token, with V' = clamp(vpreds, oldValues - c, oldValues + c):
 *   l = max((vpreds - returns)^2, (V' - returns)^2)
 * loss = 0.5 * aggregateLoss(l, mask, mode); clipfrac = masked mean of [(V' - R)^2 > (vpreds - R)^2]
 * (with masked_mean's 1e-8), a scalar the caller reads and disposes. The loss stays in the caller's gradient graph.
 */
export function computeValueLoss(
  vpreds: tf.Tensor2D,
  returns: tf.Tensor2D,
  oldValues: tf.Tensor2D,
  mask: tf.Tensor2D,
  clipRangeValue: number,
  mode: LossAggMode,
  globalBatchInfo?: AggregateLossOptions,
): { loss: tf.Scalar; clipfrac: tf.Scalar } {
  // A scalar kept past the tidy: inside a gradient closure nothing can be read on a GPU.
  let clipfrac!: tf.Scalar;
  const loss = tf.tidy(() => {
    // verl_F.clip_by_value: max(min(x, hi), lo) with tensor bounds.
    const clippedPreds = tf.maximum(tf.minimum(vpreds, tf.add(oldValues, clipRangeValue)), tf.sub(oldValues, clipRangeValue));
    const unclippedLosses = tf.square(tf.sub(vpreds, returns));
    const clippedLosses = tf.square(tf.sub(clippedPreds, returns));
    const tokenLosses = tf.maximum(unclippedLosses, clippedLosses) as tf.Tensor2D;
    const clipped = tf.mul(tf.cast(tf.greater(clippedLosses, unclippedLosses), 'float32'), mask);
    clipfrac = tf.keep(tf.div(tf.sum(clipped), tf.add(tf.sum(mask), 1e-8)) as tf.Scalar);
    return tf.mul(aggregateLoss(tokenLosses, mask, mode, globalBatchInfo), 0.5) as tf.Scalar;
  });
  return { loss, clipfrac };
}
