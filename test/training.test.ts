import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { AdamW, generate, packSequences, Rng, type CausalLM } from '../core-adapters/index.js';
import { initModel } from '../core-adapters/model/checkpoint.js';
import { sampleToken, topAlternatives } from '../core-adapters/model/generate.js';
import { languageModelStep, maskedNll } from '../core-adapters/model/train-step.js';
import { createAdapters, LORA_MODULES } from '../core-adapters/model/lora.js';
import { lossAndGradients } from '../core-adapters/model/optim.js';
import { enginePaths, expectClose, onEnginePath } from './helpers.js';

const TINY = {
  model_type: 'llama',
  vocab_size: 16,
  hidden_size: 32,
  intermediate_size: 64,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  max_position_embeddings: 64,
};

/** Sequences of a fixed pattern with varied prompt lengths, so padding is exercised. */
function patternBatch() {
  const prompts = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]];
  const responses = prompts.map((p) => [11, 12, 13, 14, 15].slice(0, 2 + p.length).concat([2]));
  return packSequences(prompts, responses);
}

describe('training and sampling on a tiny Llama', () => {
  let model: CausalLM;
  beforeEach(() => {
    model = initModel(TINY, 1);
  });
  afterEach(() => model.dispose());

  for (const enginePath of enginePaths()) {
    it(`learns: the loss on a fixed batch falls well below its start (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        const optimizer = new AdamW({ lr: 1e-2, weightDecay: 0 });
        const seq = patternBatch();
        const losses: number[] = [];
        for (let i = 0; i < 40; i++) losses.push(await languageModelStep(model, optimizer, seq));
        expect(losses[0]).to.be.closeTo(Math.log(16), 0.3);
        expect(losses.at(-1)!).to.be.below(0.3 * losses[0]);
        optimizer.dispose();
      }));
  }

  for (const enginePath of enginePaths()) {
    it(`activation checkpointing (all layers, or past a memory budget) gives the same gradients, full and LoRA, and leaks no tensors (${enginePath})`, () =>
      onEnginePath(enginePath, () => {
        const seq = patternBatch();
        // budget -1: every layer recomputed; 0: the first layer keeps its activations, the rest recompute.
        const gradients = (m: CausalLM, checkpointing: boolean, budget = -1) => {
          m.gradientCheckpointing = checkpointing;
          m.activationBudgetBytes = budget;
          const { loss, grads } = lossAndGradients(() => maskedNll(m, seq), m.trainableParams());
          const out = new Map([...grads].map(([n, g]) => [n, g.dataSync() as Float32Array]));
          tf.dispose([loss, ...grads.values()]);
          return out;
        };
        const lora = initModel(TINY, 1, 'config.json', enginePath === 'stock' ? {} : { frozenBase: 'float32' });
        lora.attachAdapters(createAdapters(lora.config, { rank: 4, alpha: 8, targetModules: [...LORA_MODULES] }, 2));
        for (const [n, v] of lora.adapters!.params) if (n.endsWith('lora_B')) v.assign(tf.randomNormal(v.shape, 0, 0.1, 'float32', 5));
        for (const m of [model, lora]) {
          const plain = gradients(m, false);
          const before = tf.memory().numTensors;
          for (const budget of [-1, 0]) {
            const checkpointed = gradients(m, true, budget);
            expect(tf.memory().numTensors).to.equal(before);
            expect([...checkpointed.keys()]).to.deep.equal([...plain.keys()]);
            for (const [n, g] of plain) expectClose(checkpointed.get(n)!, g, 1e-5 * Math.max(1, ...g.map(Math.abs)), `${n} (budget ${budget})`);
          }
        }
        lora.dispose();
      }));
  }

  for (const enginePath of enginePaths()) {
    it(`attention a chunk of query rows at a time (long sequences) gives the same log-probs, gradients and samples, within its score budget, and leaks no tensors (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        const seq = patternBatch();
        const run = async (m: CausalLM, floats: number | undefined, checkpointing: boolean) => {
          m.attentionScoreFloats = floats;
          m.gradientCheckpointing = checkpointing;
          m.activationBudgetBytes = checkpointing ? -1 : undefined;
          let out!: { loss: Float32Array; grads: Map<string, Float32Array> };
          const profile = await tf.profile(() => {
            const { loss, grads } = lossAndGradients(() => maskedNll(m, seq), m.trainableParams());
            out = { loss: Float32Array.of(loss.dataSync()[0]), grads: new Map([...grads].map(([n, g]) => [n, g.dataSync() as Float32Array])) };
            tf.dispose([loss, ...grads.values()]);
          });
          const scores = profile.kernels.filter((k) => k.name === 'Softmax').map((k) => k.outputShapes[0]!.reduce((a, b) => a * b, 1));
          return { ...out, largestScores: Math.max(...scores) };
        };
        const lora = initModel(TINY, 1, 'config.json', enginePath === 'stock' ? {} : { frozenBase: 'float32' });
        lora.attachAdapters(createAdapters(lora.config, { rank: 4, alpha: 8, targetModules: [...LORA_MODULES] }, 2));
        for (const [n, v] of lora.adapters!.params) if (n.endsWith('lora_B')) v.assign(tf.randomNormal(v.shape, 0, 0.1, 'float32', 5));
        // 4 rows x 2 kv heads x 11 keys: one group's 11 query rows a chunk, 3 (the last of each group 2), and 1.
        const T = seq.inputIds.length / 4;
        for (const m of [model, lora]) {
          for (const checkpointing of [false, true]) {
            const whole = await run(m, undefined, checkpointing);
            expect(whole.largestScores, 'one softmax over every group').to.equal(4 * 4 * T * T);
            const before = tf.memory().numTensors;
            for (const [floats, rows] of [[4 * 2 * T * T, T], [4 * 2 * T * 3, 3], [1, 1]]) {
              const chunked = await run(m, floats, checkpointing);
              expect(tf.memory().numTensors, 'tensors left').to.equal(before);
              expect(chunked.largestScores, `scores at once (budget ${floats})`).to.equal(4 * 2 * T * rows);
              expectClose(chunked.loss, whole.loss, 1e-5, `loss (budget ${floats})`);
              for (const [n, g] of whole.grads) expectClose(chunked.grads.get(n)!, g, 1e-5 * Math.max(1, ...g.map(Math.abs)), `${n} (budget ${floats}, checkpointing ${checkpointing})`);
            }
          }
          // Sampling: a prefill in chunks of query rows (and a cache written in place) draws the same tokens.
          const prompts = [[1, 2, 3, 4, 5, 6, 7], [3], [4, 5, 6]];
          m.attentionScoreFloats = undefined;
          const wholeSample = await generate(m, prompts, { maxNewTokens: 6, seed: 3, withLogProbs: true });
          m.attentionScoreFloats = 2 * 2 * 7 * 2;
          const chunkedSample = await generate(m, prompts, { maxNewTokens: 6, seed: 3, withLogProbs: true });
          expect(chunkedSample.tokens).to.deep.equal(wholeSample.tokens);
          chunkedSample.logProbs!.forEach((row, b) => expectClose(row, wholeSample.logProbs![b], 1e-5, `sampled row ${b}`));
          m.attentionScoreFloats = undefined;
        }
        lora.dispose();
      }));
  }

  it('leaks no tensors across training and sampling steps', async () => {
    const optimizer = new AdamW({ lr: 1e-3 });
    const seq = patternBatch();
    const prompts = [[1, 2], [3], [4, 5, 6]];
    // The first step creates the optimizer's moment slots; every later step must leave the count alone.
    await languageModelStep(model, optimizer, seq);
    await generate(model, prompts, { maxNewTokens: 6, seed: 1 });
    const after1 = tf.memory().numTensors;
    for (let i = 0; i < 4; i++) {
      await languageModelStep(model, optimizer, seq);
      await generate(model, prompts, { maxNewTokens: 6, seed: i, topK: 5, topP: 0.9, stopTokenIds: [2] });
    }
    expect(tf.memory().numTensors).to.equal(after1);
    optimizer.dispose();
  });

  it('samples reproducibly by seed and stops rows at their stop token', async () => {
    const prompts = [[1, 2], [3], [4, 5, 6]];
    const a = await generate(model, prompts, { maxNewTokens: 12, seed: 5, temperature: 1.5 });
    const b = await generate(model, prompts, { maxNewTokens: 12, seed: 5, temperature: 1.5 });
    const c = await generate(model, prompts, { maxNewTokens: 12, seed: 6, temperature: 1.5 });
    expect(a.tokens).to.deep.equal(b.tokens);
    expect(a.tokens).to.not.deep.equal(c.tokens);
    a.tokens.forEach((row) => expect(row).to.have.length(12));
    // Stop on whatever the first row sampled third: that row ends there, the others continue.
    const stopToken = a.tokens[0][2];
    const stopped = await generate(model, prompts, { maxNewTokens: 12, seed: 5, temperature: 1.5, stopTokenIds: [stopToken] });
    const firstStop = a.tokens[0].indexOf(stopToken);
    expect(stopped.tokens[0]).to.deep.equal(a.tokens[0].slice(0, firstStop + 1));
    expect(stopped.stopped[0]).to.equal(true);
  });

  it('greedy KV-cache decoding of a left-padded batch equals each prompt decoded alone without a cache', async () => {
    const prompts = [[1, 2, 3, 4, 5], [6], [7, 8]];
    const batched = await generate(model, prompts, { maxNewTokens: 10, greedy: true });
    for (const [i, p] of prompts.entries()) {
      expect((await generate(model, [p], { maxNewTokens: 10, greedy: true, noCache: true })).tokens[0]).to.deep.equal(batched.tokens[i]);
    }
  });
});

