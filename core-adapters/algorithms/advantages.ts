// Advantage estimators: every one of verl v0.9.0's verl/trainer/ppo/core_algos.py under its verl
// name (register_adv_est / get_adv_estimator_fn), in a registry by name. They run on the host once
// per batch, on plain arrays in float64, and hand back float32 arrays that are zero wherever the
// mask is 0 (verl leaves whitened constants or returns there; every loss masks them out).
import { InputError } from '../errors.js';

/** What an advantage estimator reads. */
export interface AdvantageInput {
  /** B responses of T token positions, row-major. */
  batch: number;
  length: number;
  /** [B*T] the outcome score at the last valid token, plus any per-token shaping or KL penalty. */
  tokenRewards: ArrayLike<number>;
  /** [B*T] 1 for real response tokens, 0 for padding (and observation tokens in multi-turn rows). */
  responseMask: ArrayLike<number>;
  /** [B*T] critic values (gae only). */
  values?: ArrayLike<number>;
  /** [B] one id per prompt; the rollout.n responses of a prompt share it. */
  groupIds: (string | number)[];
  gamma: number;
  lam: number;
  normByStd: boolean;
  epsilon: number;
  /** [B] remax: the score of each response's prompt under greedy decoding (verl's reward_baselines). */
  rewardBaselines?: ArrayLike<number>;
  /** [B*T] optimal_token_baseline: the old policy's log-probs of the sampled tokens. */
  oldLogProbs?: ArrayLike<number>;
  /** [B*T] optimal_token_baseline: sum over the vocabulary of pi^2 at each position (the actor's). */
  sumPiSquared?: ArrayLike<number>;
  /** [B*T] optimal_token_baseline: truncated importance weights of rollouts from another engine, if any. */
  rolloutIsWeights?: ArrayLike<number>;
  /** gdpo: each scorer field by name, one value per response (verl's reward_extra_info). */
  rewardComponents?: ReadonlyMap<string, ArrayLike<number>>;
  /** gdpo: algorithm.gdpo_reward_keys and gdpo_reward_weights (null keys: the summed token rewards). */
  gdpo?: { keys: string[] | null; weights: number[] | null };
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
  /**
   * The estimator reads rewardBaselines (remax): each step also decodes every prompt greedily and
   * scores that response (verl's ray_trainer does this when adv_estimator is remax).
   */
  needsGreedyBaseline?: boolean;
  /** The estimator reads oldLogProbs and sumPiSquared: the actor computes sum pi^2 with the old log-probs. */
  needsSumPiSquared?: boolean;
  /** Each prompt group needs at least two responses (grpo_passk): actor_rollout_ref.rollout.n >= 2. */
  needsGroups?: boolean;
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

