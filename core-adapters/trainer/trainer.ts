// The core RL trainer (verl's RayPPOTrainer.fit) for every algorithm: rollout, reward, old and
// reference log-probs, values, advantages, critic and actor updates, validation, checkpoints.
// Algorithms differ only through the bindings it is given.
import os from 'node:os';
import fs from 'node:fs';
import path from 'node:path';
import { inject, injectable, multiInject, optional } from 'inversify';
import type { TextTokenizer } from '../model/tokenizer.js';
import type { AdvantageEstimator } from '../algorithms/advantages.js';
import { composeAdvantages, type AdvantageComposition } from '../algorithms/compose.js';
import { tokenRolloutCorrection } from '../algorithms/rollout-correction.js';
import { AdaptiveKlController, FixedKlController, type KlController } from '../algorithms/kl.js';
import { writeConfig, type Config } from '../config/load.js';
import type {
  ActorStepListener,
  CheckpointStore,
  Critic,
  DataPosition,
  Dataset,
  LogProbResult,
  Metrics,
  MetricsSink,
  RewardManager,
  RewardResult,
  RewardShaper,
  SamplingSettings,
  Trainer,
  Worker,
} from '../contracts/index.js';
import { InputError, ReportedByRankZero, RolloutUnavailable } from '../errors.js';
import type { RunRequirements } from '../plugins/algorithms.js';
import { Rng } from '../random.js';
import { TOKENS } from '../tokens.js';
import { Batch, responseTokens } from '../batch.js';
import { REWARD_EXTRA_INFO } from '../rewards/manager.js';
import { dumpRollouts, rolloutRecords } from './rollout-dump.js';
import { concatRollouts, promptBatch, sequencesFromSamples } from '../workers/sequences.js';
import { gatherValues } from '../workers/ranks.js';
import { SINGLE_RANK, type RankWorld } from '../engine/mpi.js';
import { correctSetMatching, matchingMetrics, type CorrectSetMatching } from './matching.js';
import { Teachers } from '../distillation/teachers.js';
import { AsyncRollouts } from './async-rollouts.js';
import { readTrainerState, TRAINER_STATE_FILE, type TrainerState } from './checkpoints.js';
import { acquireRunLock, seesRunLock } from './run-lock.js';
import { isRunAware } from './metrics.js';
import { validationMetrics } from './val-metrics.js';
import { promptHash, StepRecordLog, VAL_GENERATIONS_FILE, ValPromptLog, type PromptMatchingRecord, type ValGeneration, type ValPromptRecord } from './val-prompts.js';

function mean(values: ArrayLike<number>): number {
  let total = 0;
  for (let i = 0; i < values.length; i++) total += values[i];
  return values.length ? total / values.length : 0;
}

/**
 * The temperature validation's matching metrics score the policy and the reference at: validation's
 * sampling temperature (val_kwargs.temperature), or 1 under greedy validation (T = 0 has no distribution).
 */
export function matchingTemperature(valKwargs: { temperature: number; do_sample: boolean }): number {
  return valKwargs.do_sample && valKwargs.temperature > 0 ? valKwargs.temperature : 1;
}

/** Per-row sums of a [B, R] array over the mask, as plain numbers. */
function rowSums(data: ArrayLike<number>, mask: ArrayLike<number>, rows: number): number[] {
  const width = data.length / rows;
  return Array.from({ length: rows }, (_, b) => {
    let total = 0;
    for (let t = 0; t < width; t++) total += data[b * width + t] * mask[b * width + t];
    return total;
  });
}

/** Masked mean over all valid tokens. */
function maskedMean(data: ArrayLike<number>, mask: ArrayLike<number>): number {
  let total = 0;
  let count = 0;
  for (let i = 0; i < data.length; i++) {
    total += data[i] * mask[i];
    count += mask[i];
  }
  return count ? total / count : 0;
}

/** A prompt's matching as val_prompts.jsonl keeps it (shares to 4 significant digits, so small ones survive). */
function matchingRecord(m: CorrectSetMatching & { exact: boolean; texts?: string[] }): PromptMatchingRecord {
  const round = (x: number) => Number(x.toPrecision(4));
  return {
    exact: m.exact,
    kl: m.kl,
    tv: m.tv,
    entropy: m.entropy,
    ref_entropy: m.refEntropy,
    mass: m.mass,
    ref_mass: m.refMass,
    ...(m.texts ? { answers: m.texts } : {}),
    shares: m.shares.map(round),
    ref_shares: m.refShares.map(round),
  };
}

/** A deterministic seed for step `step` of a run seeded `seed` (resume reproduces it). */
export function stepSeed(seed: number, step: number): number {
  return Math.floor(Rng.derive(seed, step).next() * 2 ** 31);
}

/** A step's rollouts: where its prompts end in the data, and its samples (in flight while the step before trains). */
interface StepRollouts {
  step: number;
  next: DataPosition;
  /** Actor updates done when its sampling started (the weights it samples with). */
  updatesAtLaunch: number;
  batch: Promise<Batch>;
}

/** The one training loop for every algorithm: rollouts, rewards, advantages, updates, validation, checkpoints. */
@injectable()
export class RLTrainer implements Trainer {
  protected klController?: KlController;
  protected position: DataPosition = { epoch: 0, offset: 0 };
  protected step = 0;
  private stopRequested = false;
  /** The resumed checkpoint's own metrics line, for a metrics file that lost it. */
  private resumedMetrics?: Metrics;
  /** The step fit stopped at after requestStop (undefined when it ran to the end). */
  stoppedAt?: number;
  /** Where validate writes per-prompt results during fit (flowrl eval writes none). */
  private valPrompts?: ValPromptLog;
  private valGenerations?: StepRecordLog<Omit<ValGeneration, 'step'>>;
  /** Decodes logged generations; absent outside a container. */
  @inject(TOKENS.Tokenizer) @optional() protected readonly tokenizer?: TextTokenizer;
  /** Actor updates this process has made (how far the weights moved since a batch was launched). */
  private actorUpdates = 0;
  /** trainer.one_step_off_policy: the next step's rollouts, sampled while this step trains. */
  private prefetched?: StepRollouts;
  /** The step whose rollouts generateRollouts is drawing (one ahead of `step` when sampling one step off). */
  protected rolloutStep = 0;
  /** distillation.enabled: the teachers that score each batch for the actor's distillation loss. */
  protected teachers?: Teachers;
  /** trainer.v1.trainer_mode separate_async: prompt groups sampled continuously (async-rollouts.ts). */
  private asyncRollouts?: AsyncRollouts;
  /** separate_async: each launch batch's prompt groups and the data position before it. */
  private readonly launchBatches = new Map<number, { groups: Batch; before: DataPosition }>();
  /** separate_async: where the next launch batch's prompts start, and the first launch a resumed run draws. */
  private launchCursor: DataPosition = { epoch: 0, offset: 0 };
  private firstLaunch = 1;

