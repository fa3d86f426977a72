// The plugin's config section. plugin.json declares each key (default, doc, choices, range) and the
// host validates them; what is left here is what spans keys.
import { InputError, type Config } from '../core-adapters/index.js';

export interface FlowRLConfig {
  /** beta: scale of the reward inside the trajectory-balance residual. */
  beta: number;
  /** ProjZ depth: the number of Linear layers. */
  proj_layer: number;
  proj_dropout: number;
  importance_sampling: boolean;
  importance_weight_max: number;
  /** cap: min(w, importance_weight_max) (the recipe); ppo: clamp(w, 1 - clip_ratio_low, 1 + clip_ratio_high) (the paper's text). */
  importance_weight_clip: 'cap' | 'ppo';
  /** Stop log Z's gradient at the pooled hidden states (the reference lets it reach the LM). */
  detach_logz_input: boolean;
  /** advantage: GRPO-normalised advantages (the paper); score: each response's total reward (outcome plus shaping). */
  reward_source: 'advantage' | 'score';
  /** true (the recipe): log-probs as per-token means; false: sequence sums, whose fixed point is pi_ref * exp(beta * r) / Z. */
  length_normalize: boolean;
  /** proj_z: the learned head (the recipe); group: each prompt group's own estimate from its samples (VarGrad), no lag. */
  log_z: 'proj_z' | 'group' | 'none';
  /** The policy the residual subtracts: ref (the paper), old (the policy that sampled), none. */
  reference: 'ref' | 'old' | 'none';
  /** sequence: one residual per response (the paper); token: per token, with clamped token weights (the authors' later code). */
  level: 'sequence' | 'token';
  /** Multiplier of the actor's lr for ProjZ's parameters (GFlowNet practice: log Z learns faster than the policy). */
  log_z_lr_scale: number;
  /** Rows of each prompt group taken from past correct answers instead of sampled (0: off; local rollouts only). */
  replay_samples: number;
  /** Distinct correct answers the replay keeps per prompt (oldest dropped first). */
  replay_capacity: number;
  /** Rows of each prompt group sampled from the reference policy instead of the policy (0: off; local rollouts only). */
  reference_samples: number;
  /** Temperature of the policy's training rows for prompts already solved (null: off); log-probs stay at the rollout's. */
  explore_temperature: number | null;
}

/** Whether the run keeps the replay of correct answers (drawn from, or read for which prompts are solved). */
export function usesReplay(flowrl: FlowRLConfig): boolean {
  return flowrl.replay_samples > 0 || flowrl.explore_temperature !== null;
}

/** Whether some training rows are not the policy's own samples at the rollout temperature. */
export function usesOffPolicyRows(flowrl: FlowRLConfig): boolean {
  return usesReplay(flowrl) || flowrl.reference_samples > 0;
}

export function flowrlConfig(config: Config): FlowRLConfig {
  const section = config.flowrl as FlowRLConfig | undefined;
  if (!section) throw new InputError("config section 'flowrl' is missing; is the FlowRL plugin registered under plugins:?");
  const offPolicy = section.replay_samples + section.reference_samples;
  const n = config.actor_rollout_ref.rollout.n;
  if (offPolicy > 0 && offPolicy >= n) {
    throw new InputError(`flowrl.replay_samples + flowrl.reference_samples is ${offPolicy}; it must be below actor_rollout_ref.rollout.n (${n}) so every group keeps samples of the policy`);
  }
  if (offPolicy > 0 && config.actor_rollout_ref.rollout.name !== 'local') {
    throw new InputError(`flowrl.replay_samples and flowrl.reference_samples need actor_rollout_ref.rollout.name local (got ${config.actor_rollout_ref.rollout.name}): their rows have no engine log-probs`);
  }
  if ((offPolicy > 0 || section.explore_temperature !== null) && config.actor_rollout_ref.rollout.multi_turn.enable) {
    throw new InputError('flowrl.replay_samples, reference_samples and explore_temperature make single-turn rows; they cannot be used with actor_rollout_ref.rollout.multi_turn.enable');
  }
  if (section.explore_temperature !== null && config.actor_rollout_ref.rollout.name !== 'local') {
    throw new InputError(`flowrl.explore_temperature needs actor_rollout_ref.rollout.name local (got ${config.actor_rollout_ref.rollout.name}): a server's log-probs are at the temperature it sampled at`);
  }
  if (section.level === 'token' && section.log_z !== 'none') {
    throw new InputError(`flowrl.level token has no log Z per token; set flowrl.log_z none (got ${section.log_z})`);
  }
  if (section.level === 'token' && !section.length_normalize) {
    throw new InputError('flowrl.length_normalize false sums a sequence\'s log-probs; at flowrl.level token there is no sequence sum (leave it true)');
  }
  return section;
}
