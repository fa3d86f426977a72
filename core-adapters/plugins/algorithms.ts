// Algorithms by name: what users swap with algorithm.name. Each implies an advantage estimator and
// whether the run needs a critic and a reference policy. Plugins add theirs through plugin.json.
import type { AdvantageEstimatorRegistry, EstimatorTraits } from '../algorithms/advantages.js';
import { getPath } from '../config/load.js';
import { InputError } from '../errors.js';

/** The reference policy is needed when any listed config key holds one of its listed values. */
export interface ReferenceCondition {
  when: Record<string, unknown[]>;
}

/** An algorithm by name: the advantage estimator it implies and whether it reads the reference policy. */
export interface AlgorithmSpec {
  name: string;
  /** The advantage estimator used unless algorithm.adv_estimator names another. */
  advEstimator: string;
  /** The reference policy is needed even without KL terms (FlowRL's objective reads it), always or under a config condition. */
  needsReference: boolean | ReferenceCondition;
  /** The policy loss (actor.policy_loss.loss_mode) used while that key is left at vanilla; a plugin algorithm such as DAPO's names its own. */
  policyLoss?: string;
  description: string;
  /** 'core' or the plugin that contributed it. */
  source: string;
}

export const CORE_ALGORITHMS: AlgorithmSpec[] = [
  { name: 'ppo', advEstimator: 'gae', needsReference: false, description: 'PPO with a learned critic and GAE', source: 'core' },
  { name: 'grpo', advEstimator: 'grpo', needsReference: false, description: 'group-normalised outcome advantages, no critic', source: 'core' },
  {
    name: 'reinforce_plus_plus',
    advEstimator: 'reinforce_plus_plus',
    needsReference: false,
    description: 'REINFORCE++: whitened discounted returns, no critic',
    source: 'core',
  },
];

export class AlgorithmRegistry {
  private readonly specs = new Map<string, AlgorithmSpec>();

  constructor(specs: AlgorithmSpec[] = CORE_ALGORITHMS) {
    specs.forEach((s) => this.register(s));
  }

  register(spec: AlgorithmSpec): void {
    const existing = this.specs.get(spec.name);
    if (existing) throw new InputError(`algorithm '${spec.name}' from ${spec.source} is already provided by ${existing.source}`);
    this.specs.set(spec.name, spec);
  }

  names(): string[] {
    return [...this.specs.keys()];
  }

  /** The spec for a name; an unknown name fails with the list of available ones. */
  get(name: string, key = 'algorithm.name'): AlgorithmSpec {
    const spec = this.specs.get(name);
    if (!spec) throw new InputError(`${key}: unknown algorithm '${name}'; available: ${this.names().join(', ')}`);
    return spec;
  }
}

/** What a run needs from algorithm.name: the estimator, a critic, a reference policy. */
export interface RunRequirements {
  algorithm: AlgorithmSpec;
  advEstimator: string;
  /** The estimator's registered traits (an outcome estimator takes shaping through its return). */
  estimatorTraits: EstimatorTraits;
  useCritic: boolean;
  useReference: boolean;
}

/** The config runRequirements reads (the estimator's own keys are optional, for callers that build it by hand). */
export interface RequirementsConfig {
  algorithm: { name: string; adv_estimator: string | null; use_kl_in_reward: boolean; gdpo_reward_keys?: string[] | null; gdpo_reward_weights?: number[] | null };
  actor_rollout_ref: { actor: { use_kl_loss: boolean }; rollout?: { n: number } };
}

/** Settings an estimator cannot run without, refused before anything loads (verl fails on them mid-step). */
function checkEstimatorSettings(advEstimator: string, traits: EstimatorTraits, config: RequirementsConfig): void {
  const n = config.actor_rollout_ref.rollout?.n;
  if (traits.needsGroups && n !== undefined && n < 2) {
    throw new InputError(`actor_rollout_ref.rollout.n is ${n}; algorithm.adv_estimator ${advEstimator} compares the responses of a prompt, so it needs 2 or more`);
  }
  if (advEstimator !== 'gdpo') return;
  const keys = config.algorithm.gdpo_reward_keys;
  if (!keys?.length) throw new InputError("algorithm.gdpo_reward_keys: adv_estimator gdpo needs the scorer's fields to normalise one by one (e.g. [score, acc])");
  const weights = config.algorithm.gdpo_reward_weights;
  if (weights && weights.length !== keys.length) throw new InputError(`algorithm.gdpo_reward_weights has ${weights.length} weights for ${keys.length} gdpo_reward_keys`);
}

/** Whether the algorithm itself reads the reference policy under this config. */
export function algorithmNeedsReference(algorithm: AlgorithmSpec, config: object): boolean {
  const needs = algorithm.needsReference;
  if (typeof needs === 'boolean') return needs;
  return Object.entries(needs.when).some(([key, values]) => values.includes(getPath(config, key)));
}

/** needs_reference_policy as a phrase: 'always', 'never' or the condition. */
export function describeReferenceNeed(needs: boolean | ReferenceCondition): string {
  if (typeof needs === 'boolean') return needs ? 'always' : 'never';
  return Object.entries(needs.when).map(([key, values]) => `${key} is ${values.map(String).join(' or ')}`).join(', or ');
}

/** What a run needs, from algorithm.name and the KL settings (as verl derives use_critic / use_reference_policy). */
export function runRequirements(config: RequirementsConfig, registry: AlgorithmRegistry, estimators: AdvantageEstimatorRegistry): RunRequirements {
  const algorithm = registry.get(config.algorithm.name);
  const advEstimator = config.algorithm.adv_estimator ?? algorithm.advEstimator;
  checkEstimatorSettings(advEstimator, estimators.traits(advEstimator), config);
  return {
    algorithm,
    advEstimator,
    estimatorTraits: estimators.traits(advEstimator),
    useCritic: estimators.traits(advEstimator).needsValues === true,
    useReference: algorithmNeedsReference(algorithm, config) || config.actor_rollout_ref.actor.use_kl_loss || config.algorithm.use_kl_in_reward,
  };
}
