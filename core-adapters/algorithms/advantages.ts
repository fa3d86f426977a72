// Advantage estimators (verl's verl/trainer/ppo/core_algos.py: compute_gae_advantage_return,
// compute_grpo_outcome_advantage, compute_reinforce_plus_plus_outcome_advantage), in a registry by
// name like verl's register_adv_est / get_adv_estimator_fn. They run on the host once per batch, on
// plain arrays in float64, and hand back float32 arrays that are zero wherever the mask is 0.
import { InputError } from '../errors.js';

/** What an advantage estimator reads. */
export interface AdvantageInput {
  /** B responses of T token positions, row-major. */
  batch: number;
  length: number;
  /** [B*T] the outcome score at the last valid token, plus any per-token shaping or KL penalty. */
  tokenRewards: Float32Array;
  /** [B*T] 1 for real response tokens, 0 for padding (and observation tokens in multi-turn rows). */
  responseMask: Float32Array;
  /** [B*T] critic values (gae only). */
  values?: Float32Array;
  /** [B] one id per prompt; the rollout.n responses of a prompt share it. */
  groupIds: (string | number)[];
  gamma: number;
  lam: number;
  normByStd: boolean;
  epsilon: number;
}

/** [B*T] each, zero where the mask is 0. */
export interface AdvantageOutput {
  advantages: Float32Array;
  returns: Float32Array;
}

/** An advantage estimator: token rewards (and values) in, advantages and returns out. */
export type AdvantageEstimator = (input: AdvantageInput) => AdvantageOutput;

/** What the trainer must know of an estimator beyond its function. */
export interface EstimatorTraits {
  /**
   * The estimator reduces each response's token rewards to one score (grpo). Per-token shaping
   * rewards then bypass it and enter the advantage through their return (see addShapingReturns).
   */
  outcome?: boolean;
  /** The estimator reads critic values (gae): a run that uses it trains a critic. */
  needsValues?: boolean;
}

/**
 * Advantage estimators by name (verl's register_adv_est), one registry per host: the core ones,
 * then what plugins register through their PluginContext. Nothing is global, so registrations
 * never leak from one host (or test) to the next.
 */
export class AdvantageEstimatorRegistry {
  private readonly entries = new Map<string, { estimator: AdvantageEstimator; traits: EstimatorTraits; provider: string }>();
  /** Who registrations come from now: 'core', or the plugin whose entry is running (the host sets it). */
  provider = 'core';

  /** A registry holding gae, grpo and reinforce_plus_plus. */
  constructor() {
    this.register('gae', computeGaeAdvantages, { needsValues: true });
    this.register('grpo', computeGrpoOutcomeAdvantages, { outcome: true });
    this.register('reinforce_plus_plus', computeReinforcePlusPlusAdvantages);
  }

  /** Adds an estimator; another function under a taken name is an InputError naming both providers, the same one again a no-op. */
  register(name: string, estimator: AdvantageEstimator, traits: EstimatorTraits = {}): void {
    const existing = this.entries.get(name);
    if (existing && existing.estimator !== estimator) throw new InputError(`advantage estimator '${name}' from ${this.provider} is already registered by ${existing.provider}; pick another name`);
    this.entries.set(name, { estimator, traits, provider: existing?.provider ?? this.provider });
  }

  /** Who registered each estimator ('core' or a plugin's name). */
  providers(): Map<string, string> {
    return new Map([...this.entries].map(([name, e]) => [name, e.provider]));
  }

  /** The estimator of this name (InputError naming `key` and listing the names if none). */
  get(name: string, key = 'algorithm.adv_estimator'): AdvantageEstimator {
    const entry = this.entries.get(name);
    if (!entry) throw new InputError(`${key}: unknown advantage estimator '${name}'; available: ${this.names().join(', ')}`);
    return entry.estimator;
  }

  /** The traits the estimator was registered with ({} for an unknown name). */
  traits(name: string): EstimatorTraits {
    return this.entries.get(name)?.traits ?? {};
  }

  names(): string[] {
    return [...this.entries.keys()];
  }
}

/**
 * Adds per-token shaping rewards to outcome advantages (and returns) as their discounted return,
 * A_k += sum_{j >= k, valid} gamma^(j - k) rho_j, un-normalised: RLFR's way of letting dense
 * rewards into GRPO (its OpenRLHF fork's returns; README "RLFR flow rewards"). Masked positions
 * neither add nor receive.
 */