  constructor(
    @inject(TOKENS.Config) protected readonly config: Config,
    @inject(TOKENS.Worker) protected readonly worker: Worker,
    @inject(TOKENS.Critic) protected readonly critic: Critic,
    @inject(TOKENS.Dataset) protected readonly dataset: Dataset,
    @inject(TOKENS.RewardManager) protected readonly rewards: RewardManager,
    @inject(TOKENS.AdvantageEstimator) protected readonly estimator: AdvantageEstimator,
    @inject(TOKENS.RunRequirements) protected readonly requirements: RunRequirements,
    @inject(TOKENS.CheckpointStore) protected readonly checkpoints: CheckpointStore,
    @multiInject(TOKENS.MetricsSink) protected readonly sinks: MetricsSink[],
    @multiInject(TOKENS.RewardShaper) @optional() protected readonly shapers: RewardShaper[] = [],
  ) {}

  @inject(TOKENS.Ranks) @optional() protected readonly ranks: RankWorld = SINGLE_RANK;

  /**
   * The reward manager's scores for `batch`. Under data-parallel ranks rank 0 scores and every rank
   * takes its result (and the scorers' extra fields): a scorer with a time limit (code rewards) or
   * a remote judge may answer differently twice, and ranks that disagreed on rewards would keep
   * different groups and train on different advantages.
   */
  protected async score(batch: Batch): Promise<RewardResult> {
    if (this.ranks.size === 1) return await this.rewards.compute(batch);
    const mine = this.ranks.rank === 0 ? await this.rewards.compute(batch) : undefined;
    const extra = mine && batch.has(REWARD_EXTRA_INFO) ? batch.column(REWARD_EXTRA_INFO) : undefined;
    const [first] = gatherValues(this.ranks, mine ? { result: mine, extra } : undefined);
    const shared = first as { result: RewardResult; extra?: unknown[] };
    if (!mine && shared.extra) batch.setColumn(REWARD_EXTRA_INFO, shared.extra);
    return shared.result;
  }

  /** The sinks this process logs to: none on ranks after the first. */
  protected get activeSinks(): MetricsSink[] {
    return this.writes ? this.sinks : [];
  }

  /** Whether this process writes the run's files (metrics, checkpoints, logs): rank 0 of data-parallel ranks, or the one process. */
  protected get writes(): boolean {
    return this.ranks.rank === 0;
  }

  get runDir(): string {
    return this.config.trainer.default_local_dir!;
  }

  get totalSteps(): number {
    const explicit = this.config.trainer.total_training_steps;
    return explicit ?? this.config.trainer.total_epochs * this.dataset.stepsPerEpoch(this.config.data.train_batch_size);
  }

  /** Loads models and data (once), then restores the checkpoint resume_mode asks for. */
  async setup(): Promise<void> {
    this.checkRanks();
    this.checkOneStepOff();
    this.checkRolloutOptions();
    await this.dataset.init();
    // The schedules span the run, as verl's trainer tells its workers.
    this.config.actor_rollout_ref.actor.optim.total_training_steps = this.totalSteps;
    this.config.critic.optim.total_training_steps = this.totalSteps;
    await this.rewards.init?.();
    await this.worker.init();
    if (this.requirements.useCritic) await this.critic.init();
    for (const shaper of this.shapers) await shaper.init?.();
    const model = this.config.actor_rollout_ref.model;
    this.teachers = Teachers.fromConfig(this.config, this.tokenizer, model.tokenizer_path ?? model.path ?? '');
    if (this.writes) writeConfig(path.join(this.runDir, 'config.yaml'), this.config);
    const kl = this.config.algorithm.kl_ctrl;
    let klCoef = kl.kl_coef;
    const target = this.checkpoints.resumeTarget();
    // Ranks resume together or not at all: one that found no checkpoint (no shared file system) would train other weights.
    if (this.ranks.size > 1) {
      const found = gatherValues(this.ranks, target?.step ?? 0);
      if (found.some((step) => step !== found[0])) {
        if (!this.writes) throw new ReportedByRankZero();
        throw new InputError(`data-parallel ranks found different checkpoints to resume from in ${path.join(this.runDir, 'checkpoints')} (steps by rank: ${found.join(', ')}); the ranks need the run directory on a shared file system`);
      }
    }
    if (target) {
      const state = this.restore(target.dir);
      // Only an adaptive coefficient is state; a fixed one comes from the config.
      if (kl.type === 'adaptive') klCoef = state.kl_coef;
    }
    this.klController = kl.type === 'adaptive' ? new AdaptiveKlController(klCoef, kl.target_kl, kl.horizon) : new FixedKlController(klCoef);
    if (this.config.trainer.v1.trainer_mode === 'separate_async') this.startAsyncRollouts();
  }

  /**
   * separate_async: groups launched as the synchronous trainer would sample its steps, launch batch
   * k being step k's prompts, uids and seed (async-rollouts.ts), from the resumed position on.
   */
  private startAsyncRollouts(): void {
    const rollout = this.config.actor_rollout_ref.rollout;
    const sampler = this.config.trainer.v1.sampler;
    const why = rollout.name === 'local' ? 'rollout.name local samples in this process, which cannot train meanwhile' : this.config.trainer.one_step_off_policy ? 'trainer.one_step_off_policy is the synchronous trainer\'s overlap' : this.config.algorithm.filter_groups.enable ? 'algorithm.filter_groups draws generation batches by need' : rollout.multi_turn.enable ? 'multi-turn rollouts are not sampled by group yet' : undefined;
    if (why) throw new InputError(`trainer.v1.trainer_mode separate_async needs rollout servers sampling single-turn groups on their own; here ${why}`);
    if (rollout.server.max_staleness < sampler.max_off_policy_threshold + 1) {
      // The rollout's own check would drop what the async trainer means to keep.
      rollout.server.max_staleness = sampler.max_off_policy_threshold + 1;
    }
    this.launchCursor = this.position;
    const n = rollout.n;
    this.asyncRollouts = new AsyncRollouts({
      firstLaunch: this.firstLaunch,
      trainBatchSize: this.config.data.train_batch_size,
      threshold: sampler.max_off_policy_threshold,
      strategy: sampler.max_off_policy_strategy,
      version: () => this.worker.policyVersion(),
      wanted: () => (this.totalSteps - this.step + 1) * this.config.data.train_batch_size,
      drawLaunch: (launch) => {
        const { prompts, next } = this.dataset.nextBatch(this.launchCursor, this.config.data.train_batch_size, 'data.train_batch_size');
        this.launchBatches.set(launch, { groups: promptBatch(prompts, `s${launch}`), before: this.launchCursor });
        this.launchCursor = next;
        return prompts.length;
      },
      sample: (launch, index) => {
        const prompts = this.launchBatches.get(launch)!.groups.selectRows([index]).repeat(n, true);
        this.rolloutStep = launch;
        const sampling = { ...this.samplingSettings(stepSeed(this.config.trainer.seed, launch)), firstRow: index * n };
        return this.requirements.estimatorTraits.needsGreedyBaseline ? this.withRewardBaselines(this.generateRollouts(prompts, sampling), prompts.selectRows([0]), sampling) : this.generateRollouts(prompts, sampling);
      },
    });
  }

