// Truncated importance sampling (TIS) for rollouts sampled by another engine (an inference server):
// its log-probs of the sampled tokens differ from the trainer's own (kernels, precision, a stale
// weight version), so the rollouts come from a slightly different policy. Each loss term is
// weighted by the truncated ratio trainer/engine, a constant (research/scale-out.md §4d).
// Plain arrays in, plain arrays out: the weights are constants and the metrics plain numbers.

/** The mismatch diagnostics, over the valid tokens of a batch. */
export type RolloutCorrectionMetrics = {
  /** Masked mean of |old − rollout|. */
  'rollout/logprob_diff_mean': number;
  /** Max of |old − rollout| (0 without valid tokens). */
  'rollout/logprob_diff_max': number;
  /** Fraction of valid tokens whose exp(old − rollout) exceeds the cap (0 without a cap). */
  'rollout/tis_clipfrac': number;
};

/** Per-token weights [B * R] and the batch's mismatch metrics. */
export interface TokenRolloutCorrection {
  weights: Float32Array;
  metrics: RolloutCorrectionMetrics;
}

/** Per-sequence weights [B], the token-level metrics, and how many non-empty sequences were truncated. */
export interface SequenceRolloutCorrection {
  weights: Float32Array;
  metrics: RolloutCorrectionMetrics & { 'rollout/tis_seq_clipfrac': number };
}

/**
 * Token-level TIS (for token-level losses such as PPO's): for valid tokens
 *   w_t = min(exp(old_t − rollout_t), cap)
 * and 1 at padding and when `cap` is null (correction off; the metrics are still reported).
 * `old` are the trainer's log-probs of the sampled tokens, `rollout` the engine's, `mask` the
 * response mask, all [B, R] flattened. Computed in float64, the weights stored as float32.
 */
export function tokenRolloutCorrection(old: ArrayLike<number>, rollout: ArrayLike<number>, mask: ArrayLike<number>, cap: number | null): TokenRolloutCorrection {
  const weights = new Float32Array(mask.length).fill(1);
  let tokens = 0;
  let diffSum = 0;
  let diffMax = 0;
  let clipped = 0;
  for (let i = 0; i < mask.length; i++) {
    if (mask[i] === 0) continue;
    const logRatio = old[i] - rollout[i];
    tokens += 1;
    diffSum += Math.abs(logRatio);
    diffMax = Math.max(diffMax, Math.abs(logRatio));
    if (cap === null) continue;
    const ratio = Math.exp(logRatio);
    if (ratio > cap) clipped += 1;
    weights[i] = Math.min(ratio, cap);
  }
  const per = (n: number) => (tokens ? n / tokens : 0);
  return { weights, metrics: { 'rollout/logprob_diff_mean': per(diffSum), 'rollout/logprob_diff_max': diffMax, 'rollout/tis_clipfrac': per(clipped) } };
}

/**
 * Sequence-level TIS (for sequence-level losses such as FlowRL's, whose own importance weight is
 * exp of a summed log ratio): for each row b of [B, R] arrays (R = mask.length / rows)
 *   w_b = min(exp(sum_t mask_bt (old_bt − rollout_bt)), cap)
 * and 1 for a row without valid tokens and when `cap` is null. The token-level metrics are those
 * of tokenRolloutCorrection; `rollout/tis_seq_clipfrac` is the fraction of non-empty rows whose
 * exp(sum) exceeds the cap.
 */
export function sequenceRolloutCorrection(
  old: ArrayLike<number>,
  rollout: ArrayLike<number>,
  mask: ArrayLike<number>,
  rows: number,
  cap: number | null,
): SequenceRolloutCorrection {
  const { metrics } = tokenRolloutCorrection(old, rollout, mask, cap);
  const width = rows ? mask.length / rows : 0;
  const weights = new Float32Array(rows).fill(1);
  let nonEmpty = 0;
  let clipped = 0;
  for (let b = 0; b < rows; b++) {
    let logRatio = 0;
    let valid = 0;
    for (let t = b * width; t < (b + 1) * width; t++) {
      if (mask[t] === 0) continue;
      logRatio += old[t] - rollout[t];
      valid += 1;
    }
    if (valid === 0) continue;
    nonEmpty += 1;
    if (cap === null) continue;
    const ratio = Math.exp(logRatio);
    if (ratio > cap) clipped += 1;
    weights[b] = Math.min(ratio, cap);
  }
  return { weights, metrics: { ...metrics, 'rollout/tis_seq_clipfrac': nonEmpty ? clipped / nonEmpty : 0 } };
}
