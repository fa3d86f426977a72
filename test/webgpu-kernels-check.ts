// Checks the fused WebGPU programs (core-adapters/engine/webgpu-kernels.ts) on the webgpu backend
// against float64 references computed here, and counts what a decode step and an AdamW step
// dispatch and a decode step reads back; prints the findings as JSON for test/webgpu.test.ts. Not a test file itself.
import 'reflect-metadata';
import * as tf from '@tensorflow/tfjs-core';
import { initEngine } from '../core-adapters/engine/backend.js';
import { decodeAttention, runSwiGlu } from '../core-adapters/engine/kernels.js';
import { rmsNorm } from '../core-adapters/engine/ops.js';
import { readFloat32 } from '../core-adapters/engine/readback.js';
import { drawRowsOnGpu, writeTimeSliceOnGpu } from '../core-adapters/engine/webgpu-kernels.js';
import { initWeights, modelFromWeights } from '../core-adapters/model/checkpoint.js';
import { positionsFromMask } from '../core-adapters/model/causal-lm.js';
import { parseModelConfig } from '../core-adapters/model/config.js';
import { Decoding, sampleToken, tokenLogProb } from '../core-adapters/model/generate.js';
import { createAdapters, LORA_MODULES } from '../core-adapters/model/lora.js';
import { AdamW } from '../core-adapters/model/optim.js';
import { Rng } from '../core-adapters/random.js';
import { rmsNormReference } from './helpers.js';

const info = await initEngine('webgpu', { quiet: true });
if (info.backend !== 'webgpu') throw new Error(`expected the webgpu backend, got ${info.backend}`);
const rng = new Rng(3);
const normal = (n: number, scale = 1) => Float32Array.from({ length: n }, () => rng.normal() * scale);
const read = (t: tf.Tensor) => readFloat32(t, 'kernel check');

