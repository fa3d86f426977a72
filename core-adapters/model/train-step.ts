// Supervised next-token training: the step behind `flowrl bench` and supervised fine-tuning.
import * as tf from '@tensorflow/tfjs';
import type { CausalLM } from './causal-lm.js';
import { responseMask, scoreResponses, type SequenceBatch } from './logprobs.js';
import { clipGradNorm, lossAndGradients, type AdamW } from './optim.js';

/** Mean negative log-likelihood over the real (unpadded) response tokens. */
export function maskedNll(model: CausalLM, seq: SequenceBatch): tf.Scalar {
  const { logProbs } = scoreResponses(model, seq);
  const mask = tf.tensor2d(responseMask(seq), [seq.batch, seq.responseLength]);
  return tf.div(tf.neg(tf.sum(tf.mul(logProbs, mask))), tf.maximum(tf.sum(mask), 1));
}

/**
 * Mean negative log-likelihood of the response tokens, one clipped AdamW step; returns the loss.
 * A non-finite gradient norm skips the update.
 */
export function languageModelStep(model: CausalLM, optimizer: AdamW, seq: SequenceBatch, maxGradNorm = 1): number {
  const { loss, grads } = lossAndGradients(() => maskedNll(model, seq), model.params);
  const norm = clipGradNorm(grads, maxGradNorm);
  if (Number.isFinite(norm)) optimizer.apply(model.params, grads);
  tf.dispose([...grads.values()]);
  const value = loss.dataSync()[0];
  loss.dispose();
  return value;
}