export function addShapingReturns(output: AdvantageOutput, shaping: ArrayLike<number>, mask: ArrayLike<number>, batch: number, length: number, gamma: number): void {
  for (let b = 0; b < batch; b++) {
    let running = 0;
    for (let t = length - 1; t >= 0; t--) {
      const i = b * length + t;
      if (!mask[i]) continue;
      running = shaping[i] + gamma * running;
      output.advantages[i] += running;
      output.returns[i] += running;
    }
  }
}

function checkInput(input: AdvantageInput, who: string): void {
  const { batch, length } = input;
  const size = batch * length;
  if (!Number.isInteger(batch) || !Number.isInteger(length) || batch < 0 || length < 0) {
    throw new Error(`${who}: batch and length must be non-negative integers, got ${batch} and ${length}`);
  }
  if (input.tokenRewards.length !== size) throw new Error(`${who}: tokenRewards has ${input.tokenRewards.length} entries, expected ${batch}x${length}`);
  if (input.responseMask.length !== size) throw new Error(`${who}: responseMask has ${input.responseMask.length} entries, expected ${batch}x${length}`);
  if (input.values && input.values.length !== size) throw new Error(`${who}: values has ${input.values.length} entries, expected ${batch}x${length}`);
  if (input.groupIds.length !== batch) throw new Error(`${who}: ${input.groupIds.length} group ids for ${batch} responses`);
}

/**
 * verl_F.masked_whiten (verl/utils/torch_functional.py) over every entry of `values` where mask
 * is non-zero, in float64:
 *  - mean = masked_sum / (mask_sum + 1e-8) (masked_mean's epsilon);
 *  - var = masked_mean((v - mean)^2) * n / (n - 1), i.e. masked_var with unbiased=True (Bessel's
 *    correction); verl raises when the mask sums to 0 or 1, and so does this;
 *  - whitened = (v - mean) / sqrt(var + 1e-8), and with shiftMean false the mean is added back
 *    (verl's default, used by GAE and REINFORCE++, is shift_mean=True: zero-mean output).
 * The result is computed at every position, masked or not, as verl does; callers mask it.
 */
export function maskedWhiten(values: ArrayLike<number>, mask: ArrayLike<number>, shiftMean = true): Float64Array {
  let n = 0;
  let sum = 0;
  for (let i = 0; i < values.length; i++) {
    if (mask[i] !== 0) sum += values[i] * mask[i];
    n += mask[i];
  }
  if (n === 0) throw new Error('maskedWhiten: the mask has no valid entry');
  if (n === 1) throw new Error('maskedWhiten: the mask has a single valid entry, so the unbiased variance divides by zero');
  const mean = sum / (n + 1e-8);
  let squares = 0;
  for (let i = 0; i < values.length; i++) {
    if (mask[i] !== 0) squares += (values[i] - mean) ** 2 * mask[i];
  }
  const variance = (squares / (n + 1e-8)) * (n / (n - 1));
  const scale = 1 / Math.sqrt(variance + 1e-8);
  const out = new Float64Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = (values[i] - mean) * scale + (shiftMean ? 0 : mean);
  return out;
}

function masked(values: ArrayLike<number>, mask: ArrayLike<number>): Float32Array {
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = mask[i] !== 0 ? values[i] : 0;
  return out;
}

/**
 * GRPO's per-response advantage from one scalar score per response (verl's
 * compute_grpo_outcome_advantage, before the broadcast over tokens). Per group id:
 * (score - mean) / (std + epsilon) with the unbiased std (torch.std's default, n - 1), or
 * score - mean when normByStd is false (Dr.GRPO). A group with one response uses mean 0 and
 * std 1, so its advantage is score / (1 + epsilon) (or the score itself without normByStd).
 * A group whose scores are all equal gets 0 everywhere. Group ids need not be contiguous.
 */
export function computeGrpoAdvantages(scores: number[], groupIds: (string | number)[], options: { normByStd: boolean; epsilon: number }): number[] {
  if (scores.length !== groupIds.length) throw new Error(`computeGrpoAdvantages: ${scores.length} scores for ${groupIds.length} group ids`);
  const groups = new Map<string | number, number[]>();
  scores.forEach((score, i) => {
    const members = groups.get(groupIds[i]);
    if (members) members.push(score);
    else groups.set(groupIds[i], [score]);
  });
  const stats = new Map<string | number, { mean: number; std: number }>();
  for (const [id, members] of groups) {
    if (members.length === 1) {
      stats.set(id, { mean: 0, std: 1 });
      continue;
    }
    const mean = members.reduce((a, b) => a + b, 0) / members.length;
    const variance = members.reduce((a, s) => a + (s - mean) ** 2, 0) / (members.length - 1);
    stats.set(id, { mean, std: Math.sqrt(variance) });
  }
  return scores.map((score, i) => {
    const { mean, std } = stats.get(groupIds[i])!;
    return options.normByStd ? (score - mean) / (std + options.epsilon) : score - mean;
  });
}

