// On-policy distillation's loss (verl's trainer/distillation/losses.py at verl main 1dda039): the
// student samples, a teacher scores the student's tokens, and the per-token divergence is either
// backpropagated directly (a supervised loss) or, with use_policy_gradient, its negative is the
// advantage of a separate vanilla PPO term (the reverse-KL reward of on-policy distillation).
//
//   estimator modes (k1/kl, abs, k2/mse, k3/low_var_kl), at each sampled token y_t:
//     l_t = kl_penalty(log pi_s(y_t), log pi_t(y_t))          (k1: s - t)
//   forward_kl_topk, over the teacher's k most likely tokens V_t at each position:
//     l_t = max(0, sum_{v in V_t} exp(t_v) (t_v - s_v))       (neither side renormalised)
//   with log_prob_min_clamp: s_v, t_v >= the clamp first; with loss_max_clamp: l_t in [-c, c].
//   use_policy_gradient: L = vanilla_ppo(log pi_s, log pi_old, A = -sg(l)); else L = agg(l).
//   In the actor: loss = task + coef * L, or L alone without task rewards (coef 1).
import * as tf from '@tensorflow/tfjs-core';
import { stopGradient } from '../engine/ops.js';
import { keepMetrics, type PendingMetrics } from '../engine/readback.js';
import type { DISTILLATION_LOSS_MODES, KlEstimator, LossAggMode } from '../config/choices.js';
import { klPenalty } from './kl.js';
import { aggregateLoss, maskedMeanTensor, type AggregateLossOptions } from './loss-aggregation.js';
import { vanillaPolicyLoss } from './policy-losses.js';

export type DistillationLossMode = (typeof DISTILLATION_LOSS_MODES)[number];

/** distillation.distillation_loss as the loss reads it. */
export interface DistillationLossSettings {
  lossMode: DistillationLossMode;
  lossMaxClamp: number | null;
  logProbMinClamp: number | null;
  usePolicyGradient: boolean;
  clipRatioLow: number;
  clipRatioHigh: number;
  lossAggMode: LossAggMode;
  globalBatchInfo?: AggregateLossOptions;
}

/** What the loss is given: [B, R] log-probs at the sampled tokens, or [B, R, k] at the teacher's top-k ids. */
export type DistillationInput =
  | { kind: 'estimator'; studentLogProbs: tf.Tensor2D; teacherLogProbs: tf.Tensor2D }
  | { kind: 'topk'; studentTopLogProbs: tf.Tensor3D; teacherTopLogProbs: tf.Tensor3D };

/** Whether a mode needs the teacher's top-k (and the student's log-probs at those ids). */
export function usesTopK(mode: DistillationLossMode): boolean {
  return mode === 'forward_kl_topk';
}

/** Masked min and max of [B, R] values over the valid tokens (0 when there are none). */
function maskedRange(values: tf.Tensor, mask: tf.Tensor): [tf.Scalar, tf.Scalar] {
  const valid = tf.greater(mask, 0);
  const any = tf.greater(tf.sum(mask), 0);
  const min = tf.min(tf.where(valid, values, tf.fill(values.shape, Infinity)));
  const max = tf.max(tf.where(valid, values, tf.fill(values.shape, -Infinity)));
  return [tf.where(any, min, 0) as tf.Scalar, tf.where(any, max, 0) as tf.Scalar];
}

/**
 * Per-token distillation losses [B, R] (before loss_max_clamp) and their mode's metrics: abs_loss
 * for the estimators; the top-k mass of each side (before log_prob_min_clamp) for forward_kl_topk.
 */