  /** trainer.one_step_off_policy needs samples from other processes, allowed to be one update old. */
  /**
   * Data-parallel ranks sample locally: with servers every rank would push weights to them, and
   * sampling that overlaps training (one step off) would interleave the ranks' gathers with the
   * update's sums in an order that differs between ranks.
   */
  private checkRanks(): void {
    if (this.ranks.size > 1 && this.config.actor_rollout_ref.rollout.name !== 'local') {
      throw new InputError(`actor_rollout_ref.rollout.name ${this.config.actor_rollout_ref.rollout.name}: data-parallel ranks (mpirun) sample on the ranks themselves for now (rollout.name local); with rollout servers run the trainer as one process`);
    }
  }

  private checkOneStepOff(): void {
    if (!this.config.trainer.one_step_off_policy) return;
    const rollout = this.config.actor_rollout_ref.rollout;
    if (rollout.name === 'local') {
      throw new InputError(`trainer.one_step_off_policy needs rollout servers (actor_rollout_ref.rollout.name sglang or vllm): with rollout.name local, sampling and training share this process and cannot overlap`);
    }
    if (rollout.server.max_staleness < 1) {
      throw new InputError(`trainer.one_step_off_policy samples each batch with the weights one update behind: set actor_rollout_ref.rollout.server.max_staleness to 1 or more (it is ${rollout.server.max_staleness}, so every sample would be dropped as stale)`);
    }
    const servers = ([] as string[]).concat(rollout.server.urls ?? []).length;
    const samples = this.config.data.train_batch_size * rollout.n;
    if (samples > rollout.server.max_inflight * servers) {
      // Samples beyond the slots are sent only when the trainer next yields: the overlap is partial.
      process.stderr.write(`[flowrl] warning: trainer.one_step_off_policy overlaps only ${rollout.server.max_inflight * servers} of a step's ${samples} samples with training; raise actor_rollout_ref.rollout.server.max_inflight to ${Math.ceil(samples / Math.max(1, servers))}\n`);
    }
  }

  /** DAPO's dynamic sampling and overlong penalty, and bypass mode: what they need, checked before anything loads. */
  private checkRolloutOptions(): void {
    const f = this.config.algorithm.filter_groups;
    const o = this.config.reward_model.overlong_buffer;
    if (o.enable && this.config.reward_model.reward_manager !== 'dapo') {
      throw new InputError(`reward_model.overlong_buffer.enable is true but reward_model.reward_manager is '${this.config.reward_model.reward_manager}': the overlong penalty is the dapo reward manager's; set reward_model.reward_manager=dapo`);
    }
    const bypass = this.config.algorithm.rollout_correction.bypass_mode;
    if (bypass && this.config.actor_rollout_ref.rollout.name === 'local') {
      throw new InputError('algorithm.rollout_correction.bypass_mode takes the rollout engine\'s log-probs as the old ones: it needs rollout servers (actor_rollout_ref.rollout.name sglang or vllm); local sampling reports none');
    }
    if (bypass && (this.requirements.estimatorTraits.needsSumPiSquared || this.config.actor_rollout_ref.actor.calculate_sum_pi_squared)) {
      throw new InputError('algorithm.rollout_correction.bypass_mode skips the pass that computes sum pi^2, which this run needs (algorithm.adv_estimator or actor.calculate_sum_pi_squared)');
    }
    if (!f.enable) return;
    if (f.metric === null) throw new InputError('algorithm.filter_groups.enable is true but algorithm.filter_groups.metric is null: name what must vary within a kept group (acc, score, seq_reward or seq_final_reward)');
    if (this.config.trainer.one_step_off_policy) {
      throw new InputError('algorithm.filter_groups and trainer.one_step_off_policy cannot be combined: a step does not know how many generation batches it needs until it has scored them');
    }
    if (f.metric === 'seq_final_reward' && this.config.algorithm.use_kl_in_reward) {
      throw new InputError("algorithm.filter_groups.metric seq_final_reward with algorithm.use_kl_in_reward is not supported: the KL penalty is applied after filtering here; use seq_reward (the scores' sum)");
    }
  }

  /** Releases the models this trainer's roles hold. */
  dispose(): void {
    this.worker.dispose();
    if (this.requirements.useCritic) this.critic.dispose();
    for (const shaper of this.shapers) shaper.dispose?.();
    this.teachers?.dispose();
  }

  /** Loads data, scorers and the policy, then one validation pass. */
  async evaluate(): Promise<Metrics> {
    await this.dataset.init();
    await this.rewards.init?.();
    await this.worker.init();
    return await this.validate();
  }

  protected restore(dir: string): TrainerState {
    this.worker.loadCheckpoint(dir);
    if (this.requirements.useCritic) this.critic.loadCheckpoint(dir);
    for (const shaper of this.shapers) shaper.loadCheckpoint?.(dir);
    const state = readTrainerState(dir);
    this.step = state.global_step;
    this.position = state.data_position;
    this.firstLaunch = state.rollout_launch ?? state.global_step + 1;
    this.resumedMetrics = state.metrics;
    return state;
  }

  protected async saveCheckpoint(stepMetrics?: Metrics): Promise<void> {
    if (!this.writes) return;
    await this.checkpoints.save(this.step, async (dir) => {
      await this.worker.saveCheckpoint(dir);
      if (this.requirements.useCritic) await this.critic.saveCheckpoint(dir);
      for (const shaper of this.shapers) await shaper.saveCheckpoint?.(dir);
      writeConfig(path.join(dir, 'config.yaml'), this.config);
      const state: TrainerState = {
        global_step: this.step,
        data_position: this.position,
        kl_coef: this.klController?.value ?? 0,
        metrics: stepMetrics,
        ...(this.asyncRollouts ? { rollout_launch: this.asyncRollouts.resumeLaunch } : {}),
      };
      fs.writeFileSync(path.join(dir, TRAINER_STATE_FILE), JSON.stringify(state, null, 2) + '\n');
    });
  }