describe('sampleToken: greedy, temperature, top-k, top-p', () => {
  const logits = Float32Array.from([1, 3, 2, 0.5, 2.9]);
  const counts = (options: Parameters<typeof sampleToken>[1], n = 4000) => {
    const rng = new Rng(11);
    const seen = new Array(logits.length).fill(0);
    for (let i = 0; i < n; i++) seen[sampleToken(logits, options, rng)]++;
    return seen.map((c) => c / n);
  };

  it('topAlternatives: the k largest logits, ties by id, with log-softmax at T and at 1 as computed directly', () => {
    const row = Float32Array.from([0.5, 3, -1, 3, 2.25, 7, -4, 2.25, 0]);
    const logSoftmax = (t: number) => {
      const z = Array.from(row, (v) => v / t);
      const lse = Math.log(z.reduce((sum, v) => sum + Math.exp(v), 0));
      return z.map((v) => v - lse);
    };
    for (const k of [1, 3, 5, 9]) {
      const order = Array.from(row.keys()).sort((a, b) => row[b] - row[a] || a - b).slice(0, k);
      const alt = topAlternatives(row, k, 0.7);
      expect(alt.ids, `k ${k}`).to.deep.equal(order);
      expectClose(alt.atTemperature, order.map((id) => logSoftmax(0.7)[id]), 1e-12);
      expectClose(alt.atOne, order.map((id) => logSoftmax(1)[id]), 1e-12);
    }
  });

  it('greedy and temperature 0 take the argmax', () => {
    expect(sampleToken(logits, { maxNewTokens: 1, greedy: true }, new Rng(0))).to.equal(1);
    expect(sampleToken(logits, { maxNewTokens: 1, temperature: 0 }, new Rng(0))).to.equal(1);
  });

  it('samples the softmax at temperature 1', () => {
    const z = Array.from(logits).map(Math.exp);
    const total = z.reduce((a, b) => a + b, 0);
    counts({ maxNewTokens: 1 }).forEach((f, i) => expect(f).to.be.closeTo(z[i] / total, 0.03));
  });

  it('top-k keeps only the k most likely tokens', () => {
    const f = counts({ maxNewTokens: 1, topK: 2 });
    expect(f[0] + f[2] + f[3]).to.equal(0);
    expect(f[1]).to.be.closeTo(Math.exp(3) / (Math.exp(3) + Math.exp(2.9)), 0.03);
  });

  it('top-p keeps the smallest set whose mass reaches p', () => {
    // Probabilities ~ [0.08, 0.39, 0.14, 0.03, 0.36]: p = 0.7 keeps tokens 1 and 4 only.
    const f = counts({ maxNewTokens: 1, topP: 0.7 });
    expect(f[0] + f[2] + f[3]).to.equal(0);
    expect(f[1] + f[4]).to.equal(1);
  });
});
