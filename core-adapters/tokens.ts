// Dependency-injection identifiers, one per role. Symbol.for keeps them identical across copies of
// this module (a plugin compiled against the published package still names the same bindings).
/** The dependency-injection token of each role and contribution point (Symbol.for, so copies of this module agree). */
export const TOKENS = {
  Config: Symbol.for('flowrl.Config'),
  Engine: Symbol.for('flowrl.Engine'),
  /** Data-parallel ranks (mpirun); one rank in a plain process. */
  Ranks: Symbol.for('flowrl.Ranks'),
  Tokenizer: Symbol.for('flowrl.Tokenizer'),
  /** The actor-rollout-ref worker: sampling, log-probs, the reference policy, actor updates. */
  Worker: Symbol.for('flowrl.Worker'),
  /** The policy-update role; the worker hands it the model it builds. */
  Actor: Symbol.for('flowrl.Actor'),
  /** Sampling: in this process (local) or on inference servers (sglang, vllm); the worker hands it the policy. */
  Rollout: Symbol.for('flowrl.Rollout'),
  Critic: Symbol.for('flowrl.Critic'),
  Trainer: Symbol.for('flowrl.Trainer'),
  RewardManager: Symbol.for('flowrl.RewardManager'),
  /** The advantage estimator function named by the algorithm (registry lookup). */
  AdvantageEstimator: Symbol.for('flowrl.AdvantageEstimator'),
  /** The policy-loss function named by actor.policy_loss (registry lookup). */
  PolicyLoss: Symbol.for('flowrl.PolicyLoss'),
  /** Contribution point: per-token reward shaping after scoring (multiInject). */
  RewardShaper: Symbol.for('flowrl.RewardShaper'),
  /** Contribution point: CLI subcommands a plugin adds, run as `flowrl NAME CONFIG` (multiInject). */
  Command: Symbol.for('flowrl.Command'),
  /** Contribution point: where metrics go (multiInject). */
  MetricsSink: Symbol.for('flowrl.MetricsSink'),
  CheckpointStore: Symbol.for('flowrl.CheckpointStore'),
  Dataset: Symbol.for('flowrl.Dataset'),
  /** What the run needs (advantage estimator, critic, reference), from algorithm.name. */
  RunRequirements: Symbol.for('flowrl.RunRequirements'),
  AlgorithmRegistry: Symbol.for('flowrl.AlgorithmRegistry'),
  /** Scorers by data_source: the built-ins and what plugins registered (the reward manager reads it). */
  ScorerRegistry: Symbol.for('flowrl.ScorerRegistry'),
  /** Tool classes by name for multi-turn rollouts: the built-ins and what plugins registered. */
  ToolRegistry: Symbol.for('flowrl.ToolRegistry'),
  /** Which agent loop each data row uses (the multi-turn setup; the dataset reads it). */
  AgentRouting: Symbol.for('flowrl.AgentRouting'),
  /** URL of the module a replica thread imports (composition.ts), or '' when the host was made without threads. */
  ReplicaEntry: Symbol.for('flowrl.ReplicaEntry'),
} as const;

/** The name of a binding in TOKENS. */
export type TokenName = keyof typeof TOKENS;

/** Contribution points: many bindings each (multiInject), so a plugin adds to them with bind. */
export const CONTRIBUTION_POINTS: TokenName[] = ['RewardShaper', 'Command', 'MetricsSink'];

/** Bindings a plugin manifest may declare as overridden. */
export const OVERRIDABLE_BINDINGS: TokenName[] = [
  'Worker',
  'Actor',
  'Rollout',
  'Critic',
  'Trainer',
  'RewardManager',
  'AdvantageEstimator',
  'PolicyLoss',
  'RewardShaper',
  'MetricsSink',
  'CheckpointStore',
  'Dataset',
];
