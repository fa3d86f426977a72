// Per-token log-probabilities of responses given prompts, verl-style: the sequence is a left-padded
// prompt followed by a right-padded response, and logits are divided by the sampling temperature.
import * as tf from '@tensorflow/tfjs-core';
import { headLogProbs } from '../engine/ops.js';
import { readFloat32 } from '../engine/readback.js';
import { positionsFromMask, type CausalLM } from './causal-lm.js';
import { topAlternatives } from './generate.js';

/** A batch of prompt+response sequences, row-major. */
export interface SequenceBatch {
  batch: number;
  promptLength: number;
  responseLength: number;
  /** [batch, promptLength + responseLength]: left-padded prompt, then right-padded response. */
  inputIds: Int32Array;
  /** 1 for real tokens, same shape as inputIds. */
  attentionMask: Int32Array;
  /** [batch * responseLength]: the response tokens a loss reads (multi-turn SFT: the assistant's); absent: every real one. */
  lossMask?: Float32Array;
}

export interface ResponseScores {
  /** [batch, responseLength]; entries under padding are meaningless (mask them). */
  logProbs: tf.Tensor2D;
  entropy?: tf.Tensor2D;
  /** [batch, responseLength] sum over the vocabulary of pi^2, when asked for (optimal_token_baseline). */
  sumPiSquared?: tf.Tensor2D;
  /** Final-norm hidden states of the whole sequence, [batch * (P + R), H]. */
  hidden: tf.Tensor2D;
  /** Requested decoder-layer outputs, [batch * (P + R), H] each. */
  layerOutputs: tf.Tensor2D[];
}

export interface ScoreOptions {
  temperature?: number;
  withEntropy?: boolean;
  /** Also sum_v pi_v^2 per position (only outside a gradient scope). */
  withSumPiSquared?: boolean;
  outputLayers?: number[];
}

/** 1 where a response position holds a real token, [batch * R]. */
export function responseMask(seq: SequenceBatch): Float32Array {
  const { batch, promptLength: P, responseLength: R } = seq;
  const out = new Float32Array(batch * R);
  for (let b = 0; b < batch; b++) for (let t = 0; t < R; t++) out[b * R + t] = seq.attentionMask[b * (P + R) + P + t];
  return out;
}

/** Response token ids, [batch * R], with padding replaced by 0 so they index the vocabulary. */
function responseTargets(seq: SequenceBatch): Int32Array {
  const { batch, promptLength: P, responseLength: R } = seq;
  const L = P + R;
  const out = new Int32Array(batch * R);
  for (let b = 0; b < batch; b++) {
    for (let t = 0; t < R; t++) {
      const i = b * L + P + t;
      out[b * R + t] = seq.attentionMask[i] ? seq.inputIds[i] : 0;
    }
  }
  return out;
}

/**
 * One forward pass over prompt+response; log-probs (and optionally entropies) of the response
 * tokens, plus the hidden states that plugin heads read. Call inside tf.tidy or a gradient scope.
 */
export function scoreResponses(model: CausalLM, seq: SequenceBatch, options: ScoreOptions = {}): ResponseScores {
  const { batch, responseLength: R } = seq;
  const H = model.config.hiddenSize;
  const out = model.forward({
    ids: seq.inputIds,
    batch,
    attentionMask: seq.attentionMask,
    positions: positionsFromMask(seq.attentionMask, batch),
    outputLayers: options.outputLayers,
  });
  const predicting = responseStates(out.hidden, seq, H);
  const scored = headLogProbs(predicting, model.headWeight(), responseTargets(seq), options.temperature ?? 1, options.withEntropy, options.withSumPiSquared);
  return {
    logProbs: scored.logProbs.reshape([batch, R]),
    entropy: scored.entropy?.reshape([batch, R]),
    sumPiSquared: scored.sumPiSquared?.reshape([batch, R]),
    hidden: out.hidden,
    layerOutputs: out.layerOutputs,
  };
}

/** The hidden states [B * R, H] that predict the response tokens: position P-1+t predicts token t. */
export function responseStates(hidden: tf.Tensor, seq: SequenceBatch, H: number): tf.Tensor2D {
  const { batch, promptLength: P, responseLength: R } = seq;
  return hidden
    .reshape([batch, P + R, H])
    .slice([0, P - 1, 0], [batch, R, H])
    .reshape([batch * R, H]) as tf.Tensor2D;
}

/**
 * Log-probs [B, R, k] at T of k given ids per response position (a teacher's top-k), from the
 * states scoreResponses returned: each state repeated k times through the fused, chunked head, so
 * the [B * R, V] log-softmax is never held and the gradient flows as for the sampled tokens (the
 * head's work grows k-fold).
 */
