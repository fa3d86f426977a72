// Loss aggregation and policy losses (verl's verl/trainer/ppo/core_algos.py: agg_loss,
// compute_policy_loss_vanilla, register_policy_loss / get_policy_loss_fn). Losses are differentiable
// tfjs graphs over [B, T] tensors; metrics are read back as plain numbers.
import * as tf from '@tensorflow/tfjs';
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
  /** seq-mean-token-sum-norm: the divisor (default: T, the mask's last dimension). */
  lossScaleFactor?: number;
}

/** masked_sum's guard: entries outside the mask are replaced by 0 before multiplying, so a NaN there cannot leak in. */
function maskedProduct(values: tf.Tensor, mask: tf.Tensor): tf.Tensor {
  return tf.mul(tf.where(tf.notEqual(mask, 0), values, tf.zerosLike(values)), mask);
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
 * agg_loss with verl's denominators, for loss and mask of shape [B, T]:
 *  - token-mean: sum(loss * mask) / sum(mask);
 *  - seq-mean-token-mean: per row sum(loss * mask) / (row tokens + 1e-8), then the sum over rows
 *    divided by the number of rows with at least one valid token (fully masked rows are excluded);
 *  - seq-mean-token-sum: per row sum(loss * mask), summed over rows, divided by the number of rows
 *    with at least one valid token;
 *  - seq-mean-token-sum-norm: sum(loss * mask) / T (Dr.GRPO's constant divisor: not divided by the
 *    number of rows, as in verl).
 * Where verl would divide 0 by 0 (no valid token or row at all) the result is 0.
 */
export function aggregateLoss(loss: tf.Tensor2D, mask: tf.Tensor2D, mode: LossAggMode, options: AggregateLossOptions = {}): tf.Scalar {
  return tf.tidy(() => {
    const weighted = maskedProduct(loss, mask);
    switch (mode) {
      case 'token-mean':
        return tf.div(tf.sum(weighted), count(options.batchNumTokens, () => tf.sum(mask))) as tf.Scalar;
      case 'seq-mean-token-mean':
      case 'seq-mean-token-sum': {
        const rowTokens = tf.sum(mask, 1);
        let rowLosses = tf.sum(weighted, 1);
        if (mode === 'seq-mean-token-mean') rowLosses = tf.div(rowLosses, tf.add(rowTokens, 1e-8));
        const rowValid = tf.cast(tf.greater(rowTokens, 0), 'float32');
        return tf.div(tf.sum(tf.mul(rowLosses, rowValid)), count(options.globalBatchSize, () => tf.sum(rowValid))) as tf.Scalar;
      }
      case 'seq-mean-token-sum-norm':
        return tf.div(tf.sum(weighted), options.lossScaleFactor ?? mask.shape[1]) as tf.Scalar;
      default:
        throw new InputError(`unknown loss_agg_mode '${mode as string}'; available: ${LOSS_AGG_MODES.join(', ')}`);
    }
  });
}

/** masked_mean of a non-differentiated quantity as a number: sum(v * mask) / (sum(mask) + 1e-8). */
function maskedMeanTensor(values: tf.Tensor, mask: tf.Tensor): tf.Scalar {
  return tf.div(tf.sum(maskedProduct(values, mask)), tf.add(tf.sum(mask), 1e-8)) as tf.Scalar;
}

/** The tensors a policy loss reads, [B, R] each. */
export interface PolicyLossInput {
  logProb: tf.Tensor2D;
  oldLogProb: tf.Tensor2D;
  advantages: tf.Tensor2D;
  responseMask: tf.Tensor2D;
  /**
   * Constant per-token factors (the rollout correction's TIS weights) multiplied into the token
   * losses before aggregation; absent means 1. A registered policy loss must apply them.
   */
  tokenWeights?: tf.Tensor2D;
}

/** The settings a policy loss reads (from actor_rollout_ref.actor). */
export interface PolicyLossOptions {
  clipRatioLow: number;
  clipRatioHigh: number;
  /** Dual-clip bound for negative advantages (verl's clip_ratio_c, default 3); must exceed 1. */
  clipRatioC: number;
  lossAggMode: LossAggMode;
  /** Mini-batch denominators for gradient accumulation (see AggregateLossOptions). */
  globalBatchInfo?: AggregateLossOptions;
}

/** A policy loss value with its metrics. */
export interface PolicyLossResult {
  loss: tf.Scalar;
  metrics: { 'actor/pg_clipfrac': number; 'actor/ppo_kl': number; 'actor/pg_clipfrac_lower': number };
}

/** A policy loss (verl's policy_loss registry entry): log-probs and advantages in, a scalar and metrics out. */
export type PolicyLoss = (input: PolicyLossInput, options: PolicyLossOptions) => PolicyLossResult;

/** Policy losses by name (verl's register_policy_loss), one registry per host, like the estimators. */
export class PolicyLossRegistry {
  private readonly losses = new Map<string, { fn: PolicyLoss; provider: string }>();
  /** Who registrations come from now: 'core', or the plugin whose entry is running (the host sets it). */
  provider = 'core';

  /** A registry holding vanilla. */
  constructor() {
    this.register('vanilla', vanillaPolicyLoss);
  }

  /** Adds a policy loss; another function under a taken name is an InputError naming both providers, the same one again a no-op. */
  register(name: string, fn: PolicyLoss): void {
    const existing = this.losses.get(name);
    if (existing && existing.fn !== fn) throw new InputError(`policy loss '${name}' from ${this.provider} is already registered by ${existing.provider}; pick another name`);
    this.losses.set(name, { fn, provider: existing?.provider ?? this.provider });
  }

  /** The loss of this name (InputError naming `key` and listing the names if none). */
  get(name: string, key = 'actor_rollout_ref.actor.policy_loss'): PolicyLoss {
    const entry = this.losses.get(name);
    if (!entry) throw new InputError(`${key}: unknown policy loss '${name}'; available: ${this.names().join(', ')}`);
    return entry.fn;
  }

  /** Who registered each loss ('core' or a plugin's name). */
  providers(): Map<string, string> {
    return new Map([...this.losses].map(([name, e]) => [name, e.provider]));
  }

  names(): string[] {
    return [...this.losses.keys()];
  }
}

/**
 * PPO's clipped surrogate as verl's compute_policy_loss_vanilla computes it, per token:
 *   log r = clamp(logProb - oldLogProb, -20, 20),  r = exp(log r)
 *   l1 = -A r,  l2 = -A clamp(r, 1 - low, 1 + high),  l = max(l1, l2)
 *   for A < 0 (dual clip): l = min(l, -A c)
 * times input.tokenWeights when given, aggregated by lossAggMode. Metrics (masked means, with masked_mean's 1e-8):
 *   pg_clipfrac = mean[l2 > l1], ppo_kl = mean[-log r],
 *   pg_clipfrac_lower = mean[(max(l1, l2) > -A c) and A < 0].
 * The loss tensor stays in the caller's gradient graph (tfjs keeps what the backward pass needs);
 * every other intermediate is freed here.
 */
export const vanillaPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  const { clipRatioLow, clipRatioHigh, clipRatioC } = options;
  if (!(clipRatioC > 1)) throw new InputError(`clip_ratio_c: the dual-clip bound must be greater than 1, got ${clipRatioC}`);
  let metrics: PolicyLossResult['metrics'] | undefined;
  const loss = tf.tidy(() => {
    const logRatio = tf.clipByValue(tf.sub(logProb, oldLogProb), -20, 20);
    const ratio = tf.exp(logRatio);
    const negAdvantages = tf.neg(advantages);
    const unclipped = tf.mul(negAdvantages, ratio);
    const clipped = tf.mul(negAdvantages, tf.clipByValue(ratio, 1 - clipRatioLow, 1 + clipRatioHigh));
    const ppoLosses = tf.maximum(unclipped, clipped);
    const dualBound = tf.mul(negAdvantages, clipRatioC);
    const negative = tf.less(advantages, 0);
    const tokenLosses = tf.where(negative, tf.minimum(dualBound, ppoLosses), ppoLosses) as tf.Tensor2D;
    const stats = tf.stack([
      maskedMeanTensor(tf.cast(tf.greater(clipped, unclipped), 'float32'), responseMask),
      maskedMeanTensor(tf.neg(logRatio), responseMask),
      maskedMeanTensor(tf.cast(tf.logicalAnd(tf.greater(ppoLosses, dualBound), negative), 'float32'), responseMask),
    ]).dataSync();
    metrics = { 'actor/pg_clipfrac': stats[0], 'actor/ppo_kl': stats[1], 'actor/pg_clipfrac_lower': stats[2] };
    const weighted = input.tokenWeights ? (tf.mul(tokenLosses, input.tokenWeights) as tf.Tensor2D) : tokenLosses;
    return aggregateLoss(weighted, responseMask, options.lossAggMode, options.globalBatchInfo);
  });
  return { loss, metrics: metrics! };
};

