// Batched autoregressive sampling with a KV cache over left-padded prompts.
import * as tf from '@tensorflow/tfjs';
import { canWriteInPlace } from '../engine/kernels.js';
import type { ThreadPool } from '../engine/thread-pool.js';
import { Rng } from '../random.js';
import { positionsFromMask, type CausalLM, type KVCache } from './causal-lm.js';

/** How generate samples: length, temperature, top-p, top-k, greedy, stops, seed. */
export interface SamplingOptions {
  maxNewTokens: number;
  /** Softmax temperature; ignored when greedy. */
  temperature?: number;
  /** Nucleus sampling: keep the smallest set of tokens whose probability reaches topP (1 = off). */
  topP?: number;
  /** Keep only the k most likely tokens (0 or -1 = off). */
  topK?: number;
  greedy?: boolean;
  /** Generation stops for a row once it samples one of these (the stop token is kept). */
  stopTokenIds?: number[];
  /** Token used to left-pad prompts (its value never matters: it is masked). */
  padTokenId?: number;
  seed?: number;
  /** Index of the first prompt in the whole batch: row b samples from stream (seed, firstRow + b). */
  firstRow?: number;
  /** Recompute the whole sequence every step instead of using the KV cache (for checks only). */
  noCache?: boolean;
  /** Per-row seeds (a server's per-sample seeds): row b draws from new Rng(rowSeeds[b]), not from (seed, firstRow + b). */
  rowSeeds?: number[];
  /** Per-row limits on new tokens, each at most maxNewTokens (a server batches requests of different lengths). */
  rowMaxNewTokens?: number[];
  /** Also return each sampled token's log-probability under the sampling distribution (log-softmax of logits / T). */
  withLogProbs?: boolean;
}

export interface Generation {
  /** New tokens per row, ending with the stop token when one was sampled. */
  tokens: number[][];
  /** Whether each row ended on a stop token. */
  stopped: boolean[];
  /** With withLogProbs: per token, log-softmax(logits / T) of the sampled id (T = 1 when greedy), before top-k/top-p as SGLang reports it. */
  logProbs?: number[][];
}

/** log-softmax(logits / T)[token] over the whole vocabulary, in float64. */
export function tokenLogProb(logits: Float32Array, token: number, temperature: number): number {
  const invT = 1 / (temperature > 0 ? temperature : 1);
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
  let total = 0;
  for (let i = 0; i < logits.length; i++) total += Math.exp((logits[i] - max) * invT);
  return (logits[token] - max) * invT - Math.log(total);
}

/**
 * The seed of the stream local sampling draws row `row` from (rows sampled in pieces of `chunk`
 * under seed + the piece's first row): flowrl serve given it for a sample draws the same tokens.
 */
export function sampleSeed(seed: number, row: number, chunk: number): number {
  const start = row - (row % chunk);
  return Rng.deriveSeed(seed + start, row - start);
}

/** Tokens whose probability is at least this share of the total are the first candidates for top-p. */
const NUCLEUS_CANDIDATE_SHARE = 1e-6;

/** Draws from unnormalised probabilities `probs` over `order` (in that order); returns the chosen position. */
function draw(probs: Float64Array, order: ArrayLike<number>, total: number, rng: Rng): number {
  let u = rng.next() * total;
  for (let j = 0; j < order.length; j++) {
    u -= probs[order[j]];
    if (u <= 0) return order[j];
  }
  return order[order.length - 1];
}

/**
 * Picks a token from one row of logits: greedy, or temperature, then top-k, then top-p. Written
 * for large vocabularies (150k): plain sampling allocates nothing beyond one probability array, and
 * top-p first sorts only the tokens above a tiny share of the mass, which holds the nucleus unless
 * the distribution is nearly flat (then it sorts everything).
 */