  protected log(step: number, metrics: Metrics): void {
    for (const sink of this.activeSinks) sink.log(step, metrics);
  }

  /** Asks fit to stop after the current step, with a checkpoint. */
  requestStop(): void {
    this.stopRequested = true;
  }

  /** Trains to the end, holding the run directory's lock (one run per directory). */
  async fit(): Promise<Metrics> {
    const release = this.writes ? acquireRunLock(this.runDir) : () => {};
    try {
      if (this.ranks.size > 1) this.checkSharedRunDir();
      return await this.train();
    } finally {
      release();
    }
  }

  /**
   * Data-parallel ranks: every rank must see rank 0's run directory (its lock, just taken), or a
   * fresh run would succeed and its first resume fail on the ranks without the checkpoints.
   */
  private checkSharedRunDir(): void {
    const [owner] = gatherValues(this.ranks, this.writes ? { pid: process.pid, host: os.hostname() } : undefined);
    const views = gatherValues(this.ranks, { host: os.hostname(), sees: seesRunLock(this.runDir, owner!) });
    const blind = views.map((v, rank) => ({ ...v, rank })).filter((v) => !v.sees);
    if (!blind.length) return;
    if (!this.writes) throw new ReportedByRankZero();
    throw new InputError(
      `trainer.default_local_dir (${this.runDir}) is not shared by the ranks: ${blind.map((v) => `rank ${v.rank} on ${v.host}`).join(', ')} ${blind.length > 1 ? 'do' : 'does'} not see the lock rank 0 took on ${owner!.host}; put the run directory on a file system every machine mounts at that path`,
    );
  }

  protected async train(): Promise<Metrics> {
    await this.setup();
    const total = this.totalSteps;
    const resumed = this.step > 0;
    for (const sink of this.activeSinks) if (isRunAware(sink)) sink.begin({ startStep: this.step, totalSteps: total, resumed, stepMetrics: this.resumedMetrics });
    if (this.writes) this.valPrompts = new ValPromptLog(this.runDir, { startStep: this.step, resumed });
    if (this.writes && this.config.trainer.log_val_generations > 0) this.valGenerations = new StepRecordLog(this.runDir, VAL_GENERATIONS_FILE, { startStep: this.step, resumed });
    let lastValidation: Metrics = {};
    if (this.config.trainer.val_before_train && this.step === 0 && this.dataset.val.length) {
      lastValidation = await this.validate();
      this.log(0, lastValidation);
    }
    const { test_freq: testFreq, save_freq: saveFreq } = this.config.trainer;
    try {
      await this.trainSteps(total, testFreq, saveFreq, (v) => (lastValidation = v));
    } catch (e) {
      // A run that fails closes its trackers' runs as failed where they can say so (waiting briefly),
      // and drops what the others still hold rather than waiting on them.
      const failing = this.activeSinks.filter((sink) => sink.fail);
      for (const sink of this.activeSinks) if (sink.fail) sink.fail();
      else sink.abandon?.();
      await flushSinks(failing, FAILED_FLUSH_SECONDS);
      throw e;
    } finally {
      // Rollouts sampled for a step that will not run (a stop, an error) are waited out and dropped.
      await this.dropPrefetched();
      await this.asyncRollouts?.drain();
    }
    for (const sink of this.activeSinks) sink.close();
    await flushSinks(this.activeSinks);
    return lastValidation;
  }

  /** The steps of train() from the current one to `total`. */
  private async trainSteps(total: number, testFreq: number, saveFreq: number, validated: (metrics: Metrics) => void): Promise<void> {
    while (this.step < total) {
      this.step += 1;
      const started = performance.now();
      const before = this.position;
      let metrics: Metrics;
      try {
        metrics = await this.trainStep();
      } catch (e) {
        if (e instanceof RolloutUnavailable) throw await this.stopWithoutRollouts(e, { before });
        throw e;
      }
      const last = this.step === total;
      if (this.dataset.val.length && testFreq > 0 && (this.step % testFreq === 0 || last)) {
        const t = performance.now();
        try {
          // Validation samples with the new weights: the next step's rollouts finish on the old ones first.
          await this.prefetched?.batch.catch(() => undefined);
          const validation = await this.validate();
          validated(validation);
          Object.assign(metrics, validation, { 'timing_s/testing': (performance.now() - t) / 1000 });
        } catch (e) {
          if (!(e instanceof RolloutUnavailable)) throw e;
          // The step's update is done: keep its line and a checkpoint, without its validation.
          Object.assign(metrics, { 'training/global_step': this.step, 'training/epoch': this.position.epoch });
          this.log(this.step, metrics);
          throw await this.stopWithoutRollouts(e, { finished: metrics });
        }
      }
      metrics['training/global_step'] = this.step;
      metrics['training/epoch'] = this.position.epoch;
      const scheduledSave = (saveFreq > 0 && this.step % saveFreq === 0) || last;
      if (scheduledSave) {
        const t = performance.now();
        await this.saveCheckpoint({ ...metrics, 'timing_s/step': (performance.now() - started) / 1000 });
        metrics['timing_s/save_checkpoint'] = (performance.now() - t) / 1000;
      }
      metrics['timing_s/step'] = (performance.now() - started) / 1000;
      this.log(this.step, metrics);
      // Steps run synchronously: yield so a signal's handler can ask for a stop.
      await new Promise((resolve) => setImmediate(resolve));
      // Ranks stop together: a signal may reach one between two steps and another during one.
      if (this.ranks.size > 1) this.stopRequested = gatherValues(this.ranks, this.stopRequested).some(Boolean);
      if (this.stopRequested && !last) {
        if (!scheduledSave) await this.saveCheckpoint(metrics);
        this.stoppedAt = this.step;
        break;
      }
    }
  }

  /** Waits out rollouts sampled for a step that will not run, so no request outlives the run. */
  private async dropPrefetched(): Promise<void> {
    const pending = this.prefetched;
    this.prefetched = undefined;
    if (pending) (await pending.batch.catch(() => undefined))?.dispose();
  }

