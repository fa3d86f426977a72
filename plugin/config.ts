// The plugin's config section (defaults in plugin.json), read and checked in one place.
import { InputError, type Config } from '../core-adapters/index.js';

export const REWARD_SOURCES = ['advantage', 'score'] as const;

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
}

export function flowrlConfig(config: Config): FlowRLConfig {
  const section = config.flowrl as FlowRLConfig | undefined;
  if (!section) throw new InputError("config section 'flowrl' is missing; is the FlowRL plugin registered under plugins:?");
  if (!REWARD_SOURCES.includes(section.reward_source)) {
    throw new InputError(`flowrl.reward_source is '${section.reward_source}'; allowed: ${REWARD_SOURCES.join(', ')}`);
  }
  if (!Number.isInteger(section.proj_layer) || section.proj_layer < 1) throw new InputError(`flowrl.proj_layer must be a whole number >= 1; got ${section.proj_layer}`);
  if (!(section.proj_dropout >= 0 && section.proj_dropout < 1)) throw new InputError(`flowrl.proj_dropout must be in [0, 1); got ${section.proj_dropout}`);
  if (!(section.importance_weight_max > 0)) throw new InputError(`flowrl.importance_weight_max must be > 0; got ${section.importance_weight_max}`);
  return section;
}
