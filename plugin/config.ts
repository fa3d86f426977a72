// The plugin's config section (defaults in plugin.json), read and checked in one place.
import { InputError, type Config } from '../core-adapters/index.js';

export const REWARD_SOURCES = ['advantage', 'score'] as const;
export const LOG_Z_SOURCES = ['proj_z', 'group'] as const;

export interface FlowRLConfig {
  /** beta: scale of the reward inside the trajectory-balance residual. */
  beta: number;
  /** ProjZ depth: the number of Linear layers. */
  proj_layer: number;
  proj_dropout: number;
  importance_sampling: boolean;
  importance_weight_max: number;
  /** Stop log Z's gradient at the pooled hidden states (the reference lets it reach the LM). */
  detach_logz_input: boolean;
  /** advantage: GRPO-normalised advantages (the paper); score: each response's total reward (outcome plus shaping). */
  reward_source: (typeof REWARD_SOURCES)[number];
  /** true (the recipe): log-probs as per-token means; false: sequence sums, whose fixed point is pi_ref * exp(beta * r) / Z. */
  length_normalize: boolean;
  /** proj_z: the learned head (the recipe); group: each prompt group's own estimate from its samples (VarGrad), no lag. */
  log_z: (typeof LOG_Z_SOURCES)[number];
  /** Multiplier of the actor's lr for ProjZ's parameters (GFlowNet practice: log Z learns faster than the policy). */
  log_z_lr_scale: number;
  /** Rows of each prompt group taken from past correct answers instead of sampled (0: off; local rollouts only). */
  replay_samples: number;
  /** Distinct correct answers the replay keeps per prompt (oldest dropped first). */
  replay_capacity: number;
  /** Rows of each prompt group sampled from the reference policy instead of the policy (0: off; local rollouts only). */
  reference_samples: number;
}

export function flowrlConfig(config: Config): FlowRLConfig {
  const section = config.flowrl as FlowRLConfig | undefined;
  if (!section) throw new InputError("config section 'flowrl' is missing; is the FlowRL plugin registered under plugins:?");
  if (!REWARD_SOURCES.includes(section.reward_source)) {
    throw new InputError(`flowrl.reward_source is '${section.reward_source}'; allowed: ${REWARD_SOURCES.join(', ')}`);
  }
  if (!LOG_Z_SOURCES.includes(section.log_z)) throw new InputError(`flowrl.log_z is '${section.log_z}'; allowed: ${LOG_Z_SOURCES.join(', ')}`);
  if (!(section.log_z_lr_scale > 0)) throw new InputError(`flowrl.log_z_lr_scale must be > 0; got ${section.log_z_lr_scale}`);
  if (!Number.isInteger(section.replay_samples) || section.replay_samples < 0) throw new InputError(`flowrl.replay_samples must be a whole number >= 0; got ${section.replay_samples}`);
  if (!Number.isInteger(section.replay_capacity) || section.replay_capacity < 1) throw new InputError(`flowrl.replay_capacity must be a whole number >= 1; got ${section.replay_capacity}`);
  if (!Number.isInteger(section.reference_samples) || section.reference_samples < 0) throw new InputError(`flowrl.reference_samples must be a whole number >= 0; got ${section.reference_samples}`);
  const offPolicy = section.replay_samples + section.reference_samples;
  const n = config.actor_rollout_ref.rollout.n;
  if (offPolicy > 0 && offPolicy >= n) {
    throw new InputError(`flowrl.replay_samples + flowrl.reference_samples is ${offPolicy}; it must be below actor_rollout_ref.rollout.n (${n}) so every group keeps samples of the policy`);
  }
  if (offPolicy > 0 && config.actor_rollout_ref.rollout.name !== 'local') {
    throw new InputError(`flowrl.replay_samples and flowrl.reference_samples need actor_rollout_ref.rollout.name local (got ${config.actor_rollout_ref.rollout.name}): their rows have no engine log-probs`);
  }
  if (!Number.isInteger(section.proj_layer) || section.proj_layer < 1) throw new InputError(`flowrl.proj_layer must be a whole number >= 1; got ${section.proj_layer}`);
  if (!(section.proj_dropout >= 0 && section.proj_dropout < 1)) throw new InputError(`flowrl.proj_dropout must be in [0, 1); got ${section.proj_dropout}`);
  if (!(section.importance_weight_max > 0)) throw new InputError(`flowrl.importance_weight_max must be > 0; got ${section.importance_weight_max}`);
  return section;
}
