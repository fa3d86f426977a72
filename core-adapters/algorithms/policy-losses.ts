// The policy losses of verl v0.9.0 (verl/trainer/ppo/core_algos.py, each @register_policy_loss
// function), as differentiable tfjs graphs over [B, R] tensors. Each follows its verl function's
// arithmetic step for step, including where it clamps, detaches and which aggregation it forces;
// metrics are scalars read after the gradients (readMetrics). Departures are stated on the loss they concern.
import * as tf from '@tensorflow/tfjs-core';
import { InputError } from '../errors.js';
import type { LossAggMode } from '../config/choices.js';
import { constantFrom, stopGradient } from '../engine/ops.js';
import { keepMetrics, readsSynchronously, type PendingMetrics } from '../engine/readback.js';
import { Rng } from '../random.js';
import { signOf, torchAbs, torchMaximum, torchMinimum } from './torch-ops.js';
import { aggregateLoss, maskedMeanTensor, type AggregateLossOptions } from './loss-aggregation.js';
import { checkRolloutCorrection, DEFAULT_ROLLOUT_CORRECTION, rolloutCorrectionAndRejection, type RolloutCorrectionSettings } from './rollout-corr-helper.js';

/** The tensors a policy loss reads, [B, R] each. */
export interface PolicyLossInput {
  logProb: tf.Tensor2D;
  oldLogProb: tf.Tensor2D;
  advantages: tf.Tensor2D;
  responseMask: tf.Tensor2D;
  /**
   * Constant per-token factors (the rollout correction's TIS weights) multiplied into the token
   * losses before aggregation, as verl applies rollout_is_weights; absent means 1. A registered
   * policy loss must apply them (geo_mean as their geometric mean per sequence; bypass_mode, as in
   * verl, computes its own and ignores them).
   */
  tokenWeights?: tf.Tensor2D;
  /**
   * The four inputs' values on the host, for the losses that choose tokens by them (clip_cov,
   * kl_cov, bypass_mode: readsInputValues). The actor gives them where the backend cannot read
   * inside the gradient (webgpu); elsewhere those losses read the tensors themselves.
   */
  host?: PolicyLossHostValues;
}

/** A loss's inputs as host arrays, [B * R] each (see PolicyLossInput.host). */
export interface PolicyLossHostValues {
  logProb: Float32Array;
  oldLogProb: Float32Array;
  advantages: Float32Array;
  responseMask: Float32Array;
}

/** The losses that choose tokens by their inputs' values (the ones a GPU actor must give `host`). */
const VALUE_READERS = new WeakSet<PolicyLoss>();

/** Marks a loss as choosing tokens by its inputs' values (PolicyLossRegistry's readsInputValues trait). */
export function markReadsInputValues(loss: PolicyLoss): PolicyLoss {
  VALUE_READERS.add(loss);
  return loss;
}

/** Whether a loss needs its inputs' values on the host (PolicyLossInput.host on a GPU). */
export function readsInputValues(loss: PolicyLoss): boolean {
  return VALUE_READERS.has(loss);
}

/** actor.policy_loss's settings (verl's PolicyLossConfig) besides loss_mode. */
export interface PolicyLossSettings {
  /** clip_cov: share of the valid tokens whose loss is dropped (verl 0.0002). */
  clipCovRatio: number;
  /** clip_cov: candidates have a covariance above this (verl 1.0)... */
  clipCovLb: number;
  /** ...and below this (verl 5.0). */
  clipCovUb: number;
  /** kl_cov: share of the valid tokens that get the |log ratio| penalty (verl 0.0002). */
  klCovRatio: number;
  /** kl_cov: that penalty's coefficient (verl 0.1). */
  ppoKlCoef: number;
  /** dro: the quadratic log-ratio penalty (required, > 0). */
  droBeta: number | null;
  /** bypass_mode's settings. */
  rolloutCorrection: RolloutCorrectionSettings;
}

/** verl v0.9.0's PolicyLossConfig defaults (actor.yaml). */
export const DEFAULT_POLICY_LOSS_SETTINGS: PolicyLossSettings = {
  clipCovRatio: 0.0002,
  clipCovLb: 1.0,
  clipCovUb: 5.0,
  klCovRatio: 0.0002,
  ppoKlCoef: 0.1,
  droBeta: null,
  rolloutCorrection: DEFAULT_ROLLOUT_CORRECTION,
};

