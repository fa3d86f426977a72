// RLFR's flow rewards as a host RewardShaper (README "RLFR flow rewards"): per response token, the
// velocity deviation of the policy's latents from a reference flow, normalised per sequence,
// filtered and turned into a small penalty; the field is fine-tuned online on correct rollouts with
// its own AdamW, at each actor optimizer step (the reference) or once per training step. Works with
// any algorithm: the trainer adds the penalties to the token rewards (gae, reinforce_plus_plus) or
// to the advantages as their return (grpo, flowrl).
import fs from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { inject, injectable } from 'inversify';
import {
  AdamW,
  clippedStep,
  InputError,
  loadOptimizerState,
  OPTIMIZER_FILE,
  lossAndGradients,
  LrScheduler,
  readScalar,
  Rng,
  saveOptimizerState,
  sequenceBatch,
  TOKENS,
  type Batch,
  type Config,
  type Dataset,
  type Metrics,
  type RewardShaper,
  type RunRequirements,
  type Worker,
} from '../../core-adapters/index.js';
import { flowRewardConfig, type FlowRewardConfig } from './config.js';
import { FlowModel } from './flow-model.js';
import { flowDeviation, responseLatents, type TokenLatents } from './latents.js';
import { flowTokenRewards } from './shaping.js';
import { flowMatchingLoss, sampleFlowTimes } from './velocity-field.js';

export const FLOW_CHECKPOINT_DIR = 'flow';
const STATE_FILE = 'shaper_state.json';
/** Separates the field's noise streams from the trainer's (same run seed). */
const NOISE_SALT = 0x0f10;
const UPDATE_SALT = 0x0f11;

/** Each response's outcome score (the sum of its token-level scores). */
function responseScores(batch: Batch): number[] {
  const scores = batch.tensor('token_level_scores');
  const [B, R] = scores.shape;
  return Array.from({ length: B }, (_, b) => {
    let total = 0;
    for (let t = 0; t < R; t++) total += scores.data[b * R + t];
    return total;
  });
}

/** The rows of `latents` that belong to the given sequences. */
function subsetLatents(latents: TokenLatents, keep: (sequence: number) => boolean): TokenLatents {
  const rows = Array.from({ length: latents.rows }, (_, r) => r).filter((r) => keep(latents.sequence[r]));
  const d = latents.size;
  const pick = (data: Float32Array) => {
    const out = new Float32Array(rows.length * d);
    rows.forEach((r, i) => out.set(data.subarray(r * d, (r + 1) * d), i * d));
    return out;
  };
  return {
    size: d,
    rows: rows.length,
    positions: Int32Array.from(rows, (r) => latents.positions[r]),
    sequence: Int32Array.from(rows, (r) => latents.sequence[r]),
    targets: latents.targets.map(pick),
    contexts: latents.contexts.map(pick),
  };
}

@injectable()
export class FlowRewardShaper implements RewardShaper {
  readonly name = 'flow';
  protected flow!: FlowRewardConfig;
  protected model!: FlowModel;
  protected optimizer!: AdamW;
  protected lrScheduler!: LrScheduler;
  /** Calls of shape(), which seed the reward noise (kept in checkpoints so a resume draws the same). */
  protected shapeCalls = 0;
  /** Latents of the last batch's correct rollouts, for a training_step update after the actor's. */
  private pending?: TokenLatents;

  constructor(
    @inject(TOKENS.Config) protected readonly config: Config,
    @inject(TOKENS.Worker) protected readonly worker: Worker,
    @inject(TOKENS.Dataset) protected readonly dataset: Dataset,
    @inject(TOKENS.RunRequirements) protected readonly requirements: RunRequirements,
  ) {}

  get flowModel(): FlowModel {
    return this.model;
  }

  async init(): Promise<void> {
    this.flow = flowRewardConfig(this.config);
    const lm = this.worker.module.lm;
    const source = this.flow.flow_model;
    this.model = source ? FlowModel.load(source, lm) : FlowModel.create(lm, this.flow, this.config.trainer.seed + UPDATE_SALT);
    const { online } = this.flow;
    this.optimizer = new AdamW({ lr: online.lr, betas: online.betas as [number, number], weightDecay: online.weight_decay });
    this.lrScheduler = this.onlineSchedule();
    const c = this.model.config;
    const params = [...this.model.field.params.values()].reduce((n, v) => n + v.size, 0);
    if (source && this.config.trainer.progress && (c.context_mode !== this.flow.context_mode || c.hook_layers_percentile.join() !== this.flow.hook_layers_percentile.join())) {
      console.error(`[flowrl] flow rewards: ${source} was trained with context ${c.context_mode} on layers ${c.hook_layers_percentile.join('+')}; using those`);
    }
    if (this.config.trainer.progress) console.error(
      `[flowrl] flow rewards: ${source ? `field from ${source}` : 'a fresh field (v = 0: no reward until it has trained)'}; ` +
        `${params.toLocaleString('en-US')} parameters, layers ${this.model.layers.join(', ')}, context ${c.context_mode}, ` +
        `online updates ${online.enable ? `on (lr ${online.lr})` : 'off'}`,
    );
  }

