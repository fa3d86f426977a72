// From scores to advantages, as one training step composes them (verl's compute_advantage, plus
// the dense shaping rewards of RewardShapers):
//   1. token rewards = token-level scores, plus the shaping rewards unless the estimator is an
//      outcome estimator (it sees one score per response, e.g. grpo);
//   2. minus beta * KL(old || ref) per token when algorithm.use_kl_in_reward;
//   3. the registered estimator gives advantages and returns;
//   4. for an outcome estimator, the shaping rewards enter as their discounted return
//      A_k += sum_{j >= k} gamma^(j - k) rho_j (RLFR's way into GRPO).
import type { Metrics } from '../contracts/index.js';
import { addShapingReturns, type AdvantageEstimator, type AdvantageInput, type EstimatorTraits } from './advantages.js';
import type { KlPenaltyType } from '../config/choices.js';
import { applyKlPenalty, type KlController } from './kl.js';

/** What composeAdvantages reads: one step's scores, shaping, mask, groups, values and settings. */
export interface AdvantageComposition {
  estimator: AdvantageEstimator;
  estimatorTraits: EstimatorTraits;
  batch: number;
  length: number;
  /** [B, R] outcome scores at each response's last valid token. */
  tokenScores: Float32Array;
  /** [B, R] dense shaping rewards (zeros without shapers). */
  shaping: Float32Array;
  responseMask: Float32Array;
  groupIds: (string | number)[];
  /** [B, R] critic values, for estimators that need them. */
  values?: Float32Array;
  gamma: number;
  lam: number;
  normByStd: boolean;
  /** KL in the reward (algorithm.use_kl_in_reward): the log-probs and the coefficient's controller. */
  klInReward?: { oldLogProbs: Float32Array; refLogProbs: Float32Array; type: KlPenaltyType; controller: KlController };
  /** What some estimators read besides rewards (AdvantageInput's fields of the same names): remax, the optimal token baselines, gdpo. */
  extra?: Pick<AdvantageInput, 'rewardBaselines' | 'oldLogProbs' | 'sumPiSquared' | 'rolloutIsWeights' | 'rewardComponents' | 'gdpo'>;
}

/** Advantages and returns for the actor and critic, with the token rewards they came from. */
export interface ComposedAdvantages {
  advantages: Float32Array;
  returns: Float32Array;
  /** [B, R] what each token was rewarded with, shaping and KL included (token_level_rewards). */
  tokenRewards: Float32Array;
  metrics: Metrics;
}

/** One step's advantages from its scores: the four steps above, in order. */
export function composeAdvantages(c: AdvantageComposition): ComposedAdvantages {
  const outcomeOnly = c.estimatorTraits.outcome === true;
  let rewards: Float32Array = Float32Array.from(c.tokenScores);
  if (!outcomeOnly) for (let i = 0; i < rewards.length; i++) rewards[i] += c.shaping[i];
  const metrics: Metrics = {};
  if (c.klInReward) {
    const { oldLogProbs, refLogProbs, type, controller } = c.klInReward;
    const penalised = applyKlPenalty(rewards, oldLogProbs, refLogProbs, c.responseMask, c.batch, c.length, type, controller);
    rewards = penalised.tokenRewards;
    metrics['actor/reward_kl_penalty'] = penalised.meanKl;
    metrics['actor/reward_kl_penalty_coeff'] = penalised.coef;
  }
  const out = c.estimator({
    batch: c.batch,
    length: c.length,
    tokenRewards: rewards,
    responseMask: c.responseMask,
    values: c.values,
    groupIds: c.groupIds,
    gamma: c.gamma,
    lam: c.lam,
    normByStd: c.normByStd,
    epsilon: 1e-6,
    ...c.extra,
  });
  if (outcomeOnly && c.shaping.some((x) => x !== 0)) {
    addShapingReturns(out, c.shaping, c.responseMask, c.batch, c.length, c.gamma);
    for (let i = 0; i < rewards.length; i++) rewards[i] += c.shaping[i];
  }
  return { advantages: out.advantages, returns: out.returns, tokenRewards: rewards, metrics };
}
