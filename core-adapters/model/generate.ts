// Batched autoregressive sampling with a KV cache over left-padded prompts.
import * as tf from '@tensorflow/tfjs-core';
import { canWriteInPlace, sampleRowsNatively, type RowSamples } from '../engine/kernels.js';
import { splitFrozenProducts } from '../engine/native.js';
import { readFloat32 } from '../engine/readback.js';
import { drawRowsOnGpu, gpuSamplingAvailable } from '../engine/webgpu-kernels.js';
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
  /** Attention-score floats one prefill chunk may hold (default PREFILL_SCORE_FLOATS); smaller runs the prompts in more chunks. */
  prefillScoreFloats?: number;
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
  /** Also return, per token, the log of the softmax share top-k and top-p kept (vLLM's processed logprobs subtract it). */
  withKeptMass?: boolean;
  /** Also return, per token, the this many most likely tokens with their log-probabilities (OpenAI's top logprobs). */
  topLogProbs?: number;
  /** Per row, a test of the ids sampled so far that ends the row when true (a server's stop strings); the row counts as stopped. */
  rowStopWhen?: (((ids: readonly number[]) => boolean) | undefined)[];
  /** Per row, ids it takes in order instead of drawing (a test's scripted answer), each scored as drawn; past their end it draws. */
  rowForced?: (readonly number[] | undefined)[];
  /**
   * Per row, a change to its next-token logits before anything reads them (a server's logit_bias
   * and min_tokens), given a copy and how many tokens the row has; the log-probs are those of the changed logits.
   */
  rowLogits?: (((logits: Float32Array, produced: number) => void) | undefined)[];
}

export interface Generation {
  /** New tokens per row, ending with the stop token when one was sampled. */
  tokens: number[][];
  /** Whether each row ended on a stop token. */
  stopped: boolean[];
  /** With withLogProbs: per token, log-softmax(logits / T) of the sampled id (T = 1 when greedy), before top-k/top-p as SGLang reports it. */
  logProbs?: number[][];
  /** With withKeptMass: per token, log of the share of the softmax the filters kept (0 without top-k/top-p). */
  keptLogMass?: number[][];
  /** With topLogProbs: per row and token, the most likely tokens at that step. */
  alternatives?: Alternatives[][];
}

/** The most likely tokens at one step, most likely first (ties by id), with their log-softmax at the sampling temperature and at 1, before any filter. */
export interface Alternatives {
  ids: number[];
  atTemperature: number[];
  atOne: number[];
}

/** The `k` most likely tokens of one row of (finite) logits; see Alternatives. */
export function topAlternatives(logits: Float32Array, k: number, temperature: number): Alternatives {
  const ids: number[] = [];
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i];
    if (v > max) max = v;
    if (ids.length === k && !(v > logits[ids[k - 1]])) continue;
    // Insertion into the short sorted list; an equal logit stays behind the lower id.
    let j = Math.min(ids.length, k - 1);
    while (j > 0 && v > logits[ids[j - 1]]) j -= 1;
    ids.splice(j, 0, i);
    if (ids.length > k) ids.length = k;
  }
  let sumT = 0;
  let sumOne = 0;
  for (let i = 0; i < logits.length; i++) {
    sumT += Math.exp((logits[i] - max) / temperature);
    sumOne += Math.exp(logits[i] - max);
  }
  return {
    ids,
    atTemperature: ids.map((id) => (logits[id] - max) / temperature - Math.log(sumT)),
    atOne: ids.map((id) => logits[id] - max - Math.log(sumOne)),
  };
}

/**
 * Temperatures below this sample greedily (SGLang v0.5.x's _SAMPLING_EPS does the same): dividing
 * by a denormal temperature overflows the logits to infinities, whose softmax is NaN.
 */
export const GREEDY_TEMPERATURE = 1e-6;

/** Whether `options` sample greedily: asked for, or a temperature too small to divide by. */
export function samplesGreedily(options: { greedy?: boolean; temperature?: number }): boolean {
  const t = options.temperature ?? 1;
  if (!(t >= 0) || t === Infinity) throw new RangeError(`sampling temperature must be a finite number >= 0; got ${t}`);
  return options.greedy === true || t < GREEDY_TEMPERATURE;
}

/** The largest float32 below 1: a draw rounded to float32 stays a draw in [0, 1). */
const LARGEST_FLOAT32_BELOW_ONE = 1 - 2 ** -24;