/** Largest |a - b| over the largest |b| (at least 1). */
function relativeError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return Infinity;
  let worst = 0;
  let scale = 1;
  for (let i = 0; i < a.length; i++) {
    worst = Math.max(worst, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return Number.isNaN(worst) ? Infinity : worst / scale;
}

async function checkRmsNorm(N: number, H: number): Promise<number> {
  const x = normal(N * H, 3);
  const w = normal(H);
  const out = await read(tf.tidy(() => rmsNorm(tf.tensor2d(x, [N, H]), tf.tensor1d(w), 1e-6)));
  return relativeError(out, rmsNormReference(x, w, N, H, 1e-6));
}

async function checkSwiGlu(): Promise<{ forward: number; gate: number; up: number }> {
  const n = 7 * 130;
  // Saturated gates too (sigmoid at 0 and 1).
  const gate = Float32Array.from(normal(n, 4), (v, i) => (i % 97 === 0 ? 40 : i % 89 === 0 ? -40 : v));
  const up = normal(n);
  const dy = normal(n);
  const [g, u, d] = [gate, up, dy].map((v) => tf.tensor2d(v, [7, 130]));
  const y = runSwiGlu(g, u);
  const [dGate, dUp] = runSwiGlu(g, u, d);
  const [yv, gv, uv] = await Promise.all([y, dGate, dUp].map(read));
  tf.dispose([g, u, d, y, dGate, dUp]);
  const s = (v: number) => 1 / (1 + Math.exp(-v));
  return {
    forward: relativeError(yv, Array.from(gate, (v, i) => v * s(v) * up[i])),
    gate: relativeError(gv, Array.from(gate, (v, i) => dy[i] * up[i] * s(v) * (1 + v * (1 - s(v))))),
    up: relativeError(uv, Array.from(gate, (v, i) => dy[i] * v * s(v))),
  };
}

/** x * cos + rotate_half(x) * sin for one head, in float64. */
function rotate(x: ArrayLike<number>, c: ArrayLike<number>, s: ArrayLike<number>, at: number, d: number): number[] {
  const half = d / 2;
  return Array.from({ length: d }, (_, j) => x[at + j] * c[at + j] + (j < half ? -x[at + j + half] : x[at + j - half]) * s[at + j]);
}

/**
 * A decode step's attention against float64: masked slots (left padding, past one 64-key tile
 * in some rows), stale values in the cache past the new slot, grouped heads, and head sizes that
 * fill one, two and a part of a thread's slots. Returns the worst output error and cache error.
 */
async function checkAttention(B: number, H: number, KV: number, d: number, S: number, past: number, pads: number[]): Promise<{ out: number; cache: number }> {
  const C = H + 2 * KV;
  const groups = H / KV;
  const qkv = normal(B * C * d);
  const cos = normal(B * C * d);
  const sin = normal(B * C * d);
  const keys = normal(B * KV * S * d);
  const values = normal(B * KV * S * d);
  const bias = new Float32Array(B * groups * S);
  for (let b = 0; b < B; b++) for (let g = 0; g < groups; g++) for (let t = 0; t < S; t++) if (t < pads[b]) bias[(b * groups + g) * S + t] = -1e9;
  const k = tf.tensor4d(keys, [B, KV, S, d]);
  const v = tf.tensor4d(values, [B, KV, S, d]);
  const out = tf.tidy(() => decodeAttention(tf.tensor2d(qkv, [B, C * d]), tf.tensor2d(cos, [B, C * d]), tf.tensor2d(sin, [B, C * d]), tf.tensor4d(bias, [B, 1, groups, S]), k, v, { heads: H, kvHeads: KV, past }));
  const [got, gotKeys, gotValues] = await Promise.all([out, k, v].map(read));
  tf.dispose([out, k, v]);
  // The reference: the new slot written, then softmax attention over slots 0..past.
  for (let b = 0; b < B; b++) {
    for (let g = 0; g < KV; g++) {
      const slot = ((b * KV + g) * S + past) * d;
      rotate(qkv, cos, sin, (b * C + H + g) * d, d).forEach((x, j) => (keys[slot + j] = x));
      rotate(qkv, cos, sin, (b * C + H + KV + g) * d, d).forEach((x, j) => (values[slot + j] = x));
    }
  }
  const expected = new Float64Array(B * H * d);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / groups);
      const q = rotate(qkv, cos, sin, (b * C + h) * d, d);
      const scores = Array.from({ length: past + 1 }, (_, t) => q.reduce((sum, x, j) => sum + x * keys[((b * KV + g) * S + t) * d + j], 0) + bias[b * groups * S + t]);
      const max = Math.max(...scores);
      const weights = scores.map((x) => Math.exp(x - max));
      const total = weights.reduce((a, w) => a + w, 0);
      for (let j = 0; j < d; j++) expected[(b * H + h) * d + j] = weights.reduce((sum, w, t) => sum + (w / total) * values[((b * KV + g) * S + t) * d + j], 0);
    }
  }
  return { out: relativeError(got, expected), cache: Math.max(relativeError(gotKeys, keys), relativeError(gotValues, values)) };
}

async function checkTimeSlice(): Promise<number> {
  const [B, H, S, T, d, at] = [2, 3, 20, 5, 8, 7];
  const target = normal(B * H * S * d);
  const source = normal(B * H * T * d);
  const t = tf.tensor4d(target, [B, H, S, d]);
  const s = tf.tensor4d(source, [B, H, T, d]);
  const wrote = writeTimeSliceOnGpu(t, s, at);
  const got = await read(t);
  tf.dispose([t, s]);
  for (let row = 0; row < B * H; row++) target.set(source.subarray(row * T * d, (row + 1) * T * d), (row * S + at) * d);
  return wrote ? relativeError(got, target) : Infinity;
}

/** drawRowsOnGpu's tokens and log-probabilities, read. */
async function drawOnGpu(logits: tf.Tensor2D, temperature: number, greedy: boolean, draws: Float32Array): Promise<{ tokens: number[]; logProbs: number[] }> {
  const out = drawRowsOnGpu(logits, temperature, greedy, draws)!;
  const values = await read(out);
  out.dispose();
  return { tokens: Array.from({ length: draws.length }, (_, r) => values[2 * r]), logProbs: Array.from({ length: draws.length }, (_, r) => values[2 * r + 1]) };
}

