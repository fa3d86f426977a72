// KL penalties and KL coefficient controllers (verl's verl/trainer/ppo/core_algos.py: kl_penalty /
// kl_penalty_forward, AdaptiveKLController, FixedKLController; apply_kl_penalty from
// verl/trainer/ppo/ray_trainer.py). Estimators follow http://joschu.net/blog/kl-approx.html.
import * as tf from '@tensorflow/tfjs-core';
import { InputError } from '../errors.js';
import { KL_PENALTY_TYPES, type KlEstimator, type KlPenaltyType } from '../config/choices.js';
import { stopGradient } from '../engine/ops.js';
import { torchAbs } from './torch-ops.js';


function checkType(type: string): asserts type is KlPenaltyType {
  if (!(KL_PENALTY_TYPES as readonly string[]).includes(type)) {
    throw new InputError(`unknown kl_penalty '${type}'; available: ${KL_PENALTY_TYPES.join(', ')}`);
  }
}

/**
 * The estimator whose value a kl_penalty name gives (a trailing '+' only changes the gradient).
 * 'full' needs the whole vocabulary's log-probs of both policies, which a [B, R] pair of sampled-token
 * log-probs does not hold; verl v0.9.0's kl_penalty_forward raises NotImplementedError for it too.
 */
export function klEstimatorOf(type: KlPenaltyType, key = 'kl_penalty'): KlEstimator {
  checkType(type);
  const base = type.endsWith('+') ? type.slice(0, -1) : type;
  if (base === 'full') throw new InputError(`${key}: '${type}' (the whole-vocabulary KL) is not implemented, as in verl v0.9.0 (kl_penalty_forward raises NotImplementedError); use kl, abs, mse, low_var_kl or their '+' variants`);
  return base as KlEstimator;
}

/** The estimator's value, differentiable in both inputs (kl_penalty_forward). */
function klForward(logProb: tf.Tensor, refLogProb: tf.Tensor, estimator: KlEstimator): tf.Tensor {
  const d = tf.sub(logProb, refLogProb);
  switch (estimator) {
    case 'kl':
    case 'k1':
      return d;
    case 'abs':
      return torchAbs(d);
    case 'mse':
    case 'k2':
      return tf.mul(tf.square(d), 0.5);
    case 'low_var_kl':
    case 'k3': {
      const k = tf.clipByValue(tf.neg(d), -20, 20);
      return tf.clipByValue(tf.sub(tf.sub(tf.exp(k), k), 1), -10, 10);
    }
  }
}

/**
 * Elementwise KL estimate between the policy and the reference from the log-probs of the sampled
 * tokens, d = logProb - refLogProb (verl v0.9.0's kl_penalty):
 *  - kl / k1: d
 *  - abs: |d| (its gradient at d = 0 is 0, as torch's abs has it, not tfjs's -1)
 *  - mse / k2: d^2 / 2
 *  - low_var_kl / k3: with k = clamp(-d, -20, 20), clamp(exp(k) - k - 1, -10, 10)
 *  - NAME+ (straight-through): the value of NAME, the gradient of k2 (d with respect to logProb):
 *    k2 - sg(k2) + sg(NAME), k2 being the estimator whose expected gradient is the KL's.
 * Differentiable with respect to both inputs; 'full' throws (see klEstimatorOf).
 */
export function klPenalty(logProb: tf.Tensor, refLogProb: tf.Tensor, type: KlPenaltyType): tf.Tensor {
  const estimator = klEstimatorOf(type);
  return tf.tidy(() => {
    const forward = klForward(logProb, refLogProb, estimator);
    if (!type.endsWith('+')) return forward;
    const k2 = klForward(logProb, refLogProb, 'k2');
    return tf.add(tf.sub(k2, stopGradient(k2)), stopGradient(forward));
  });
}