export function sampleToken(logits: Float32Array, options: SamplingOptions, rng: Rng): number {
  const V = logits.length;
  if (options.greedy || options.temperature === 0) {
    let best = 0;
    for (let i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    return best;
  }
  const invT = 1 / (options.temperature ?? 1);
  const topK = options.topK ?? 0;
  let ids: Int32Array | undefined;
  if (topK > 0 && topK < V) {
    ids = Int32Array.from(Array.from({ length: V }, (_, i) => i).sort((a, b) => logits[b] - logits[a]).slice(0, topK));
  }
  const count = ids ? ids.length : V;
  const id = (j: number) => (ids ? ids[j] : j);
  let max = -Infinity;
  for (let j = 0; j < count; j++) max = Math.max(max, logits[id(j)] * invT);
  const probs = new Float64Array(count);
  let total = 0;
  for (let j = 0; j < count; j++) total += probs[j] = Math.exp(logits[id(j)] * invT - max);
  const topP = options.topP ?? 1;
  if (topP >= 1) {
    let u = rng.next() * total;
    for (let j = 0; j < count; j++) {
      u -= probs[j];
      if (u <= 0) return id(j);
    }
    return id(count - 1);
  }
  // The nucleus is a prefix of the tokens sorted by probability (ties by position). Every token
  // above the candidate bound outranks every token below it, so when the candidates' mass reaches
  // topP the nucleus lies among them.
  const bound = total * NUCLEUS_CANDIDATE_SHARE;
  let order: number[] = [];
  for (let j = 0; j < count; j++) if (probs[j] >= bound) order.push(j);
  const byProbability = (a: number, b: number) => probs[b] - probs[a] || a - b;
  order.sort(byProbability);
  let mass = 0;
  let keep = 0;
  while (keep < order.length && mass < topP * total) mass += probs[order[keep++]];
  if (mass < topP * total) {
    order = Array.from({ length: count }, (_, j) => j).sort(byProbability);
    mass = 0;
    keep = 0;
    while (keep < order.length && mass < topP * total) mass += probs[order[keep++]];
  }
  return id(draw(probs, order.slice(0, Math.max(1, keep)), mass, rng));
}

/** Logits of the last position of each row, [B, V]. */
function lastLogits(model: CausalLM, hidden: tf.Tensor2D, batch: number): tf.Tensor2D {
  const H = model.config.hiddenSize;
  const length = hidden.shape[0] / batch;
  const last = hidden.reshape([batch, length, H]).slice([0, length - 1, 0], [batch, 1, H]).reshape([batch, H]) as tf.Tensor2D;
  return model.logits(last);
}

/** Samples up to maxNewTokens per prompt. Prompts are token ids without padding. */
export function generate(model: CausalLM, prompts: number[][], options: SamplingOptions): Generation {
  const batch = prompts.length;
  // One stream per row: a row's samples do not depend on when other rows stop.
  const rngs = prompts.map((_, b) => (options.rowSeeds ? new Rng(options.rowSeeds[b]) : Rng.derive(options.seed ?? 0, (options.firstRow ?? 0) + b)));
  const limits = prompts.map((_, b) => Math.min(options.rowMaxNewTokens?.[b] ?? options.maxNewTokens, options.maxNewTokens));
  const logProbs: number[][] | undefined = options.withLogProbs ? prompts.map(() => []) : undefined;
  const temperature = options.greedy ? 1 : (options.temperature ?? 1);
  const stop = new Set(options.stopTokenIds ?? []);
  const pad = options.padTokenId ?? 0;
  const P = Math.max(...prompts.map((p) => p.length));
  if (prompts.some((p) => p.length === 0)) throw new Error('generate: every prompt needs at least one token');

  // Left-padded ids and mask for everything seen so far; grown one column per step.
  let width = P;
  let ids = new Int32Array(batch * P).fill(pad);
  let mask = new Int32Array(batch * P);
  prompts.forEach((p, b) => {
    ids.set(p, b * P + P - p.length);
    mask.fill(1, b * P + P - p.length, (b + 1) * P);
  });
  const seen = prompts.map((p) => p.length);
  const tokens: number[][] = prompts.map(() => []);
  const stopped = prompts.map(() => false);
  // Rows done: stopped on a stop token, or at their own length limit.
  const done = limits.map((limit) => limit <= 0);

  // tidy keeps only what it returns, so the new cache travels out with the logits.
  let { logits, cache } = tf.tidy(() => {
    // A cache preallocated for the whole sample grows in place instead of being copied per token.
    const cacheCapacity = canWriteInPlace() ? P + options.maxNewTokens : undefined;
    const out = model.forward({ ids, batch, attentionMask: mask, positions: positionsFromMask(mask, batch), useCache: !options.noCache, cacheCapacity });
    return { logits: lastLogits(model, out.hidden, batch), cache: out.cache };
  }) as { logits: tf.Tensor2D; cache?: KVCache };

  try {
    for (let step = 0; step < options.maxNewTokens; step++) {
      const values = logits.dataSync() as Float32Array;
      const V = logits.shape[1];
      const next = new Int32Array(batch);
      for (let b = 0; b < batch; b++) {
        if (done[b]) {
          next[b] = pad;
          continue;
        }
        const row = values.subarray(b * V, (b + 1) * V);
        next[b] = sampleToken(row, options, rngs[b]);
        tokens[b].push(next[b]);
        logProbs?.[b].push(tokenLogProb(row, next[b], temperature));
        if (stop.has(next[b])) stopped[b] = done[b] = true;
        if (tokens[b].length >= limits[b]) done[b] = true;
      }
      if (done.every(Boolean) || step === options.maxNewTokens - 1) break;

      const grownIds = new Int32Array(batch * (width + 1));
      const grownMask = new Int32Array(batch * (width + 1));
      const positions = new Int32Array(batch);
      for (let b = 0; b < batch; b++) {
        grownIds.set(ids.subarray(b * width, (b + 1) * width), b * (width + 1));
        grownMask.set(mask.subarray(b * width, (b + 1) * width), b * (width + 1));
        grownIds[b * (width + 1) + width] = next[b];
        grownMask[b * (width + 1) + width] = 1;
        positions[b] = seen[b]++;
      }
      ids = grownIds;
      mask = grownMask;
      width += 1;

      const previous = cache;
      const previousLogits = logits;
      ({ logits, cache } = tf.tidy(() => {
        const out = options.noCache
          ? model.forward({ ids, batch, attentionMask: mask, positions: positionsFromMask(mask, batch) })
          : model.forward({ ids: next, batch, attentionMask: mask, positions, cache: previous, useCache: true });
        return { logits: lastLogits(model, out.hidden, batch), cache: out.cache };
      }) as { logits: tf.Tensor2D; cache?: KVCache });
      previousLogits.dispose();
      if (previous && previous.keys[0] !== cache?.keys[0]) tf.dispose([...previous.keys, ...previous.values]);
    }
  } finally {
    logits.dispose();
    if (cache) tf.dispose([...cache.keys, ...cache.values]);
  }
  return logProbs ? { tokens, stopped, logProbs } : { tokens, stopped };
}

/**
 * Rows per thread below which sampling stays on one thread. Decoding is dispatch-bound (a fixed
 * cost per op per token), so a small batch gains nothing from a split, and two busy threads slow
 * each other here: 128 rows took 85 ms on one thread and 87 ms on two; 256 rows 230 and 148 ms.
 */
export const MIN_SAMPLING_ROWS_PER_THREAD = 128;

/**
 * generate() with the prompts split across a worker pool's replicas (contiguous shards; each row
 * keeps its own random stream, so the samples match a single-thread run up to float rounding).
 * The replicas must hold the model's current weights (ThreadPool.publish).
 */
export function generateOnPool(model: CausalLM, prompts: number[][], options: SamplingOptions, pool?: ThreadPool, minRowsPerThread = MIN_SAMPLING_ROWS_PER_THREAD): Generation {
  const threads = pool ? Math.min(pool.size, Math.floor(prompts.length / Math.max(1, minRowsPerThread))) : 1;
  if (!pool || threads < 2) return generate(model, prompts, options);
  const first = options.firstRow ?? 0;
  const shard = (a: number, b: number): SamplingOptions => ({ ...options, firstRow: first + a, rowSeeds: options.rowSeeds?.slice(a, b), rowMaxNewTokens: options.rowMaxNewTokens?.slice(a, b) });
  const parts = pool.runOnRowShards(
    prompts.length,
    (a, b) => ({ kind: 'generate', prompts: prompts.slice(a, b), options: shard(a, b) }),
    (a, b) => generate(model, prompts.slice(a, b), shard(a, b)),
    threads,
  );
  const merged: Generation = { tokens: parts.flatMap((p) => p.tokens), stopped: parts.flatMap((p) => p.stopped) };
  if (options.withLogProbs) merged.logProbs = parts.flatMap((p) => p.logProbs!);
  return merged;
}