  /** Whether the field trains at each actor optimizer step (else once per training step). */
  private get perActorStep(): boolean {
    return this.flow.online.cadence === 'actor_step';
  }

  /**
   * The online schedule: warm-up and cosine decay over the field's turns in the run, one per actor
   * step (actor_step) or per actor update (training_step), taken or not (as the reference's
   * scheduler steps with every actor step); none during critic warm-up.
   */
  private onlineSchedule(): LrScheduler {
    const { online } = this.flow;
    const c = this.config;
    const trainingSteps = c.trainer.total_training_steps ?? c.trainer.total_epochs * this.dataset.stepsPerEpoch(c.data.train_batch_size);
    const updating = Math.max(1, trainingSteps - (this.requirements.useCritic ? c.critic.warmup : 0));
    const actorSteps = Math.ceil(c.data.train_batch_size / c.actor_rollout_ref.actor.ppo_mini_batch_size) * c.actor_rollout_ref.actor.ppo_epochs;
    const total = updating * (this.perActorStep ? actorSteps : 1);
    return new LrScheduler({ lr: online.lr, warmupSteps: Math.floor(online.warmup_ratio * total), totalSteps: total, minLrRatio: online.min_lr_ratio });
  }

  async shape(batch: Batch, shaping: Float32Array): Promise<Metrics> {
    const mask = batch.tensor('response_mask');
    const [B, R] = mask.shape;
    const scores = responseScores(batch);
    const correct = scores.map((s) => s >= this.flow.online.reward_threshold);
    const scoring = this.model.trained && this.flow.coef > 0;
    const learning = this.flow.online.enable && !this.perActorStep;
    // An untrained field (v = 0) measures only |x1 - eps|^2, which says nothing about the flow: no reward.
    const select = Float32Array.from(mask.data, (m, i) => (m && (scoring || (learning && correct[Math.floor(i / R)])) ? 1 : 0));
    const latents = await responseLatents(this.worker.module.lm, sequenceBatch(batch), this.model.layers, this.model.config.context_mode, select, this.flow.micro_batch_size);
    this.pending = learning ? subsetLatents(latents, (b) => correct[b]) : undefined;
    const rng = Rng.derive(this.config.trainer.seed + NOISE_SALT, this.shapeCalls++);
    const metrics: Metrics = { 'flow/trained_steps': this.model.config.trained_steps, 'flow/correct_fraction': correct.filter(Boolean).length / B };
    if (!scoring || latents.rows === 0) return { ...metrics, 'flow/score_mean': 0, 'flow/kept_tokens': 0, 'flow/reward_mean': 0 };

    const deviation = new Float32Array(B * R);
    const d = latents.size;
    for (const [l, layerId] of this.model.layerIds.entries()) {
      const [x1, ctx] = [tf.tensor2d(latents.targets[l], [latents.rows, d]), tf.tensor2d(latents.contexts[l], [latents.rows, d])];
      try {
        const values = await flowDeviation(this.model.field, x1, ctx, layerId, rng, this.flow.rewarding_timesteps);
        values.forEach((v, r) => (deviation[latents.positions[r]] += v / this.model.layers.length));
      } finally {
        tf.dispose([x1, ctx]);
      }
    }
    const rewards = flowTokenRewards(deviation, mask.data, B, R, this.flow);
    let kept = 0;
    let total = 0;
    let scoreSum = 0;
    let valid = 0;
    for (let i = 0; i < rewards.length; i++) {
      shaping[i] += rewards[i];
      if (rewards[i] !== 0) kept += 1;
      total += rewards[i];
      if (mask.data[i]) {
        scoreSum += deviation[i];
        valid += 1;
      }
    }
    return { ...metrics, 'flow/score_mean': valid ? scoreSum / valid : 0, 'flow/kept_tokens': kept / B, 'flow/reward_mean': total / B };
  }

  /** cadence training_step: one field step on the last batch's correct rollouts, after the actor's update. */
  async afterUpdate(): Promise<Metrics> {
    const data = this.pending;
    this.pending = undefined;
    if (this.perActorStep || !this.flow.online.enable) return {};
    const metrics = !data || data.rows === 0 ? { 'flow/loss': 0, 'flow/update_sequences': 0 } : await this.fieldStep(data, new Set(data.sequence).size);
    this.lrScheduler.step();
    return metrics;
  }

  /**
   * cadence actor_step (the reference): one field step per actor optimizer step, on the mini-batch's
   * correct rollouts, read from the policy before the step is applied (the weights of its forward).
   */
  async onActorStep(mini: Batch): Promise<Metrics> {
    if (!this.perActorStep || !this.flow.online.enable) return {};
    const correct = responseScores(mini).map((s) => s >= this.flow.online.reward_threshold);
    let metrics: Metrics = { 'flow/loss': 0, 'flow/update_sequences': 0 };
    if (correct.some(Boolean)) {
      const mask = mini.tensor('response_mask');
      const R = mask.shape[1];
      const select = Float32Array.from(mask.data, (m, i) => (m && correct[Math.floor(i / R)] ? 1 : 0));
      const latents = await responseLatents(this.worker.module.lm, sequenceBatch(mini), this.model.layers, this.model.config.context_mode, select, this.flow.micro_batch_size);
      metrics = await this.fieldStep(latents, mini.size);
    }
    this.lrScheduler.step();
    return metrics;
  }