/** The settings a policy loss reads (from actor_rollout_ref.actor). */
export interface PolicyLossOptions {
  /** clip_ratio_low (verl falls back to clip_ratio when it is null; the caller resolves that). */
  clipRatioLow: number;
  clipRatioHigh: number;
  /** Dual-clip bound for negative advantages (verl's clip_ratio_c, default 3; vanilla needs > 1), DPPO's truncation. */
  clipRatioC: number;
  lossAggMode: LossAggMode;
  /** Mini-batch denominators for gradient accumulation, and loss_scale_factor (see AggregateLossOptions). */
  globalBatchInfo?: AggregateLossOptions;
  /** SAPO's gate temperature for A > 0 (actor.tau_pos, verl 1.0)... */
  tauPos?: number;
  /** ...and for A <= 0 (actor.tau_neg, verl 1.05). */
  tauNeg?: number;
  /** actor.policy_loss's settings; verl's defaults where absent. */
  policyLoss?: Partial<PolicyLossSettings>;
  /** Seeds clip_cov's random choice of tokens (the actor derives it from trainer.seed, the update and the rows). */
  seed?: number;
  /**
   * clip_cov's choice of `count` tokens among the candidates (flat indices into [B * R], row-major,
   * as torch.nonzero lists them); replaces the seeded choice (a test passes verl's).
   */
  select?: (candidates: readonly number[], count: number) => readonly number[];
  /** Rows of this micro-batch over rows of its mini-batch: geo_mean's plain mean over rows is scaled by it (default 1). */
  rowShare?: number;
}

/**
 * A policy loss value with its metrics (actor/pg_clipfrac, actor/ppo_kl, ... as the verl loss
 * reports them): scalars kept past the loss's tidy, read with readMetrics once the gradients are taken.
 */
export interface PolicyLossResult {
  loss: tf.Scalar;
  metrics: PendingMetrics;
}

/** A policy loss (verl's policy_loss registry entry): log-probs and advantages in, a scalar and metrics out. */
export type PolicyLoss = (input: PolicyLossInput, options: PolicyLossOptions) => PolicyLossResult;

/** The settings with verl's defaults filled in. */
export function policyLossSettings(options: PolicyLossOptions): PolicyLossSettings {
  return { ...DEFAULT_POLICY_LOSS_SETTINGS, ...options.policyLoss };
}

/**
 * The inputs' values inside the loss, for the losses that choose tokens by them: the actor's host
 * copies, or read here where the backend can (a GPU reads only after the gradient closure).
 */
function hostValues(mode: string, input: PolicyLossInput): PolicyLossHostValues {
  if (input.host) return input.host;
  if (!readsSynchronously()) {
    throw new InputError(
      `actor_rollout_ref.actor.policy_loss.loss_mode: '${mode}' chooses tokens by the current log-probs inside the gradient, and on the ${tf.getBackend()} backend the actor must give them (PolicyLossInput.host; the stock actors do)`,
    );
  }
  const read = (t: tf.Tensor) => t.dataSync() as Float32Array;
  return { logProb: read(input.logProb), oldLogProb: read(input.oldLogProb), advantages: read(input.advantages), responseMask: read(input.responseMask) };
}

/** Float32's masked mean over the valid tokens, as maskedMeanTensor computes it (sum / (count + 1e-8)). */
function hostMaskedMean(values: Float32Array, mask: Float32Array): number {
  let sum = 0;
  let count = 0;
  for (let i = 0; i < values.length; i++) {
    sum += values[i] * mask[i];
    count += mask[i];
  }
  return Math.fround(Math.fround(sum) / Math.fround(count + 1e-8));
}

/**
 * clip_cov's candidates on the host (for a GPU, from the actor's host values), as the tensor path
 * computes them in float32: valid, not clipped (clipped <= unclipped) and lb < cov < ub.
 */
function clipCovCandidates(host: PolicyLossHostValues, options: PolicyLossOptions, lb: number, ub: number): { flags: Uint8Array; tokens: number } {
  const { logProb, oldLogProb, advantages, responseMask } = host;
  const f = Math.fround;
  const advMean = hostMaskedMean(advantages, responseMask);
  const lpMean = hostMaskedMean(logProb, responseMask);
  const flags = new Uint8Array(logProb.length);
  let tokens = 0;
  for (let i = 0; i < logProb.length; i++) {
    tokens += responseMask[i];
    const ratio = f(Math.exp(f(logProb[i] - oldLogProb[i])));
    const negA = -advantages[i];
    const unclipped = f(negA * ratio);
    const clipped = f(negA * Math.min(Math.max(ratio, f(1 - options.clipRatioLow)), f(1 + options.clipRatioHigh)));
    const cov = f(f(advantages[i] - advMean) * f(logProb[i] - lpMean));
    flags[i] = responseMask[i] > 0 && !(clipped > unclipped) && cov > lb && cov < ub ? 1 : 0;
  }
  return { flags, tokens };
}

