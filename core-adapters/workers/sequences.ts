// Conversions between the loop's Batch and the model's inputs and outputs.
import { Batch } from '../batch.js';
import type { PromptRecord } from '../contracts/index.js';
import type { SequenceBatch } from '../model/logprobs.js';

/** The model's view of a batch holding input_ids and attention_mask ([B, P + R]) and responses ([B, R]). */
export function sequenceBatch(batch: Batch): SequenceBatch {
  const ids = batch.tensor('input_ids');
  const R = batch.tensor('responses').shape[1];
  return {
    batch: batch.size,
    promptLength: ids.shape[1] - R,
    responseLength: R,
    inputIds: ids.data as Int32Array,
    attentionMask: batch.tensor('attention_mask').data as Int32Array,
  };
}

/** A batch of prompts for sampling: ids and what scoring needs, one uid per prompt. */
export function promptBatch(prompts: PromptRecord[], uidPrefix: string): Batch {
  return new Batch({
    columns: {
      prompt_ids: prompts.map((p) => p.ids),
      uid: prompts.map((p) => `${uidPrefix}-${p.index}`),
      data_source: prompts.map((p) => p.dataSource),
      ground_truth: prompts.map((p) => p.groundTruth),
      extra_info: prompts.map((p) => p.extraInfo),
      index: prompts.map((p) => p.index),
    },
  });
}

/**
 * Packs prompts with their sampled responses: prompts left-padded to the longest, responses
 * right-padded to `responseLength`, masks alongside.
 */
export function sequencesFromSamples(prompts: number[][], responses: number[][], responseLength: number, padId: number) {
  const B = prompts.length;
  const P = Math.max(...prompts.map((p) => p.length));
  const R = responseLength;
  const L = P + R;
  const inputIds = new Int32Array(B * L).fill(padId);
  const attentionMask = new Int32Array(B * L);
  const responseIds = new Int32Array(B * R).fill(padId);
  const responseMask = new Float32Array(B * R);
  const promptIds = new Int32Array(B * P).fill(padId);
  for (let b = 0; b < B; b++) {
    const p = prompts[b];
    const r = responses[b].slice(0, R);
    promptIds.set(p, b * P + P - p.length);
    inputIds.set(p, b * L + P - p.length);
    attentionMask.fill(1, b * L + P - p.length, b * L + P);
    inputIds.set(r, b * L + P);
    attentionMask.fill(1, b * L + P, b * L + P + r.length);
    responseIds.set(r, b * R);
    responseMask.fill(1, b * R, b * R + r.length);
  }
  return {
    prompts: { shape: [B, P], data: promptIds },
    responses: { shape: [B, R], data: responseIds },
    input_ids: { shape: [B, L], data: inputIds },
    attention_mask: { shape: [B, L], data: attentionMask },
    response_mask: { shape: [B, R], data: responseMask },
  };
}