/**
 * Tokens drawn on the GPU against sampleToken on the host from the same uniforms: temperatures,
 * a vocabulary that is not a multiple of the program's 256 threads and one smaller than them,
 * greedy ties (the first largest wins), -Infinity logits (allowed when sampling), an ended row
 * and a NaN row.
 */
async function checkSampling(): Promise<{ draws: number; mismatches: string[]; logProbError: number; ended: number; nanRow: number; greedyTie: number }> {
  const mismatches: string[] = [];
  let logProbError = 0;
  let draws = 0;
  for (const [V, temperature, rows] of [
    [5000, 1, 48],
    [5000, 0.6, 48],
    [300, 1.3, 24],
    [37, 1, 24],
  ] as const) {
    const logits = normal(rows * V, 3);
    for (let i = 0; i < rows * V; i += 13) if (i % 2) logits[i] = -Infinity;
    const seeds = Array.from({ length: rows }, (_, r) => 1000 * V + r);
    const uniforms = Float32Array.from(seeds, (seed) => Math.min(new Rng(seed).next(), 1 - 2 ** -24));
    const t = tf.tensor2d(logits, [rows, V]);
    const drawn = await drawOnGpu(t, temperature, false, uniforms);
    t.dispose();
    for (let r = 0; r < rows; r++) {
      const row = logits.subarray(r * V, (r + 1) * V);
      const expected = sampleToken(row, { maxNewTokens: 1, temperature }, new Rng(seeds[r]));
      draws++;
      if (drawn.tokens[r] !== expected) mismatches.push(`V ${V} T ${temperature} row ${r}: ${drawn.tokens[r]} against ${expected}`);
      else logProbError = Math.max(logProbError, Math.abs(drawn.logProbs[r] - tokenLogProb(row, expected, temperature)));
    }
  }
  const V = 4999;
  const logits = normal(4 * V);
  logits[10] = logits[4000] = 50;
  logits[2 * V + 7] = NaN;
  const t = tf.tensor2d(logits, [4, V]);
  const greedy = await drawOnGpu(t, 1, true, Float32Array.from([0, NaN, 0, 0]));
  t.dispose();
  return { draws, mismatches, logProbError, ended: greedy.tokens[1], nanRow: greedy.tokens[2], greedyTie: greedy.tokens[0] };
}

/** Counts the GPU programs `run` dispatches, by program name. */
async function countPrograms(run: () => Promise<void>): Promise<Record<string, number>> {
  const programs: Record<string, number> = {};
  const backend = tf.backend() as unknown as { runWebGPUProgram(p: object, ...rest: unknown[]): unknown };
  const original = backend.runWebGPUProgram.bind(backend);
  backend.runWebGPUProgram = (p, ...rest) => {
    programs[p.constructor.name] = (programs[p.constructor.name] ?? 0) + 1;
    return original(p, ...rest);
  };
  try {
    await run();
  } finally {
    backend.runWebGPUProgram = original;
  }
  return programs;
}

