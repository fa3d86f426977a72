// The roles of the host, as small interfaces. Each is bound in the container under its TOKENS entry;
// a plugin replaces an implementation by rebinding the token (usually with a subclass).
import type * as tf from '@tensorflow/tfjs-core';
import type { Batch } from '../batch.js';
import type { CausalLM } from '../model/causal-lm.js';
import type { AdamW, LrScheduler } from '../model/optim.js';
import type { ThreadPool } from '../engine/thread-pool.js';

export type { Metrics } from '../metrics.js';
import type { Metrics } from '../metrics.js';

/** A set of named parameters beyond the LM's own, such as a plugin's head on the policy. */
export interface ParameterHead {
  /** Trainable parameters by stable name (they key checkpoints and optimizer state). */
  readonly params: Map<string, tf.Variable>;
  dispose(): void;
}

/** What the worker hands the actor: the policy LM, heads attached to it, and one optimizer for all. */
export interface PolicyModule {
  lm: CausalLM;
  /** Heads attached by the worker (FlowRL attaches 'proj_z'); saved as <name>.safetensors in checkpoints. */
  heads: Map<string, ParameterHead>;
  /** Every trainable parameter: the LM's and the heads', by stable name. */
  params: Map<string, tf.Variable>;
  optimizer: AdamW;
  /** The learning rate of each optimizer step; the worker steps it once per training step. */
  lrScheduler: LrScheduler;
  /** Data-parallel replicas of these parameters (engine.workers > 1); publish after every change. */
  pool?: ThreadPool;
}

/** What a log-prob pass computes besides the log-probs. */
export interface LogProbOptions {
  withEntropy: boolean;
  /** sum_v pi_v^2 per position (verl's actor.calculate_sum_pi_squared), for optimal_token_baseline. */
  withSumPiSquared?: boolean;
  /** Scoring temperature; default the rollout's (validation's matching scores at its own). */
  temperature?: number;
}

/** [B * R] each: log-probs, and what LogProbOptions asked for. */
export interface LogProbResult {
  logProbs: Float32Array;
  entropy?: Float32Array;
  sumPiSquared?: Float32Array;
}

/** The policy-update role (verl's DataParallelPPOActor). */
export interface Actor {
  /** Receives the module the worker built; called once before any other method. */
  attach(module: PolicyModule): void;
  /** Per-token log-probs of the batch's responses (and entropies, sum pi^2) without gradients. */
  computeLogProb(batch: Batch, options: LogProbOptions): Promise<LogProbResult>;
  /**
   * Mini-batches x epochs of updates on a batch holding advantages and old log-probs. Each listener
   * sees every mini-batch just before its optimizer step; their metrics join the actor's averages.
   */
  updatePolicy(batch: Batch, listeners?: ActorStepListener[]): Promise<Metrics>;
}

/**
 * Told of each actor optimizer step, with its mini-batch, before the step is applied: the policy
 * still has the weights whose forward gave the step's gradients (RLFR's online field trains here).
 */
export interface ActorStepListener {
  onActorStep(miniBatch: Batch): Metrics | Promise<Metrics>;
}

/** What the worker hands the rollout: the policy and how its samples stop and are padded. */
export interface RolloutPolicy {
  module: PolicyModule;
  stopTokenIds: number[];
  padTokenId: number;
  /**
   * Writes the policy's current weights as a server loads them: a Hugging Face directory, or with
   * LoRA the PEFT adapter alone. Returns whether it wrote an adapter.
   */
  writeWeights(dir: string): Promise<{ adapter: boolean }>;
}

/**
 * The rollout role (verl's rollout): samples responses with the policy's current weights, in this
 * process (local) or on inference servers (sglang, vllm).
 */
export interface Rollout {
  /** Receives the policy the worker built; called once, from the worker's init. */
  attach(policy: RolloutPolicy): Promise<void>;
  /**
   * Samples a batch of prompts (already repeated rollout.n times). The batch returned holds
   * responses, input_ids, attention_mask and response_mask; an engine in another process adds its
   * per-token log-probs as rollout_log_probs, and its metrics under meta.metrics.
   */
  generateSequences(prompts: Batch, sampling: SamplingSettings): Promise<Batch>;
  /** The policy's weights changed (an update or a restore): the next samples come from the new ones. */
  policyChanged(): void;
  /**
   * Resolves once every generateSequences call in progress has the weights it samples with on its
   * engines and its requests sent, so the caller can compute while the engines sample (a rollout in
   * this process samples within the call and need not define it).
   */
  dispatched?(): Promise<void>;
  /** Resolves once every generateSequences call in progress has its weights on its engines (written and loaded), so the policy may change. */
  synced?(): Promise<void>;
  dispose(): Promise<void>;
}

