// flowrl/core: what a plugin may import from the host, and all of it. Plugins (and plugin/ in this
// repository) import nothing else; everything not listed here is internal and may change. The
// README's "The plugin surface" section describes each group.
import 'reflect-metadata';

// Errors: bad input (config, files, rows) is an InputError; the CLI prints it and exits 2.
export { GpuDeviceError, InputError, RolloutUnavailable } from './errors.js';

// Bindings: one token per role and contribution point; a manifest declares the ones it overrides.
export { TOKENS, OVERRIDABLE_BINDINGS, type TokenName } from './tokens.js';

// Contracts: the roles, the contribution points, and the records they pass.
export type {
  Actor,
  ActorStepListener,
  CheckpointInfo,
  CheckpointStore,
  Critic,
  DataPosition,
  Dataset,
  MetricsSink,
  ParameterHead,
  PluginCommand,
  PolicyModule,
  PromptRecord,
  RewardManager,
  RewardResult,
  RewardShaper,
  Rollout,
  RolloutPolicy,
  SamplingSettings,
  Trainer,
  Worker,
} from './contracts/index.js';

// Plugins: what a plugin's entry receives, its manifest, and what the run needs from algorithm.name.
export type { PluginContext, PluginEntry, PluginRegistries } from './plugins/loader.js';
export type { PluginManifest } from './plugins/manifest.js';
export type { AlgorithmSpec, RunRequirements } from './plugins/algorithms.js';

export type { Metrics } from './metrics.js';

// Configuration: the resolved run config (core sections typed, plugin sections open).
export { CORE_DEFAULTS, CORE_SPEC, KEY_CHOICES, keySpecs, type ConfigTree, type ConfigValue, type KeySpec } from './config/defaults.js';
export { readConfigFile, resolveConfig, writeConfig, type Config } from './config/load.js';

// The host: a container built from a config (plugins loaded, bindings made) and the tfjs engine.
export { createHost } from './composition.js';
export type { Host, HostOptions } from './host.js';
export { initEngine, type EngineInfo } from './engine/backend.js';
// Reads are asynchronous (a GPU backend has no other kind); a loss's metrics are kept scalars.
export { keepMetrics, readAllFloat32, readFloat32, readScalar, type PendingMetrics } from './engine/readback.js';
export type { BackendChoice, NativeChoice } from './config/choices.js';

// Base roles, meant for subclassing (verl's recipe style): override a method, rebind the token.
export { PPOActor, type MicroBatchShare } from './actor/ppo-actor.js';
export { ActorRolloutRefWorker } from './workers/actor-rollout-ref.js';
export { ValueCritic } from './workers/critic.js';
export { RLTrainer } from './trainer/trainer.js';
export { NaiveRewardManager } from './rewards/manager.js';
export { ScorerRegistry } from './rewards/registry.js';
export { ToolRegistry } from './tools/registry.js';
export { StatelessTool, type Tool, type ToolResult, type FunctionToolSchema } from './tools/tool.js';
export { Sandbox } from './rewards/sandbox.js';
export { scoreCode, SandboxRunner, SandboxFusionRunner, type CodeRunner } from './rewards/code.js';
export type { Scorer, ScoreResult } from './rewards/types.js';
export { PromptDataset } from './data/dataset.js';
export { LocalCheckpointStore } from './trainer/checkpoints.js';
export { LocalRollout, samplePolicy } from './rollout/local.js';
export { ServerRollout } from './rollout/server-rollout.js';
// Multi-turn rollouts: the agent loop, its template renderer, and the role that runs it in a step.
export { runAgentLoop, ToolTurnRenderer, type AgentRow, type Trajectory, type TurnSampler } from './rollout/agent-loop.js';
export { MultiTurn } from './rollout/multi-turn.js';

// Registries by name (one per host; plugins add to them through PluginContext.registries), and the
// math they hold (verl's core_algos): estimators, policy losses, KL, the rollout correction (TIS).
export {
  AdvantageEstimatorRegistry,
  computeGrpoOutcomeAdvantages,
  maskedWhiten,
  type AdvantageEstimator,
  type AdvantageInput,
  type AdvantageOutput,
  type EstimatorTraits,
} from './algorithms/advantages.js';
export { PolicyLossRegistry, policyLossOptions } from './algorithms/policy-loss.js';
export { aggregateLoss, type AggregateLossOptions } from './algorithms/loss-aggregation.js';
export { vanillaPolicyLoss, type PolicyLoss, type PolicyLossInput, type PolicyLossOptions, type PolicyLossResult } from './algorithms/policy-losses.js';
export { klPenalty } from './algorithms/kl.js';
export type { KlPenaltyType, LossAggMode } from './config/choices.js';
export { composeAdvantages, type AdvantageComposition, type ComposedAdvantages } from './algorithms/compose.js';
export {
  sequenceRolloutCorrection,
  tokenRolloutCorrection,
  type RolloutCorrectionMetrics,
  type SequenceRolloutCorrection,
  type TokenRolloutCorrection,
} from './algorithms/rollout-correction.js';

// Batches and seeded randomness.
export { Batch, type BatchTensor } from './batch.js';
export { Rng } from './random.js';

// The model: loading, scoring, sampling, and the parameters of heads a worker attaches.
export { CausalLM, positionsFromMask } from './model/causal-lm.js';
export { smallLlamaConfig, type ModelConfig, type SmallLlamaSizes } from './model/config.js';
export {
  loadModel,
  loadOptimizerState,
  loadParameters,
  OPTIMIZER_FILE,
  saveModel,
  saveOptimizerState,
  saveParameters,
  writeDirectoryAtomically,
} from './model/checkpoint.js';
export { uniqueVariableName } from './model/variables.js';
export { TextTokenizer } from './model/tokenizer.js';
export { packSequences, responseMask, scoreResponses, type SequenceBatch } from './model/logprobs.js';
export { sequenceBatch, sequencesFromSamples } from './workers/sequences.js';
export { rowsByGroup } from './arrays.js';
export { generate, type SamplingOptions } from './model/generate.js';

// Optimisation: AdamW as PyTorch's, verl's lr schedules, and the one clipped optimizer step.
export { AdamW, clippedStep, LrScheduler, lossAndGradients, scheduledLr, type AdamWOptions, type LrSchedule } from './model/optim.js';
export { MetricAverager, runUpdateLoop, shuffledBatches, type MicroBatchPlace, type UpdateLoop } from './model/update-loop.js';

// Differentiable tensor ops that stay fast on the wasm backend (for heads and losses).
export { addColumns, linear, rmsNorm, scaleColumns, silu, stopGradient } from './engine/ops.js';

// Statistics over seeds, as flowrl compare reports them.
export { tCdf, tInterval, type Interval } from './report/statistics.js';
export { formatDifferenceInterval, formatInterval, formatSigned } from './report/comparison.js';
// Per-prompt validation records (val_prompts.jsonl), with the matching over each prompt's correct set.
export { readValPrompts, type PromptMatchingRecord, type ValPromptRecord } from './trainer/val-prompts.js';

// Data: verl's rows, supervised examples, and the countdown task the examples use.
export { fileList } from './data/dataset.js';
export { readRows, writeRowsJsonl, type DataRow } from './data/rows.js';
export { readSftExamples, runSft, type SftExample } from './trainer/sft.js';
export { buildTokenizer } from './model/tokenizer.js';
export { countdownProblemKey, generateCountdown, writeCountdownDataset, type CountdownOptions } from './data/countdown.js';
export { solveCountdown, type CountdownProblem } from './rewards/countdown-solver.js';
