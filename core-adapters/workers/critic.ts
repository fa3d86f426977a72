// The critic (verl's DataParallelPPOCritic): a copy of the LM trunk with a scalar value head, read at
// the state before each response token, trained with the clipped value loss.
import * as tf from '@tensorflow/tfjs-core';
import { readFloat32, readMetrics, type PendingMetrics } from '../engine/readback.js';
import fs from 'node:fs';
import path from 'node:path';
import { inject, injectable, optional } from 'inversify';
import { miniBatchDenominators, type AggregateLossOptions } from '../algorithms/policy-loss.js';
import { computeValueLoss } from '../algorithms/value-loss.js';
import { concatFloat32 } from '../arrays.js';
import type { Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import type { Critic, Metrics } from '../contracts/index.js';
import { InputError } from '../errors.js';
import type { CausalLM } from '../model/causal-lm.js';
import {
  loadModel,
  loadOptimizerState,
  OPTIMIZER_FILE,
  loadParameters,
  loadWeightsInto,
  saveModel,
  saveOptimizerState,
  saveParameters,
} from '../model/checkpoint.js';
import { uniqueVariableName } from '../model/variables.js';
import { positionsFromMask } from '../model/causal-lm.js';
import type { SequenceBatch } from '../model/logprobs.js';
import { accumulateGradients, linear } from '../engine/ops.js';
import { AdamW, LrScheduler, lossAndGradients, verlLrSchedule } from '../model/optim.js';
import { runUpdateLoop } from '../model/update-loop.js';
import { Rng } from '../random.js';
import { TOKENS } from '../tokens.js';
import { sequenceBatch } from './sequences.js';
import { gatherValues, onRankRows, rankRows, sumGradientsOverRanks } from './ranks.js';
import { SINGLE_RANK, type RankWorld } from '../engine/mpi.js';

export const VALUE_HEAD_FILE = 'value_head.safetensors';

/** The value critic for gae: the LM trunk with a linear value head, trained by the clipped value loss. */
@injectable()
export class ValueCritic implements Critic {
  protected lm!: CausalLM;
  protected params = new Map<string, tf.Variable>();
  protected optimizer!: AdamW;
  protected lrScheduler!: LrScheduler;

  @inject(TOKENS.Ranks) @optional() protected readonly ranks: RankWorld = SINGLE_RANK;

  constructor(@inject(TOKENS.Config) protected readonly config: Config) {}

  async init(): Promise<void> {
    const source = this.config.critic.model.path ?? this.config.actor_rollout_ref.model.path;
    if (!source) throw new InputError('critic.model.path and actor_rollout_ref.model.path are both unset');
    this.lm = loadModel(source);
    const H = this.lm.config.hiddenSize;
    const rng = new Rng(this.config.trainer.seed);
    const w = Float32Array.from({ length: H }, () => 0.02 * rng.normal());
    this.params = new Map(this.lm.params);
    tf.tidy(() => {
      this.params.set('value_head.weight', tf.variable(tf.tensor2d(w, [H, 1]), true, uniqueVariableName('value_head.weight')));
      this.params.set('value_head.bias', tf.variable(tf.zeros([1]), true, uniqueVariableName('value_head.bias')));
    });
    const o = this.config.critic.optim;
    this.optimizer = new AdamW({ lr: o.lr, betas: o.betas as [number, number], eps: o.eps, weightDecay: o.weight_decay });
    this.lrScheduler = new LrScheduler(verlLrSchedule(o, 'critic.optim'));
  }

  protected headParams(): Map<string, tf.Variable> {
    return new Map([...this.params].filter(([k]) => k.startsWith('value_head.')));
  }

  /** Values [B, R]: the value head on the state before each response token. */
  protected values(seq: SequenceBatch): tf.Tensor2D {
    const { batch, promptLength: P, responseLength: R } = seq;
    const H = this.lm.config.hiddenSize;
    const out = this.lm.forward({ ids: seq.inputIds, batch, attentionMask: seq.attentionMask, positions: positionsFromMask(seq.attentionMask, batch) });
    const states = out.hidden.reshape([batch, P + R, H]).slice([0, P - 1, 0], [batch, R, H]).reshape([batch * R, H]) as tf.Tensor2D;
    const v = linear(states, this.params.get('value_head.weight') as tf.Variable<tf.Rank.R2>, this.params.get('value_head.bias') as tf.Variable<tf.Rank.R1>);
    return v.reshape([batch, R]);
  }

  async computeValues(whole: Batch): Promise<Float32Array> {
    return (await onRankRows(this.ranks, whole, async (batch) => ({ values: await this.computeValuesHere(batch) }))).values;
  }

  /** Values of `batch`'s rows on this rank, in critic.ppo_micro_batch_size pieces. */
  private async computeValuesHere(batch: Batch): Promise<Float32Array> {
    const parts: Float32Array[] = [];
    for (const part of batch.split(this.config.critic.ppo_micro_batch_size)) {
      const v = tf.tidy(() => this.values(sequenceBatch(part)));
      try {
        parts.push(await readFloat32(v, 'critic values'));
      } finally {
        v.dispose();
      }
    }
    return concatFloat32(parts);
  }

  async updateCritic(batch: Batch): Promise<Metrics> {
    const cfg = this.config.critic;
    const tensor = (b: Batch, key: string) => b.toTensor(key).toFloat() as tf.Tensor2D;
    let denominators: { mini: Batch; global: AggregateLossOptions } | undefined;
    const metrics = await runUpdateLoop<Batch>({
      miniBatches: batch.split(Math.max(1, cfg.ppo_mini_batch_size * this.config.actor_rollout_ref.rollout.n)),
      epochs: cfg.ppo_epochs,
      microBatches: (mini) => mini.split(cfg.ppo_micro_batch_size),
      rows: (micro) => micro.size,
      accumulate: async (whole, { mini }, grads, averages) => {
        if (denominators?.mini !== mini) denominators = { mini, global: miniBatchDenominators(mini.tensor('response_mask')) };
        const global = denominators.global;
        // Under data-parallel ranks each takes its rows (the loss is additive over rows with the mini-batch's denominators).
        const [a, b] = rankRows(this.ranks, whole.size);
        const mine: [Metrics, number][] = [];
        if (b > a) {
          const micro = this.ranks.size === 1 ? whole : whole.slice(a, b);
          let pending: PendingMetrics = {};
          const { loss, grads: g } = lossAndGradients(() => {
            const vpreds = this.values(sequenceBatch(micro));
            const { loss: vf, clipfrac } = computeValueLoss(vpreds, tensor(micro, 'returns'), tensor(micro, 'values'), tensor(micro, 'response_mask'), cfg.cliprange_value, cfg.loss_agg_mode, global);
            pending = { 'critic/vf_loss': tf.keep(tf.mul(vf, mini.size / micro.size) as tf.Scalar), 'critic/vf_clipfrac': clipfrac };
            return vf;
          }, this.params);
          loss.dispose();
          accumulateGradients(grads, g);
          // Weighed by its share of the mini-batch's rows, so uneven pieces average to the whole's loss.
          mine.push([await readMetrics(pending, 'critic loss metrics'), micro.size / mini.size]);
        }
        for (const [m, weight] of this.ranks.size === 1 ? mine : gatherValues(this.ranks, mine).flat()) averages.add(m, weight);
      },
      sumGradients: this.ranks.size > 1 ? (grads) => sumGradientsOverRanks(this.ranks, grads, this.params) : undefined,
      optimizer: this.optimizer,
      params: this.params,
      maxGradNorm: cfg.grad_clip,
      lr: () => this.lrScheduler.lr,
      prefix: 'critic',
    });
    // verl steps the critic's scheduler once per update_critic.
    this.lrScheduler.step();
    return metrics;
  }

  async saveCheckpoint(dir: string): Promise<void> {
    const criticDir = path.join(dir, 'critic');
    await saveModel(this.lm, criticDir);
    await saveParameters(path.join(criticDir, VALUE_HEAD_FILE), this.headParams());
    await saveOptimizerState(path.join(criticDir, OPTIMIZER_FILE), this.optimizer, this.lrScheduler);
  }

  loadCheckpoint(dir: string): void {
    const criticDir = path.join(dir, 'critic');
    if (!fs.existsSync(criticDir)) throw new InputError(`${dir}: no critic/ directory, but this run trains a critic`);
    loadWeightsInto(this.lm, criticDir);
    loadParameters(path.join(criticDir, VALUE_HEAD_FILE), this.headParams());
    loadOptimizerState(path.join(criticDir, OPTIMIZER_FILE), this.optimizer, this.params, this.lrScheduler);
  }

  dispose(): void {
    this.lm?.dispose();
    tf.dispose([...this.headParams().values()]);
    this.optimizer?.dispose();
  }
}