/** klPenalty's value for one pair of numbers, in float64 (host side: no gradient, so '+' changes nothing). */
function klPenaltyValue(logProb: number, refLogProb: number, estimator: KlEstimator): number {
  const d = logProb - refLogProb;
  switch (estimator) {
    case 'kl':
    case 'k1':
      return d;
    case 'abs':
      return Math.abs(d);
    case 'mse':
    case 'k2':
      return 0.5 * d * d;
    case 'low_var_kl':
    case 'k3': {
      const k = Math.min(20, Math.max(-20, -d));
      return Math.min(10, Math.max(-10, Math.exp(k) - k - 1));
    }
  }
}


/** The KL coefficient (beta) of the in-reward penalty. */
export interface KlController {
  readonly value: number;
  update(currentKl: number, steps: number): void;
}

export class FixedKlController implements KlController {
  readonly value: number;

  constructor(coef: number) {
    this.value = coef;
  }

  update(_currentKl: number, _steps: number): void {}
}

/**
 * Ziegler et al.'s adaptive coefficient (arXiv 1909.08593), as verl's AdaptiveKLController:
 * e = clip(currentKl / targetKl - 1, -0.2, 0.2), value *= 1 + e * steps / horizon.
 */
export class AdaptiveKlController implements KlController {
  private coef: number;
  readonly targetKl: number;
  readonly horizon: number;

  constructor(initCoef: number, targetKl: number, horizon: number) {
    if (!(horizon > 0)) throw new InputError(`kl_ctrl.horizon: must be greater than 0, got ${horizon}`);
    this.coef = initCoef;
    this.targetKl = targetKl;
    this.horizon = horizon;
  }

  get value(): number {
    return this.coef;
  }

  update(currentKl: number, steps: number): void {
    const error = Math.min(0.2, Math.max(-0.2, currentKl / this.targetKl - 1));
    this.coef *= 1 + (error * steps) / this.horizon;
  }
}

/**
 * verl's apply_kl_penalty (use_kl_in_reward), on host arrays of shape [B*T]:
 *   kl_t = klPenalty(old, ref) * mask_t,  reward_t = score_t - beta * kl_t  (beta: the value before the update)
 *   meanKl = mean over the B rows of each row's masked mean of kl (sum / (tokens + 1e-8); a fully
 *            masked row counts as 0),
 * then controller.update(meanKl, B). Returns the rewards, meanKl (verl's actor/reward_kl_penalty)
 * and the coefficient applied (actor/reward_kl_penalty_coeff).
 */
export function applyKlPenalty(
  tokenScores: Float32Array,
  oldLogProb: Float32Array,
  refLogProb: Float32Array,
  mask: Float32Array,
  batch: number,
  length: number,
  type: KlPenaltyType,
  controller: KlController,
): { tokenRewards: Float32Array; meanKl: number; coef: number } {
  const estimator = klEstimatorOf(type);
  const size = batch * length;
  for (const [name, array] of [['tokenScores', tokenScores], ['oldLogProb', oldLogProb], ['refLogProb', refLogProb], ['mask', mask]] as const) {
    if (array.length !== size) throw new Error(`applyKlPenalty: ${name} has ${array.length} entries, expected ${batch}x${length}`);
  }
  const beta = controller.value;
  const tokenRewards = new Float32Array(size);
  let total = 0;
  for (let b = 0; b < batch; b++) {
    let rowKl = 0;
    let rowTokens = 0;
    for (let t = 0; t < length; t++) {
      const i = b * length + t;
      const kl = mask[i] !== 0 ? klPenaltyValue(oldLogProb[i], refLogProb[i], estimator) * mask[i] : 0;
      tokenRewards[i] = tokenScores[i] - beta * kl;
      rowKl += kl * mask[i];
      rowTokens += mask[i];
    }
    total += rowKl / (rowTokens + 1e-8);
  }
  const meanKl = batch > 0 ? total / batch : 0;
  controller.update(meanKl, batch);
  return { tokenRewards, meanKl, coef: beta };
}