  /**
   * The rollout servers are gone: back to the end of the previous step when this one was cut off
   * (`before`: where its prompts started), or keep this one when only its validation was (`finished`:
   * its metrics). Checkpointed (unless that checkpoint exists), so the same command resumes.
   */
  private async stopWithoutRollouts(e: RolloutUnavailable, at: { before: DataPosition } | { finished: Metrics }): Promise<RolloutUnavailable> {
    if ('before' in at) {
      this.step -= 1;
      this.position = at.before;
    }
    for (const sink of this.activeSinks) sink.close();
    if (this.step === 0) return new RolloutUnavailable(`${e.message}; no step finished, so there is no checkpoint; rerun once the servers are back`);
    if (this.checkpoints.latest()?.step !== this.step) await this.saveCheckpoint('finished' in at ? at.finished : undefined);
    return new RolloutUnavailable(`${e.message}; stopped after step ${this.step} with a checkpoint in ${path.join(this.runDir, 'checkpoints')}; run the same command to resume once the servers are back`);
  }

  protected samplingSettings(seed: number): SamplingSettings {
    const r = this.config.actor_rollout_ref.rollout;
    return {
      temperature: r.temperature,
      topP: r.top_p,
      topK: r.top_k,
      greedy: r.temperature === 0,
      maxNewTokens: this.config.data.max_response_length,
      seed,
    };
  }

  /**
   * Starts sampling step `step`'s prompts, which start at `position`; the samples come with the
   * weights as they are now. Under filter_groups a step may draw several generation batches
   * (`gen` counts them), each of data.gen_batch_size prompts with its own uids and seed.
   */
  private launchRollouts(step: number, position: DataPosition, gen = 0): StepRollouts {
    const d = this.config.data;
    const generating = this.config.algorithm.filter_groups.enable && d.gen_batch_size !== null;
    const size = generating ? d.gen_batch_size! : d.train_batch_size;
    const { prompts, next } = this.dataset.nextBatch(position, size, generating ? 'data.gen_batch_size' : 'data.train_batch_size');
    const groups = promptBatch(prompts, gen ? `s${step}g${gen}` : `s${step}`);
    const promptsBatch = groups.repeat(this.config.actor_rollout_ref.rollout.n, true);
    this.rolloutStep = step;
    const seed = stepSeed(this.config.trainer.seed, step);
    const sampling = this.samplingSettings(gen ? Rng.deriveSeed(seed, gen) : seed);
    const sampled = this.generateRollouts(promptsBatch, sampling);
    const batch = this.requirements.estimatorTraits.needsGreedyBaseline ? this.withRewardBaselines(sampled, groups, sampling) : sampled;
    // Awaited by its step, or dropped at a stop: never an unhandled rejection meanwhile.
    batch.catch(() => undefined);
    return { step, next, updatesAtLaunch: this.actorUpdates, batch };
  }

  /**
   * What some estimators read besides rewards, from the step's batch (verl's compute_advantage passes
   * them when present): remax's reward_baselines, the old log-probs and sum pi^2 with the TIS
   * weights of rollouts from another engine (the optimal token baselines), and the scorer's fields
   * with algorithm.gdpo_reward_keys (gdpo).
   */
  private estimatorExtras(batch: Batch, old: { logProbs: Float32Array; sumPiSquared?: Float32Array }): AdvantageComposition['extra'] {
    const a = this.config.algorithm;
    const cap = a.rollout_correction.tis_cap;
    const offEngine = old.sumPiSquared && cap !== null && batch.has('rollout_log_probs');
    const rows = batch.has(REWARD_EXTRA_INFO) ? batch.column<Record<string, number>>(REWARD_EXTRA_INFO) : undefined;
    // Only the fields every response has (a scorer may leave some out for some answers).
    const fields = rows?.length ? Object.keys(rows[0]).filter((k) => rows.every((r) => typeof r[k] === 'number')) : [];
    return {
      rewardBaselines: batch.has('reward_baselines') ? batch.column<number>('reward_baselines') : undefined,
      oldLogProbs: old.logProbs,
      sumPiSquared: old.sumPiSquared,
      rolloutIsWeights: offEngine ? tokenRolloutCorrection(old.logProbs, batch.tensor('rollout_log_probs').data, batch.tensor('response_mask').data, cap).weights : undefined,
      rewardComponents: a.gdpo_reward_keys ? new Map(fields.map((k) => [k, rows!.map((r) => r[k])])) : undefined,
      gdpo: { keys: a.gdpo_reward_keys, weights: a.gdpo_reward_weights },
    };
  }

  /**
   * remax (verl's ray_trainer with adv_estimator remax): each prompt is also decoded greedily, with
   * the weights that sample it, and scored; the score becomes the reward_baselines column of its
   * sampled rows. A column, so DAPO's filtering and concatenation carry it.
   */
  private async withRewardBaselines(sampled: Promise<Batch>, prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    const greedy = this.worker.generateSequences(prompts, { ...sampling, greedy: true, temperature: 0, topP: 1, topK: -1 });
    greedy.catch(() => undefined);
    const batch = await sampled;
    const baseline = await greedy;
    try {
      const reward = await this.score(baseline);
      const R = baseline.tensor('responses').shape[1];
      const byUid = new Map<string, number>();
      // verl sums the greedy response's token scores (rm_scores.sum(-1)).
      baseline.column<string>('uid').forEach((uid, b) => byUid.set(uid, reward.tokenLevelScores.subarray(b * R, (b + 1) * R).reduce((a: number, v: number) => a + v, 0)));
      batch.setColumn(
        'reward_baselines',
        batch.column<string>('uid').map((uid) => {
          const score = byUid.get(uid);
          if (score === undefined) throw new Error(`remax: no greedy baseline for the rows of prompt ${uid}`);
          return score;
        }),
      );
    } finally {
      baseline.dispose();
    }
    return batch;
  }

  /** A training step's rollouts for its prompts (repeated rollout.n times); subclasses may add off-policy rows. */
  protected async generateRollouts(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    return await this.worker.generateSequences(prompts, sampling);
  }