/** The token losses times the rollout correction's weights, when there are any. */
function weighted(losses: tf.Tensor, input: PolicyLossInput): tf.Tensor2D {
  return (input.tokenWeights ? tf.mul(losses, input.tokenWeights) : losses) as tf.Tensor2D;
}

const asFloat = (t: tf.Tensor) => tf.cast(t, 'float32');

/**
 * Runs `body` in a tidy that keeps only the loss; `body` sets the metrics through `report`. The
 * loss stays in the caller's gradient graph (tfjs keeps what the backward pass needs).
 */
function tidyLoss(body: (report: (stats: Record<string, tf.Tensor>) => void) => tf.Scalar): PolicyLossResult {
  let metrics: PendingMetrics = {};
  const loss = tf.tidy(() => body((stats) => (metrics = keepMetrics(stats))));
  return { loss, metrics };
}

/** verl's assertion in compute_policy_loss_vanilla. */
export function checkDualClip(clipRatioC: number): void {
  if (!(clipRatioC > 1)) throw new InputError(`actor_rollout_ref.actor.clip_ratio_c: the dual-clip bound must be greater than 1, got ${clipRatioC}`);
}

/**
 * compute_policy_loss_vanilla (PPO's clipped surrogate with dual clip), per token:
 *   log r = clamp(logProb - oldLogProb, -20, 20),  r = exp(log r)
 *   l1 = -A r,  l2 = -A clamp(r, 1 - low, 1 + high),  l = max(l1, l2)
 *   for A < 0 (dual clip): l = min(l, -A c)
 * times input.tokenWeights when given, aggregated by lossAggMode. Metrics (masked means, with masked_mean's 1e-8):
 *   pg_clipfrac = mean[l2 > l1], ppo_kl = mean[-log r],
 *   pg_clipfrac_lower = mean[(max(l1, l2) > -A c) and A < 0].
 */
export const vanillaPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  const { clipRatioLow, clipRatioHigh, clipRatioC } = options;
  checkDualClip(clipRatioC);
  return tidyLoss((report) => {
    const logRatio = tf.clipByValue(tf.sub(logProb, oldLogProb), -20, 20);
    const ratio = tf.exp(logRatio);
    const negAdvantages = tf.neg(advantages);
    const unclipped = tf.mul(negAdvantages, ratio);
    const clipped = tf.mul(negAdvantages, tf.clipByValue(ratio, 1 - clipRatioLow, 1 + clipRatioHigh));
    const ppoLosses = torchMaximum(unclipped, clipped);
    const dualBound = tf.mul(negAdvantages, clipRatioC);
    // Off the tape: distillation's advantages derive from the student's own log-probs (no gradient through them, and tfjs has none for Less).
    const negative = constantFrom([advantages], ([a]) => tf.less(a, 0));
    const tokenLosses = tf.where(negative, torchMinimum(dualBound, ppoLosses), ppoLosses);
    report({
      'actor/pg_clipfrac': maskedMeanTensor(asFloat(tf.greater(clipped, unclipped)), responseMask),
      'actor/ppo_kl': maskedMeanTensor(tf.neg(logRatio), responseMask),
      'actor/pg_clipfrac_lower': maskedMeanTensor(asFloat(tf.logicalAnd(tf.greater(ppoLosses, dualBound), negative)), responseMask),
    });
    return aggregateLoss(weighted(tokenLosses, input), responseMask, options.lossAggMode, options.globalBatchInfo);
  });
};

/**
 * The two DPPO losses (compute_policy_loss_dppo_tv / _dppo_kl, arXiv 2602.04879): a policy
 * gradient -A sg(min(r, c)) log pi on the tokens whose divergence from the old policy stays within
 * clip_ratio_low / clip_ratio_high (here thresholds on a divergence, not on the ratio), c being
 * clip_ratio_c (verl reads it with a fallback of 20 that its ActorConfig's 3.0 always overrides).
 * `valid` gets log pi (a constant copy), pi and pi_old, and returns 1 on the tokens kept, 0 elsewhere.
 */