/** Three AdamW steps in place on the GPU against torch.optim.AdamW's update in float64, and the programs a step takes. */
async function checkAdamW(): Promise<{ param: number; m: number; v: number; programsPerVariable: number; tensorsLeft: number }> {
  const shapes = [[37, 53], [130]];
  const lr = 0.01;
  const [b1, b2, eps, wd] = [0.9, 0.95, 1e-6, 0.1];
  const optimizer = new AdamW({ lr, betas: [b1, b2], eps, weightDecay: wd });
  const starts = shapes.map((shape) => normal(tf.util.sizeFromShape(shape)));
  const params = new Map(shapes.map((shape, i) => [`p${i}`, tf.variable(tf.tensor(starts[i], shape))]));
  const expected = starts.map((start) => ({ p: Float64Array.from(start), m: new Float64Array(start.length), v: new Float64Array(start.length) }));
  let before = 0;
  let programs = 0;
  for (let t = 1; t <= 3; t++) {
    // Gradients of mixed sizes, zeros among them.
    const grads = shapes.map((shape) => Float32Array.from(normal(tf.util.sizeFromShape(shape), 10 ** (t - 2)), (g, i) => (i % 11 === 0 ? 0 : g)));
    const gradTensors = new Map(shapes.map((shape, i) => [`p${i}`, tf.tensor(grads[i], shape)]));
    const counted = await countPrograms(async () => {
      optimizer.apply(params, gradTensors);
    });
    programs = Object.values(counted).reduce((a, b) => a + b, 0);
    tf.dispose([...gradTensors.values()]);
    // After the first step's moments are made.
    if (t === 1) before = tf.memory().numTensors;
    expected.forEach((e, i) => {
      for (let j = 0; j < e.p.length; j++) {
        const g = grads[i][j];
        e.p[j] *= 1 - lr * wd;
        e.m[j] = b1 * e.m[j] + (1 - b1) * g;
        e.v[j] = b2 * e.v[j] + (1 - b2) * g * g;
        e.p[j] -= (lr / (1 - b1 ** t)) * (e.m[j] / (Math.sqrt(e.v[j]) / Math.sqrt(1 - b2 ** t) + eps));
      }
    });
  }
  const tensorsLeft = tf.memory().numTensors - before;
  const state = await optimizer.getState();
  const errors = { param: 0, m: 0, v: 0 };
  for (const [i, e] of expected.entries()) {
    const moments = state.moments.get(`p${i}`)!;
    errors.param = Math.max(errors.param, relativeError(await read(params.get(`p${i}`)!), e.p));
    errors.m = Math.max(errors.m, relativeError(moments.m, e.m));
    errors.v = Math.max(errors.v, relativeError(moments.v, e.v));
  }
  optimizer.dispose();
  tf.dispose([...params.values()]);
  return { ...errors, programsPerVariable: programs / shapes.length, tensorsLeft };
}

const MODEL = parseModelConfig(
  {
    model_type: 'qwen2',
    vocab_size: 700,
    hidden_size: 64,
    intermediate_size: 96,
    num_hidden_layers: 3,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    max_position_embeddings: 256,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: true,
  },
  'webgpu kernel check model',
);

/** Every LoRA B of the model set to random values of the given scale (they start at zero). */
function setAdapterB(model: ReturnType<typeof modelFromWeights>, scale: number): void {
  for (const [name, v] of model.trainableParams()) {
    if (!name.endsWith('lora_B')) continue;
    const value = tf.tensor(normal(v.size, scale), v.shape);
    v.assign(value);
    value.dispose();
  }
}

/**
 * A LoRA model (B not zero): logits without a tape (weights merged with their adapters) against
 * the same forward under a tape (x W + (x A scale) B), also after the adapters and a base weight
 * change, and what one decode step dispatches and reads.
 */