  /**
   * One AdamW step of the field on latents of correct rollouts: rectified flow at the rewarding
   * times (or logit-normal), a mean over each sequence's tokens, summed over sequences and divided
   * by `sequences`, averaged over layers. Latents are constants, so the policy gets no gradient.
   */
  private async fieldStep(data: TokenLatents, sequences: number): Promise<Metrics> {
    const perSequence = new Map<number, number>();
    for (const s of data.sequence) perSequence.set(s, (perSequence.get(s) ?? 0) + 1);
    const weights = Float32Array.from(data.sequence, (s) => 1 / (perSequence.get(s)! * sequences));
    const layers = this.model.layerIds;
    const n = data.rows * layers.length;
    const d = data.size;
    const rng = Rng.derive(this.config.trainer.seed + UPDATE_SALT, this.optimizer.step);
    const { rewarding_timesteps: rewarding, online } = this.flow;
    const times = online.time_sampling === 'logit_normal' ? sampleFlowTimes(n, rng) : Float32Array.from({ length: n }, () => rewarding[Math.floor(rng.next() * rewarding.length)]);
    const layerOfRow = Float32Array.from({ length: n }, (_, i) => layers[Math.floor(i / data.rows)]);
    const rowWeights = Float32Array.from({ length: n }, (_, i) => weights[i % data.rows]);
    const [x1, ctx] = tf.tidy(() => [tf.concat(data.targets.map((t) => tf.tensor2d(t, [data.rows, d]))), tf.concat(data.contexts.map((c) => tf.tensor2d(c, [data.rows, d])))]);
    const { loss, grads } = lossAndGradients(() => flowMatchingLoss(this.model.field, x1 as tf.Tensor2D, ctx as tf.Tensor2D, layerOfRow, rowWeights, rng, times, layers.length), this.model.field.params);
    // A non-finite gradient would poison the field for good: the step is skipped, as the actor's is.
    let value: number;
    let stepped: { norm: number; applied: boolean };
    try {
      stepped = await clippedStep(this.optimizer, this.model.field.params, grads, online.grad_clip, this.lrScheduler.lr);
      value = await readScalar(loss, 'the RLFR flow loss');
    } finally {
      tf.dispose([loss, x1, ctx, ...grads.values()]);
    }
    const { norm: gradNorm, applied: finite } = stepped;
    // A step at lr 0 (the first of a warm-up) leaves a fresh field untrained: it must not start rewarding.
    if (finite && this.optimizer.lr > 0) this.model.config.trained_steps += 1;
    return { 'flow/loss': value, 'flow/lr': this.optimizer.lr, 'flow/grad_norm': gradNorm, 'flow/update_sequences': perSequence.size, 'flow/skipped_updates': finite ? 0 : 1 };
  }

  async saveCheckpoint(dir: string): Promise<void> {
    const flowDir = path.join(dir, FLOW_CHECKPOINT_DIR);
    await this.model.save(flowDir);
    await saveOptimizerState(path.join(flowDir, OPTIMIZER_FILE), this.optimizer, this.lrScheduler);
    fs.writeFileSync(path.join(flowDir, STATE_FILE), JSON.stringify({ shape_calls: this.shapeCalls }, null, 2) + '\n');
  }

  loadCheckpoint(dir: string): void {
    const flowDir = path.join(dir, FLOW_CHECKPOINT_DIR);
    if (!fs.existsSync(flowDir)) throw new InputError(`${dir}: no ${FLOW_CHECKPOINT_DIR}/ directory; the run was checkpointed without reward.flow.enable`);
    this.model.restore(flowDir);
    const optimizerFile = path.join(flowDir, OPTIMIZER_FILE);
    if (fs.existsSync(optimizerFile)) loadOptimizerState(optimizerFile, this.optimizer, this.model.field.params, this.lrScheduler);
    const stateFile = path.join(flowDir, STATE_FILE);
    let calls: unknown;
    try {
      calls = (JSON.parse(fs.readFileSync(stateFile, 'utf8')) as { shape_calls?: unknown }).shape_calls;
    } catch (e) {
      throw new InputError(`${stateFile}: cannot be read as the flow shaper's state (${(e as Error).message})`);
    }
    if (!Number.isInteger(calls) || (calls as number) < 0) throw new InputError(`${stateFile}: key 'shape_calls' must be a whole number >= 0`);
    this.shapeCalls = calls as number;
  }

  dispose(): void {
    this.model?.dispose();
    this.optimizer?.dispose();
  }
}