function dppoLoss(input: PolicyLossInput, options: PolicyLossOptions, valid: (logProb: tf.Tensor, prob: tf.Tensor, oldProb: tf.Tensor) => tf.Tensor): PolicyLossResult {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  return tidyLoss((report) => {
    const logRatio = tf.clipByValue(tf.sub(logProb, oldLogProb), -20, 20);
    const ratio = tf.exp(logRatio);
    const truncated = stopGradient(tf.minimum(ratio, options.clipRatioC));
    const keep = constantFrom([logProb, oldLogProb], ([lp, old]) => valid(lp, tf.exp(lp), tf.exp(old)));
    const tokenLosses = tf.mul(tf.mul(tf.mul(tf.neg(advantages), truncated), logProb), keep);
    report({
      'actor/pg_clipfrac': maskedMeanTensor(tf.sub(1, keep), responseMask),
      'actor/ppo_kl': maskedMeanTensor(tf.neg(logRatio), responseMask),
      'actor/pg_clipfrac_lower': maskedMeanTensor(tf.mul(asFloat(tf.greater(ratio, options.clipRatioC)), keep), responseMask),
    });
    return aggregateLoss(weighted(tokenLosses, input), responseMask, options.lossAggMode, options.globalBatchInfo);
  });
}

/** DPPO-Binary-TV: kept where p - p_old <= high (A > 0) or p - p_old >= -low (A <= 0). */
export const dppoTvPolicyLoss: PolicyLoss = (input, options) =>
  dppoLoss(input, options, (_logProb, prob, oldProb) => {
    const change = tf.sub(prob, oldProb);
    return tf.where(tf.greater(input.advantages, 0), asFloat(tf.lessEqual(change, options.clipRatioHigh)), asFloat(tf.greaterEqual(change, -options.clipRatioLow)));
  });

/**
 * DPPO-Binary-KL: the KL between the Bernoulli(p_old) and Bernoulli(p) of the sampled token,
 *   kl = p_old (log p_old - log p) + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8)),
 * kept where kl <= high or p <= p_old (A > 0), kl <= low or p >= p_old (A <= 0).
 */
export const dppoKlPolicyLoss: PolicyLoss = (input, options) =>
  dppoLoss(input, options, (logProb, prob, oldProb) => {
    const binaryKl = tf.add(
      tf.mul(oldProb, tf.sub(input.oldLogProb, logProb)),
      tf.mul(tf.sub(1, oldProb), tf.log(tf.div(tf.add(tf.sub(1, oldProb), 1e-8), tf.add(tf.sub(1, prob), 1e-8)))),
    );
    const positive = tf.logicalOr(tf.lessEqual(binaryKl, options.clipRatioHigh), tf.lessEqual(prob, oldProb));
    const negative = tf.logicalOr(tf.lessEqual(binaryKl, options.clipRatioLow), tf.greaterEqual(prob, oldProb));
    return tf.where(tf.greater(input.advantages, 0), asFloat(positive), asFloat(negative));
  });

/**
 * GSPO (compute_policy_loss_gspo, arXiv 2507.18071): the sequence's mean log ratio with each token's
 * own gradient, s = exp(min(log pi - sg(log pi) + sg(mean_t(log pi - log pi_old)), 10)), then PPO's
 * clip on s without the dual clip; always aggregated seq-mean-token-mean (verl ignores
 * loss_agg_mode here). The mean divides by max(row tokens, 1); pg_clipfrac_lower is 0.
 */
export const gspoPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  return tidyLoss((report) => {
    const logRatio = tf.sub(logProb, oldLogProb);
    const rowLength = tf.maximum(tf.sum(responseMask, 1, true), 1);
    const seqLogRatio = tf.div(tf.sum(tf.mul(logRatio, responseMask), 1, true), rowLength);
    const logSeqRatio = tf.minimum(tf.add(tf.sub(logProb, stopGradient(logProb)), stopGradient(seqLogRatio)), 10);
    const seqRatio = tf.exp(logSeqRatio);
    const negAdvantages = tf.neg(advantages);
    const unclipped = tf.mul(negAdvantages, seqRatio);
    const clipped = tf.mul(negAdvantages, tf.clipByValue(seqRatio, 1 - options.clipRatioLow, 1 + options.clipRatioHigh));
    const tokenLosses = torchMaximum(unclipped, clipped);
    report({
      'actor/pg_clipfrac': maskedMeanTensor(asFloat(tf.greater(clipped, unclipped)), responseMask),
      'actor/ppo_kl': maskedMeanTensor(tf.neg(logRatio), responseMask),
      'actor/pg_clipfrac_lower': tf.scalar(0),
    });
    return aggregateLoss(weighted(tokenLosses, input), responseMask, 'seq-mean-token-mean', options.globalBatchInfo);
  });
};

