// The FlowRL actor: the stock actor's update loop (mini-batches, micro-batches, clipping, AdamW)
// with its micro-batch loss replaced by the trajectory-balance objective. Its forward pass also
// yields log Z from ProjZ on the same pass's prompt hidden states.
import * as tf from '@tensorflow/tfjs-core';
import { injectable, injectFromBase } from 'inversify';
import {
  policyLossOptions,
  PPOActor,
  Rng,
  rowsByGroup,
  scoreResponses,
  sequenceBatch,
  sequenceRolloutCorrection,
  stopGradient,
  type ActorStepListener,
  type Batch,
  type Metrics,
  type MicroBatchShare,
  type PendingMetrics,
} from '../core-adapters/index.js';
import { flowrlConfig } from './config.js';
import { computeFlowRLLoss } from './objective.js';
import { poolPromptStates, type ProjZ } from './proj-z.js';

export const PROJ_Z = 'proj_z';
/** Per-row log Z of flowrl.log_z: group, set on the batch before the update. */
const GROUP_LOG_Z = 'flowrl_group_log_z';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLActor extends PPOActor {
  protected get projZ(): ProjZ {
    const head = this.module.heads.get(PROJ_Z);
    if (!head) throw new Error('FlowRLActor: the policy module has no proj_z head (is FlowRLWorker bound?)');
    return head as ProjZ;
  }

  /**
   * log Z per row as its prompt group's estimate (flowrl.log_z: group): the Z that zeroes the group's
   * mean residual under the sampling policy, -mean_g(lp_old(y) - beta * r(y) - lp_ref(y)) (lp_ref: the
   * flowrl.reference term, none for reference none), with lp the
   * (length-normalised or summed) sequence log-prob. The residuals are then deviations from the
   * group's mean (VarGrad, Richter et al. 2020), so no learned head lags behind a moving target.
   */
  private groupLogZ(batch: Batch): Float32Array {
    const flowrl = flowrlConfig(this.config);
    const mask = batch.tensor('response_mask').data;
    const old = batch.tensor('old_log_probs').data;
    // The term the residual subtracts (flowrl.reference): the reference, the sampling policy, or nothing.
    const term = flowrl.reference === 'ref' ? batch.tensor('ref_log_prob').data : flowrl.reference === 'old' ? old : undefined;
    const reward = flowrl.reward_source === 'score' ? batch.tensor('token_level_rewards').data : batch.tensor('advantages').data;
    const B = batch.size;
    const R = mask.length / B;
    const residual = new Float64Array(B);
    for (let b = 0; b < B; b++) {
      let lp = 0;
      let lpRef = 0;
      let rewardSum = 0;
      let tokens = 0;
      for (let t = 0; t < R; t++) {
        const m = mask[b * R + t];
        lp += m * old[b * R + t];
        if (term) lpRef += m * term[b * R + t];
        rewardSum += m * reward[b * R + t];
        tokens += m;
      }
      const norm = flowrl.length_normalize ? 1 / (tokens + 1e-8) : 1;
      // score: the row's total reward; advantage: its (constant) per-token value.
      const r = flowrl.reward_source === 'score' ? rewardSum : rewardSum / (tokens + 1e-8);
      residual[b] = norm * (lp - lpRef) - flowrl.beta * r;
    }
    const out = new Float32Array(B);
    for (const rows of rowsByGroup(batch.column<string>('uid'))) {
      const logZ = -rows.reduce((total, b) => total + residual[b], 0) / rows.length;
      for (const b of rows) out[b] = logZ;
    }
    return out;
  }

  override updatePolicy(batch: Batch, listeners: ActorStepListener[] = []): Promise<Metrics> {
    if (flowrlConfig(this.config).log_z === 'group') batch.set(GROUP_LOG_Z, { shape: [batch.size], data: this.groupLogZ(batch) });
    return super.updatePolicy(batch, listeners);
  }

  /** Per-row total reward (outcome plus any shaping) broadcast over its valid tokens (reward_source: score). */
  private sequenceScores(micro: Batch): tf.Tensor2D {
    const rewards = micro.tensor('token_level_rewards');
    const mask = micro.tensor('response_mask').data;
    const [B, R] = rewards.shape;
    const out = new Float32Array(B * R);
    for (let b = 0; b < B; b++) {
      let total = 0;
      for (let t = 0; t < R; t++) total += rewards.data[b * R + t] * mask[b * R + t];
      for (let t = 0; t < R; t++) out[b * R + t] = total * mask[b * R + t];
    }
    return tf.tensor2d(out, [B, R]);
  }

  /** Sequence TIS weights [B] of a batch sampled by another engine; undefined for local sampling or with tis_cap null. */
  private sequenceTisWeights(micro: Batch): tf.Tensor1D | undefined {
    const cap = this.tisCap;
    if (cap === null || !micro.has('rollout_log_probs')) return undefined;
    const old = micro.tensor('old_log_probs').data;
    return tf.tensor1d(sequenceRolloutCorrection(old, micro.tensor('rollout_log_probs').data, micro.tensor('response_mask').data, micro.size, cap).weights);
  }

  /** The token-level mismatch metrics plus the fraction of sequences whose engine weight was truncated. */
  protected override rolloutCorrectionMetrics(batch: Batch): Metrics {
    if (!batch.has('rollout_log_probs')) return {};
    const old = batch.tensor('old_log_probs').data;
    return sequenceRolloutCorrection(old, batch.tensor('rollout_log_probs').data, batch.tensor('response_mask').data, batch.size, this.tisCap).metrics;
  }

  /** log Z from ProjZ on this forward pass's pooled prompt states. */
  private projZLogZ(hidden: tf.Tensor2D, seq: ReturnType<typeof sequenceBatch>, part: MicroBatchShare): tf.Tensor1D {
    let pooled = poolPromptStates(hidden, seq.attentionMask, seq.batch, seq.promptLength);
    if (flowrlConfig(this.config).detach_logz_input) pooled = stopGradient(pooled);
    // Dropout masks per row from (seed, optimizer step, row in the mini-batch): a resumed run, or
    // one whose micro-batches are split across worker threads, draws the same ones.
    const rowRngs = Array.from({ length: seq.batch }, (_, b) => Rng.derive(this.config.trainer.seed, part.step * 1_000_003 + part.firstRow + b));
    return this.projZ.forward(pooled, { training: true, rowRngs });
  }

  /** Sequence level: a plain mean over sequences, so a micro-batch weighs by its share of rows; token level: the mini-batch's denominators. */
  protected override microBatchLoss(micro: Batch, part: MicroBatchShare, record: (m: PendingMetrics) => void): tf.Scalar {
    const flowrl = flowrlConfig(this.config);
    const actor = this.config.actor_rollout_ref.actor;
    const token = flowrl.level === 'token';
    const seq = sequenceBatch(micro);
    const out = scoreResponses(this.module.lm, seq, { temperature: this.temperature });
    const logZ = flowrl.log_z === 'none' ? undefined : flowrl.log_z === 'group' ? tf.tensor1d(micro.tensor(GROUP_LOG_Z).data as Float32Array) : this.projZLogZ(out.hidden, seq, part);
    const options = policyLossOptions(actor, part.global);
    const { loss, metrics } = computeFlowRLLoss(
      {
        logProb: out.logProbs,
        oldLogProb: part.onPolicy ? stopGradient(out.logProbs) : this.floatTensor(micro, 'old_log_probs'),
        refLogProb: micro.has('ref_log_prob') ? this.floatTensor(micro, 'ref_log_prob') : undefined,
        advantages: flowrl.reward_source === 'score' ? this.sequenceScores(micro) : this.floatTensor(micro, 'advantages'),
        responseMask: this.floatTensor(micro, 'response_mask'),
        logZ,
        // From the batch's old_log_probs even on-policy: the gap is between the trainer's and the engine's scores.
        rolloutWeights: token ? this.tokenTisWeights(micro) : this.sequenceTisWeights(micro),
      },
      {
        beta: flowrl.beta,
        importanceWeightMax: flowrl.importance_weight_max,
        importanceWeightClip: flowrl.importance_weight_clip,
        clipRatioLow: options.clipRatioLow,
        clipRatioHigh: options.clipRatioHigh,
        importanceSampling: flowrl.importance_sampling,
        lengthNormalize: flowrl.length_normalize,
        reference: flowrl.reference,
        level: flowrl.level,
        lossAggMode: options.lossAggMode,
        globalBatchInfo: options.globalBatchInfo,
        share: part.share,
      },
    );
    record(metrics);
    return this.withDistillation(micro, part, out, token ? loss : (tf.mul(loss, part.share) as tf.Scalar), record);
  }
}