  /** A registry holding verl v0.9.0's estimators (core_algos.py's register_adv_est names). */
  constructor() {
    for (const [name, estimator, traits] of CORE_ESTIMATORS) this.register(name, estimator, traits);
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
 * Each response's outcome score: its whole row of token rewards summed, masked positions included,
 * as verl's outcome estimators do (token_level_rewards.sum(-1)). The host places rewards only on
 * valid tokens, so for its batches this is the sum over the response.
 */
function responseScores(input: AdvantageInput): number[] {
  const { batch, length, tokenRewards: rewards } = input;
  const scores: number[] = [];
  for (let b = 0; b < batch; b++) {
    let score = 0;
    for (let t = 0; t < length; t++) score += rewards[b * length + t];
    scores.push(score);
  }
  return scores;
}

/** Response indices by group id, in first-seen order (verl's id2score dictionaries). */
function groupsOf(groupIds: (string | number)[]): Map<string | number, number[]> {
  const groups = new Map<string | number, number[]>();
  groupIds.forEach((id, b) => {
    const members = groups.get(id);
    if (members) members.push(b);
    else groups.set(id, [b]);
  });
  return groups;
}

function meanOf(values: number[]): number {
  return values.reduce((a, v) => a + v, 0) / values.length;
}

/** One value per response times its mask (verl's scores.unsqueeze(-1) * response_mask). */
function broadcast(perResponse: ArrayLike<number>, mask: ArrayLike<number>, batch: number, length: number): Float64Array {
  const out = new Float64Array(batch * length);
  for (let b = 0; b < batch; b++) {
    for (let t = 0; t < length; t++) out[b * length + t] = perResponse[b] * mask[b * length + t];
  }
  return out;
}

/** An outcome estimator's output: the per-response values broadcast over the mask; returns equal advantages. */
function outcomeOutput(perResponse: ArrayLike<number>, input: AdvantageInput): AdvantageOutput {
  const advantages = masked(broadcast(perResponse, input.responseMask, input.batch, input.length), input.responseMask);
  return { advantages, returns: Float32Array.from(advantages) };
}

/** Whitened over the batch's valid tokens, then masked (verl's masked_whiten(x, mask) * mask); returns equal advantages. */
function whitenedOutput(perResponse: ArrayLike<number>, input: AdvantageInput): AdvantageOutput {
  const { responseMask: mask, batch, length } = input;
  const advantages = masked(maskedWhiten(broadcast(perResponse, mask, batch, length), mask), mask);
  return { advantages, returns: Float32Array.from(advantages) };
}

/**
 * GRPO (compute_grpo_outcome_advantage; grpo_vectorized, compute_grpo_vectorized_outcome_advantage,
 * computes the same): each response's score normalised per group by computeGrpoAdvantages, then
 * broadcast over the response mask. Returns equal the advantages.
 */
export function computeGrpoOutcomeAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'grpo');
  const perResponse = computeGrpoAdvantages(responseScores(input), input.groupIds, { normByStd: input.normByStd, epsilon: input.epsilon });
  return outcomeOutput(perResponse, input);
}

/**
 * REINFORCE++ (compute_reinforce_plus_plus_outcome_advantage, v0.9.0): discounted returns-to-go
 * G_t = r_t + gamma * G_{t+1} over valid tokens. A masked position (an observation span in a
 * multi-turn row) is skipped: its reward is dropped and the running return carries over it
 * unchanged, undiscounted (v0.9.0 changed this from resetting the return there). Advantages are G
 * masked_whiten-ed over every valid token of the batch, times the mask; returns are G (0 where masked).
 */
export function computeReinforcePlusPlusAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'reinforce_plus_plus');
  const { batch, length, tokenRewards: rewards, responseMask: mask, gamma } = input;
  const raw = new Float64Array(batch * length);
  for (let b = 0; b < batch; b++) {
    let running = 0;
    for (let t = length - 1; t >= 0; t--) {
      const i = b * length + t;
      const next = rewards[i] + gamma * running;
      raw[i] = next * mask[i];
      // verl's blend; for a 0/1 mask it keeps `next` on valid tokens and the old return elsewhere.
      running = next * mask[i] + running * (1 - mask[i]);
    }
  }
  return { advantages: masked(maskedWhiten(raw, mask), mask), returns: masked(raw, mask) };
}

/**
 * REINFORCE++ with a group baseline (compute_reinforce_plus_plus_baseline_outcome_advantage): each
 * score minus its group's mean (0 for a group of one), broadcast over the mask, then masked_whiten-ed
 * over every valid token of the batch. Returns equal the advantages.
 */
export function computeReinforcePlusPlusBaselineAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'reinforce_plus_plus_baseline');
  const scores = responseScores(input);
  const centred = new Array<number>(input.batch);
  for (const members of groupsOf(input.groupIds).values()) {
    const mean = members.length === 1 ? 0 : meanOf(members.map((b) => scores[b]));
    for (const b of members) centred[b] = scores[b] - mean;
  }
  return whitenedOutput(centred, input);
}

/**
 * RLOO's leave-one-out advantage: s_i - mean of the group's other scores, written as verl writes
 * it, s * n / (n - 1) - mean * n / (n - 1). A group of one keeps its raw score in rloo
 * (compute_rloo_outcome_advantage) but gets 0 in rloo_vectorized
 * (compute_rloo_vectorized_outcome_advantage multiplies by count > 1).
 */
