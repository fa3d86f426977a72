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
      messages: prompts.map((p) => p.messages ?? []),
      agent_name: prompts.map((p) => p.agentName ?? 'single_turn_agent'),
    },
  });
}

/**
 * Packs prompts with their sampled responses: prompts left-padded to the longest, responses
 * right-padded to `responseLength`, masks alongside. attention_mask covers every response token;
 * response_mask too, unless `lossMasks` gives it per token (multi-turn: 0 on tool turns).
 */
export function sequencesFromSamples(prompts: number[][], responses: number[][], responseLength: number, padId: number, lossMasks?: number[][]) {
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
    if (lossMasks) lossMasks[b].slice(0, r.length).forEach((m, t) => (responseMask[b * R + t] = m));
    else responseMask.fill(1, b * R, b * R + r.length);
  }
  return {
    prompts: { shape: [B, P], data: promptIds },
    responses: { shape: [B, R], data: responseIds },
    input_ids: { shape: [B, L], data: inputIds },
    attention_mask: { shape: [B, L], data: attentionMask },
    response_mask: { shape: [B, R], data: responseMask },
  };
}

/** Tensors whose second dimension starts with the left-padded prompt. */
const PROMPT_LED = ['prompts', 'input_ids', 'attention_mask'];

/**
 * Rollout batches as one: each pads its prompts to the longest batch's width first (each batch is
 * left-padded only to its own longest prompt), so rows line up as sequencesFromSamples packs them.
 * Padded positions are masked, so their id does not matter; `padId` fills them.
 */
export function concatRollouts(batches: Batch[], padId = 0): Batch {
  const width = (b: Batch) => b.tensor('prompts').shape[1];
  const P = Math.max(...batches.map(width));
  const aligned = batches.map((batch) => {
    const grow = P - width(batch);
    if (!grow) return batch;
    const out = batch.selectRows(Array.from({ length: batch.size }, (_, i) => i));
    for (const key of PROMPT_LED) {
      if (!batch.has(key)) continue;
      const t = batch.tensor(key);
      const [B, W] = t.shape;
      const data = t.data instanceof Float32Array ? new Float32Array(B * (W + grow)) : new Int32Array(B * (W + grow));
      data.fill(key === 'attention_mask' ? 0 : padId);
      for (let b = 0; b < B; b++) data.set(t.data.subarray(b * W, (b + 1) * W), b * (W + grow) + grow);
      out.set(key, { shape: [B, W + grow], data });
    }
    return out;
  });
  const merged = Batch.concat(aligned);
  aligned.forEach((b, i) => b !== batches[i] && b.dispose());
  return merged;
}