  /** One training step; returns its metrics. */
  protected async trainStep(): Promise<Metrics> {
    const timing: Metrics = {};
    const timed = async <T>(name: string, f: () => T | Promise<T>): Promise<T> => {
      const t = performance.now();
      const out = await f();
      timing[`timing_s/${name}`] = (performance.now() - t) / 1000;
      return out;
    };
    const stepStarted = performance.now();
    // Local sampling runs inside launchRollouts before its first await, so the clock starts first.
    const genStarted = performance.now();
    const { batch, kept, rolloutMetrics } = this.asyncRollouts ? await this.asyncStepBatch() : await this.syncStepBatch(timing);
    // Sync: the whole sampling. One step off: the wait for samples launched while the last step trained. Async: the wait for finished groups.
    timing['timing_s/gen'] = (performance.now() - genStarted) / 1000 - (timing['timing_s/reward'] ?? 0);
    if (this.config.trainer.one_step_off_policy && this.step < this.totalSteps) {
      const t = performance.now();
      this.prefetched = this.launchRollouts(this.step + 1, this.position);
      await this.worker.rolloutDispatched();
      rolloutMetrics['timing_s/launch_next'] = (performance.now() - t) / 1000;
    }
    const B = batch.size;
    const R = batch.tensor('responses').shape[1];
    const mask = batch.tensor('response_mask').data as Float32Array;

    const rewardStarted = performance.now();
    const reward = kept ? kept.reward : await this.score(batch);
    if (!kept) timing['timing_s/reward'] = (performance.now() - rewardStarted) / 1000;
    batch.set('token_level_scores', { shape: [B, R], data: reward.tokenLevelScores });
    batch.setColumn('correct', reward.correct);
    const metrics: Metrics = { ...reward.metrics, ...((batch.meta.metrics as Metrics | undefined) ?? {}), ...rolloutMetrics };

    // sum pi^2 (verl's actor.calculate_sum_pi_squared) when asked for or when the estimator reads it.
    const withSumPiSquared = this.requirements.estimatorTraits.needsSumPiSquared === true || this.config.actor_rollout_ref.actor.calculate_sum_pi_squared;
    // Bypass mode (verl's apply_bypass_mode): the engine's log-probs are the old ones; no pass, no entropy.
    const old: LogProbResult = this.config.algorithm.rollout_correction.bypass_mode
      ? { logProbs: Float32Array.from(batch.tensor('rollout_log_probs').data) }
      : await timed('old_log_prob', () => this.worker.computeLogProb(batch, { withSumPiSquared }));
    batch.set('old_log_probs', { shape: [B, R], data: old.logProbs });
    if (old.sumPiSquared) batch.set('sum_pi_squared', { shape: [B, R], data: old.sumPiSquared });
    if (old.entropy) metrics['actor/entropy'] = maskedMean(old.entropy, mask);
    if (this.teachers) await timed('teacher', () => this.teachers!.score(batch));
    if (this.requirements.useReference) {
      batch.set('ref_log_prob', { shape: [B, R], data: await timed('ref', () => this.worker.computeRefLogProb(batch)) });
    }
    if (this.requirements.useCritic) {
      batch.set('values', { shape: [B, R], data: await timed('values', () => this.critic.computeValues(batch)) });
    }

    const shaping = new Float32Array(B * R);
    for (const shaper of this.shapers) Object.assign(metrics, await timed(`shape_${shaper.name}`, () => shaper.shape(batch, shaping)));
    const a = this.config.algorithm;
    const advantages = await timed('adv', () =>
      composeAdvantages({
        estimator: this.estimator,
        estimatorTraits: this.requirements.estimatorTraits,
        batch: B,
        length: R,
        tokenScores: reward.tokenLevelScores,
        shaping,
        responseMask: mask,
        groupIds: batch.column<string>('uid'),
        values: this.requirements.useCritic ? (batch.tensor('values').data as Float32Array) : undefined,
        gamma: a.gamma,
        lam: a.lam,
        normByStd: a.norm_adv_by_std_in_grpo,
        extra: this.estimatorExtras(batch, old),
        klInReward: a.use_kl_in_reward
          ? { oldLogProbs: old.logProbs, refLogProbs: batch.tensor('ref_log_prob').data as Float32Array, type: a.kl_penalty, controller: this.klController! }
          : undefined,
      }),
    );
    Object.assign(metrics, advantages.metrics);
    // What each token was rewarded with, shaping included (reported and read by actors).
    batch.set('token_level_rewards', { shape: [B, R], data: advantages.tokenRewards });
    batch.set('advantages', { shape: [B, R], data: advantages.advantages });
    batch.set('returns', { shape: [B, R], data: advantages.returns });

    if (this.requirements.useCritic) Object.assign(metrics, await timed('update_critic', () => this.critic.updateCritic(batch)));
    if (!this.requirements.useCritic || this.step > this.config.critic.warmup) {
      const listeners = this.shapers.filter((s): s is RewardShaper & ActorStepListener => s.onActorStep !== undefined);
      Object.assign(metrics, await timed('update_actor', () => this.worker.updateActor(batch, listeners)));
      this.actorUpdates += 1;
      // Online shapers follow the policy: they update when it does (not during critic warm-up).
      for (const shaper of this.shapers) Object.assign(metrics, (await shaper.afterUpdate?.(batch)) ?? {});
    }

    // verl's response lengths count every response token (attention): tool turns of a conversation too.
    const tokens = responseTokens(batch);
    const lengths = rowSums(tokens, tokens, B);
    const sequenceRewards = rowSums(batch.tensor('token_level_rewards').data, mask, B);
    const promptTokens = (batch.tensor('attention_mask').data as Int32Array).reduce((s, v) => s + v, 0) - lengths.reduce((s, v) => s + v, 0);
    const seconds = (performance.now() - stepStarted) / 1000;
    Object.assign(metrics, timing, {
      'critic/score/mean': mean(reward.scores),
      'critic/score/max': Math.max(...reward.scores),
      'critic/score/min': Math.min(...reward.scores),
      'critic/accuracy': mean(reward.correct.map(Number)),
      'critic/rewards/mean': mean(sequenceRewards),
      'critic/advantages/mean': maskedMean(advantages.advantages, mask),
      'critic/returns/mean': maskedMean(advantages.returns, mask),
      'response_length/mean': mean(lengths),
      'response_length/max': Math.max(...lengths),
      'response_length/clip_ratio': mean(lengths.map((l) => Number(l >= R))),
      'perf/throughput': (promptTokens + lengths.reduce((s, v) => s + v, 0)) / seconds,
    });
    if (this.requirements.useCritic) metrics['critic/values/mean'] = maskedMean(batch.tensor('values').data, mask);
    const dumpDir = this.config.trainer.rollout_data_dir;
    if (dumpDir && this.writes && this.tokenizer) dumpRollouts(dumpDir, this.step, rolloutRecords(batch, this.tokenizer, this.step));
    batch.dispose();
    return metrics;
  }

