// The stock actor (verl's DataParallelPPOActor): log-probs without gradients, and policy updates over
// mini-batches x epochs with micro-batch gradient accumulation, global-norm clipping and AdamW.
// Subclasses change the objective by overriding microBatchLoss.
import * as tf from '@tensorflow/tfjs-core';
import { inject, injectable, optional } from 'inversify';
import { aggregateLoss, miniBatchDenominators, policyLossOptions, readsInputValues, type AggregateLossOptions, type PolicyLoss, type PolicyLossHostValues } from '../algorithms/policy-loss.js';
import { klPenalty } from '../algorithms/kl.js';
import { tokenRolloutCorrection } from '../algorithms/rollout-correction.js';
import { concatFloat32, shardRanges } from '../arrays.js';
import { Rng } from '../random.js';
import type { Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import type { Actor, ActorStepListener, LogProbOptions, LogProbResult, Metrics, PolicyModule } from '../contracts/index.js';
import { gatheredLogProbs, scoreResponses, type ResponseScores } from '../model/logprobs.js';
import { distillationLoss, usesTopK, type DistillationInput } from '../algorithms/distillation.js';
import { TEACHER_LOG_PROBS, TEACHER_TOPK_IDS, TEACHER_TOPK_LOG_PROBS } from '../distillation/teachers.js';
import { accumulateGradients } from '../engine/ops.js';
import { lossAndGradients } from '../model/optim.js';
import { runUpdateLoop, type MetricAverager } from '../model/update-loop.js';
import { TOKENS } from '../tokens.js';
import { sequenceBatch } from '../workers/sequences.js';
import { gatherValues, rankRows, sumGradientsOverRanks } from '../workers/ranks.js';
import { SINGLE_RANK, type RankWorld } from '../engine/mpi.js';
import { disposeMetrics, readAllFloat32, readFloat32, readMetrics, readsSynchronously, type PendingMetrics } from '../engine/readback.js';

/**
 * A micro-batch's place in its mini-batch: verl's global denominators (valid tokens and non-empty
 * rows of the whole mini-batch), so accumulated micro-batch losses equal the mini-batch loss
 * whatever the micro-batch size, and its share of the rows for losses that are plain means.
 */
export interface MicroBatchShare {
  global: AggregateLossOptions;
  /** Rows of the micro-batch over rows of the mini-batch. */
  share: number;
  /** Optimizer updates applied so far (seeds per-update randomness such as dropout). */
  step: number;
  /** One mini-batch and one epoch: the old policy is the current one. */
  onPolicy: boolean;
  /** The micro-batch's first row within its mini-batch (per-row randomness survives any split). */
  firstRow: number;
  /** The policy loss's inputs on the host, when it chooses tokens by them and the backend cannot read in the gradient (webgpu). */
  host?: PolicyLossHostValues;
}

/** The stock actor (verl's DataParallelPPOActor); subclasses change the objective by overriding microBatchLoss. */
@injectable()
export class PPOActor implements Actor {
  protected module!: PolicyModule;
  @inject(TOKENS.Ranks) @optional() protected readonly ranks: RankWorld = SINGLE_RANK;

  constructor(
    @inject(TOKENS.Config) protected readonly config: Config,
    @inject(TOKENS.PolicyLoss) protected readonly policyLoss: PolicyLoss,
  ) {}

  attach(module: PolicyModule): void {
    this.module = module;
  }

  protected get actorConfig() {
    return this.config.actor_rollout_ref.actor;
  }

  protected get temperature(): number {
    return this.config.actor_rollout_ref.rollout.temperature || 1;
  }

  async computeLogProb(batch: Batch, options: LogProbOptions): Promise<LogProbResult> {
    const pool = this.module.pool;
    if (!pool || batch.size < 2) return this.computeLogProbHere(batch, options);
    // Rows split across the worker threads; each shard is scored whole, so the result is the same.
    const parts = await pool.runOnRowShards(
      batch.size,
      (a, b) => ({ kind: 'log-prob', batch: batch.slice(a, b).toPlain(), withEntropy: options.withEntropy, withSumPiSquared: options.withSumPiSquared === true, temperature: options.temperature }),
      (a, b) => this.computeLogProbHere(batch.slice(a, b), options),
    );
    return {
      logProbs: concatFloat32(parts.map((p) => p.logProbs)),
      entropy: options.withEntropy ? concatFloat32(parts.map((p) => p.entropy!)) : undefined,
      sumPiSquared: options.withSumPiSquared ? concatFloat32(parts.map((p) => p.sumPiSquared!)) : undefined,
    };
  }

  /** computeLogProb on this thread, in log_prob_micro_batch_size pieces. */
  async computeLogProbHere(batch: Batch, options: LogProbOptions): Promise<LogProbResult> {
    const micro = this.config.actor_rollout_ref.rollout.log_prob_micro_batch_size;
    const logProbs: Float32Array[] = [];
    const entropies: Float32Array[] = [];
    const sums: Float32Array[] = [];
    for (const part of batch.split(micro)) {
      const [lp, ent, sq] = tf.tidy(() => {
        const out = scoreResponses(this.module.lm, sequenceBatch(part), { temperature: options.temperature ?? this.temperature, withEntropy: options.withEntropy, withSumPiSquared: options.withSumPiSquared });
        return [out.logProbs, out.entropy ?? tf.zeros([0]), out.sumPiSquared ?? tf.zeros([0])];
      });
      try {
        const [lpValues, entValues, sqValues] = await readAllFloat32([lp, ent, sq], 'log-probs');
        logProbs.push(lpValues);
        entropies.push(entValues);
        sums.push(sqValues);
      } finally {
        tf.dispose([lp, ent, sq]);
      }
    }
    return {
      logProbs: concatFloat32(logProbs),
      entropy: options.withEntropy ? concatFloat32(entropies) : undefined,
      sumPiSquared: options.withSumPiSquared ? concatFloat32(sums) : undefined,
    };
  }

  /**
   * The policy loss's inputs as host arrays, for a loss that chooses tokens by them on a backend
   * that cannot read inside the gradient: the current log-probs from a forward pass without
   * gradients (the one the loss repeats, so the same numbers), the rest from the batch.
   */
  protected async lossInputValues(micro: Batch): Promise<PolicyLossHostValues> {
    const lp = tf.tidy(() => scoreResponses(this.module.lm, sequenceBatch(micro), { temperature: this.temperature }).logProbs);
    let logProb: Float32Array;
    try {
      logProb = await readFloat32(lp, "log-probs for the policy loss's token choice");
    } finally {
      lp.dispose();
    }
    const values = (key: string) => Float32Array.from(micro.tensor(key).data);
    return { logProb, oldLogProb: values('old_log_probs'), advantages: values('advantages'), responseMask: values('response_mask') };
  }

  /** A [B, R] float tensor of a batch array (the caller's tidy releases it). */
  protected floatTensor(batch: Batch, key: string): tf.Tensor2D {
    return batch.toTensor(key).toFloat() as tf.Tensor2D;
  }

  /** The TIS cap for batches sampled by another engine (those carrying rollout_log_probs); null: no correction. */
  protected get tisCap(): number | null {
    return this.config.algorithm.rollout_correction.tis_cap;
  }

  /**
   * Token TIS weights [B, R] of a batch sampled by another engine; undefined for local sampling or
   * with tis_cap null. Like floatTensor, made inside the caller's tidy (lossAndGradients), which releases it.
   */
  protected tokenTisWeights(micro: Batch): tf.Tensor2D | undefined {
    const cap = this.tisCap;
    if (cap === null || !micro.has('rollout_log_probs')) return undefined;
    const mask = micro.tensor('response_mask');
    const { weights } = tokenRolloutCorrection(micro.tensor('old_log_probs').data, micro.tensor('rollout_log_probs').data, mask.data, cap);
    return tf.tensor2d(weights, mask.shape as [number, number]);
  }

  /** The whole batch's engine-vs-trainer mismatch metrics (none for local sampling); subclasses may add their own. */
  protected rolloutCorrectionMetrics(batch: Batch): Metrics {
    if (!batch.has('rollout_log_probs')) return {};
    return tokenRolloutCorrection(batch.tensor('old_log_probs').data, batch.tensor('rollout_log_probs').data, batch.tensor('response_mask').data, this.tisCap).metrics;
  }

  /** Responses per optimizer step: ppo_mini_batch_size prompts times rollout.n. */
  protected get miniBatchSize(): number {
    return Math.max(1, this.actorConfig.ppo_mini_batch_size * this.config.actor_rollout_ref.rollout.n);
  }

  /**
   * The loss of one micro-batch as its part of the mini-batch loss, with its metrics recorded. PPO:
   * clipped surrogate (times the TIS weights for rollouts from another engine), optional KL loss to
   * the reference, entropy bonus, each aggregated with the mini-batch's denominators. Metrics are
   * recorded as scalars (a GPU cannot read inside the gradient closure), read after the gradients.
   */
  protected microBatchLoss(micro: Batch, part: MicroBatchShare, record: (m: PendingMetrics) => void): tf.Scalar {
    const cfg = this.actorConfig;
    const mode = cfg.loss_agg_mode;
    const withEntropy = cfg.entropy_coeff !== 0;
    const out = scoreResponses(this.module.lm, sequenceBatch(micro), { temperature: this.temperature, withEntropy });
    const mask = this.floatTensor(micro, 'response_mask');
    const options = policyLossOptions(cfg, part.global);
    const pg = this.policyLoss(
      {
        logProb: out.logProbs,
        oldLogProb: this.floatTensor(micro, 'old_log_probs'),
        advantages: this.floatTensor(micro, 'advantages'),
        responseMask: mask,
        tokenWeights: this.tokenTisWeights(micro),
        host: part.host,
      },
      // clip_cov's random choice: the same for the same run, update and rows, whatever the threads.
      { ...options, seed: Rng.deriveSeed(Rng.deriveSeed(this.config.trainer.seed, part.step), part.firstRow), rowShare: part.share },
    );
    let loss: tf.Scalar = pg.loss;
    // Metrics are per micro-batch on its own scale (the loss carries the mini-batch's).
    const ownScale = (t: tf.Scalar) => tf.keep(tf.div(t, Math.max(part.share, 1e-12)) as tf.Scalar);
    const metrics: PendingMetrics = { 'actor/pg_loss': ownScale(pg.loss), ...pg.metrics };
    if (withEntropy) {
      const entropy = aggregateLoss(out.entropy!, mask, mode, options.globalBatchInfo);
      metrics['actor/entropy_loss'] = ownScale(entropy);
      loss = tf.sub(loss, tf.mul(entropy, cfg.entropy_coeff));
    }
    if (cfg.use_kl_loss) {
      const kl = aggregateLoss(klPenalty(out.logProbs, this.floatTensor(micro, 'ref_log_prob'), cfg.kl_loss_type) as tf.Tensor2D, mask, mode, options.globalBatchInfo);
      metrics['actor/kl_loss'] = ownScale(kl);
      metrics['actor/kl_coef'] = cfg.kl_loss_coef;
      loss = tf.add(loss, tf.mul(kl, cfg.kl_loss_coef));
    }
    record(metrics);
    return this.withDistillation(micro, part, out, loss, record);
  }

  /**
   * The micro-batch's loss with on-policy distillation's term when distillation is on (verl's
   * distillation_ppo_loss): the task's loss plus distillation_loss_coef times the distillation
   * loss, or the distillation loss alone without task rewards. `out` is the forward pass the task
   * loss used; `taskLoss` carries the micro-batch's share of the mini-batch, as the term does.
   */
  protected withDistillation(micro: Batch, part: MicroBatchShare, out: ResponseScores, taskLoss: tf.Scalar, record: (m: PendingMetrics) => void): tf.Scalar {
    const d = this.config.distillation;
    if (!d.enabled) return taskLoss;
    const l = d.distillation_loss;
    const cfg = this.actorConfig;
    const mask = this.floatTensor(micro, 'response_mask');
    let input: DistillationInput;
    if (usesTopK(l.loss_mode)) {
      const ids = micro.tensor(TEACHER_TOPK_IDS);
      const teacher = micro.tensor(TEACHER_TOPK_LOG_PROBS);
      const k = ids.shape[2];
      input = {
        kind: 'topk',
        studentTopLogProbs: gatheredLogProbs(this.module.lm, out.hidden, sequenceBatch(micro), ids.data as Int32Array, k, this.temperature),
        teacherTopLogProbs: tf.tensor3d(teacher.data as Float32Array, teacher.shape as [number, number, number]),
      };
    } else {
      input = { kind: 'estimator', studentLogProbs: out.logProbs as tf.Tensor2D, teacherLogProbs: this.floatTensor(micro, TEACHER_LOG_PROBS) };
    }
    const options = policyLossOptions(cfg, part.global);
    const distill = distillationLoss(input, { logProb: out.logProbs as tf.Tensor2D, oldLogProb: this.floatTensor(micro, 'old_log_probs'), tokenWeights: this.tokenTisWeights(micro) }, mask, {
      lossMode: l.loss_mode,
      lossMaxClamp: l.loss_max_clamp,
      logProbMinClamp: l.log_prob_min_clamp,
      usePolicyGradient: l.use_policy_gradient,
      clipRatioLow: l.clip_ratio_low ?? l.clip_ratio,
      clipRatioHigh: l.clip_ratio_high ?? l.clip_ratio,
      lossAggMode: cfg.loss_agg_mode,
      globalBatchInfo: options.globalBatchInfo,
    });
    const metrics: PendingMetrics = Object.fromEntries(Object.entries(distill.metrics).map(([k, v]) => [`actor/${k}`, v]));
    metrics['actor/distillation/loss'] = tf.keep(tf.div(distill.loss, Math.max(part.share, 1e-12)) as tf.Scalar);
    record(metrics);
    if (!l.use_task_rewards) return distill.loss;
    return tf.add(taskLoss, tf.mul(distill.loss, l.distillation_loss_coef)) as tf.Scalar;
  }


  /** One micro-batch's (or shard's) gradients and the metrics its loss recorded; worker replicas run this too. */
  async microBatchGradients(micro: Batch, part: MicroBatchShare): Promise<{ grads: Map<string, tf.Tensor>; metrics: Metrics[] }> {
    if (!readsSynchronously() && readsInputValues(this.policyLoss)) part = { ...part, host: await this.lossInputValues(micro) };
    const pending: PendingMetrics[] = [];
    let computed: { loss: tf.Scalar; grads: Map<string, tf.Tensor> };
    try {
      computed = lossAndGradients(() => this.microBatchLoss(micro, part, (m) => pending.push(m)), this.module.params);
    } catch (e) {
      pending.forEach(disposeMetrics);
      throw e;
    }
    computed.loss.dispose();
    const metrics: Metrics[] = [];
    try {
      for (const m of pending) metrics.push(await readMetrics(m, 'actor loss metrics'));
    } catch (e) {
      tf.dispose([...computed.grads.values()]);
      throw e;
    }
    return { grads: computed.grads, metrics };
  }

  /**
   * Gradients of a micro-batch, summed into `grads`. Under data-parallel ranks each rank takes its
   * rows of it (their metrics are gathered, so every rank averages all of them); with a worker pool
   * a rank's rows are split across the threads. Each piece's loss is its part of the mini-batch
   * loss, so the sum over pieces, threads and ranks is the same.
   */
  protected async accumulateMicroBatch(micro: Batch, part: MicroBatchShare, mini: Batch, grads: Map<string, tf.Tensor>, averages: MetricAverager): Promise<void> {
    if (this.ranks.size === 1) return this.accumulateRows(micro, part, mini, grads, (m, weight) => averages.add(m, weight));
    const [a, b] = rankRows(this.ranks, micro.size);
    const mine: [Metrics, number][] = [];
    if (b > a) await this.accumulateRows(micro.slice(a, b), { ...part, share: (b - a) / mini.size, firstRow: part.firstRow + a }, mini, grads, (m, weight) => mine.push([m, weight]));
    for (const [m, weight] of gatherValues(this.ranks, mine).flat()) averages.add(m, weight);
  }

  /** Gradients of rows of a micro-batch on this rank, split across the pool's threads when it has one; each piece's metrics weigh its share. */
  private async accumulateRows(micro: Batch, part: MicroBatchShare, mini: Batch, grads: Map<string, tf.Tensor>, record: (metrics: Metrics, weight: number) => void): Promise<void> {
    const pool = this.module.pool;
    if (!pool || micro.size < 2) {
      const local = await this.microBatchGradients(micro, part);
      accumulateGradients(grads, local.grads);
      local.metrics.forEach((m) => record(m, part.share));
      return;
    }
    const ranges = shardRanges(micro.size, pool.size);
    const parts = ranges.map(([a, b]) => ({ ...part, share: (b - a) / mini.size, firstRow: part.firstRow + a }));
    const [mine, ...theirs] = ranges.map(([a, b]) => micro.slice(a, b));
    const { local, results } = await pool.run(
      theirs.map((shard, i) => ({ kind: 'actor-grads', batch: shard.toPlain(), part: parts[i + 1] })),
      () => this.microBatchGradients(mine, parts[0]),
      grads,
    );
    accumulateGradients(grads, local.grads);
    [local.metrics, ...(results as Metrics[][])].forEach((metrics, i) => metrics.forEach((m) => record(m, parts[i].share)));
  }

  async updatePolicy(batch: Batch, listeners: ActorStepListener[] = []): Promise<Metrics> {
    const cfg = this.actorConfig;
    const onPolicy = batch.size <= this.miniBatchSize && cfg.ppo_epochs === 1;
    let denominators: { mini: Batch; global: AggregateLossOptions } | undefined;
    const metrics = await runUpdateLoop<Batch>({
      miniBatches: batch.split(this.miniBatchSize),
      epochs: cfg.ppo_epochs,
      microBatches: (mini) => mini.split(cfg.ppo_micro_batch_size),
      rows: (micro) => micro.size,
      accumulate: async (micro, { mini, firstRow, step }, grads, averages) => {
        if (denominators?.mini !== mini) denominators = { mini, global: miniBatchDenominators(mini.tensor('response_mask')) };
        await this.accumulateMicroBatch(micro, { global: denominators.global, share: micro.size / mini.size, step, onPolicy, firstRow }, mini, grads, averages);
      },
      beforeStep: async (mini, averages) => {
        for (const listener of listeners) averages.add(await listener.onActorStep(mini));
      },
      sumGradients: this.ranks.size > 1 ? (grads) => sumGradientsOverRanks(this.ranks, grads, this.module.params) : undefined,
      afterStep: (_mini, applied) => applied && this.module.pool?.publish(this.module.params),
      optimizer: this.module.optimizer,
      params: this.module.params,
      maxGradNorm: cfg.grad_clip,
      lr: () => this.module.lrScheduler.lr,
      prefix: 'actor',
    });
    return { ...metrics, ...this.rolloutCorrectionMetrics(batch) };
  }
}