/** The actor-rollout-ref worker: owns the policy, the reference policy and sampling. */
export interface Worker {
  init(): Promise<void>;
  readonly module: PolicyModule;
  /** Samples responses for a batch of prompts (already repeated rollout.n times) through the rollout role. */
  generateSequences(prompts: Batch, sampling: SamplingSettings): Promise<Batch>;
  /** Resolves once sampling in progress has its weights on the engines and its requests sent (Rollout.dispatched). */
  rolloutDispatched(): Promise<void>;
  /** Resolves once sampling in progress has its weights on the engines (Rollout.synced): the policy may then change under it. */
  rolloutSynced(): Promise<void>;
  /** Changes of the policy's weights so far (updates and restores): the version rollout servers sample with, as ServerRollout counts them. */
  policyVersion(): number;
  /** The old policy's log-probs and entropies; with withSumPiSquared, also sum pi^2 (optimal_token_baseline). */
  computeLogProb(batch: Batch, options?: { withSumPiSquared?: boolean; temperature?: number }): Promise<{ logProbs: Float32Array; entropy: Float32Array; sumPiSquared?: Float32Array }>;
  /** Reference log-probs (at the rollout temperature unless given); a run whose algorithm needs no reference loads it on first use (validation's matching metrics). */
  computeRefLogProb(batch: Batch, options?: { temperature?: number }): Promise<Float32Array>;
  updateActor(batch: Batch, listeners?: ActorStepListener[]): Promise<Metrics>;
  /** Writes the actor (HF directory), its heads and optimizer state into dir. */
  saveCheckpoint(dir: string): Promise<void>;
  loadCheckpoint(dir: string): void;
  /** Writes a plain HF directory of the policy, without any plugin head. */
  exportModel(dir: string): Promise<void>;
  dispose(): void;
}

/** How the worker samples one batch of rollouts. */
export interface SamplingSettings {
  temperature: number;
  topP: number;
  topK: number;
  greedy: boolean;
  maxNewTokens: number;
  seed: number;
  /** These prompts are rows firstRow.. of the step's batch (a data-parallel rank's share, an async group): each row samples from that row's stream. */
  firstRow?: number;
}

/** A value model (verl's critic). */
export interface Critic {
  init(): Promise<void>;
  computeValues(batch: Batch): Promise<Float32Array>;
  updateCritic(batch: Batch): Promise<Metrics>;
  saveCheckpoint(dir: string): Promise<void>;
  loadCheckpoint(dir: string): void;
  dispose(): void;
}

/** Scores of a batch of rollouts: token-level, per response, and which ones are correct. */
export interface RewardResult {
  /** [B, R] with each response's score at its last valid token. */
  tokenLevelScores: Float32Array;
  /** One score per response. */
  scores: number[];
  /** Whether each response counts as correct (the scorer's acc, else score > 0). */
  correct: boolean[];
  /** Means of the scorers' extra numeric fields, as metrics. */
  metrics: Metrics;
}

/** A correct response as text and as the token ids a policy emits for it (ending with its stop token). */
export interface CorrectResponse {
  text: string;
  ids: number[];
}

/** Scores rollouts by data_source (verl's reward manager). */
export interface RewardManager {
  /** Loads what scoring needs (a custom scorer module). */
  init?(): Promise<void>;
  /** Scores a batch; a promise where scoring runs something (code rewards). */
  compute(batch: Batch): RewardResult | Promise<RewardResult>;
  /** Every correct response to a prompt, where the task can list them; undefined where it cannot (validation then estimates matching from samples). */
  correctResponses?(prompt: PromptRecord): CorrectResponse[] | undefined;
}

/**
 * Contribution point: dense per-token rewards added to the outcome reward (RLFR's flow rewards are
 * one). The trainer adds them to the token rewards before a token-level estimator (gae,
 * reinforce_plus_plus), and to the advantages as their return after an outcome estimator (grpo).
 */
export interface RewardShaper {
  readonly name: string;
  /** Loads what shaping needs; called once after the worker's init and before any restore. */
  init?(): Promise<void>;
  /**
   * Adds this shaper's reward per response token into `shaping` ([B, R], row-major; padding must
   * stay 0). The batch holds the rollouts and their token_level_scores.
   */
  shape(batch: Batch, shaping: Float32Array): Metrics | Promise<Metrics>;
  /** Called after each actor update with the same batch (for online-trained shapers). */
  afterUpdate?(batch: Batch): Metrics | Promise<Metrics>;
  /** Present when the shaper also follows each actor optimizer step (see ActorStepListener). */
  onActorStep?(miniBatch: Batch): Metrics | Promise<Metrics>;
  /** State to keep in checkpoints, as files written into dir. */
  saveCheckpoint?(dir: string): void | Promise<void>;
  loadCheckpoint?(dir: string): void;
  dispose?(): void;
}

