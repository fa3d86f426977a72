// The actor-rollout-ref worker (verl's ActorRolloutRefWorker): it loads the policy, builds the module
// it hands to the actor (subclasses attach heads here), keeps the frozen reference policy, samples
// rollouts, and saves and restores all of it.
import * as tf from '@tensorflow/tfjs-core';
import { readFloat32 } from '../engine/readback.js';
import fs from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import path from 'node:path';
import { inject, injectable, optional } from 'inversify';
import { concatFloat32 } from '../arrays.js';
import type { Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import type { Actor, ActorStepListener, Metrics, PolicyModule, Rollout, RolloutPolicy, SamplingSettings, Worker } from '../contracts/index.js';
import { InputError } from '../errors.js';
import type { CausalLM } from '../model/causal-lm.js';
import {
  loadModel,
  loadOptimizerState,
  loadParameters,
  loadWeightsInto,
  type ModelMemory,
  OPTIMIZER_FILE,
  saveModel,
  saveOptimizerState,
  saveParameters,
  shareFrozenBases,
  writeDirectoryAtomically,
} from '../model/checkpoint.js';
import { frozenBaseAvailable } from '../engine/frozen.js';
import { heapOverflowGiB, readModelConfig } from '../model/config.js';
import { ADAPTER_CONFIG_FILE, createAdapters, loadAdapterCheckpoint, loadAdapters, parseTargetModules, writeAdapterFiles } from '../model/lora.js';
import { resolveThreadCount, ThreadPool, type ReplicaSpec } from '../engine/thread-pool.js';
import { scoreResponses } from '../model/logprobs.js';
import { AdamW, LrScheduler, verlLrSchedule } from '../model/optim.js';
import { stopTokenIds, type TextTokenizer } from '../model/tokenizer.js';
import type { RunRequirements } from '../plugins/algorithms.js';
import { TOKENS } from '../tokens.js';
import { sequenceBatch } from './sequences.js';
import { gatherBatch, onRankRows, rankRows } from './ranks.js';
import { launchedRank, SINGLE_RANK, type RankWorld } from '../engine/mpi.js';
import { describeBfloat16Products } from '../engine/kernels.js';

/**
 * What a worker thread builds as this worker's replica: createActorReplica in `entry` (the
 * composition root, which the host names through TOKENS.ReplicaEntry: it builds a whole host).
 */
function actorReplicaSpec(config: Config, entry: string): ReplicaSpec {
  // A frozen LoRA base goes to the threads as shared memory: one copy for all of them.
  return { module: entry, factory: 'createActorReplica', args: { config: structuredClone(config), frozenBases: shareFrozenBases() } };
}

/** The policy worker (verl's ActorRolloutRefWorker): sampling, log-probs, the reference, checkpoints; subclasses attach heads in buildPolicyModule. */
@injectable()
export class ActorRolloutRefWorker implements Worker {
  module!: PolicyModule;
  protected reference?: CausalLM;

  /** Where replica threads build their replica (composition.ts); '' for a host made without threads. */
  @inject(TOKENS.ReplicaEntry) @optional() protected readonly replicaEntry: string = '';
  @inject(TOKENS.Ranks) @optional() protected readonly ranks: RankWorld = SINGLE_RANK;

  constructor(
    @inject(TOKENS.Config) protected readonly config: Config,
    @inject(TOKENS.Actor) protected readonly actor: Actor,
    @inject(TOKENS.Tokenizer) protected readonly tokenizer: TextTokenizer,
    @inject(TOKENS.RunRequirements) protected readonly requirements: RunRequirements,
    @inject(TOKENS.Rollout) protected readonly rollout: Rollout,
  ) {}

  protected get modelPath(): string {
    const p = this.config.actor_rollout_ref.model.path;
    if (!p) throw new InputError(`actor_rollout_ref.model.path is not set; point it at a Hugging Face model directory`);
    return p;
  }

  async init(): Promise<void> {
    await this.initReplica();
    if (this.requirements.useReference) this.loadReference();
    const threads = resolveThreadCount(this.config.engine.workers);
    if (threads > 1 && tf.getBackend() === 'wasm' && !this.replicaEntry && this.config.trainer.progress) {
      process.stderr.write('[flowrl] one thread: this host was made without a replica entry (create it with createHost from flowrl/core)\n');
    }
    if (threads > 1 && tf.getBackend() === 'wasm' && this.replicaEntry) {
      this.module.pool = await ThreadPool.create({
        size: threads,
        spec: actorReplicaSpec(this.config, this.replicaEntry),
        params: this.module.params,
        native: this.config.engine.native,
      });
      this.module.pool.publish(this.module.params);
      if (this.config.trainer.progress) process.stderr.write(`[flowrl] data-parallel: ${threads} threads (engine.workers), each with a policy replica\n`);
    }
    await this.rollout.attach(this.rolloutPolicy());
  }

  /** The policy as the rollout sees it: the module, stops, padding and how to write its weights for a server. */
  protected rolloutPolicy(): RolloutPolicy {
    return {
      module: this.module,
      stopTokenIds: this.stopTokenIds(),
      padTokenId: this.padTokenId,
      writeWeights: async (dir) => {
        const adapters = this.module.lm.adapters;
        if (adapters) {
          await writeAdapterFiles(dir, adapters, path.resolve(this.modelPath));
          return { adapter: true };
        }
        await this.exportModel(dir);
        return { adapter: false };
      },
    };
  }

  /**
   * The frozen reference policy: the initial weights of model.path, or with LoRA the policy's own
   * base with its adapters off (no second copy).
   */
  loadReference(): void {
    if (this.module?.lm.adapters) return;
    this.reference ??= loadModel(this.config.actor_rollout_ref.ref.model_path ?? this.modelPath);
  }

  /** The policy module alone, attached to the actor (what a data-parallel replica needs). */
  async initReplica(): Promise<void> {
    const lm = loadModel(this.modelPath, this.baseMemory());
    try {
      this.attachAdapters(lm);
    } catch (e) {
      lm.dispose();
      throw e;
    }
    lm.gradientCheckpointing = this.config.actor_rollout_ref.model.enable_gradient_checkpointing;
    this.module = this.buildPolicyModule(lm);
    this.actor.attach(this.module);
  }

  /**
   * Where the policy's weights live: with LoRA the frozen base goes outside the wasm heap when the
   * native addon can multiply it there (model.base_dtype); otherwise on the heap, which must hold it.
   */
  protected baseMemory(): ModelMemory {
    const m = this.config.actor_rollout_ref.model;
    if (m.base_compute_dtype === 'bfloat16' && m.base_dtype !== 'bfloat16') {
      throw new InputError(`actor_rollout_ref.model.base_compute_dtype is bfloat16, which needs a bfloat16 base: set actor_rollout_ref.model.base_dtype to bfloat16 (it is ${m.base_dtype})`);
    }
    if (m.lora_rank > 0 && frozenBaseAvailable()) {
      if (m.base_compute_dtype === 'bfloat16' && isMainThread && launchedRank() === 0) process.stderr.write(`[flowrl] bfloat16 products (model.base_compute_dtype): ${describeBfloat16Products()}\n`);
      return { frozenBase: m.base_dtype, frozenCompute: m.base_compute_dtype };
    }
    if (m.base_dtype !== 'float32' && m.lora_rank > 0) throw new InputError(`actor_rollout_ref.model.base_dtype is ${m.base_dtype}, which needs the native addon on the wasm backend (here: ${tf.getBackend()}, engine.native ${this.config.engine.native}); use float32`);
    if (m.base_dtype !== 'float32') throw new InputError(`actor_rollout_ref.model.base_dtype is ${m.base_dtype}, which applies to a frozen LoRA base only; set lora_rank > 0 or base_dtype float32`);
    if (tf.getBackend() === 'wasm') {
      const config = readModelConfig(path.join(this.modelPath, 'config.json'));
      // Full fine-tuning holds the policy, its gradients, AdamW's two moments and the reference
      // (which validation's matching metrics load for every algorithm).
      const withReference = this.requirements.useReference || this.config.trainer.val_matching;
      const copies = m.lora_rank > 0 ? 1 : 4 + (withReference ? 1 : 0);
      const gib = heapOverflowGiB(config, copies);
      if (gib !== undefined) {
        const what = m.lora_rank > 0 ? 'the frozen base' : `${copies} float32 copies of this model (policy, gradients, AdamW's two moments${copies > 4 ? `, reference${this.requirements.useReference ? '' : ' for trainer.val_matching'}` : ''})`;
        throw new InputError(
          `${this.modelPath}: ${what} take ${gib.toFixed(2)} GiB of the wasm heap, which stops at 4 GiB. ` +
            'Train it with LoRA (actor_rollout_ref.model.lora_rank > 0) and the native addon (the base then stays outside the heap), or on tfjs-node.',
        );
      }
    }
    return {};
  }

  /**
   * LoRA (model.lora_rank > 0): fresh adapters with PEFT's initialisation, or those of
   * model.lora_adapter_path, whose rank must match.
   */
  protected attachAdapters(lm: CausalLM): void {
    const m = this.config.actor_rollout_ref.model;
    const key = (k: string) => `actor_rollout_ref.model.${k}`;
    if (!Number.isInteger(m.lora_rank) || m.lora_rank < 0) throw new InputError(`${key('lora_rank')} must be a whole number >= 0 (0: full fine-tuning); got ${m.lora_rank}`);
    if (m.lora_rank === 0) {
      if (m.lora_adapter_path) throw new InputError(`${key('lora_adapter_path')} is set but ${key('lora_rank')} is 0; set lora_rank to the adapter's r to train it`);
      return;
    }
    if (m.lora_adapter_path) {
      const adapters = loadAdapters(lm.config, m.lora_adapter_path);
      if (adapters.settings.rank !== m.lora_rank) {
        adapters.dispose();
        throw new InputError(`${path.join(m.lora_adapter_path, ADAPTER_CONFIG_FILE)}: r is ${adapters.settings.rank} but ${key('lora_rank')} is ${m.lora_rank}`);
      }
      lm.attachAdapters(adapters);
      return;
    }
    if (!(m.lora_alpha > 0)) throw new InputError(`${key('lora_alpha')} must be a positive number; got ${m.lora_alpha}`);
    const targetModules = parseTargetModules(m.target_modules, key('target_modules'));
    lm.attachAdapters(createAdapters(lm.config, { rank: m.lora_rank, alpha: m.lora_alpha, targetModules }, this.config.trainer.seed));
  }

  /** The module the actor trains: the LM, no heads, one AdamW over every parameter. Subclasses attach heads. */
  protected buildPolicyModule(lm: CausalLM): PolicyModule {
    const optim = this.config.actor_rollout_ref.actor.optim;
    return {
      lm,
      heads: new Map(),
      params: new Map(lm.trainableParams()),
      optimizer: new AdamW({ lr: optim.lr, betas: optim.betas as [number, number], eps: optim.eps, weightDecay: optim.weight_decay }),
      lrScheduler: new LrScheduler(verlLrSchedule(optim, 'actor_rollout_ref.actor.optim')),
    };
  }

  get padTokenId(): number {
    return this.tokenizer.padTokenId ?? 0;
  }

  /** Stop tokens: the model config's eos ids plus the tokenizer's eos token. */
  stopTokenIds(): number[] {
    return stopTokenIds(this.module.lm.config.eosTokenIds, this.tokenizer);
  }

  /** Under data-parallel ranks each samples its rows (their seeds as in one process) and every rank gets them all. */
  async generateSequences(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    if (this.ranks.size === 1) return this.rollout.generateSequences(prompts, sampling);
    // Gathers go in call order, the same on every rank, whichever sampling finishes first (remax
    // samples and decodes greedily at once): the slot is taken now, the gather made in it.
    const previous = this.gatherTurn;
    let done!: () => void;
    this.gatherTurn = new Promise<void>((resolve) => (done = resolve));
    try {
      const [a, b] = rankRows(this.ranks, prompts.size);
      const local = b > a ? await this.rollout.generateSequences(prompts.slice(a, b), { ...sampling, firstRow: (sampling.firstRow ?? 0) + a }) : undefined;
      await previous;
      return gatherBatch(this.ranks, local, this.padTokenId);
    } finally {
      done();
    }
  }

  /** The last rollout gather's turn (data-parallel ranks). */
  private gatherTurn: Promise<void> = Promise.resolve();

  async rolloutDispatched(): Promise<void> {
    await this.rollout.dispatched?.();
  }

  async rolloutSynced(): Promise<void> {
    await this.rollout.synced?.();
  }

  /** Weight changes so far, counted where the rollout is told of them. */
  private weightChanges = 0;

  policyVersion(): number {
    return this.weightChanges;
  }

  computeLogProb(batch: Batch, options: { withSumPiSquared?: boolean; temperature?: number } = {}): Promise<{ logProbs: Float32Array; entropy: Float32Array; sumPiSquared?: Float32Array }> {
    return onRankRows(this.ranks, batch, async (rows) => {
      const { logProbs, entropy, sumPiSquared } = await this.actor.computeLogProb(rows, { withEntropy: true, withSumPiSquared: options.withSumPiSquared, temperature: options.temperature });
      return { logProbs, entropy: entropy!, sumPiSquared };
    });
  }

  async computeRefLogProb(whole: Batch, options: { temperature?: number } = {}): Promise<Float32Array> {
    return (await onRankRows(this.ranks, whole, async (batch) => ({ refLogProbs: await this.computeRefLogProbOnThreads(batch, options.temperature) }))).refLogProbs;
  }

  /** Reference log-probs of `batch`'s rows on this rank, split across the pool's threads. */
  private async computeRefLogProbOnThreads(batch: Batch, temperature?: number): Promise<Float32Array> {
    const pool = this.module.pool;
    if (!pool || batch.size < 2) return this.computeRefLogProbHere(batch, temperature);
    return concatFloat32(
      await pool.runOnRowShards(
        batch.size,
        (a, b) => ({ kind: 'ref-log-prob', batch: batch.slice(a, b).toPlain(), temperature }),
        (a, b) => this.computeRefLogProbHere(batch.slice(a, b), temperature),
      ),
    );
  }

  /**
   * Reference log-probs on this thread, in ref.log_prob_micro_batch_size pieces. A run whose
   * algorithm reads no reference loads it on first use (validation's matching metrics) and keeps it.
   */
  async computeRefLogProbHere(batch: Batch, temperature = this.config.actor_rollout_ref.rollout.temperature || 1): Promise<Float32Array> {
    this.loadReference();
    const lm = this.module.lm;
    const reference = lm.adapters ? lm : this.reference!;
    const micro = this.config.actor_rollout_ref.ref.log_prob_micro_batch_size;
    const parts: Float32Array[] = [];
    for (const part of batch.split(micro)) {
      const lp = tf.tidy(() => reference.withoutAdapters(() => scoreResponses(reference, sequenceBatch(part), { temperature }).logProbs));
      try {
        parts.push(await readFloat32(lp, 'reference log-probs'));
      } finally {
        lp.dispose();
      }
    }
    return concatFloat32(parts);
  }

  /** The actor's update, then one scheduler step (verl's update_actor). */
  async updateActor(batch: Batch, listeners: ActorStepListener[] = []): Promise<Metrics> {
    const metrics = await this.actor.updatePolicy(batch, listeners);
    this.module.lrScheduler.step();
    this.weightChanges += 1;
    this.rollout.policyChanged();
    return metrics;
  }

  async saveCheckpoint(dir: string): Promise<void> {
    const actorDir = path.join(dir, 'actor');
    const adapters = this.module.lm.adapters;
    // With LoRA the checkpoint holds the adapter (PEFT's files) and names its base; never the base.
    if (adapters) await writeDirectoryAtomically(actorDir, async (tmp) => {
      await writeAdapterFiles(tmp, adapters, path.resolve(this.modelPath));
      this.tokenizer.save(tmp);
    });
    else await this.exportModel(actorDir);
    for (const [name, head] of this.module.heads) await saveParameters(path.join(actorDir, `${name}.safetensors`), head.params);
    await saveOptimizerState(path.join(actorDir, OPTIMIZER_FILE), this.module.optimizer, this.module.lrScheduler);
  }

  loadCheckpoint(dir: string): void {
    const actorDir = path.join(dir, 'actor');
    if (!fs.existsSync(actorDir)) throw new InputError(`${dir}: no actor/ directory; not a checkpoint`);
    if (this.module.lm.adapters) loadAdapterCheckpoint(this.module.lm.adapters, actorDir);
    else loadWeightsInto(this.module.lm, actorDir);
    for (const [name, head] of this.module.heads) loadParameters(path.join(actorDir, `${name}.safetensors`), head.params);
    loadOptimizerState(path.join(actorDir, OPTIMIZER_FILE), this.module.optimizer, this.module.params, this.module.lrScheduler);
    this.module.pool?.publish(this.module.params);
    this.weightChanges += 1;
    this.rollout.policyChanged();
  }

  async exportModel(dir: string): Promise<void> {
    await saveModel(this.module.lm, dir, { tokenizer: this.tokenizer });
  }

  dispose(): void {
    void this.rollout.dispose();
    void this.module?.pool?.close();
    this.module?.lm.dispose();
    this.module?.heads.forEach((h) => h.dispose());
    this.module?.optimizer.dispose();
    this.reference?.dispose();
  }
}