/**
 * SAPO (compute_policy_loss_sapo, arXiv 2511.20347): a soft gate in place of the clip,
 *   l = -A sigmoid(tau (r - 1)) 4 / tau,  tau = tau_pos for A > 0, tau_neg otherwise,
 * r from the log ratio clamped to [-20, 20]; always seq-mean-token-mean; both clip fractions 0.
 */
export const sapoPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  const tauPos = options.tauPos ?? 1.0;
  const tauNeg = options.tauNeg ?? 1.05;
  return tidyLoss((report) => {
    const logRatio = tf.clipByValue(tf.sub(logProb, oldLogProb), -20, 20);
    const ratio = tf.exp(logRatio);
    const tau = tf.where(tf.greater(advantages, 0), tf.fill(advantages.shape, tauPos), tf.fill(advantages.shape, tauNeg));
    const gates = tf.mul(tf.sigmoid(tf.mul(tau, tf.sub(ratio, 1))), tf.div(4, tau));
    const tokenLosses = tf.mul(tf.neg(gates), advantages);
    report({ 'actor/pg_clipfrac': tf.scalar(0), 'actor/ppo_kl': maskedMeanTensor(tf.neg(logRatio), responseMask), 'actor/pg_clipfrac_lower': tf.scalar(0) });
    return aggregateLoss(weighted(tokenLosses, input), responseMask, 'seq-mean-token-mean', options.globalBatchInfo);
  });
};

/** GPG (compute_policy_loss_gpg, arXiv 2504.02546): the plain policy gradient -A log pi, no ratio; no metrics. */
export const gpgPolicyLoss: PolicyLoss = (input, options) =>
  tidyLoss(() => aggregateLoss(weighted(tf.mul(tf.neg(input.logProb), input.advantages), input), input.responseMask, options.lossAggMode, options.globalBatchInfo));

/** `count` of the candidates, drawn without replacement by a seeded shuffle (clip_cov's randperm). */
export function seededSelection(seed: number): (candidates: readonly number[], count: number) => number[] {
  return (candidates, count) => {
    const pool = [...candidates];
    const rng = new Rng(seed);
    const n = Math.min(count, pool.length);
    for (let i = 0; i < n; i++) {
      const j = i + rng.int(pool.length - i);
      [pool[i], pool[j]] = [pool[j], pool[i]];
    }
    return pool.slice(0, n);
  };
}

/**
 * Clip-Cov (compute_policy_loss_clip_cov, arXiv 2505.22617): PPO's clip (no ratio clamp, no dual
 * clip) with a few tokens' losses dropped: among the valid tokens that PPO's clip leaves alone and
 * whose covariance (A - mean A)(log pi - mean log pi) lies strictly between clip_cov_lb and
 * clip_cov_ub, max(1, floor(clip_cov_ratio * valid tokens)) are chosen at random (verl: randperm;
 * here seeded by options.seed, or options.select) and multiplied by 0, a constant. The covariance
 * and the choice take no gradient. pg_clipfrac is the share dropped; no pg_clipfrac_lower.
 */
export const clipCovPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  const s = policyLossSettings(options);
  if (!(s.clipCovRatio > 0)) throw new InputError(`actor_rollout_ref.actor.policy_loss.clip_cov_ratio: must be greater than 0, got ${s.clipCovRatio}`);
  return tidyLoss((report) => {
    const logRatio = tf.sub(logProb, oldLogProb);
    const ratio = tf.exp(logRatio);
    const negAdvantages = tf.neg(advantages);
    const unclipped = tf.mul(negAdvantages, ratio);
    const clipped = tf.mul(negAdvantages, tf.clipByValue(ratio, 1 - options.clipRatioLow, 1 + options.clipRatioHigh));
    const valid = tf.greater(responseMask, 0);
    const cov = tf.mul(tf.sub(advantages, maskedMeanTensor(advantages, responseMask)), tf.sub(logProb, maskedMeanTensor(logProb, responseMask)));
    // On a GPU the choice is made from the actor's host values; elsewhere from these tensors.
    const { flags, tokens } = input.host
      ? clipCovCandidates(input.host, options, s.clipCovLb, s.clipCovUb)
      : (() => {
          const candidate = tf.logicalAnd(tf.logicalAnd(valid, tf.logicalNot(tf.greater(clipped, unclipped))), tf.logicalAnd(tf.greater(cov, s.clipCovLb), tf.less(cov, s.clipCovUb)));
          if (!readsSynchronously()) hostValues('clip_cov', input);
          return { flags: candidate.dataSync() as Uint8Array, tokens: tf.sum(responseMask).dataSync()[0] };
        })();
    const candidates: number[] = [];
    flags.forEach((f, i) => f && candidates.push(i));
    const clipCount = Math.max(Math.trunc(s.clipCovRatio * tokens), 1);
    const dropped = new Float32Array(flags.length).fill(1);
    const chosen = candidates.length ? (options.select ?? seededSelection(options.seed ?? 0))(candidates, Math.min(clipCount, candidates.length)) : [];
    for (const i of chosen) dropped[i] = 0;
    const corr = tf.tensor2d(dropped, advantages.shape);
    report({ 'actor/pg_clipfrac': maskedMeanTensor(tf.sub(1, corr), responseMask), 'actor/ppo_kl': maskedMeanTensor(tf.neg(logRatio), responseMask) });
    const tokenLosses = tf.mul(torchMaximum(unclipped, clipped), corr);
    return aggregateLoss(weighted(tokenLosses, input), responseMask, options.lossAggMode, options.globalBatchInfo);
  });
};

