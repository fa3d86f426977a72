// Loss aggregation (verl v0.9.0's agg_loss in verl/trainer/ppo/core_algos.py) and the masked
// reductions the losses share (verl/utils/torch_functional.py: masked_sum, masked_mean).
import * as tf from '@tensorflow/tfjs-core';
import { InputError } from '../errors.js';
import { LOSS_AGG_MODES, type LossAggMode } from '../config/choices.js';


/**
 * verl's global_batch_info: denominators taken from the whole mini-batch instead of the micro-batch
 * at hand, so that gradient accumulation over micro-batches sums to the mini-batch loss. Left out,
 * each comes from the tensors given (verl's defaults).
 */
export interface AggregateLossOptions {
  /** token-mean: valid tokens in the global batch (default: the mask's sum). */
  batchNumTokens?: number;
  /** seq-mean-*: sequences with at least one valid token in the global batch (default: counted in the mask). */
  globalBatchSize?: number;
  /** seq-mean-token-sum-norm: the further divisor (actor.loss_scale_factor; default: T, the mask's last dimension). */
  lossScaleFactor?: number;
  /**
   * verl's dp_size: its ranks average their gradients, so each rank's loss is scaled up by it. 1
   * here (the default): this project's data-parallel threads sum their gradients instead.
   */
  dpSize?: number;
}

/** masked_sum's guard: entries outside the mask are replaced by 0 before multiplying, so a NaN there cannot leak in. */
export function maskedProduct(values: tf.Tensor, mask: tf.Tensor): tf.Tensor {
  return tf.mul(tf.where(tf.notEqual(mask, 0), values, tf.zerosLike(values)), mask);
}

/** masked_mean over every element: sum(v * mask) / (sum(mask) + 1e-8). */
export function maskedMeanTensor(values: tf.Tensor, mask: tf.Tensor): tf.Scalar {
  return tf.div(tf.sum(maskedProduct(values, mask)), tf.add(tf.sum(mask), 1e-8)) as tf.Scalar;
}

/** A count used as a denominator: at least 1, so an all-masked batch gives 0 rather than verl's 0/0. */
function count(n: number | undefined, fallback: () => tf.Tensor): tf.Tensor {
  return tf.maximum(n === undefined ? fallback() : tf.scalar(n), 1);
}

/**
 * verl's global denominators of a mini-batch from its response mask [B, R]: valid tokens and
 * non-empty rows, so micro-batch losses summed over a mini-batch equal the mini-batch's loss.
 */
export function miniBatchDenominators(mask: { data: ArrayLike<number>; shape: number[] }): AggregateLossOptions {
  const [B, R] = mask.shape;
  let tokens = 0;
  let rows = 0;
  for (let b = 0; b < B; b++) {
    let rowTokens = 0;
    for (let t = 0; t < R; t++) rowTokens += mask.data[b * R + t];
    tokens += rowTokens;
    rows += rowTokens > 0 ? 1 : 0;
  }
  return { batchNumTokens: tokens, globalBatchSize: rows };
}

/**
 * agg_loss as verl v0.9.0 computes it, for loss and mask of shape [B, T] (each mode times dpSize):
 *  - token-mean: sum(loss * mask) / sum(mask);
 *  - token-sum: sum(loss * mask) (micro-batch sums add up to the mini-batch's);
 *  - seq-mean-token-mean: per row sum(loss * mask) / (row tokens + 1e-8), then the sum over rows
 *    divided by the number of rows with at least one valid token (fully masked rows are excluded);
 *  - seq-mean-token-sum: per row sum(loss * mask), summed over rows, divided by the number of rows
 *    with at least one valid token;
 *  - seq-mean-token-sum-norm: seq-mean-token-sum divided again by lossScaleFactor (default T):
 *    Dr.GRPO's constant divisor (v0.7.0 divided by T alone; v0.8.0 on divides by the rows as well).
 * Where verl would divide 0 by 0 (no valid token or row at all) the result is 0.
 */
export function aggregateLoss(loss: tf.Tensor2D, mask: tf.Tensor2D, mode: LossAggMode, options: AggregateLossOptions = {}): tf.Scalar {
  const dp = options.dpSize ?? 1;
  const scaled = (t: tf.Tensor) => (dp === 1 ? t : tf.mul(t, dp)) as tf.Scalar;
  // As verl: with several ranks a rank's own counts would be the wrong denominators.
  if (dp > 1 && mode === 'token-mean' && options.batchNumTokens === undefined) throw new Error('aggregateLoss: (global) batch_num_tokens is required when dp_size > 1');
  if (dp > 1 && mode.startsWith('seq-mean') && options.globalBatchSize === undefined) throw new Error('aggregateLoss: global_batch_size is required when dp_size > 1');
  return tf.tidy(() => {
    const weighted = maskedProduct(loss, mask);
    switch (mode) {
      case 'token-mean':
        return scaled(tf.div(tf.sum(weighted), count(options.batchNumTokens, () => tf.sum(mask))));
      case 'token-sum':
        return scaled(tf.sum(weighted));
      case 'seq-mean-token-mean':
      case 'seq-mean-token-sum':
      case 'seq-mean-token-sum-norm': {
        const rowTokens = tf.sum(mask, 1);
        let rowLosses = tf.sum(weighted, 1);
        if (mode === 'seq-mean-token-mean') rowLosses = tf.div(rowLosses, tf.add(rowTokens, 1e-8));
        const rowValid = tf.cast(tf.greater(rowTokens, 0), 'float32');
        const seqMean = scaled(tf.div(tf.sum(tf.mul(rowLosses, rowValid)), count(options.globalBatchSize, () => tf.sum(rowValid))));
        return mode === 'seq-mean-token-sum-norm' ? (tf.div(seqMean, options.lossScaleFactor ?? mask.shape[1]) as tf.Scalar) : seqMean;
      }
      default:
        throw new InputError(`unknown loss_agg_mode '${mode as string}'; available: ${LOSS_AGG_MODES.join(', ')}`);
    }
  });
}