async function checkModel(): Promise<{ mergedErrors: number[]; chunkedErrors: number[]; programs: Record<string, number>; readBytes: number; layers: number; tensorsAfterUpdate: number }> {
  const model = modelFromWeights(MODEL, initWeights(MODEL, 4));
  model.attachAdapters(createAdapters(MODEL, { rank: 4, alpha: 8, targetModules: [...LORA_MODULES] }, 5));
  setAdapterB(model, 0.05);
  // Without a tape the forward multiplies by W + scale A B; under one, x W + (x A scale) B. Six
  // tokens a row (q, k and v from column slices, unmerged) and one (the fused q|k|v weight merged).
  const vars = [...model.trainableParams().values()];
  const mergedError = async (length: number) => {
    const ids = Int32Array.from({ length: 2 * length }, (_, i) => (i * 37) % MODEL.vocabSize);
    const input = { ids, batch: 2, attentionMask: new Int32Array(2 * length).fill(1), positions: Int32Array.from({ length: 2 * length }, (_, i) => i % length) };
    const merged = tf.tidy(() => model.logits(model.forward(input).hidden));
    let taped: tf.Tensor | undefined;
    const { value, grads } = tf.variableGrads(() => {
      taped = tf.keep(model.logits(model.forward(input).hidden));
      return tf.sum(taped) as tf.Scalar;
    }, vars);
    tf.dispose([value, ...Object.values(grads)]);
    const error = relativeError(await read(merged), await read(taped!));
    tf.dispose([merged, taped!]);
    return error;
  };
  const mergedErrors = [await mergedError(6), await mergedError(1)];
  // An adapter update, then a base weight assigned: the merged weights are remade each time (and
  // replaced, no tensor left behind).
  const before = tf.memory().numTensors;
  setAdapterB(model, 0.05);
  mergedErrors.push(await mergedError(1));
  const tensorsAfterUpdate = tf.memory().numTensors - before;
  const down = model.params.get('model.layers.1.mlp.down_proj.weight')!;
  const value = tf.tensor(normal(down.size, 0.05), down.shape);
  down.assign(value);
  value.dispose();
  mergedErrors.push(await mergedError(1));
  // The adapters written in place by AdamW on the GPU (their dataIds unchanged).
  const optimizer = new AdamW({ lr: 0.05 });
  const adapterParams = new Map([...model.trainableParams()].filter(([name]) => name.includes('lora_')));
  const grads = new Map([...adapterParams].map(([name, v]) => [name, tf.tensor(normal(v.size), v.shape)]));
  const ids = [...adapterParams.values()].map((v) => v.dataId);
  optimizer.apply(adapterParams, grads);
  if ([...adapterParams.values()].some((v, i) => v.dataId !== ids[i])) throw new Error('AdamW on the GPU replaced a buffer instead of writing it in place');
  tf.dispose([...grads.values()]);
  optimizer.dispose();
  mergedErrors.push(await mergedError(1));
  // Attention a query row at a time (long sequences' path) against whole, with and without a tape.
  const chunkedErrors: number[] = [];
  {
    const ids = Int32Array.from({ length: 12 }, (_, i) => (i * 11) % MODEL.vocabSize);
    // The first row left-padded by one token.
    const attentionMask = Int32Array.from({ length: 12 }, (_, i) => (i === 0 ? 0 : 1));
    const input = { ids, batch: 2, attentionMask, positions: positionsFromMask(attentionMask, 2) };
    const outputs = async (floats: number | undefined) => {
      model.attentionScoreFloats = floats;
      const logits = tf.tidy(() => model.logits(model.forward(input).hidden));
      const { value, grads } = tf.variableGrads(() => tf.sum(tf.square(model.logits(model.forward(input).hidden))) as tf.Scalar, vars);
      const read1 = await read(logits);
      const gradValues = await Promise.all(vars.map((v) => read(grads[v.name])));
      tf.dispose([logits, value, ...Object.values(grads)]);
      model.attentionScoreFloats = undefined;
      return [read1, ...gradValues];
    };
    const whole = await outputs(undefined);
    const chunked = await outputs(1);
    whole.forEach((w, i) => chunkedErrors.push(relativeError(chunked[i], w)));
  }

  let readBytes = 0;
  const data = tf.Tensor.prototype.data;
  tf.Tensor.prototype.data = function (this: tf.Tensor) {
    readBytes += this.size * 4;
    return data.call(this);
  } as typeof data;
  const decoding = new Decoding(model, [[5, 6, 7], [8, 9, 10, 11, 12]], { maxNewTokens: 4, temperature: 1, seed: 1 });
  await decoding.step();
  readBytes = 0;
  const programs = await countPrograms(async () => {
    await decoding.step();
  });
  decoding.dispose();
  tf.Tensor.prototype.data = data;
  model.dispose();
  return { mergedErrors, chunkedErrors, programs, readBytes, layers: MODEL.numLayers, tensorsAfterUpdate };
}

const result = {
  rmsNorm: await checkRmsNorm(5, 301),
  // More rows than one dispatch dimension holds (65,535 workgroups): tfjs spreads it over two.
  rmsNormManyRows: await checkRmsNorm(70_001, 8),
  swiGlu: await checkSwiGlu(),
  attention: [
    await checkAttention(3, 6, 2, 32, 200, 150, [0, 70, 149]),
    await checkAttention(2, 4, 4, 128, 40, 0, [0, 0]),
    await checkAttention(2, 2, 1, 80, 90, 66, [3, 66]),
  ],
  timeSlice: await checkTimeSlice(),
  sampling: await checkSampling(),
  adamW: await checkAdamW(),
  model: await checkModel(),
};
console.log(JSON.stringify(result));