export function gatheredLogProbs(model: CausalLM, hidden: tf.Tensor, seq: SequenceBatch, ids: Int32Array, k: number, temperature = 1): tf.Tensor3D {
  const H = model.config.hiddenSize;
  const { batch, responseLength: R } = seq;
  if (ids.length !== batch * R * k) throw new Error(`gatheredLogProbs: ${ids.length} ids for [${batch}, ${R}, ${k}]`);
  const states = responseStates(hidden, seq, H);
  const repeated = tf.reshape(tf.tile(tf.expandDims(states, 1), [1, k, 1]), [batch * R * k, H]) as tf.Tensor2D;
  return headLogProbs(repeated, model.headWeight(), ids, temperature).logProbs.reshape([batch, R, k]);
}

/** Builds a SequenceBatch from unpadded prompts and responses (with `lossMasks`, each response token's loss weight, 0 or 1). */
export function packSequences(prompts: number[][], responses: number[][], padId = 0, lossMasks?: number[][]): SequenceBatch {
  const batch = prompts.length;
  const P = Math.max(1, ...prompts.map((p) => p.length));
  const R = Math.max(1, ...responses.map((r) => r.length));
  const L = P + R;
  const inputIds = new Int32Array(batch * L).fill(padId);
  const attentionMask = new Int32Array(batch * L);
  for (let b = 0; b < batch; b++) {
    const p = prompts[b];
    const r = responses[b];
    for (let t = 0; t < p.length; t++) {
      inputIds[b * L + P - p.length + t] = p[t];
      attentionMask[b * L + P - p.length + t] = 1;
    }
    for (let t = 0; t < r.length; t++) {
      inputIds[b * L + P + t] = r[t];
      attentionMask[b * L + P + t] = 1;
    }
  }
  if (!lossMasks) return { batch, promptLength: P, responseLength: R, inputIds, attentionMask };
  const lossMask = new Float32Array(batch * R);
  lossMasks.forEach((mask, b) => mask.slice(0, responses[b].length).forEach((m, t) => (lossMask[b * R + t] = m)));
  return { batch, promptLength: P, responseLength: R, inputIds, attentionMask, lossMask };
}

/** Log-probs of each response token as plain arrays (unpadded), for CLIs and tests. */
export async function responseLogProbs(model: CausalLM, prompts: number[][], responses: number[][], temperature = 1): Promise<number[][]> {
  const seq = packSequences(prompts, responses);
  const logProbs = tf.tidy(() => scoreResponses(model, seq, { temperature }).logProbs);
  try {
    const values = await readFloat32(logProbs, 'response log-probs');
    const R = seq.responseLength;
    return responses.map((r, b) => Array.from(values.subarray(b * R, b * R + r.length)));
  } finally {
    logProbs.dispose();
  }
}

/** A prompt position's most likely next tokens at T = 1, and the rank of the token the prompt has there. */
export interface PromptPositionTop {
  /** The prompt's own token's log-prob there. */
  logProb: number;
  ids: number[];
  logProbs: number[];
  /** 1 + how many tokens are more likely than the prompt's own (vLLM's rank). */
  rank: number;
}

/** Positions whose logits are read at once: a 151,936-token vocabulary is 0.6 MB a position. */
const PROMPT_TOP_CHUNK = 64;

/**
 * The `k` most likely tokens at each prompt position 1.. given the ids before it, at T = 1, with
 * the rank of the prompt's own token there (vLLM's prompt_logprobs k): one forward pass, then the
 * logits read a chunk of positions at a time. Ties rank by id, as topAlternatives orders them.
 */
export async function promptTopLogProbs(model: CausalLM, ids: readonly number[], k: number): Promise<PromptPositionTop[]> {
  const L = ids.length;
  if (L < 2) return [];
  const mask = new Int32Array(L).fill(1);
  const hidden = tf.tidy(() => model.forward({ ids: Int32Array.from(ids), batch: 1, attentionMask: mask, positions: positionsFromMask(mask, 1) }).hidden as tf.Tensor2D);
  const out: PromptPositionTop[] = [];
  try {
    for (let start = 0; start < L - 1; start += PROMPT_TOP_CHUNK) {
      const rows = Math.min(PROMPT_TOP_CHUNK, L - 1 - start);
      const logits = tf.tidy(() => model.logits(hidden.slice([start, 0], [rows, hidden.shape[1]])));
      let values: Float32Array;
      try {
        values = await readFloat32(logits, 'prompt top log-probs');
      } finally {
        logits.dispose();
      }
      const V = values.length / rows;
      for (let r = 0; r < rows; r++) {
        const row = values.subarray(r * V, (r + 1) * V);
        const own = ids[start + r + 1];
        let rank = 1;
        for (let i = 0; i < V; i++) if (row[i] > row[own] || (row[i] === row[own] && i < own)) rank++;
        const top = topAlternatives(row, Math.max(1, k), 1);
        // The own token's log-softmax from the most likely one's: the same normaliser.
        out.push({ logProb: top.atOne[0] - row[top.ids[0]] + row[own], ids: top.ids.slice(0, k), logProbs: top.atOne.slice(0, k), rank });
      }
    }
  } finally {
    hidden.dispose();
  }
  return out;
}