/**
 * Contribution point: a CLI subcommand from a plugin, `flowrl NAME CONFIG [key=value ...]`. It is
 * resolved from the container the config builds (so it can inject the config and any role); the
 * plugin's manifest lists it under `commands` so the CLI can find it before loading anything.
 */
export interface PluginCommand {
  readonly name: string;
  run(): Promise<void>;
}

/** Contribution point: where metrics go (metrics.jsonl, the console). */
export interface MetricsSink {
  log(step: number, metrics: Metrics): void;
  close(): void;
  /** A sink that sends in the background: resolves once what it was given is sent (the trainer waits, bounded). */
  flush?(): Promise<void>;
  /** The trainer stopped waiting for flush(): drop what is left and hold nothing open. */
  abandon?(): void;
  /** The run failed: close the tracker's run as failed (MLflow's FAILED); flush is then awaited, briefly. */
  fail?(): void;
  /** trainer.log_val_generations: the validation's logged samples (verl logs them as a table or text where the tracker can). */
  logGenerations?(step: number, generations: { prompt: string; response: string; score: number }[]): void;
}

/** A complete checkpoint: its global step and directory. */
export interface CheckpointInfo {
  step: number;
  dir: string;
}

/** Where checkpoints go: atomic saves, the latest complete one, and the one to resume from. */
export interface CheckpointStore {
  /** Writes global_step_N atomically through `write(tmpDir)`. */
  save(step: number, write: (dir: string) => void | Promise<void>): Promise<CheckpointInfo>;
  /** The newest complete checkpoint, if any. */
  latest(): CheckpointInfo | undefined;
  /** The checkpoint resume_mode asks for (auto: latest; disable: none; else a path). */
  resumeTarget(): CheckpointInfo | undefined;
}

/** A prompt ready for sampling: token ids plus what scoring needs. */
export interface PromptRecord {
  ids: number[];
  dataSource: string;
  groundTruth: unknown;
  extraInfo: Record<string, unknown>;
  /** Index of the row in its split (stable across runs). */
  index: number;
  /** The row's prompt messages, and its agent loop (multi-turn rollouts read both). */
  messages?: { role: string; content: string }[];
  agentName?: 'single_turn_agent' | 'tool_agent';
}

/** Which agent loop a data row uses and how a tool row's prompt is rendered (rollout.multi_turn; rollout/multi-turn.ts). */
export interface AgentRouting {
  readonly enabled: boolean;
  /** The row's agent_name, else rollout.agent.default_agent_loop; `where` names the row in errors. */
  agentOf(agentName: string | undefined, where: string): 'single_turn_agent' | 'tool_agent';
  /** The chat template with the schemas of the tools the row may call (extra_info.tool_selection; all when absent or empty). */
  promptText(messages: { role: string; content: string }[], toolSelection?: string[]): string;
}

/** Where the trainer is in the training prompts (kept in checkpoints). */
export interface DataPosition {
  epoch: number;
  /** Prompts consumed in this epoch. */
  offset: number;
}

/** The training and validation prompts, tokenized, served in seeded order. */
export interface Dataset {
  init(): Promise<void>;
  readonly train: PromptRecord[];
  readonly val: PromptRecord[];
  /** Prompts for one training step from a position; returns the next position. `key` names the size in errors (data.train_batch_size, or data.gen_batch_size under filter_groups). */
  nextBatch(position: DataPosition, size: number, key?: string): { prompts: PromptRecord[]; next: DataPosition };
  /** Training steps in one epoch. */
  stepsPerEpoch(size: number): number;
}

/** The training loop (verl's RayPPOTrainer): fit, evaluate, validate. */
export interface Trainer {
  /** Runs training to the end; returns the last validation metrics (if any). */
  fit(): Promise<Metrics>;
  /** Loads what validation needs (data, scorers, the policy; no checkpoint), then one validation pass (`flowrl eval`). */
  evaluate(): Promise<Metrics>;
  /** One validation pass, once the trainer is set up (by fit or evaluate). */
  validate(): Promise<Metrics>;
  /** Asks fit to stop after the current step, with a checkpoint; fit then returns early. */
  requestStop?(): void;
  /** The step fit stopped at after requestStop (undefined when it ran to the end). */
  readonly stoppedAt?: number;
  /** Releases the models the run's roles hold. */
  dispose(): void;
}
