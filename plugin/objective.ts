// The FlowRL objective (trajectory balance with a learned log partition), as the final verl recipe
// computes it (verl recipe/flowrl; README "FlowRL"), per sequence b with masked means over response tokens:
//   delta_b = log Z(x_b) + mean_t log pi(y_t) - beta * mean_t A_t - mean_t log pi_ref(y_t)
//   w_b     = min(exp(sum_t (log pi - log pi_old)), w_max)      (no gradient; 1 without IS)
//             or, with importanceWeightClip 'ppo' (the paper's text), clamp(w_b, 1 - eps_low, 1 + eps_high)
//   loss    = mean_b(w_b * c_b * delta_b^2)
// where c_b is the engine correction for rollouts sampled elsewhere (sequenceRolloutCorrection:
// min(exp(sum_t (log pi_old - log pi_rollout)), tis_cap); 1 for local sampling). With
// lengthNormalize false the two log-prob terms are sums over tokens (trajectory balance itself).
import * as tf from '@tensorflow/tfjs';
import { keepMetrics, stopGradient, type PendingMetrics } from '../core-adapters/index.js';

export interface FlowRLInputs {
  /** Current policy token log-probs [B, T] (differentiated). */
  logProb: tf.Tensor2D;
  oldLogProb: tf.Tensor2D;
  refLogProb: tf.Tensor2D;
  /** The reward target per token [B, T]: GRPO advantages (constant over a row) or the raw score. */
  advantages: tf.Tensor2D;
  /** 1 on valid response tokens, 0 on padding [B, T]. */
  responseMask: tf.Tensor2D;
  /** log Z(x) per sequence [B] (differentiated). */
  logZ: tf.Tensor1D;
  /** Constant per-sequence factors [B] (the rollout correction's sequence TIS weights); absent: 1. */
  rolloutWeights?: tf.Tensor1D;
}

export interface FlowRLOptions {
  /** beta: the reward scale inside the residual (the paper's 15). */
  beta?: number;
  /** Upper clamp of the sequence importance weight (importanceWeightClip 'cap'). */
  importanceWeightMax?: number;
  /**
   * 'cap' (the recipe and the authors' final code): w clamped above at importanceWeightMax. 'ppo' (the
   * paper's text, FlowRL issue 13): w clamped to [1 - clipRatioLow, 1 + clipRatioHigh].
   */
  importanceWeightClip?: 'cap' | 'ppo';
  /** The PPO-style bounds of 'ppo' (the actor's clip_ratio_low / clip_ratio_high). */
  clipRatioLow?: number;
  clipRatioHigh?: number;
  /** false: every weight is 1. */
  importanceSampling?: boolean;
  /** true (the recipe): the log-probs enter as per-token means; false: as sequence sums (trajectory balance itself). */
  lengthNormalize?: boolean;
}

export interface FlowRLResult {
  loss: tf.Scalar;
  /** Scalars kept past the loss's tidy; readMetrics reads them once the gradients are taken. */
  metrics: PendingMetrics;
}

const EPS = 1e-8;

/** Per-row masked mean over the token axis, with masked_mean's +1e-8. */
function rowMean(values: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor1D {
  return tf.div(tf.sum(tf.mul(values, mask), 1), tf.add(tf.sum(mask, 1), EPS));
}

/** Per-row masked sum over the token axis. */
function rowSum(values: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor1D {
  return tf.sum(tf.mul(values, mask), 1);
}

/** Masked mean over every valid token of the batch (for metrics). */
function batchMean(values: tf.Tensor, mask: tf.Tensor2D): tf.Scalar {
  return tf.div(tf.sum(tf.mul(values, mask)), tf.add(tf.sum(mask), EPS));
}

const METRIC_NAMES = [
  'actor/log_z',
  'actor/log_prob',
  'actor/old_log_prob',
  'actor/ref_log_prob',
  'actor/log_reward',
  'actor/importance_weight',
  'actor/ppo_kl',
  'actor/ref_kl',
  'actor/final_loss',
  // The log Z that zeroes each residual, and the residual itself (log Z should track the former).
  'actor/log_z_target',
  'actor/residual',
  // Sequences whose importance weight the clip changed.
  'actor/importance_weight_clipfrac',
];

export function computeFlowRLLoss(inputs: FlowRLInputs, options: FlowRLOptions = {}): FlowRLResult {
  const beta = options.beta ?? 15;
  const weightMax = options.importanceWeightMax ?? 10;
  // Both clips act on log w, so exp never overflows.
  const [logLow, logHigh] = options.importanceWeightClip === 'ppo' ? [Math.log(1 - (options.clipRatioLow ?? 0.2)), Math.log(1 + (options.clipRatioHigh ?? 0.2))] : [-Infinity, Math.log(weightMax)];
  const useWeights = options.importanceSampling ?? true;
  const reduce = (options.lengthNormalize ?? true) ? rowMean : rowSum;
  const { logProb, oldLogProb, refLogProb, advantages, responseMask: mask, logZ } = inputs;
  let metrics: PendingMetrics = {};
  // tidy frees the intermediates; tfjs keeps what the backward pass needs on its own.
  const loss = tf.tidy(() => {
    const delta = tf.sub(tf.sub(tf.add(logZ, reduce(logProb, mask)), tf.mul(rowMean(advantages, mask), beta)), reduce(refLogProb, mask));
    const logW = stopGradient(tf.sum(tf.mul(tf.sub(logProb, oldLogProb), mask), 1));
    const clippedLogW = tf.clipByValue(logW, logLow, logHigh);
    const weight = useWeights ? tf.exp(clippedLogW) : tf.onesLike(logZ);
    // The engine factor is reduced as w is (exp of a summed log ratio, truncated), so w * c chains pi/pi_old and pi_old/pi_rollout per sequence.
    const applied = inputs.rolloutWeights ? tf.mul(weight, inputs.rolloutWeights) : weight;
    const value = tf.mean(tf.mul(applied, tf.square(delta))) as tf.Scalar;
    const stats = [
        tf.mean(logZ),
        batchMean(logProb, mask),
        batchMean(oldLogProb, mask),
        batchMean(refLogProb, mask),
        batchMean(advantages, mask),
        tf.mean(weight),
        batchMean(tf.sub(oldLogProb, logProb), mask),
        batchMean(tf.sub(refLogProb, logProb), mask),
        value,
        tf.mean(tf.sub(logZ, delta)),
        tf.mean(delta),
        useWeights ? tf.mean(tf.cast(tf.notEqual(clippedLogW, logW), 'float32')) : tf.scalar(0),
      ];
    metrics = keepMetrics(Object.fromEntries(METRIC_NAMES.map((n, i) => [n, stats[i]])));
    return value;
  });
  return { loss, metrics };
}