/**
 * The flat indices of the `count` largest values (ties: the lower index first), as torch.topk
 * picks them up to its unspecified order among equals.
 */
function topIndices(values: ArrayLike<number>, count: number): number[] {
  return Array.from({ length: values.length }, (_, i) => i)
    .sort((a, b) => values[b] - values[a] || a - b)
    .slice(0, count);
}

/**
 * KL-Cov (compute_policy_loss_kl_cov, arXiv 2505.22617): the unclipped -A r (no clamp) on every
 * token, plus ppo_kl_coef |log r| on the max(1, floor(kl_cov_ratio * n)) valid tokens of largest
 * covariance (A - mean A)(log pi - mean log pi) over the n valid tokens (plain means; the choice
 * takes no gradient). |log r| has gradient 0 at 0, as torch's abs. Metric: ppo_kl = mean |log r|.
 */
export const klCovPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  const s = policyLossSettings(options);
  if (!(s.klCovRatio > 0)) throw new InputError(`actor_rollout_ref.actor.policy_loss.kl_cov_ratio: must be greater than 0, got ${s.klCovRatio}`);
  return tidyLoss((report) => {
    const logRatio = tf.sub(logProb, oldLogProb);
    const absKl = torchAbs(logRatio);
    const ratio = tf.exp(logRatio);
    const plain = tf.mul(tf.neg(advantages), ratio);
    const penalised = tf.add(plain, tf.mul(absKl, s.ppoKlCoef));
    // The covariance in float32 on the valid tokens, as verl computes it on the CPU.
    const { responseMask: maskData, advantages: advData, logProb: lpData } = hostValues('kl_cov', input);
    const valid: number[] = [];
    maskData.forEach((m, i) => m > 0 && valid.push(i));
    const chosen = new Float32Array(maskData.length);
    if (valid.length) {
      const adv = Float32Array.from(valid, (i) => advData[i]);
      const lp = Float32Array.from(valid, (i) => lpData[i]);
      const advMean = Math.fround(adv.reduce((a, x) => a + x, 0) / adv.length);
      const lpMean = Math.fround(lp.reduce((a, x) => a + x, 0) / lp.length);
      const cov = Float32Array.from(valid, (_, j) => Math.fround(adv[j] - advMean) * Math.fround(lp[j] - lpMean));
      for (const j of topIndices(cov, Math.max(1, Math.trunc(valid.length * s.klCovRatio)))) chosen[valid[j]] = 1;
    }
    const tokenLosses = tf.where(tf.tensor2d(chosen, advantages.shape).cast('bool'), penalised, plain);
    report({ 'actor/ppo_kl': maskedMeanTensor(absKl, responseMask) });
    return aggregateLoss(weighted(tokenLosses, input), responseMask, options.lossAggMode, options.globalBatchInfo);
  });
};

/**
 * GMPO (compute_policy_loss_geo_mean, arXiv 2507.20673): the geometric mean of the token ratios per
 * sequence, each log ratio d clipped sign-aware, sgn(A) min(sgn(A) d, sgn(A) clamp(d, -low, high)),
 *   ratio_b = exp(sum_t m d'_t / (tokens_b + 1e-8)),  A_b = sum_t m A_t / (tokens_b + 1e-8),
 *   loss = mean_b(-A_b ratio_b [times exp(sum_t m log(w_t + 1e-10) / (tokens_b + 1e-8))]),
 * a plain mean over every row of the batch (loss_agg_mode does not apply; no log-ratio clamp).
 * Departure: verl takes that mean per micro-batch and its new engine sums micro-batch losses, so
 * the step grows with the number of micro-batches; here the mean is scaled by options.rowShare so
 * micro-batches add up to the mini-batch's mean, whatever their size. Metrics: pg_clipfrac and
 * pg_clipfrac_lower are the shares of tokens whose d was clamped with A > 0 and A < 0.
 */