export function tokenDistillationLosses(input: DistillationInput, mask: tf.Tensor2D, settings: Pick<DistillationLossSettings, 'lossMode' | 'logProbMinClamp'>): { losses: tf.Tensor2D; stats: Record<string, tf.Tensor> } {
  if (input.kind === 'estimator') {
    if (usesTopK(settings.lossMode)) throw new Error(`distillation: ${settings.lossMode} needs the teacher's top-k log-probs`);
    const losses = klPenalty(input.studentLogProbs, input.teacherLogProbs, settings.lossMode as KlEstimator) as tf.Tensor2D;
    // k1 can be negative: its mean magnitude says how far apart the two are.
    return { losses, stats: { 'distillation/abs_loss': maskedMeanTensor(tf.abs(losses), mask) } };
  }
  let student: tf.Tensor = input.studentTopLogProbs;
  let teacher: tf.Tensor = input.teacherTopLogProbs;
  const studentMass = tf.sum(tf.exp(student), -1);
  const teacherMass = tf.sum(tf.exp(teacher), -1);
  if (settings.logProbMinClamp !== null) {
    student = tf.maximum(student, settings.logProbMinClamp);
    teacher = tf.maximum(teacher, settings.logProbMinClamp);
  }
  // sum_k p_t (log p_t - log p_s); top-k does not sum to 1 on either side, so it can dip below 0.
  const forward = tf.sum(tf.mul(tf.exp(teacher), tf.sub(teacher, student)), -1);
  const [studentMin, studentMax] = maskedRange(studentMass, mask);
  const [teacherMin, teacherMax] = maskedRange(teacherMass, mask);
  return {
    losses: tf.relu(forward) as tf.Tensor2D,
    stats: {
      'distillation/student_mass': maskedMeanTensor(studentMass, mask),
      'distillation/student_mass_min': studentMin,
      'distillation/student_mass_max': studentMax,
      'distillation/teacher_mass': maskedMeanTensor(teacherMass, mask),
      'distillation/teacher_mass_min': teacherMin,
      'distillation/teacher_mass_max': teacherMax,
    },
  };
}

/**
 * The distillation term of one micro-batch (verl's distillation_loss): the token losses clamped by
 * loss_max_clamp, then a vanilla PPO term with advantages -losses (use_policy_gradient; the
 * losses carry no gradient there, the sampled tokens' log-probs do) or the losses aggregated as the
 * actor aggregates its own. Metrics (distillation/*) are kept scalars, read after the gradients.
 */
export function distillationLoss(
  input: DistillationInput,
  policy: { logProb: tf.Tensor2D; oldLogProb: tf.Tensor2D; tokenWeights?: tf.Tensor2D },
  mask: tf.Tensor2D,
  settings: DistillationLossSettings,
): { loss: tf.Scalar; metrics: PendingMetrics } {
  let metrics: PendingMetrics = {};
  let pgMetrics: PendingMetrics = {};
  const loss = tf.tidy(() => {
    const { losses: raw, stats } = tokenDistillationLosses(input, mask, settings);
    const [lossMin, lossMax] = maskedRange(raw, mask);
    const c = settings.lossMaxClamp;
    // Both sides: k1 is negative where the student is below the teacher.
    const losses = c === null ? raw : (tf.clipByValue(raw, -c, c) as tf.Tensor2D);
    let value: tf.Scalar;
    if (settings.usePolicyGradient) {
      const pg = vanillaPolicyLoss(
        { logProb: policy.logProb, oldLogProb: policy.oldLogProb, advantages: tf.neg(stopGradient(losses)) as tf.Tensor2D, responseMask: mask, tokenWeights: policy.tokenWeights },
        { clipRatioLow: settings.clipRatioLow, clipRatioHigh: settings.clipRatioHigh, clipRatioC: 3, lossAggMode: settings.lossAggMode, globalBatchInfo: settings.globalBatchInfo },
      );
      // The PG term's own metrics, under distillation/ as verl renames them.
      pgMetrics = Object.fromEntries(Object.entries(pg.metrics).map(([k, v]) => [k.replace(/^actor\//, 'distillation/'), v]));
      value = pg.loss;
    } else {
      value = aggregateLoss(losses, mask, settings.lossAggMode, settings.globalBatchInfo);
    }
    metrics = keepMetrics({ ...stats, 'distillation/loss_min': lossMin, 'distillation/loss_max': lossMax });
    return value;
  });
  return { loss, metrics: { ...metrics, ...pgMetrics } };
}
