// Runs the same model work on the wasm and webgpu backends in one process and prints what each
// produced as JSON, for test/webgpu.test.ts to compare (it starts this with a Vulkan driver in the
// environment). Not a test file itself: mocha picks up *.test.ts only.
import 'reflect-metadata';
import * as tf from '@tensorflow/tfjs-core';
import { initEngine, type EngineInfo } from '../core-adapters/engine/backend.js';
import { readFloat32 } from '../core-adapters/engine/readback.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { exportWeights, initWeights, loadOptimizerState, modelFromWeights, saveOptimizerState } from '../core-adapters/model/checkpoint.js';
import { readTensors } from '../core-adapters/model/safetensors.js';
import { parseModelConfig } from '../core-adapters/model/config.js';
import { generate } from '../core-adapters/model/generate.js';
import { packSequences, scoreResponses } from '../core-adapters/model/logprobs.js';
import { AdamW, globalNorm } from '../core-adapters/model/optim.js';
import { languageModelStep } from '../core-adapters/model/train-step.js';
import { Rng } from '../core-adapters/random.js';
import { bypassModePolicyLoss, clipCovPolicyLoss, klCovPolicyLoss, type PolicyLoss, type PolicyLossOptions } from '../core-adapters/algorithms/policy-losses.js';
import { readMetrics } from '../core-adapters/engine/readback.js';

// Small, but with every part of a Llama step: GQA, RoPE, SwiGLU, tied head over a vocabulary past
// the one-hot embedding path's 4096 (the gather and its segment-sum gradient).
const MODEL = parseModelConfig(
  {
    model_type: 'llama',
    vocab_size: 5000,
    hidden_size: 64,
    intermediate_size: 160,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    max_position_embeddings: 64,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    tie_word_embeddings: true,
  },
  'webgpu equivalence model',
);

/** What one backend produced (printed as JSON). */
export interface BackendResult {
  engine: Pick<EngineInfo, 'backend' | 'gpu'>;
  logProbs: number[];
  entropy: number[];
  sampled: number[][];
  sampledLogProbs: number[][];
  losses: number[];
  params: number[];
  addN: number[];
  norm: number;
  /** Products of the shapes a step meets, each transpose, including tfjs's split-K and small-output programs. */
  products: number[][];
  /** The losses that choose tokens by value (the host values given on webgpu): gradient and metrics of each. */
  valueChoosingLosses: Record<string, { grad: number[]; metrics: Record<string, number> }>;
  tensorsLeaked: number;
  /** Under a lowered binding limit: the parameter names the model holds, and the saved optimizer state's names. */
  split?: { params: string[]; optimizerState: string[]; restored: boolean };
}

const PRODUCTS: [number, number, number, boolean, boolean][] = [
  [40, 5000, 64, false, true],
  [40, 5000, 64, true, false],
  [40, 5000, 64, true, true],
  [40, 2048, 64, false, false],
  [128, 5000, 64, false, true],
  [40, 4097, 64, false, true],
  [8, 300, 64, false, true],
  [300, 64, 200, false, false],
];

async function products(): Promise<number[][]> {
  const out: number[][] = [];
  for (const [m, k, n, ta, tb] of PRODUCTS) {
    const rng = new Rng(m * k + n);
    const a = tf.tensor2d(Float32Array.from({ length: m * k }, () => rng.normal()), ta ? [k, m] : [m, k]);
    const b = tf.tensor2d(Float32Array.from({ length: k * n }, () => rng.normal()), tb ? [n, k] : [k, n]);
    const c = tf.matMul(a, b, ta, tb);
    out.push(Array.from(await readFloat32(c, 'test product')));
    tf.dispose([a, b, c]);
  }
  return out;
}

/** clip_cov, kl_cov and bypass_mode on fixed inputs: on webgpu with the host values the actor gives. */
async function valueChoosingLosses(backend: 'wasm' | 'webgpu'): Promise<BackendResult['valueChoosingLosses']> {
  const [B, R] = [8, 12];
  const rng = new Rng(2);
  const values = (f: (i: number) => number) => Float32Array.from({ length: B * R }, (_, i) => f(i));
  const host = {
    logProb: values(() => -Math.abs(rng.normal())),
    oldLogProb: values(() => -Math.abs(rng.normal())),
    advantages: values((i) => [1, -1, 0.5, -0.5][Math.floor(i / R) % 4]),
    responseMask: values((i) => (i % R < 4 + (Math.floor(i / R) % 7) ? 1 : 0)),
  };
  const options: PolicyLossOptions = { clipRatioLow: 0.2, clipRatioHigh: 0.28, clipRatioC: 3, lossAggMode: 'token-mean', policyLoss: { klCovRatio: 0.2, clipCovRatio: 0.2 }, seed: 1 };
  const out: BackendResult['valueChoosingLosses'] = {};
  for (const [name, loss] of [['clip_cov', clipCovPolicyLoss], ['kl_cov', klCovPolicyLoss], ['bypass_mode', bypassModePolicyLoss]] as [string, PolicyLoss][]) {
    const tensor = (a: Float32Array) => tf.tensor2d(a, [B, R]);
    const inputs = [host.logProb, host.oldLogProb, host.advantages, host.responseMask].map(tensor);
    let metrics = {};
    const grad = tf.grad((lp: tf.Tensor) => {
      const r = loss({ logProb: lp as tf.Tensor2D, oldLogProb: inputs[1], advantages: inputs[2], responseMask: inputs[3], host: backend === 'webgpu' ? host : undefined }, options);
      metrics = r.metrics;
      return r.loss;
    })(inputs[0]);
    out[name] = { grad: Array.from(await readFloat32(grad, `${name} gradient`)), metrics: await readMetrics(metrics, `${name} metrics`) };
    tf.dispose([grad, ...inputs]);
  }
  return out;
}

