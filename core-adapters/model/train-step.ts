// Supervised next-token training: the step behind `flowrl bench` and supervised fine-tuning.
import * as tf from '@tensorflow/tfjs-core';
import type { CausalLM } from './causal-lm.js';
import { responseMask, scoreResponses, type SequenceBatch } from './logprobs.js';
import { accumulateGradients } from '../engine/ops.js';
import { lossAndGradients, type AdamW } from './optim.js';
import { runUpdateLoop } from './update-loop.js';
import type { ThreadPool } from '../engine/thread-pool.js';
import { shardRanges } from '../arrays.js';
import { readScalar } from '../engine/readback.js';

/** Mean negative log-likelihood over the real (unpadded) response tokens. */
export function maskedNll(model: CausalLM, seq: SequenceBatch): tf.Scalar {
  return maskedNllOver(model, seq, Math.max(1, validTokens(seq)));
}

/** The response tokens' summed negative log-likelihood over `denominator` (a shard's part of a batch mean). */
export function maskedNllOver(model: CausalLM, seq: SequenceBatch, denominator: number): tf.Scalar {
  const { logProbs } = scoreResponses(model, seq);
  const mask = tf.tensor2d(seq.lossMask ?? responseMask(seq), [seq.batch, seq.responseLength]);
  return tf.div(tf.neg(tf.sum(tf.mul(logProbs, mask))), denominator);
}

function validTokens(seq: SequenceBatch): number {
  return (seq.lossMask ?? responseMask(seq)).reduce((a, b) => a + b, 0);
}

/** Rows [start, end) of a packed batch (same prompt and response widths). */
export function sliceSequences(seq: SequenceBatch, start: number, end: number): SequenceBatch {
  const L = seq.promptLength + seq.responseLength;
  const R = seq.responseLength;
  return { ...seq, batch: end - start, inputIds: seq.inputIds.slice(start * L, end * L), attentionMask: seq.attentionMask.slice(start * L, end * L), lossMask: seq.lossMask?.slice(start * R, end * R) };
}

/**
 * Adds the gradients of the mean negative log-likelihood of the response tokens into `grads`;
 * returns the loss. With a pool each thread takes a shard of rows; the shard losses share the
 * batch's token count, so the summed gradients are the whole batch's.
 */
export async function languageModelGradients(model: CausalLM, seq: SequenceBatch, grads: Map<string, tf.Tensor>, pool?: ThreadPool): Promise<number> {
  if (!pool) {
    const out = lossAndGradients(() => maskedNll(model, seq), model.trainableParams());
    accumulateGradients(grads, out.grads);
    try {
      return await readScalar(out.loss, 'the language-model loss');
    } finally {
      out.loss.dispose();
    }
  }
  const denominator = Math.max(1, validTokens(seq));
  const [mine, ...theirs] = shardRanges(seq.batch, pool.size).map(([a, b]) => sliceSequences(seq, a, b));
  const { local, results } = await pool.run(
    theirs.map((shard) => ({ kind: 'lm-grads', seq: shard, denominator })),
    () => lossAndGradients(() => maskedNllOver(model, mine, denominator), model.trainableParams()),
    grads,
  );
  accumulateGradients(grads, local.grads);
  try {
    return (await readScalar(local.loss, 'the language-model loss')) + (results as number[]).reduce((a, b) => a + b, 0);
  } finally {
    local.loss.dispose();
  }
}

/**
 * Mean negative log-likelihood of the response tokens, one clipped AdamW step at the optimizer's
 * lr; returns the loss. A non-finite gradient norm skips the update.
 */
export async function languageModelStep(model: CausalLM, optimizer: AdamW, seq: SequenceBatch, maxGradNorm = 1, pool?: ThreadPool): Promise<number> {
  let loss = NaN;
  await runUpdateLoop<SequenceBatch>({
    miniBatches: [seq],
    rows: (s) => s.batch,
    accumulate: async (s, _place, grads) => void (loss = await languageModelGradients(model, s, grads, pool)),
    afterStep: () => pool?.publish(model.trainableParams()),
    optimizer,
    params: model.trainableParams(),
    maxGradNorm,
    lr: () => optimizer.lr,
    prefix: 'lm',
  });
  return loss;
}