export const geoMeanPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  return tidyLoss((report) => {
    const logRatio = tf.sub(logProb, oldLogProb);
    const sign = signOf(advantages);
    const clamped = tf.clipByValue(logRatio, -options.clipRatioLow, options.clipRatioHigh);
    const signedMin = tf.mul(torchMinimum(tf.mul(sign, logRatio), tf.mul(sign, clamped)), sign);
    const rowTokens = tf.add(tf.sum(responseMask, 1), 1e-8);
    const ratio = tf.exp(tf.div(tf.sum(tf.mul(signedMin, responseMask), 1), rowTokens));
    const rowAdvantage = tf.div(tf.sum(tf.mul(advantages, responseMask), 1), rowTokens);
    let rowLosses = tf.mul(tf.neg(rowAdvantage), ratio);
    if (input.tokenWeights) rowLosses = tf.mul(rowLosses, tf.exp(tf.div(tf.sum(tf.mul(tf.log(tf.add(input.tokenWeights, 1e-10)), responseMask), 1), rowTokens)));
    const wasClamped = asFloat(tf.notEqual(logRatio, clamped));
    report({
      'actor/pg_clipfrac': maskedMeanTensor(tf.mul(wasClamped, asFloat(tf.greater(advantages, 0))), responseMask),
      'actor/ppo_kl': maskedMeanTensor(tf.neg(logRatio), responseMask),
      'actor/pg_clipfrac_lower': maskedMeanTensor(tf.mul(wasClamped, asFloat(tf.less(advantages, 0))), responseMask),
    });
    return tf.mul(tf.mean(rowLosses), options.rowShare ?? 1) as tf.Scalar;
  });
};

/** verl's check in compute_policy_loss_dro. */
export function checkDroBeta(beta: number | null): asserts beta is number {
  if (beta === null || !(beta > 0)) throw new InputError(`actor_rollout_ref.actor.policy_loss.dro_beta: DRO needs a positive value, got ${beta}`);
}

/** DRO (compute_policy_loss_dro): -(A log pi - beta/2 (log pi - log pi_old)^2), beta = policy_loss.dro_beta. */
export const droPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  const beta = policyLossSettings(options).droBeta;
  checkDroBeta(beta);
  return tidyLoss((report) => {
    const logRatio = tf.sub(logProb, oldLogProb);
    const tokenLosses = tf.neg(tf.sub(tf.mul(logProb, advantages), tf.mul(tf.square(logRatio), 0.5 * beta)));
    report({ 'actor/ppo_kl': maskedMeanTensor(tf.neg(logRatio), responseMask) });
    return aggregateLoss(weighted(tokenLosses, input), responseMask, options.lossAggMode, options.globalBatchInfo);
  });
};

/**
 * CISPO (compute_policy_loss_cispo, arXiv 2506.13585): -sg(clamp(r, 1 - low, 1 + high)) A log pi,
 * r from the log ratio clamped to [-20, 20]: the clipped ratio weighs the gradient of log pi and
 * takes none itself. pg_clipfrac = mean[r != clipped r]; pg_clipfrac_lower 0.
 */
export const cispoPolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  return tidyLoss((report) => {
    const logRatio = tf.clipByValue(tf.sub(logProb, oldLogProb), -20, 20);
    const ratio = tf.exp(logRatio);
    const clippedRatio = tf.clipByValue(ratio, 1 - options.clipRatioLow, 1 + options.clipRatioHigh);
    const tokenLosses = tf.mul(tf.mul(tf.neg(stopGradient(clippedRatio)), advantages), logProb);
    report({
      'actor/pg_clipfrac': maskedMeanTensor(asFloat(tf.notEqual(ratio, clippedRatio)), responseMask),
      'actor/ppo_kl': maskedMeanTensor(tf.neg(logRatio), responseMask),
      'actor/pg_clipfrac_lower': tf.scalar(0),
    });
    return aggregateLoss(weighted(tokenLosses, input), responseMask, options.lossAggMode, options.globalBatchInfo);
  });
};

/**
 * compute_policy_loss_reinforce (bypass_mode's reinforce, not registered by verl): -A log pi times
 * input.tokenWeights (the importance weights, constants) when given, aggregated on responseMask;
 * ppo_kl = mean[-(log pi - oldLogProb)], oldLogProb being the rollout policy's.
 */