/**
 * GAE (verl's compute_gae_advantage_return), scanning each row from the end:
 *   delta_t = r_t + gamma * V_next - V_t,  A_t = delta_t + gamma * lam * A_next,
 * where a masked position (padding, or an observation token in a multi-turn row) neither updates
 * V_next nor A_next: both carry over it to the previous valid token, and its own reward and value
 * are ignored. Returns are A + V before whitening; the advantages are then masked_whiten-ed over all
 * valid tokens of the batch (shift_mean=True, unbiased variance). verl leaves non-zero values at
 * masked positions (whitened zeros, and values in the returns); here they are 0, which changes
 * nothing downstream since every loss masks them.
 */
export function computeGaeAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'gae');
  const { batch, length, tokenRewards: rewards, responseMask: mask, values, gamma, lam } = input;
  if (!values) throw new Error('gae: the estimator needs critic values');
  const raw = new Float64Array(batch * length);
  const returns = new Float32Array(batch * length);
  for (let b = 0; b < batch; b++) {
    let nextValue = 0;
    let nextAdvantage = 0;
    for (let t = length - 1; t >= 0; t--) {
      const i = b * length + t;
      if (mask[i] !== 0) {
        const delta = rewards[i] + gamma * nextValue - values[i];
        const advantage = delta + gamma * lam * nextAdvantage;
        // verl blends with the mask (x * m + prev * (1 - m)); for a 0/1 mask that is a selection.
        nextValue = values[i] * mask[i] + (1 - mask[i]) * nextValue;
        nextAdvantage = advantage * mask[i] + (1 - mask[i]) * nextAdvantage;
      }
      raw[i] = nextAdvantage;
      if (mask[i] !== 0) returns[i] = nextAdvantage + values[i];
    }
  }
  return { advantages: masked(maskedWhiten(raw, mask), mask), returns };
}

/**
 * GRPO (verl's compute_grpo_outcome_advantage): each response's score is the sum of its token
 * rewards over the valid tokens (verl sums the whole row; the two agree because rewards are only
 * placed on valid tokens and apply_kl_penalty masks the KL), normalised per group by
 * computeGrpoAdvantages, then broadcast over the response mask. Returns equal the advantages.
 */
export function computeGrpoOutcomeAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'grpo');
  const { batch, length, tokenRewards: rewards, responseMask: mask } = input;
  const scores: number[] = [];
  for (let b = 0; b < batch; b++) {
    let score = 0;
    for (let t = 0; t < length; t++) {
      const i = b * length + t;
      if (mask[i] !== 0) score += rewards[i];
    }
    scores.push(score);
  }
  const perResponse = computeGrpoAdvantages(scores, input.groupIds, { normByStd: input.normByStd, epsilon: input.epsilon });
  const advantages = new Float32Array(batch * length);
  for (let b = 0; b < batch; b++) {
    for (let t = 0; t < length; t++) {
      const i = b * length + t;
      advantages[i] = mask[i] !== 0 ? perResponse[b] * mask[i] : 0;
    }
  }
  return { advantages, returns: Float32Array.from(advantages) };
}

/**
 * REINFORCE++ (verl's compute_reinforce_plus_plus_outcome_advantage): discounted returns-to-go
 * G_t = r_t + gamma * G_{t+1}, where the running return is reset to 0 after every masked position
 * (verl multiplies it by the mask, "reset after EOS"; a masked position inside a multi-turn row
 * therefore cuts the return there). Advantages are the returns masked_whiten-ed over all valid
 * tokens of the batch (shift_mean=True, unbiased variance), times the mask; returns are the
 * unwhitened G (verl keeps r_t at masked positions; here they are 0).
 */
export function computeReinforcePlusPlusAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'reinforce_plus_plus');
  const { batch, length, tokenRewards: rewards, responseMask: mask, gamma } = input;
  const raw = new Float64Array(batch * length);
  for (let b = 0; b < batch; b++) {
    let running = 0;
    for (let t = length - 1; t >= 0; t--) {
      const i = b * length + t;
      running = rewards[i] + gamma * running;
      raw[i] = running;
      running *= mask[i];
    }
  }
  return { advantages: masked(maskedWhiten(raw, mask), mask), returns: masked(raw, mask) };
}