function leaveOneOut(input: AdvantageInput, who: string, singleton: 'score' | 'zero'): AdvantageOutput {
  checkInput(input, who);
  const scores = responseScores(input);
  const perResponse = new Array<number>(input.batch);
  for (const members of groupsOf(input.groupIds).values()) {
    const n = members.length;
    if (n === 1) {
      perResponse[members[0]] = singleton === 'score' ? scores[members[0]] : 0;
      continue;
    }
    const mean = meanOf(members.map((b) => scores[b]));
    for (const b of members) perResponse[b] = (scores[b] * n) / (n - 1) - (mean * n) / (n - 1);
  }
  return outcomeOutput(perResponse, input);
}

/** RLOO (compute_rloo_outcome_advantage, arXiv 2402.14740): see leaveOneOut; returns equal the advantages. */
export function computeRlooAdvantages(input: AdvantageInput): AdvantageOutput {
  return leaveOneOut(input, 'rloo', 'score');
}

/** rloo_vectorized (compute_rloo_vectorized_outcome_advantage): rloo, except a group of one gets 0. */
export function computeRlooVectorizedAdvantages(input: AdvantageInput): AdvantageOutput {
  return leaveOneOut(input, 'rloo_vectorized', 'zero');
}

/**
 * OPO (compute_opo_outcome_advantage, arXiv 2505.23585): the baseline is the group's
 * length-weighted mean score, sum(len_i * s_i) / sum(len_i) with len the valid-token count (0 for
 * a group of one). Returns equal the advantages.
 */
export function computeOpoAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'opo');
  const { batch, length, responseMask: mask } = input;
  const scores = responseScores(input);
  const lengths = Array.from({ length: batch }, (_, b) => {
    let n = 0;
    for (let t = 0; t < length; t++) n += mask[b * length + t];
    return n;
  });
  const perResponse = new Array<number>(batch);
  for (const members of groupsOf(input.groupIds).values()) {
    let baseline = 0;
    if (members.length > 1) {
      const weighted = members.reduce((a, b) => a + lengths[b] * scores[b], 0);
      baseline = weighted / members.reduce((a, b) => a + lengths[b], 0);
    }
    for (const b of members) perResponse[b] = scores[b] - baseline;
  }
  return outcomeOutput(perResponse, input);
}

/**
 * GPG (compute_gpg_outcome_advantage): alpha * (s - group mean) / f_norm, where alpha is the batch
 * size over the number of non-zero scores (at least 1) and f_norm is 1 (verl's default; its trainer
 * passes no other). A group of one uses mean 0. Returns equal the advantages.
 */
export function computeGpgAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'gpg');
  const scores = responseScores(input);
  const nonZero = scores.filter((s) => s !== 0).length;
  const alpha = input.batch / Math.max(nonZero, 1);
  const fNorm = 1;
  const perResponse = new Array<number>(input.batch);
  for (const members of groupsOf(input.groupIds).values()) {
    const mean = members.length === 1 ? 0 : meanOf(members.map((b) => scores[b]));
    for (const b of members) perResponse[b] = (alpha * (scores[b] - mean)) / fNorm;
  }
  return outcomeOutput(perResponse, input);
}

/**
 * Pass@k GRPO (compute_grpo_passk_outcome_advantage, arXiv 2503.19595): in each group only the
 * best response gets a non-zero advantage, r_max - r_second_max, divided by (unbiased std +
 * epsilon) when normByStd (algorithm.norm_adv_by_std_in_grpo). Ties at the top give 0, so which of
 * them is "best" does not matter. Every group needs two responses or more (verl raises too).
 */
export function computeGrpoPasskAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'grpo_passk');
  const scores = responseScores(input);
  const perResponse = new Array<number>(input.batch).fill(0);
  for (const [id, members] of groupsOf(input.groupIds)) {
    if (members.length < 2) throw new Error(`grpo_passk: group ${String(id)} has ${members.length} response; pass@k needs at least 2 per prompt (actor_rollout_ref.rollout.n >= 2)`);
    const values = members.map((b) => scores[b]);
    let best = 0;
    for (let j = 1; j < values.length; j++) if (values[j] > values[best]) best = j;
    const second = Math.max(...values.filter((_, j) => j !== best));
    let advantage = values[best] - second;
    if (input.normByStd) {
      const mean = meanOf(values);
      const std = Math.sqrt(values.reduce((a, v) => a + (v - mean) ** 2, 0) / (values.length - 1));
      advantage /= std + input.epsilon;
    }
    perResponse[members[best]] = advantage;
  }
  return outcomeOutput(perResponse, input);
}

