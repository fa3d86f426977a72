// The FlowRL actor: the stock actor's update loop (mini-batches, micro-batches, clipping, AdamW)
// with its micro-batch loss replaced by the trajectory-balance objective. Its forward pass also
// yields log Z from ProjZ on the same pass's prompt hidden states.
import * as tf from '@tensorflow/tfjs';
import { injectable, injectFromBase } from 'inversify';
import {
  PPOActor,
  Rng,
  scoreResponses,
  sequenceBatch,
  sequenceRolloutCorrection,
  stopGradient,
  type Batch,
  type Metrics,
  type MicroBatchShare,
} from '../core-adapters/index.js';
import { flowrlConfig } from './config.js';
import { computeFlowRLLoss } from './objective.js';
import { poolPromptStates, type ProjZ } from './proj-z.js';

export const PROJ_Z = 'proj_z';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLActor extends PPOActor {
  protected get projZ(): ProjZ {
    const head = this.module.heads.get(PROJ_Z);
    if (!head) throw new Error('FlowRLActor: the policy module has no proj_z head (is FlowRLWorker bound?)');
    return head as ProjZ;
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

  /** The FlowRL loss is a plain mean over sequences, so a micro-batch weighs by its share of rows. */
  protected override microBatchLoss(micro: Batch, part: MicroBatchShare, record: (m: Metrics) => void): tf.Scalar {
    const flowrl = flowrlConfig(this.config);
    const seq = sequenceBatch(micro);
    const out = scoreResponses(this.module.lm, seq, { temperature: this.temperature });
    let pooled = poolPromptStates(out.hidden, seq.attentionMask, seq.batch, seq.promptLength);
    if (flowrl.detach_logz_input) pooled = stopGradient(pooled);
    // Dropout masks per row from (seed, optimizer step, row in the mini-batch): a resumed run, or
    // one whose micro-batches are split across worker threads, draws the same ones.
    const rowRngs = Array.from({ length: seq.batch }, (_, b) => Rng.derive(this.config.trainer.seed, part.step * 1_000_003 + part.firstRow + b));
    const logZ = this.projZ.forward(pooled, { training: true, rowRngs });
    const { loss, metrics } = computeFlowRLLoss(
      {
        logProb: out.logProbs,
        oldLogProb: part.onPolicy ? stopGradient(out.logProbs) : this.floatTensor(micro, 'old_log_probs'),
        refLogProb: this.floatTensor(micro, 'ref_log_prob'),
        advantages: flowrl.reward_source === 'score' ? this.sequenceScores(micro) : this.floatTensor(micro, 'advantages'),
        responseMask: this.floatTensor(micro, 'response_mask'),
        logZ,
        // From the batch's old_log_probs even on-policy: the gap is between the trainer's and the engine's scores.
        rolloutWeights: this.sequenceTisWeights(micro),
      },
      { beta: flowrl.beta, importanceWeightMax: flowrl.importance_weight_max, importanceSampling: flowrl.importance_sampling },
    );
    record(metrics);
    return tf.mul(loss, part.share);
  }
}
