// The FlowRL objective (trajectory balance with a learned log partition), as the final verl recipe
// computes it (verl recipe/flowrl; README "FlowRL"), per sequence b with masked means over response tokens:
//   delta_b = log Z(x_b) + mean_t log pi(y_t) - beta * mean_t A_t - mean_t log pi_ref(y_t)
//   w_b     = min(exp(sum_t (log pi - log pi_old)), w_max)      (no gradient; 1 without IS)
//             or, with importanceWeightClip 'ppo' (the paper's text), clamp(w_b, 1 - eps_low, 1 + eps_high)
//   loss    = mean_b(w_b * c_b * delta_b^2)
// where c_b is the engine correction for rollouts sampled elsewhere (sequenceRolloutCorrection:
// min(exp(sum_t (log pi_old - log pi_rollout)), tis_cap); 1 for local sampling). With
// lengthNormalize false the two log-prob terms are sums over tokens (trajectory balance itself).
//
// The authors' later objectives (Xuekai-Zhu/verl_FlowRL, branch no-log-z, and async-flowrl's
// flowrl_token_level) are switches of the same function:
//   no log Z        log Z(x_b) = 0 (logZ absent)
//   reference old   pi_old in place of pi_ref;  reference none: no third term
//   level token     r_bt = log pi(y_t) - beta * A_t - log pi_term(y_t) per token,
//                   w_bt = clamp(exp(clamp(log pi - log pi_old, -20, 20)), 1 - eps_low, 1 + eps_high),
//                   loss = agg(w_bt * c_bt * r_bt^2) by loss_agg_mode (c_bt: token TIS weights)
import * as tf from '@tensorflow/tfjs-core';
import { aggregateLoss, keepMetrics, stopGradient, type AggregateLossOptions, type LossAggMode, type PendingMetrics, type PolicyLoss } from '../core-adapters/index.js';