/**
 * GDPO (compute_gdpo_outcome_advantage, arXiv 2601.05242): each reward component named by
 * algorithm.gdpo_reward_keys is GRPO-normalised within its groups on its own, the results are
 * summed with gdpo_reward_weights (1 each when null), broadcast over the mask and masked_whiten-ed
 * over the batch's valid tokens. Without keys the one component is the summed token reward (verl's
 * fallback when it is given no config). Returns equal the advantages.
 */
export function computeGdpoAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'gdpo');
  const keys = input.gdpo?.keys ?? null;
  const components = keys
    ? keys.map((key) => {
        const values = input.rewardComponents?.get(key);
        const available = [...(input.rewardComponents?.keys() ?? [])];
        if (!values) throw new InputError(`algorithm.gdpo_reward_keys: the scorer gives no '${key}' (its fields: ${available.join(', ') || 'none'})`);
        if (values.length !== input.batch) throw new Error(`gdpo: '${key}' has ${values.length} values for ${input.batch} responses`);
        return Array.from(values);
      })
    : [responseScores(input)];
  const weights = input.gdpo?.weights ?? components.map(() => 1);
  if (weights.length !== components.length) throw new InputError(`algorithm.gdpo_reward_weights: ${weights.length} weights for ${components.length} reward keys`);
  const combined = new Array<number>(input.batch).fill(0);
  components.forEach((scores, k) => {
    const normalised = computeGrpoAdvantages(scores, input.groupIds, { normByStd: input.normByStd, epsilon: input.epsilon });
    normalised.forEach((a, b) => (combined[b] += weights[k] * a));
  });
  return whitenedOutput(combined, input);
}

/** Reward-to-go over valid tokens, sum_{j >= t} r_j m_j, at every position (verl's flip-cumsum-flip). */
function rewardToGo(input: AdvantageInput): Float64Array {
  const { batch, length, tokenRewards: rewards, responseMask: mask } = input;
  const out = new Float64Array(batch * length);
  for (let b = 0; b < batch; b++) {
    let running = 0;
    for (let t = length - 1; t >= 0; t--) {
      const i = b * length + t;
      running += rewards[i] * mask[i];
      out[i] = running;
    }
  }
  return out;
}

/**
 * ReMax (compute_remax_outcome_advantage, arXiv 2310.10505): returns are the undiscounted
 * reward-to-go, advantages the returns minus the score of the prompt's greedy response
 * (rewardBaselines, which the trainer samples and scores when the estimator is remax).
 */
export function computeRemaxAdvantages(input: AdvantageInput): AdvantageOutput {
  checkInput(input, 'remax');
  const { batch, length, responseMask: mask, rewardBaselines: baselines } = input;
  if (!baselines) throw new Error('remax: the estimator needs rewardBaselines (the greedy responses\' scores)');
  if (baselines.length !== batch) throw new Error(`remax: ${baselines.length} reward baselines for ${batch} responses`);
  const returns = rewardToGo(input);
  const advantages = new Float64Array(batch * length);
  for (let i = 0; i < advantages.length; i++) advantages[i] = returns[i] - baselines[Math.floor(i / length)] * mask[i];
  return { advantages: masked(advantages, mask), returns: masked(returns, mask) };
}

/** The optimal token baselines' own arguments, which verl's trainer leaves at their defaults. */
export interface TokenBaselineOptions {
  /** Zero the baseline past the second-longest response of a group (see zeroTail). */
  handleZeroTail: boolean;
  /** Added to the baseline's denominator. */
  epsilon: number;
}

/** verl's defaults (handle_zero_tail=True, epsilon=1e-8), which its trainer never changes. */
export const TOKEN_BASELINE_DEFAULTS: Readonly<TokenBaselineOptions> = { handleZeroTail: true, epsilon: 1e-8 };