export const reinforcePolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  return tidyLoss((report) => {
    report({ 'actor/ppo_kl': maskedMeanTensor(tf.neg(tf.sub(logProb, oldLogProb)), responseMask) });
    return aggregateLoss(weighted(tf.mul(tf.neg(advantages), logProb), input), responseMask, options.lossAggMode, options.globalBatchInfo);
  });
};

/**
 * bypass_mode (compute_policy_loss_bypass_mode): oldLogProb is taken as the rollout policy's.
 * Importance weights w = pi / pi_rollout (token or sequence level, truncated or IcePop) and a
 * rejection mask are computed without gradient from the current log-probs
 * (rolloutCorrectionAndRejection); then, on the mask with rejected tokens removed:
 *  - loss_type reinforce: -A log pi (times w when weights are on), ppo_kl = mean[-(log pi - log pi_rollout)];
 *  - loss_type ppo_clip: vanilla on pi / pi_rollout, without weights (the ratio already is one).
 * input.tokenWeights are ignored, as verl ignores rollout_is_weights here. Metrics add rollout_corr/*.
 */
export const bypassModePolicyLoss: PolicyLoss = (input, options) => {
  const { logProb, oldLogProb, advantages, responseMask } = input;
  const settings = policyLossSettings(options).rolloutCorrection;
  const prefix = 'actor_rollout_ref.actor.policy_loss.rollout_correction';
  checkRolloutCorrection(settings, prefix);
  const [B, R] = responseMask.shape;
  const host = hostValues('bypass_mode', input);
  const correction = rolloutCorrectionAndRejection(host.logProb, host.oldLogProb, host.responseMask, B, R, settings, prefix);
  const mask = tf.tensor2d(correction.mask, [B, R]);
  const weights = correction.weights ? tf.tensor2d(correction.weights, [B, R]) : undefined;
  const loss = settings.lossType === 'reinforce' ? reinforcePolicyLoss : vanillaPolicyLoss;
  const result = loss({ logProb, oldLogProb, advantages, responseMask: mask, tokenWeights: settings.lossType === 'reinforce' ? weights : undefined }, options);
  tf.dispose([mask, weights].filter((t): t is tf.Tensor2D => t !== undefined));
  return { loss: result.loss, metrics: { ...result.metrics, ...correction.metrics } };
};

/** verl v0.9.0's registered policy losses by name, in its registration order. */
export const VERL_POLICY_LOSSES: readonly (readonly [string, PolicyLoss])[] = [
  ['vanilla', vanillaPolicyLoss],
  ['dppo_tv', dppoTvPolicyLoss],
  ['dppo_kl', dppoKlPolicyLoss],
  ['gspo', gspoPolicyLoss],
  ['sapo', sapoPolicyLoss],
  ['gpg', gpgPolicyLoss],
  ['clip_cov', markReadsInputValues(clipCovPolicyLoss)],
  ['kl_cov', markReadsInputValues(klCovPolicyLoss)],
  ['geo_mean', geoMeanPolicyLoss],
  ['dro', droPolicyLoss],
  ['cispo', cispoPolicyLoss],
  ['bypass_mode', markReadsInputValues(bypassModePolicyLoss)],
];

/**
 * Refuses, before a run, options a loss of this name cannot run with (InputError naming the key):
 * the assertions and checks of verl's functions, raised at the start instead of the first update.
 */
export function checkPolicyLossOptions(name: string, options: PolicyLossOptions): void {
  const s = policyLossSettings(options);
  const prefix = 'actor_rollout_ref.actor.policy_loss.rollout_correction';
  switch (name) {
    case 'vanilla':
      checkDualClip(options.clipRatioC);
      break;
    case 'clip_cov':
      if (!(s.clipCovRatio > 0)) throw new InputError(`actor_rollout_ref.actor.policy_loss.clip_cov_ratio: must be greater than 0, got ${s.clipCovRatio}`);
      break;
    case 'kl_cov':
      if (!(s.klCovRatio > 0)) throw new InputError(`actor_rollout_ref.actor.policy_loss.kl_cov_ratio: must be greater than 0, got ${s.klCovRatio}`);
      break;
    case 'dro':
      checkDroBeta(s.droBeta);
      break;
    case 'bypass_mode':
      checkRolloutCorrection(s.rolloutCorrection, prefix);
      if (s.rolloutCorrection.lossType === 'ppo_clip') checkDualClip(options.clipRatioC);
      break;
  }
}