/**
 * Logits a softmax cannot be taken of (NaN or infinite: weights that diverged or overflowed). The
 * engine is broken then, not the request: a server reports it through /health.
 */
export class NonFiniteLogits extends Error {
  constructor() {
    super('the model produced NaN or infinite logits (its weights are not finite, or overflowed)');
  }
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

/** Filled by sampleToken: log of the share of the temperature softmax that top-k and top-p kept (0 without filtering). */
export interface KeptMass {
  logMass: number;
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
export function sampleToken(logits: Float32Array, options: SamplingOptions, rng: Rng, kept?: KeptMass): number {
  const V = logits.length;
  if (kept) kept.logMass = 0;
  if (samplesGreedily(options)) {
    let best = 0;
    let finite = Number.isFinite(logits[0]);
    for (let i = 1; i < V; i++) {
      if (logits[i] > logits[best]) best = i;
      finite &&= Number.isFinite(logits[i]);
    }
    if (!finite) throw new NonFiniteLogits();
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
  // NaN or infinite logits make max or total non-finite; nothing sensible can be drawn then.
  if (!Number.isFinite(max) || !Number.isFinite(total)) throw new NonFiniteLogits();
  const topP = options.topP ?? 1;
  // The kept set's share of the whole softmax at T (log), for engines that renormalise over it.
  const keep = (mass: number) => {
    if (!kept) return;
    let all = total;
    if (ids) {
      all = 0;
      for (let i = 0; i < V; i++) all += Math.exp(logits[i] * invT - max);
    }
    kept.logMass = Math.log(mass / all);
  };
  if (topP >= 1) {
    keep(total);
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
  let size = 0;
  while (size < order.length && mass < topP * total) mass += probs[order[size++]];
  if (mass < topP * total) {
    order = Array.from({ length: count }, (_, j) => j).sort(byProbability);
    mass = 0;
    size = 0;
    while (size < order.length && mass < topP * total) mass += probs[order[size++]];
  }
  const nucleus = order.slice(0, Math.max(1, size));
  keep(nucleus.reduce((sum, j) => sum + probs[j], 0));
  return id(draw(probs, nucleus, mass, rng));
}

/** Logits of the last position of each row, [B, V]. */
/** Attention-score floats one prefill chunk may hold ([rows, heads, chunk, prompt]; 256 MiB). */
export const PREFILL_SCORE_FLOATS = 2 ** 26;
/** Prompt tokens one prefill chunk takes at most (vLLM's chunked prefill takes a few thousand a step too). */
const PREFILL_CHUNK_TOKENS = 4096;

/** Columns [start, end) of a row-major [rows, width] array. */
function columns(data: Int32Array, rows: number, width: number, start: number, end: number): Int32Array {
  if (start === 0 && end === width) return data;
  const out = new Int32Array(rows * (end - start));
  for (let b = 0; b < rows; b++) out.set(data.subarray(b * width + start, b * width + end), b * (end - start));
  return out;
}

function lastLogits(model: CausalLM, hidden: tf.Tensor2D, batch: number): tf.Tensor2D {
  const H = model.config.hiddenSize;
  const length = hidden.shape[0] / batch;
  const last = hidden.reshape([batch, length, H]).slice([0, length - 1, 0], [batch, 1, H]).reshape([batch, H]) as tf.Tensor2D;
  return model.logits(last);
}

/**
 * One batch of sampling, a token at a time: the constructor runs the prefill, each step() samples a
 * token for every live row and runs one decode step. A server steps it between other work; generate()
 * runs it to the end. dispose() frees the KV cache (whether or not it finished).
 */
export class Decoding {
  readonly tokens: number[][];
  readonly stopped: boolean[];
  readonly logProbs?: number[][];
  readonly keptLogMass?: number[][];
  readonly alternatives?: Alternatives[][];
  private readonly batch: number;
  private readonly rngs: Rng[];
  private readonly limits: number[];
  /** Rows done: stopped on a stop token, or at their own length limit. */
  private readonly done: boolean[];
  private readonly temperature: number;
  /** Whether rows take the most likely token (asked for, or a temperature too small to divide by). */
  readonly greedy: boolean;
  private readonly stop: Set<number>;
  private readonly pad: number;
  private readonly seen: number[];
  // Left-padded ids and mask for everything seen so far; grown one column per step.
  private ids: Int32Array;
  private mask: Int32Array;
  private width: number;
  private logits?: tf.Tensor2D;
  private cache?: KVCache;
  private stepsTaken = 0;

  constructor(
    private readonly model: CausalLM,
    prompts: number[][],
    private readonly options: SamplingOptions,
  ) {
    if (prompts.some((p) => p.length === 0)) throw new Error('generate: every prompt needs at least one token');
    const batch = (this.batch = prompts.length);
    // One stream per row: a row's samples do not depend on when other rows stop.
    this.rngs = prompts.map((_, b) => (options.rowSeeds ? new Rng(options.rowSeeds[b]) : Rng.derive(options.seed ?? 0, (options.firstRow ?? 0) + b)));
    this.limits = prompts.map((_, b) => Math.min(options.rowMaxNewTokens?.[b] ?? options.maxNewTokens, options.maxNewTokens));
    this.logProbs = options.withLogProbs ? prompts.map(() => []) : undefined;
    this.keptLogMass = options.withKeptMass ? prompts.map(() => []) : undefined;
    this.alternatives = options.topLogProbs ? prompts.map(() => []) : undefined;
    this.greedy = samplesGreedily(options);
    this.temperature = this.greedy ? 1 : (options.temperature ?? 1);
    this.stop = new Set(options.stopTokenIds ?? []);
    this.pad = options.padTokenId ?? 0;
    const P = Math.max(...prompts.map((p) => p.length));
    this.width = P;
    this.ids = new Int32Array(batch * P).fill(this.pad);
    this.mask = new Int32Array(batch * P);
    prompts.forEach((p, b) => {
      this.ids.set(p, b * P + P - p.length);
      this.mask.fill(1, b * P + P - p.length, (b + 1) * P);
    });
    this.seen = prompts.map((p) => p.length);
    this.tokens = prompts.map(() => []);
    this.stopped = prompts.map(() => false);
    this.done = this.limits.map((limit) => limit <= 0);
    this.prefillPending = options.maxNewTokens > 0 && !this.done.every(Boolean);
  }

  /** The prompts are not yet through the model: the first step() runs them. */
  private prefillPending: boolean;

  /**
   * Runs the prompts through the model (once; the first step() does it when the caller has not), a
   * chunk of columns at a time so the attention scores of a chunk ([rows, heads, C, P]) stay within
   * prefillScoreFloats (64 rows of 6,000-token prompts at once needed more floats than a typed array
   * holds), yielding between chunks.
   */
  async prefill(): Promise<void> {
    if (!this.prefillPending) return;
    this.prefillPending = false;
    const { model, options, batch } = this;
    const P = this.width;
    const mask = this.mask;
    const positions = positionsFromMask(mask, batch);
    const budget = options.prefillScoreFloats ?? PREFILL_SCORE_FLOATS;
    // Also at most PREFILL_CHUNK_TOKENS tokens a chunk: a server answers /health between chunks.
    const chunk = options.noCache ? P : Math.max(1, Math.min(P, Math.floor(budget / (batch * model.config.numHeads * P)), Math.floor(PREFILL_CHUNK_TOKENS / batch)));
    // A cache preallocated for the whole sample grows in place instead of being copied per token.
    const cacheCapacity = canWriteInPlace() ? P + options.maxNewTokens : undefined;
    for (let start = 0; start < P; start += chunk) {
      const end = Math.min(P, start + chunk);
      const previous = this.cache;
      this.cache = undefined;
      let out: { logits?: tf.Tensor2D; cache?: KVCache };
      try {
        // tidy keeps only what it returns, so the new cache travels out with the logits.
        out = tf.tidy(() =>
          splitFrozenProducts(() => {
            const step = model.forward({
              ids: columns(this.ids, batch, P, start, end),
              batch,
              attentionMask: columns(mask, batch, P, 0, end),
              positions: columns(positions, batch, P, start, end),
              cache: previous,
              useCache: !options.noCache,
              cacheCapacity,
            });
            return end === P ? { logits: lastLogits(model, step.hidden, batch), cache: step.cache } : { cache: step.cache };
          }),
        ) as { logits?: tf.Tensor2D; cache?: KVCache };
      } catch (e) {
        if (previous) tf.dispose([...previous.keys, ...previous.values]);
        throw e;
      }
      if (previous && previous.keys[0] !== out.cache?.keys[0]) tf.dispose([...previous.keys, ...previous.values]);
      this.cache = out.cache;
      this.logits = out.logits;
      // A server answers /health between chunks.
      if (end < P) await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** Ends row `b` where it stands (its request was cancelled): it takes no more tokens. True when it was still going. */
  endRow(b: number): boolean {
    const going = !this.done[b];
    this.done[b] = true;
    return going;
  }

  /** Whether every row has ended. */
  get finished(): boolean {
    return !this.logits && !this.prefillPending;
  }

  /** Samples one token per live row and, unless every row has ended, runs the next decode step; false once finished. */
  async step(): Promise<boolean> {
    await this.prefill();
    const logits = this.logits;
    if (!logits) return false;
    const { batch, done, tokens, options } = this;
    const V = logits.shape[1];
    const drawn = options.rowForced?.some(Boolean) || options.rowLogits?.some(Boolean) ? undefined : (this.drawNatively(logits) ?? (await this.drawOnGpu(logits)));
    // Top logprobs read every row's logits even when the addon drew the tokens.
    const values = drawn && !this.alternatives ? undefined : await readFloat32(logits, 'sampling (the next-token logits)');
    // Disposed while the read was pending (an aborted request): nothing more to do.
    if (this.logits !== logits) return false;
    const next = new Int32Array(batch);
    const kept: KeptMass | undefined = this.keptLogMass ? { logMass: 0 } : undefined;
    for (let b = 0; b < batch; b++) {
      if (done[b]) {
        next[b] = this.pad;
        continue;
      }
      let row = values?.subarray(b * V, (b + 1) * V);
      const change = options.rowLogits?.[b];
      if (change && row) change((row = row.slice()), tokens[b].length);
      const forced = options.rowForced?.[b]?.[tokens[b].length];
      next[b] = forced ?? (drawn ? drawn.tokens[b] : sampleToken(row!, options, this.rngs[b], kept));
      if (kept) this.keptLogMass![b].push(forced !== undefined ? 0 : drawn ? drawn.keptLogMass[b] : kept.logMass);
      this.alternatives?.[b].push(topAlternatives(row!, options.topLogProbs!, this.temperature));
      tokens[b].push(next[b]);
      this.logProbs?.[b].push(drawn ? drawn.logProbs[b] : tokenLogProb(row!, next[b], this.temperature));
      if (this.stop.has(next[b]) || options.rowStopWhen?.[b]?.(tokens[b])) this.stopped[b] = done[b] = true;
      if (tokens[b].length >= this.limits[b]) done[b] = true;
    }
    this.stepsTaken += 1;
    if (done.every(Boolean) || this.stepsTaken >= options.maxNewTokens) {
      this.dispose();
      return false;
    }

    const width = this.width;
    const grownIds = new Int32Array(batch * (width + 1));
    const grownMask = new Int32Array(batch * (width + 1));
    const positions = new Int32Array(batch);
    for (let b = 0; b < batch; b++) {
      grownIds.set(this.ids.subarray(b * width, (b + 1) * width), b * (width + 1));
      grownMask.set(this.mask.subarray(b * width, (b + 1) * width), b * (width + 1));
      grownIds[b * (width + 1) + width] = next[b];
      grownMask[b * (width + 1) + width] = 1;
      positions[b] = this.seen[b]++;
    }
    const ids = (this.ids = grownIds);
    const mask = (this.mask = grownMask);
    this.width += 1;

    const previous = this.cache;
    const model = this.model;
    // Cleared first: a failing step leaves nothing for dispose() to free twice.
    this.logits = undefined;
    this.cache = undefined;
    let out: { logits: tf.Tensor2D; cache?: KVCache };
    try {
      out = tf.tidy(() => {
        return splitFrozenProducts(() => {
          const step = options.noCache
            ? model.forward({ ids, batch, attentionMask: mask, positions: positionsFromMask(mask, batch) })
            : model.forward({ ids: next, batch, attentionMask: mask, positions, cache: previous, useCache: true });
          return { logits: lastLogits(model, step.hidden, batch), cache: step.cache };
        });
      }) as { logits: tf.Tensor2D; cache?: KVCache };
    } catch (e) {
      logits.dispose();
      if (previous) tf.dispose([...previous.keys, ...previous.values]);
      throw e;
    }
    logits.dispose();
    // A cache written in place is the same tensors; otherwise the old one is garbage now.
    if (previous && previous.keys[0] !== out.cache?.keys[0]) tf.dispose([...previous.keys, ...previous.values]);
    this.logits = out.logits;
    this.cache = out.cache;
    return true;
  }

  /**
   * The live rows' tokens drawn in the addon (temperature and top-p, each row's one draw from its
   * stream, as sampleToken takes it); undefined for greedy or top-k decoding, or without the addon.
   */
  private drawNatively(logits: tf.Tensor2D): RowSamples | undefined {
    const { options, done } = this;
    const topK = options.topK ?? 0;
    if (this.greedy || (topK > 0 && topK < logits.shape[1])) return undefined;
    try {
      return splitFrozenProducts(() => sampleRowsNatively(logits, this.temperature, options.topP ?? 1, (b) => (done[b] ? NaN : this.rngs[b].next())));
    } catch (e) {
      if ((e as Error).message.includes('non-finite logits')) throw new NonFiniteLogits();
      throw e;
    }
  }

  /**
   * On webgpu, the live rows' tokens drawn by a GPU program (greedy, or temperature without top-p or
   * top-k), so the step reads back two numbers a row instead of the vocabulary's logits; undefined
   * elsewhere, or when top logprobs need every logit anyway.
   */
  private async drawOnGpu(logits: tf.Tensor2D): Promise<RowSamples | undefined> {
    const { options, done } = this;
    const topK = options.topK ?? 0;
    if (!gpuSamplingAvailable() || logits.dtype !== 'float32' || this.alternatives || (options.topP ?? 1) < 1 || (topK > 0 && topK < logits.shape[1])) return undefined;
    // Each live row's one draw from its stream, as sampleToken takes it (none when greedy), kept
    // below 1 in float32.
    const draws = Float32Array.from(done, (ended, b) => (ended ? NaN : this.greedy ? 0 : Math.min(this.rngs[b].next(), LARGEST_FLOAT32_BELOW_ONE)));
    const drawn = drawRowsOnGpu(logits, this.temperature, this.greedy, draws);
    if (!drawn) return undefined;
    let values: Float32Array;
    try {
      values = await readFloat32(drawn, 'sampling (the drawn tokens)');
    } finally {
      drawn.dispose();
    }
    const tokens = Int32Array.from(done, (_, b) => values[2 * b]);
    if (tokens.some((token, b) => token === -2 && !done[b])) throw new NonFiniteLogits();
    return { tokens, logProbs: Float64Array.from(done, (_, b) => values[2 * b + 1]), keptLogMass: new Float64Array(this.batch) };
  }

  /** What was sampled so far (everything, once finished). */
  result(): Generation {
    const { tokens, stopped, logProbs, keptLogMass, alternatives } = this;
    return { tokens, stopped, ...(logProbs ? { logProbs } : {}), ...(keptLogMass ? { keptLogMass } : {}), ...(alternatives ? { alternatives } : {}) };
  }

  /** Frees the logits and the KV cache; the rows sampled so far stay readable. */
  dispose(): void {
    this.logits?.dispose();
    this.logits = undefined;
    if (this.cache) tf.dispose([...this.cache.keys, ...this.cache.values]);
    this.cache = undefined;
  }
}

/** Samples up to maxNewTokens per prompt. Prompts are token ids without padding. */
export async function generate(model: CausalLM, prompts: number[][], options: SamplingOptions): Promise<Generation> {
  const decoding = new Decoding(model, prompts, options);
  try {
    while (await decoding.step());
    return decoding.result();
  } finally {
    decoding.dispose();
  }
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
export async function generateOnPool(model: CausalLM, prompts: number[][], options: SamplingOptions, pool?: ThreadPool, minRowsPerThread = MIN_SAMPLING_ROWS_PER_THREAD): Promise<Generation> {
  const threads = pool ? Math.min(pool.size, Math.floor(prompts.length / Math.max(1, minRowsPerThread))) : 1;
  if (!pool || threads < 2) return generate(model, prompts, options);
  const first = options.firstRow ?? 0;
  const shard = (a: number, b: number): SamplingOptions => ({ ...options, firstRow: first + a, rowSeeds: options.rowSeeds?.slice(a, b), rowMaxNewTokens: options.rowMaxNewTokens?.slice(a, b) });
  const parts = await pool.runOnRowShards(
    prompts.length,
    (a, b) => ({ kind: 'generate', prompts: prompts.slice(a, b), options: shard(a, b) }),
    (a, b) => generate(model, prompts.slice(a, b), shard(a, b)),
    threads,
  );
  const merged: Generation = { tokens: parts.flatMap((p) => p.tokens), stopped: parts.flatMap((p) => p.stopped) };
  if (options.withLogProbs) merged.logProbs = parts.flatMap((p) => p.logProbs!);
  return merged;
}