/**
 * The optimal token baseline's ingredients (both OTB estimators): G, the reward-to-go, and W, the
 * cumulative path-variance proxy W_t = sum_{j <= t} m_j w_j with w_j = 1 - 2 pi_j + sum pi^2
 * (pi_j = exp(old log-prob)), times the squared importance weight when rollouts came from another
 * engine. Masked positions add nothing (their log-probs are never read).
 */
function pathVariance(input: AdvantageInput, who: string): { returns: Float64Array; cumulative: Float64Array } {
  const { batch, length, responseMask: mask, oldLogProbs, sumPiSquared, rolloutIsWeights } = input;
  if (!oldLogProbs || !sumPiSquared) throw new Error(`${who}: the estimator needs oldLogProbs and sumPiSquared from the actor`);
  const size = batch * length;
  if (oldLogProbs.length !== size || sumPiSquared.length !== size) throw new Error(`${who}: oldLogProbs and sumPiSquared need ${batch}x${length} entries`);
  if (rolloutIsWeights && rolloutIsWeights.length !== size) throw new Error(`${who}: rolloutIsWeights needs ${batch}x${length} entries`);
  const cumulative = new Float64Array(size);
  for (let b = 0; b < batch; b++) {
    let total = 0;
    for (let t = 0; t < length; t++) {
      const i = b * length + t;
      if (mask[i] !== 0) {
        let w = 1 - 2 * Math.exp(oldLogProbs[i]) + sumPiSquared[i];
        if (rolloutIsWeights) w *= rolloutIsWeights[i] ** 2;
        total += w * mask[i];
      }
      cumulative[i] = total;
    }
  }
  return { returns: rewardToGo(input), cumulative };
}

/**
 * OTB's optional zero tail (handle_zero_tail, on by default in verl): when one response of a group
 * is strictly the longest, its baseline is 0 from the second-longest length on, where no other
 * response of the group has a token to estimate it from. Gives that response and the cut.
 */
function zeroTail(lengths: number[]): { member: number; from: number } | undefined {
  const sorted = [...lengths].sort((x, y) => x - y);
  const longest = sorted[sorted.length - 1];
  const second = sorted[sorted.length - 2];
  const holders = lengths.filter((l) => l === longest).length;
  return holders === 1 && longest > second ? { member: lengths.indexOf(longest), from: second } : undefined;
}

/**
 * Optimal token baseline (compute_optimal_token_baseline_advantage): a baseline per position t
 * and prompt group, B_t = sum_i G_it W_it m_it / (sum_i W_it m_it + 1e-8) over the group's
 * responses (W and G from pathVariance), with verl's zero tail; a group of one has none.
 * Advantages are (G - B) on valid tokens; returns are G. Needs the actor's sum pi^2.
 */
export function computeOptimalTokenBaselineAdvantages(input: AdvantageInput, options: TokenBaselineOptions = TOKEN_BASELINE_DEFAULTS): AdvantageOutput {
  checkInput(input, 'optimal_token_baseline');
  const { batch, length, responseMask: mask } = input;
  const { returns, cumulative } = pathVariance(input, 'optimal_token_baseline');
  const baselines = new Float64Array(batch * length);
  for (const members of groupsOf(input.groupIds).values()) {
    if (members.length === 1) continue;
    const perStep = new Float64Array(length);
    for (let t = 0; t < length; t++) {
      let numerator = 0;
      let denominator = 0;
      for (const b of members) {
        const i = b * length + t;
        numerator += returns[i] * cumulative[i] * mask[i];
        denominator += cumulative[i] * mask[i];
      }
      perStep[t] = numerator / (denominator + options.epsilon);
    }
    const lengths = members.map((b) => {
      let n = 0;
      for (let t = 0; t < length; t++) n += mask[b * length + t];
      return n;
    });
    const tail = options.handleZeroTail ? zeroTail(lengths) : undefined;
    members.forEach((b, j) => {
      for (let t = 0; t < length; t++) baselines[b * length + t] = tail?.member === j && t >= tail.from ? 0 : perStep[t];
    });
  }
  const advantages = new Float64Array(batch * length);
  for (let i = 0; i < advantages.length; i++) advantages[i] = (returns[i] - baselines[i]) * mask[i];
  return { advantages: masked(advantages, mask), returns: masked(returns, mask) };
}