  /** This step's rollouts, sampled now or (one step off) while the last step trained; DAPO's kept groups under filter_groups. */
  private async syncStepBatch(timing: Metrics): Promise<{ batch: Batch; kept?: { batch: Batch; reward: RewardResult; metrics: Metrics }; rolloutMetrics: Metrics }> {
    const own = this.prefetched?.step === this.step ? this.prefetched : this.launchRollouts(this.step, this.position);
    this.prefetched = undefined;
    this.position = own.next;
    const kept = this.config.algorithm.filter_groups.enable ? await this.keptGroups(own, timing) : undefined;
    const batch = kept ? kept.batch : await own.batch;
    return { batch, kept, rolloutMetrics: { 'rollout/staleness': this.actorUpdates - own.updatesAtLaunch, ...kept?.metrics } };
  }

  /** separate_async: the next train_batch_size finished groups; a resumed run starts from the oldest launch batch not yet trained. */
  private async asyncStepBatch(): Promise<{ batch: Batch; kept?: undefined; rolloutMetrics: Metrics }> {
    const { batch, metrics } = await this.asyncRollouts!.nextBatch();
    // Groups launched meanwhile may still be writing the weights out for their servers: not under an update.
    await this.worker.rolloutSynced();
    const resume = this.launchBatches.get(this.asyncRollouts!.resumeLaunch);
    this.position = resume?.before ?? this.launchCursor;
    for (const launch of this.launchBatches.keys()) if (launch < this.asyncRollouts!.resumeLaunch) this.launchBatches.delete(launch);
    return { batch, rolloutMetrics: metrics };
  }

  /**
   * DAPO's dynamic sampling (verl-recipe's dapo trainer): scores each generation batch, keeps the
   * groups whose `metric` varies (np.std > 0, or a group of one), and samples another
   * data.gen_batch_size prompts until train_batch_size groups are kept; the first train_batch_size
   * are trained on. Past max_num_gen_batches (when > 0) the run stops, as the recipe raises.
   */
  private async keptGroups(first: StepRollouts, timing: Metrics): Promise<{ batch: Batch; reward: RewardResult; metrics: Metrics }> {
    const { metric, max_num_gen_batches: maxBatches } = this.config.algorithm.filter_groups;
    const n = this.config.actor_rollout_ref.rollout.n;
    const wanted = this.config.data.train_batch_size;
    const parts: { batch: Batch; reward: RewardResult }[] = [];
    let keptPrompts = 0;
    let drawn = 0;
    let dropped = 0;
    let launch = first;
    for (let gen = 1; ; gen++) {
      const batch = await launch.batch;
      const t = performance.now();
      const reward = await this.score(batch);
      timing['timing_s/reward'] = (timing['timing_s/reward'] ?? 0) + (performance.now() - t) / 1000;
      const values = groupMetric(metric!, batch, reward);
      const byUid = new Map<string, number[]>();
      batch.column<string>('uid').forEach((uid, row) => byUid.set(uid, [...(byUid.get(uid) ?? []), row]));
      const rows: number[] = [];
      for (const members of byUid.values()) {
        drawn += 1;
        if (members.length === 1 || populationStd(members.map((r) => values[r])) > 0) {
          rows.push(...members);
          keptPrompts += 1;
        } else dropped += 1;
      }
      parts.push({ batch: batch.selectRows(rows), reward: selectReward(reward, rows, batch.tensor('responses').shape[1]) });
      batch.dispose();
      if (keptPrompts >= wanted) {
        const all = concatRollouts(parts.map((p) => p.batch));
        parts.forEach((p) => p.batch.dispose());
        const keep = Array.from({ length: wanted * n }, (_, i) => i);
        const merged = mergeRewards(parts.map((p) => p.reward));
        const out = { batch: all.selectRows(keep), reward: selectReward(merged, keep, all.tensor('responses').shape[1]) };
        all.dispose();
        return { ...out, metrics: { 'train/num_gen_batches': gen, 'train/filtered_prompts': dropped, 'train/kept_prompt_share': (drawn - dropped) / drawn } };
      }
      if (maxBatches > 0 && gen >= maxBatches) {
        parts.forEach((p) => p.batch.dispose());
        throw new InputError(
          `algorithm.filter_groups: ${gen} generation batches kept ${keptPrompts} of the ${wanted} prompts a step needs (${dropped} of ${drawn} had responses all alike in ${metric}); the data may be too hard or too easy for the policy. Raise algorithm.filter_groups.max_num_gen_batches (0: no limit)`,
        );
      }
      launch = this.launchRollouts(this.step, this.position, gen);
      this.position = launch.next;
    }
  }

  /**
   * Matching over each validation prompt's correct set: every correct response where the reward
   * manager lists them (exact), else the distinct correct samples (an estimate, biased low with few
   * samples). Each response is scored whole under the policy and the reference (at the rollout
   * temperature, the distribution the algorithms train); answers longer than
   * data.max_response_length cannot be sampled and are left out.
   */
  protected async correctSetMatching(sampledCorrect: number[][][]): Promise<((CorrectSetMatching & { exact: boolean; texts?: string[] }) | undefined)[]> {
    const maxLength = this.config.data.max_response_length;
    const sets = this.dataset.val.map((prompt, p) => {
      // A conversation's probability holds the tools' answers, which neither policy writes: not measured.
      if (prompt.agentName === 'tool_agent') return undefined;
      const listed = this.rewards.correctResponses?.(prompt)?.filter((r) => r.ids.length <= maxLength);
      if (listed?.length) return { exact: true, responses: listed.map((r) => r.ids), texts: listed.map((r) => r.text) };
      return sampledCorrect[p].length ? { exact: false, responses: sampledCorrect[p], texts: undefined } : undefined;
    });
    const prompts: number[][] = [];
    const responses: number[][] = [];
    sets.forEach((set, p) => set?.responses.forEach((ids) => (prompts.push(this.dataset.val[p].ids), responses.push(ids))));
    if (!responses.length) return sets.map(() => undefined);
    const R = Math.max(...responses.map((r) => r.length));
    const batch = new Batch({ tensors: sequencesFromSamples(prompts, responses, R, 0) });
    const mask = batch.tensor('response_mask').data;
    // One temperature for every run, whatever its rollouts were drawn at.
    const temperature = matchingTemperature(this.config.actor_rollout_ref.rollout.val_kwargs);
    const policy = rowSums((await this.worker.computeLogProb(batch, { temperature })).logProbs, mask, batch.size);
    const reference = rowSums(await this.worker.computeRefLogProb(batch, { temperature }), mask, batch.size);
    batch.dispose();
    let row = 0;
    return sets.map((set) => {
      if (!set) return undefined;
      const n = set.responses.length;
      const m = correctSetMatching(policy.slice(row, row + n), reference.slice(row, row + n));
      row += n;
      return { ...m, exact: set.exact, texts: set.texts };
    });
  }

