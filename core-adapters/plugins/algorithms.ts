// Algorithms by name: what users swap with algorithm.name. Each implies an advantage estimator and
// whether the run needs a critic and a reference policy. Plugins add theirs through plugin.json.
import type { AdvantageEstimatorRegistry, EstimatorTraits } from '../algorithms/advantages.js';
import { InputError } from '../errors.js';

/** An algorithm by name: the advantage estimator it implies and whether it reads the reference policy. */
export interface AlgorithmSpec {
  name: string;
  /** The advantage estimator used unless algorithm.adv_estimator names another. */
  advEstimator: string;
  /** The reference policy is needed even without KL terms (FlowRL's objective reads it). */
  needsReference: boolean;
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

/** What a run needs, from algorithm.name and the KL settings (as verl derives use_critic / use_reference_policy). */
export function runRequirements(
  config: { algorithm: { name: string; adv_estimator: string | null; use_kl_in_reward: boolean }; actor_rollout_ref: { actor: { use_kl_loss: boolean } } },
  registry: AlgorithmRegistry,
  estimators: AdvantageEstimatorRegistry,
): RunRequirements {
  const algorithm = registry.get(config.algorithm.name);
  const advEstimator = config.algorithm.adv_estimator ?? algorithm.advEstimator;
  return {
    algorithm,
    advEstimator,
    estimatorTraits: estimators.traits(advEstimator),
    useCritic: estimators.traits(advEstimator).needsValues === true,
    useReference: algorithm.needsReference || config.actor_rollout_ref.actor.use_kl_loss || config.algorithm.use_kl_in_reward,
  };
}