export interface FlowRLInputs {
  /** Current policy token log-probs [B, T] (differentiated). */
  logProb: tf.Tensor2D;
  oldLogProb: tf.Tensor2D;
  /** Needed with reference 'ref' (the default). */
  refLogProb?: tf.Tensor2D;
  /** The reward target per token [B, T]: GRPO advantages (constant over a row) or the raw score. */
  advantages: tf.Tensor2D;
  /** 1 on valid response tokens, 0 on padding [B, T]. */
  responseMask: tf.Tensor2D;
  /** log Z(x) per sequence [B] (differentiated); absent: no log Z (0). */
  logZ?: tf.Tensor1D;
  /** Constant engine-correction factors: per sequence [B] at level sequence, per token [B, T] at level token; absent: 1. */
  rolloutWeights?: tf.Tensor1D | tf.Tensor2D;
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
  /** The policy the residual subtracts: ref (default), old, or none. */
  reference?: 'ref' | 'old' | 'none';
  /** sequence (default): one residual per response; token: one per token with clamped token weights. */
  level?: 'sequence' | 'token';
  /** Level token: how the token losses are reduced (the actor's loss_agg_mode, default token-mean) and the mini-batch's denominators. */
  lossAggMode?: LossAggMode;
  globalBatchInfo?: AggregateLossOptions;
  /** Level token: the micro-batch's share of the mini-batch the denominators count, so actor/final_loss is on its own scale. */
  share?: number;
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

/** The term the residual subtracts, per token [B, T], or undefined for reference none. */
function referenceTerm(inputs: FlowRLInputs, reference: 'ref' | 'old' | 'none'): tf.Tensor2D | undefined {
  if (reference === 'none') return undefined;
  if (reference === 'old') return inputs.oldLogProb;
  if (!inputs.refLogProb) throw new Error("computeFlowRLLoss: reference 'ref' needs refLogProb");
  return inputs.refLogProb;
}

/** The metrics both levels log (ref ones only when the reference policy was scored). */
function commonStats(inputs: FlowRLInputs, mask: tf.Tensor2D): Record<string, tf.Scalar> {
  const { logProb, oldLogProb, refLogProb, advantages } = inputs;
  return {
    'actor/log_prob': batchMean(logProb, mask),
    'actor/old_log_prob': batchMean(oldLogProb, mask),
    ...(refLogProb ? { 'actor/ref_log_prob': batchMean(refLogProb, mask), 'actor/ref_kl': batchMean(tf.sub(refLogProb, logProb), mask) } : {}),
    'actor/log_reward': batchMean(advantages, mask),
    'actor/ppo_kl': batchMean(tf.sub(oldLogProb, logProb), mask),
  };
}

export function computeFlowRLLoss(inputs: FlowRLInputs, options: FlowRLOptions = {}): FlowRLResult {
  let metrics: PendingMetrics = {};
  // tidy frees the intermediates; tfjs keeps what the backward pass needs on its own.
  const loss = tf.tidy(() => {
    const out = (options.level ?? 'sequence') === 'token' ? tokenLevel(inputs, options) : sequenceLevel(inputs, options);
    const token = (options.level ?? 'sequence') === 'token';
    const ownScale = token && options.share !== undefined ? tf.div(out.value, Math.max(options.share, 1e-12)) : out.value;
    metrics = keepMetrics({ ...commonStats(inputs, inputs.responseMask), ...out.stats, 'actor/final_loss': ownScale as tf.Scalar });
    return out.value;
  });
  return { loss, metrics };
}

function sequenceLevel(inputs: FlowRLInputs, options: FlowRLOptions): { value: tf.Scalar; stats: Record<string, tf.Scalar> } {
  const beta = options.beta ?? 15;
  const weightMax = options.importanceWeightMax ?? 10;
  // Both clips act on log w, so exp never overflows.
  const [logLow, logHigh] = options.importanceWeightClip === 'ppo' ? [Math.log(1 - (options.clipRatioLow ?? 0.2)), Math.log(1 + (options.clipRatioHigh ?? 0.2))] : [-Infinity, Math.log(weightMax)];
  const useWeights = options.importanceSampling ?? true;
  const reduce = (options.lengthNormalize ?? true) ? rowMean : rowSum;
  const { logProb, oldLogProb, advantages, responseMask: mask, logZ } = inputs;
  const term = referenceTerm(inputs, options.reference ?? 'ref');
  // Summed in the recipe's order, (log Z + lp) - beta A - lp_ref: float32 rounding, and so a run's
  // trajectory, stays what it was before the later objectives were added.
  const policyTerm = logZ ? tf.add(logZ, reduce(logProb, mask)) : reduce(logProb, mask);
  let delta = tf.sub(policyTerm, tf.mul(rowMean(advantages, mask), beta));
  if (term) delta = tf.sub(delta, reduce(term, mask));
  const logW = stopGradient(tf.sum(tf.mul(tf.sub(logProb, oldLogProb), mask), 1));
  const clippedLogW = tf.clipByValue(logW, logLow, logHigh);
  const weight = useWeights ? tf.exp(clippedLogW) : tf.onesLike(logW);
  // The engine factor is reduced as w is (exp of a summed log ratio, truncated), so w * c chains pi/pi_old and pi_old/pi_rollout per sequence.
  const applied = inputs.rolloutWeights ? tf.mul(weight, inputs.rolloutWeights) : weight;
  const value = tf.mean(tf.mul(applied, tf.square(delta))) as tf.Scalar;
  const stats: Record<string, tf.Scalar> = {
    'actor/importance_weight': tf.mean(weight),
    'actor/residual': tf.mean(delta),
    // Sequences whose importance weight the clip changed.
    'actor/importance_weight_clipfrac': useWeights ? tf.mean(tf.cast(tf.notEqual(clippedLogW, logW), 'float32')) : tf.scalar(0),
  };
  if (logZ) {
    stats['actor/log_z'] = tf.mean(logZ);
    // The log Z that zeroes each residual (log Z should track it).
    stats['actor/log_z_target'] = tf.mean(tf.sub(logZ, delta));
  }
  return { value, stats };
}

function tokenLevel(inputs: FlowRLInputs, options: FlowRLOptions): { value: tf.Scalar; stats: Record<string, tf.Scalar> } {
  const beta = options.beta ?? 15;
  const low = 1 - (options.clipRatioLow ?? 0.2);
  const high = 1 + (options.clipRatioHigh ?? 0.2);
  const useWeights = options.importanceSampling ?? true;
  const { logProb, oldLogProb, advantages, responseMask: mask } = inputs;
  if (inputs.logZ) throw new Error('computeFlowRLLoss: level token has no log Z');
  const term = referenceTerm(inputs, options.reference ?? 'ref');
  let residual = tf.sub(logProb, tf.mul(advantages, beta));
  if (term) residual = tf.sub(residual, term);
  const logRatio = tf.clipByValue(tf.sub(logProb, oldLogProb), -20, 20);
  const ratio = stopGradient(tf.exp(logRatio));
  const weight = useWeights ? tf.clipByValue(ratio, low, high) : tf.onesLike(ratio);
  let losses = tf.mul(weight, tf.square(residual));
  if (inputs.rolloutWeights) losses = tf.mul(losses, inputs.rolloutWeights);
  const value = aggregateLoss(losses as tf.Tensor2D, mask, options.lossAggMode ?? 'token-mean', options.globalBatchInfo);
  const clipped = useWeights ? tf.cast(tf.logicalOr(tf.greater(ratio, high), tf.less(ratio, low)), 'float32') : tf.zerosLike(ratio);
  return {
    value,
    stats: {
      'actor/importance_weight': batchMean(weight, mask),
      'actor/residual': batchMean(residual, mask),
      // On the clamped log-ratio, as the fork's token-level losses log it.
      'actor/ppo_kl': batchMean(tf.neg(logRatio), mask),
      // Tokens whose importance weight the clamp changed.
      'actor/importance_weight_clipfrac': batchMean(clipped, mask),
    },
  };
}

/**
 * The async-flowrl branch's registered policy loss flowrl_token_level (verl_FlowRL 972c5525,
 * core_algos.compute_policy_loss_flowrl_token_level), for any algorithm whose advantages it reads:
 * level token with the old policy as the reference term, clamped by the actor's clip_ratio_low /
 * clip_ratio_high, times the token TIS weights, by the actor's loss_agg_mode. The fork hard-codes
 * beta 15; here it is flowrl.beta (default 15).
 */
export function flowrlTokenLevelLoss(beta: number): PolicyLoss {
  return (input, options) => {
    const { loss, metrics } = computeFlowRLLoss(
      { logProb: input.logProb, oldLogProb: input.oldLogProb, advantages: input.advantages, responseMask: input.responseMask, rolloutWeights: input.tokenWeights },
      {
        beta,
        level: 'token',
        reference: 'old',
        clipRatioLow: options.clipRatioLow,
        clipRatioHigh: options.clipRatioHigh,
        lossAggMode: options.lossAggMode,
        globalBatchInfo: options.globalBatchInfo,
        share: options.rowShare,
      },
    );
    return { loss, metrics };
  };
}