/**
 * The model work on `backend`; with bindingLimit (webgpu), under that lowered storage-binding limit,
 * so the vocabulary matrices are held in blocks (the other checks are skipped then).
 */
async function runOn(backend: 'wasm' | 'webgpu', bindingLimit?: number): Promise<BackendResult> {
  const info = await initEngine(backend, { quiet: true });
  if (bindingLimit) process.env.FLOWRL_WEBGPU_BINDING_LIMIT = String(bindingLimit);
  const rng = new Rng(11);
  const prompts = Array.from({ length: 4 }, (_, b) => Array.from({ length: 5 + b }, () => 3 + rng.int(MODEL.vocabSize - 3)));
  const responses = Array.from({ length: 4 }, (_, b) => Array.from({ length: 9 - b }, () => 3 + rng.int(MODEL.vocabSize - 3)));
  const model = modelFromWeights(MODEL, initWeights(MODEL, 7));
  delete process.env.FLOWRL_WEBGPU_BINDING_LIMIT;
  const before = tf.memory().numTensors;

  const seq = packSequences(prompts, responses);
  const scored = tf.tidy(() => {
    const out = scoreResponses(model, seq, { temperature: 0.8, withEntropy: true });
    return [out.logProbs, out.entropy!];
  });
  const [logProbs, entropy] = await Promise.all(scored.map((t) => readFloat32(t, 'test log-probs')));
  tf.dispose(scored);

  const sample = await generate(model, prompts, { maxNewTokens: 8, temperature: 1, topP: 0.9, seed: 5, withLogProbs: true });
  // Top-p 1 and greedy: on webgpu drawn by the GPU program, from the same uniforms.
  const drawnOnGpu = await generate(model, prompts, { maxNewTokens: 8, temperature: 0.7, seed: 6, withLogProbs: true });
  const greedy = await generate(model, prompts, { maxNewTokens: 6, temperature: 0, withLogProbs: true });

  const optimizer = new AdamW({ lr: 1e-2, weightDecay: 0.01 });
  const losses: number[] = [];
  for (let step = 0; step < 3; step++) losses.push(await languageModelStep(model, optimizer, seq, 1));
  // In HF layout (blocks joined), as a checkpoint holds them.
  const params = [];
  for (const t of (await exportWeights(model)).values()) params.push(...t.data.subarray(0, 64), ...t.data.subarray(-64));

  let split: BackendResult['split'];
  if (bindingLimit) {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'flowrl-split-')), 'optimizer.safetensors');
    await saveOptimizerState(file, optimizer);
    const saved = await optimizer.getState();
    const restored = new AdamW({ lr: 1e-2, weightDecay: 0.01 });
    loadOptimizerState(file, restored, model.trainableParams());
    const again = await restored.getState();
    restored.dispose();
    const same = [...saved.moments].every(([name, m]) => maxDiff(m.m, again.moments.get(name)!.m) === 0 && maxDiff(m.v, again.moments.get(name)!.v) === 0);
    split = { params: [...model.params.keys()], optimizerState: [...readTensors(file).keys()], restored: same && again.step === saved.step };
    fs.rmSync(path.dirname(file), { recursive: true });
  }

  // More inputs than one program may bind (tfjs binds each; Dawn's default limit is 8 per stage).
  const parts = Array.from({ length: 18 }, (_, i) => tf.fill([5], i + 1));
  const summed = tf.addN(parts);
  const addN = Array.from(await readFloat32(summed, 'test addN'));
  const norm = await globalNorm(parts);
  tf.dispose([...parts, summed]);
  const productValues = bindingLimit ? [] : await products();
  const choosing = bindingLimit ? {} : await valueChoosingLosses(backend);

  optimizer.dispose();
  const leaked = tf.memory().numTensors - before;
  model.dispose();
  return {
    engine: { backend: info.backend, gpu: info.gpu },
    logProbs: Array.from(logProbs),
    entropy: Array.from(entropy),
    sampled: [...sample.tokens, ...drawnOnGpu.tokens, ...greedy.tokens],
    sampledLogProbs: [...sample.logProbs!, ...drawnOnGpu.logProbs!, ...greedy.logProbs!],
    losses,
    params,
    addN,
    norm,
    products: productValues,
    valueChoosingLosses: choosing,
    tensorsLeaked: leaked,
    split,
  };
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  return a.length === b.length ? a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0) : Infinity;
}

const wasm = await runOn('wasm');
const webgpu = await runOn('webgpu');
// 5000 x 64 float32 is 1.25 MiB: three blocks under a 500 kB limit.
const webgpuSplit = await runOn('webgpu', 500_000);
process.stdout.write(JSON.stringify({ wasm, webgpu, webgpuSplit }) + '\n');