/**
 * The optimal token baseline for multi-turn rows (compute_multi_turn_optimal_token_baseline_advantage,
 * tir_optimal_token_baseline): as optimal_token_baseline, but each response is first compacted to
 * its valid tokens, so the baseline of a response's k-th own token pools the k-th own tokens of the
 * group, wherever observation spans put them. Responses without a valid token join no group.
 */
export function computeTirOptimalTokenBaselineAdvantages(input: AdvantageInput, options: TokenBaselineOptions = TOKEN_BASELINE_DEFAULTS): AdvantageOutput {
  checkInput(input, 'tir_optimal_token_baseline');
  const { batch, length, responseMask: mask } = input;
  const { returns, cumulative } = pathVariance(input, 'tir_optimal_token_baseline');
  // Each response's valid positions, in order.
  const positions = Array.from({ length: batch }, (_, b) => {
    const out: number[] = [];
    for (let t = 0; t < length; t++) if (mask[b * length + t] !== 0) out.push(b * length + t);
    return out;
  });
  const advantages = new Float64Array(batch * length);
  const live = input.groupIds.map((id, b) => ({ id, b })).filter(({ b }) => positions[b].length > 0);
  for (const members of groupsOf(live.map((m) => m.id)).values()) {
    const rows = members.map((j) => live[j].b);
    const lengths = rows.map((b) => positions[b].length);
    const perStep = new Float64Array(Math.max(...lengths));
    if (rows.length > 1) {
      for (let k = 0; k < perStep.length; k++) {
        let numerator = 0;
        let denominator = 0;
        for (const b of rows) {
          const i = positions[b][k];
          if (i === undefined) continue;
          numerator += returns[i] * cumulative[i];
          denominator += cumulative[i];
        }
        perStep[k] = numerator / (denominator + options.epsilon);
      }
    }
    const tail = rows.length > 1 && options.handleZeroTail ? zeroTail(lengths) : undefined;
    rows.forEach((b, j) => {
      positions[b].forEach((i, k) => {
        const baseline = tail?.member === j && k >= tail.from ? 0 : perStep[k];
        // verl's advantages are masked after the scatter: a fractional mask scales them here too.
        advantages[i] = (returns[i] - baseline) * mask[i];
      });
    });
  }
  return { advantages: masked(advantages, mask), returns: masked(returns, mask) };
}

/** verl v0.9.0's estimators by their register_adv_est names, with what the trainer must know of each. */
export const CORE_ESTIMATORS: readonly (readonly [string, AdvantageEstimator, EstimatorTraits])[] = [
  ['gae', computeGaeAdvantages, { needsValues: true }],
  ['grpo', computeGrpoOutcomeAdvantages, { outcome: true }],
  ['grpo_vectorized', computeGrpoOutcomeAdvantages, { outcome: true }],
  ['gdpo', computeGdpoAdvantages, { outcome: true }],
  ['grpo_passk', computeGrpoPasskAdvantages, { outcome: true, needsGroups: true }],
  ['reinforce_plus_plus_baseline', computeReinforcePlusPlusBaselineAdvantages, { outcome: true }],
  ['rloo', computeRlooAdvantages, { outcome: true }],
  ['opo', computeOpoAdvantages, { outcome: true }],
  ['reinforce_plus_plus', computeReinforcePlusPlusAdvantages, {}],
  ['remax', computeRemaxAdvantages, { needsGreedyBaseline: true }],
  ['gpg', computeGpgAdvantages, { outcome: true }],
  ['rloo_vectorized', computeRlooVectorizedAdvantages, { outcome: true }],
  ['optimal_token_baseline', computeOptimalTokenBaselineAdvantages, { needsSumPiSquared: true }],
  ['tir_optimal_token_baseline', computeTirOptimalTokenBaselineAdvantages, { needsSumPiSquared: true }],
];