  /** trainer.log_val_generations: the first sample of each of the first N prompts, to val_generations.jsonl. */
  private logGenerations(generated: Batch, responses: number[][], scores: number[], k: number): void {
    if (!this.valGenerations || !this.tokenizer) return;
    const tokenizer = this.tokenizer;
    const turns = generated.has('turns') ? generated.column<{ role: string; content: string }[]>('turns') : undefined;
    const count = Math.min(this.config.trainer.log_val_generations, this.dataset.val.length);
    const records = Array.from({ length: count }, (_, p) => {
      const row = p * k;
      return {
        prompt: tokenizer.decode(this.dataset.val[p].ids, true),
        response: tokenizer.decode(responses[row], true),
        score: scores[row],
        ...(turns ? { turns: turns[row] } : {}),
      };
    });
    this.valGenerations.append(this.step, records);
    for (const sink of this.activeSinks) sink.logGenerations?.(this.step, records);
  }

  /**
   * Validation on the val split with rollout.val_kwargs: accuracy (mean correctness over the k
   * samples: Avg@k), pass@k (a prompt counts when any sample is correct), the unbiased pass@j for
   * j = 1, 2, 4, ..., k (Chen et al. 2021) as val/pass@j, distinct correct responses per
   * prompt, and the entropy (nats) of the empirical distribution over each prompt's correct
   * responses, averaged over prompts with at least one (0 when one answer takes all the mass).
   */
  async validate(): Promise<Metrics> {
    if (!this.dataset.val.length) throw new InputError('data.val_files: no validation prompts to evaluate (set data.val_files)');
    const kw = this.config.actor_rollout_ref.rollout.val_kwargs;
    const k = kw.n;
    const greedy = !kw.do_sample || kw.temperature === 0;
    const batch = promptBatch(this.dataset.val, 'val').repeat(k, true);
    const generated = await this.worker.generateSequences(batch, {
      temperature: kw.temperature,
      topP: kw.top_p,
      topK: kw.top_k,
      greedy,
      maxNewTokens: this.config.data.max_response_length,
      seed: stepSeed(this.config.trainer.seed, -1),
    });
    const reward = await this.score(generated);
    const responses = generated.tensor('responses');
    // Whole responses (a multi-turn one with its tool turns): distinct answers are distinct trajectories.
    const mask = responseTokens(generated);
    const R = responses.shape[1];
    const ids = Array.from({ length: generated.size }, (_, row) => {
      const out: number[] = [];
      for (let t = 0; t < R; t++) if (mask[row * R + t]) out.push(responses.data[row * R + t]);
      return out;
    });
    this.logGenerations(generated, ids, reward.scores, k);
    generated.dispose();
    const { metrics, prompts } = validationMetrics({ k, correct: reward.correct, responses: ids, scores: reward.scores });
    const perPrompt: Omit<ValPromptRecord, 'step'>[] = prompts.map((p, i) => {
      const { index, ids: promptIds } = this.dataset.val[i];
      return { prompt: index, hash: promptHash(promptIds), k, correct: p.correct, distinct: p.distinct, entropy: p.entropy };
    });
    const matching = this.config.trainer.val_matching ? await this.correctSetMatching(prompts.map((p) => p.correctResponses)) : [];
    matching.forEach((m, p) => m && (perPrompt[p].matching = matchingRecord(m)));
    this.valPrompts?.append(this.step, perPrompt);
    return { ...matchingMetrics(matching.filter((m) => m !== undefined)), ...metrics };
  }
}

/** Per response, the value DAPO's filter compares within a group (the recipe's names: seq_reward sums the scores, seq_final_reward the rewards). */
function groupMetric(metric: 'acc' | 'score' | 'seq_reward' | 'seq_final_reward', batch: Batch, reward: RewardResult): number[] {
  if (metric === 'acc') return reward.correct.map(Number);
  if (metric === 'score') return reward.scores;
  // Without a KL penalty in the reward (refused with seq_final_reward at setup) the two sums agree.
  const R = batch.tensor('responses').shape[1];
  return Array.from({ length: batch.size }, (_, b) => reward.tokenLevelScores.subarray(b * R, (b + 1) * R).reduce((sum: number, v: number) => sum + v, 0));
}

/** numpy's std (population). */
function populationStd(values: number[]): number {
  const m = values.reduce((a, b) => a + b, 0) / values.length;
  return Math.sqrt(values.reduce((a, v) => a + (v - m) ** 2, 0) / values.length);
}

/** The rows `rows` of a reward result ([B, R] token scores of width R). */
function selectReward(reward: RewardResult, rows: number[], R: number): RewardResult {
  const tokenLevelScores = new Float32Array(rows.length * R);
  rows.forEach((row, i) => tokenLevelScores.set(reward.tokenLevelScores.subarray(row * R, (row + 1) * R), i * R));
  return { tokenLevelScores, scores: rows.map((r) => reward.scores[r]), correct: rows.map((r) => reward.correct[r]), metrics: reward.metrics };
}

/** Reward results of consecutive batches as one (metrics: the last batch's; they are means). */
function mergeRewards(parts: RewardResult[]): RewardResult {
  const length = parts.reduce((n, p) => n + p.tokenLevelScores.length, 0);
  const tokenLevelScores = new Float32Array(length);
  let at = 0;
  for (const p of parts) {
    tokenLevelScores.set(p.tokenLevelScores, at);
    at += p.tokenLevelScores.length;
  }
  return { tokenLevelScores, scores: parts.flatMap((p) => p.scores), correct: parts.flatMap((p) => p.correct), metrics: parts[parts.length - 1].metrics };
}

/** Background sinks (trackers) get this long after a run to send what they were given. */
const SINK_FLUSH_SECONDS = 30;
/** ...and after a failure, long enough to mark the trackers' runs failed. */
const FAILED_FLUSH_SECONDS = 10;

async function flushSinks(sinks: MetricsSink[], seconds = SINK_FLUSH_SECONDS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const pending = new Set(sinks.filter((s) => s.flush));
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      console.warn(`[flowrl] a tracker had not sent everything after ${seconds} s; the run ends without waiting for it`);
      for (const sink of pending) sink.abandon?.();
      resolve();
    }, seconds * 1000);
    timer.unref();
  });
  try {
    // A sink that fails to flush costs its own data, not the finished run.
    const flushed = sinks.map(async (s) => {
      await s.flush?.();
      pending.delete(s);
    });
    await Promise.race([Promise.allSettled(flushed), late]);
  } finally {
    clearTimeout(timer);
  }
}
