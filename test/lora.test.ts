import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import fs from 'node:fs';
import path from 'node:path';
import { ActorRolloutRefWorker, createHost, loadModel, packSequences, responseMask, scoreResponses, TOKENS, type CausalLM, type Trainer, type Worker } from '../core-adapters/index.js';
import { lossAndGradients } from '../core-adapters/model/optim.js';
import { FrozenMatrix, frozenBaseAvailable, type SharedFrozenMatrix } from '../core-adapters/engine/frozen.js';
import { shareFrozenBases } from '../core-adapters/model/checkpoint.js';
import { loadNativeKernels, splitFrozenProducts } from '../core-adapters/engine/native.js';
import { MessageChannel } from 'node:worker_threads';
import { readTensors } from '../core-adapters/model/safetensors.js';
import { responseLogProbs } from '../core-adapters/model/logprobs.js';
import { createAdapters, LORA_MODULES, loadAdapters, writeAdapterFiles } from '../core-adapters/model/lora.js';
import { enginePaths, expectClose, expectInputError, expectSameBits, fixture, onEnginePath, flowrlInProcess, readJson, readRunMetrics, ROOT, tempDir, withoutTiming, writeCountdownConfig } from './helpers.js';

interface Case {
  prompt_ids: number[];
  response_ids: number[];
  logprobs_t1: number[];
}

// test/fixtures/make_lora_reference.py: PEFT adapters (r 8, alpha 16, all seven projections,
// random A and B) and float64 log-probs of the merged W + (alpha/r) B A.
const reference = readJson<Record<string, Case[]>>(fixture('lora_reference.json'));

/** Gradients of the summed response log-probs with respect to each adapter factor. */
function adapterGradients(model: CausalLM, prompts: number[][], responses: number[][]): Map<string, Float32Array> {
  const seq = packSequences(prompts, responses);
  const mask = tf.tensor2d(responseMask(seq), [seq.batch, seq.responseLength]);
  const { grads } = lossAndGradients(() => tf.sum(tf.mul(scoreResponses(model, seq).logProbs, mask)) as tf.Scalar, model.trainableParams());
  mask.dispose();
  const out = new Map([...grads].map(([n, g]) => [n, g.dataSync() as Float32Array]));
  tf.dispose([...grads.values()]);
  return out;
}

describe('LoRA', () => {
  for (const name of ['tiny-qwen2', 'tiny-llama-bf16']) {
    it(`a PEFT adapter on ${name} gives the float64 merged model's log-probs`, async () => {
      const model = loadModel(fixture(name));
      model.attachAdapters(loadAdapters(model.config, fixture(`lora-${name}`)));
      const cases = reference[name];
      const got = await responseLogProbs(model, cases.map((c) => c.prompt_ids), cases.map((c) => c.response_ids));
      cases.forEach((c, i) => expectClose(got[i], c.logprobs_t1, 1e-4, `${name} case ${i}`));
      model.dispose();
    });
  }

  for (const enginePath of enginePaths()) {
    it(`a frozen base outside the heap gives the same log-probs (float32, and bfloat16 of a bfloat16 checkpoint) and adapter gradients (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        if (enginePath === 'stock') return expect(frozenBaseAvailable()).to.equal(false);
        expect(frozenBaseAvailable()).to.equal(true);
        for (const [name, dtypes] of [['tiny-qwen2', ['float32']], ['tiny-llama-bf16', ['float32', 'bfloat16']]] as const) {
          const cases = reference[name];
          const prompts = cases.map((c) => c.prompt_ids);
          const responses = cases.map((c) => c.response_ids);
          const heap = loadModel(fixture(name));
          heap.attachAdapters(loadAdapters(heap.config, fixture(`lora-${name}`)));
          const heapGrads = adapterGradients(heap, prompts, responses);
          for (const frozenBase of dtypes) {
            const model = loadModel(fixture(name), { frozenBase });
            model.attachAdapters(loadAdapters(model.config, fixture(`lora-${name}`)));
            expect(model.params.has('model.embed_tokens.weight')).to.equal(false);
            const got = await responseLogProbs(model, prompts, responses);
            cases.forEach((c, i) => expectClose(got[i], c.logprobs_t1, 1e-4, `${name} ${frozenBase} case ${i}`));
            // One sequence at a time: at most 16 rows, the decoding-sized products.
            for (const [i, c] of cases.entries()) expectClose((await responseLogProbs(model, [c.prompt_ids], [c.response_ids]))[0], c.logprobs_t1, 1e-4, `${name} ${frozenBase} case ${i} alone`);
            const grads = adapterGradients(model, prompts, responses);
            for (const [n, g] of heapGrads) expectClose(grads.get(n)!, g, 1e-4 * Math.max(1, ...g.map(Math.abs)), `${name} ${frozenBase} d${n}`);
            model.dispose();
          }
          heap.dispose();
        }
      }));
  }

  for (const enginePath of enginePaths().filter((p) => p !== 'stock')) {
    it(`bfloat16 activations (model.base_compute_dtype): log-probs as a float64 forward rounding the same activations gives them, and the same on oneDNN and without it (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        const kernels = loadNativeKernels().kernels!;
        const name = 'tiny-llama-bf16';
        const cases = reference[name];
        const prompts = cases.map((c) => c.prompt_ids);
        const responses = cases.map((c) => c.response_ids);
        const model = loadModel(fixture(name), { frozenBase: 'bfloat16', frozenCompute: 'bfloat16' });
        model.attachAdapters(loadAdapters(model.config, fixture(`lora-${name}`)));
        const runs: { logProbs: number[][]; grads: Map<string, Float32Array> }[] = [];
        try {
          for (const useOnednn of kernels.bfloat16Products!().onednn ? [true, false] : [false]) {
            kernels.bfloat16Products!(useOnednn);
            runs.push({ logProbs: await responseLogProbs(model, prompts, responses), grads: adapterGradients(model, prompts, responses) });
          }
        } finally {
          kernels.bfloat16Products!(true);
          model.dispose();
        }
        // Against the float64 forward that rounds the same activations (make_bf16_activation_reference.py;
        // the float32-activation reference is 0.0077 away on average, 0.023 at worst). Not token by
        // token: an activation within float32 noise of a rounding midpoint rounds either way, and one
        // such flip at the head moves a log-prob by up to about 0.007 (measured: 8e-5 to 8e-4 on
        // average, up to 6.5e-3 at worst). oneDNN and the kernels without it are the same arithmetic in
        // another order: they agree as closely.
        const meanDistance = (got: number[][], expected: number[][]) => {
          const d = got.flatMap((lp, i) => lp.map((v, t) => Math.abs(v - expected[i][t])));
          return d.reduce((a, b) => a + b, 0) / d.length;
        };
        const rounded = readJson<Record<string, { logprobs_t1: number[] }[]>>('test/fixtures/bf16_activation_reference.json')[name].map((c) => c.logprobs_t1);
        const float32 = cases.map((c) => c.logprobs_t1);
        for (const run of runs) {
          expect(meanDistance(run.logProbs, rounded), 'mean |difference| to the bfloat16-activation reference').to.be.at.most(2e-3);
          expect(meanDistance(run.logProbs, rounded), 'nearer it than the float32-activation reference').to.be.below(meanDistance(run.logProbs, float32) / 5);
        }
        for (const run of runs.slice(1)) {
          expect(meanDistance(run.logProbs, runs[0].logProbs), 'without oneDNN: mean |difference| to oneDNN').to.be.at.most(2e-3);
          // Gradients as a whole (flips back through every layer move single entries by percents): 0.4 % at most measured.
          const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((a, x) => a + x * x, 0));
          for (const [n, g] of runs[0].grads) expect(norm(Array.from(g, (x, i) => x - run.grads.get(n)![i])) / norm(g), `d${n} without oneDNN: relative distance`).to.be.at.most(2 ** -6);
        }
      }));
  }

  for (const enginePath of enginePaths()) {
    it(`a frozen product of W over 1M values, split over the cores as sampling runs it (BLAS path) or not, equals the float64 product (${enginePath})`, () =>
      onEnginePath(enginePath, () => {
        if (enginePath === 'stock') return expect(frozenBaseAvailable()).to.equal(false);
        // The split needs the BLAS on one thread, as runs have it (a bench sets more).
        loadNativeKernels().kernels?.setThreads(1);
        const [N, K] = [1536, 1024];
        let state = 12345;
        const random = () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1;
        const values = Float32Array.from({ length: N * K }, random);
        const w = FrozenMatrix.fromFloat32(values, N, K, 'float32');
        for (const [M, start, count] of [
          [8, 0, N],
          [3, 100, 1200],
          [64, 0, N],
          [200, 7, 1100],
        ]) {
          const x = Float32Array.from({ length: M * K }, random);
          const expected = () => {
            const out = new Float64Array(M * count);
            for (let m = 0; m < M; m++)
              for (let n = 0; n < count; n++) {
                let total = 0;
                for (let k = 0; k < K; k++) total += x[m * K + k] * values[(start + n) * K + k];
                out[m * count + n] = total;
              }
            return out;
          };
          // As sampling runs them: split over the cores (the BLAS path), and as training runs them.
          const got = splitFrozenProducts(() => tf.tidy(() => w.product(tf.tensor2d(x, [M, K]), start, count).dataSync() as Float32Array));
          const unsplit = tf.tidy(() => w.product(tf.tensor2d(x, [M, K]), start, count).dataSync() as Float32Array);
          expectClose(Array.from(unsplit), Array.from(expected()), 1e-3, `unsplit M ${M}, rows ${start}+${count}`);
          expectClose(Array.from(got), Array.from(expected()), 1e-3, `M ${M}, rows ${start}+${count}`);
        }
      }));
  }

  it('a frozen base crosses to another thread as shared memory (no copy), and a second load reuses it', async function () {
    if (!frozenBaseAvailable()) this.skip();
    const model = loadModel(fixture('tiny-qwen2'), { frozenBase: 'float32' });
    const again = loadModel(fixture('tiny-qwen2'), { frozenBase: 'float32' });
    expect(again.frozen.get('model.layers.0.mlp.up_proj.weight')).to.equal(model.frozen.get('model.layers.0.mlp.up_proj.weight'));
    // Through a real structured clone, as workerData travels to a worker thread.
    const { port1, port2 } = new MessageChannel();
    const received = new Promise<Record<string, Record<string, SharedFrozenMatrix>>>((resolve) => port2.once('message', resolve));
    port1.postMessage(shareFrozenBases());
    const shared = await received;
    port1.close();
    const key = Object.keys(shared).find((k) => k.startsWith(fixture('tiny-qwen2')) && k.includes('float32'))!;
    const there = FrozenMatrix.fromShared(shared[key]['model.layers.0.mlp.up_proj.weight']);
    const here = model.frozen.get('model.layers.0.mlp.up_proj.weight')!;
    expect(there).not.to.equal(here);
    const before = here.data[5];
    (there.data as Float32Array)[5] = 123.5;
    expect(here.data[5], 'a write there shows here: one buffer').to.equal(123.5);
    (there.data as Float32Array)[5] = before;
    again.dispose();
    model.dispose();
    // A bfloat16 base with bfloat16 activations keeps them there: a worker thread's replica multiplies as the main thread does.
    const bf16 = loadModel(fixture('tiny-llama-bf16'), { frozenBase: 'bfloat16', frozenCompute: 'bfloat16' });
    const { port1: out, port2: into } = new MessageChannel();
    const arrived = new Promise<Record<string, Record<string, SharedFrozenMatrix>>>((resolve) => into.once('message', resolve));
    out.postMessage(shareFrozenBases());
    const bases = await arrived;
    out.close();
    const bf16Key = Object.keys(bases).find((k) => k.startsWith(fixture('tiny-llama-bf16')) && k.split('\u0000').slice(1, 3).join(',') === 'bfloat16,bfloat16')!;
    expect(bf16Key, 'the base is shared under its compute dtype').to.not.equal(undefined);
    expect(FrozenMatrix.fromShared(bases[bf16Key]['model.layers.0.mlp.up_proj.weight']).compute).to.equal('bfloat16');
    bf16.dispose();
  });

  it('fresh adapters (B = 0) give exactly the base log-probs, and turning them off gives the base after training moves them', async () => {
    const model = loadModel(fixture('tiny-qwen2'));
    const cases = reference['tiny-qwen2'];
    const prompts = cases.map((c) => c.prompt_ids);
    const responses = cases.map((c) => c.response_ids);
    const base = await responseLogProbs(model, prompts, responses);
    model.attachAdapters(createAdapters(model.config, { rank: 4, alpha: 8, targetModules: [...LORA_MODULES] }, 3));
    expect(await responseLogProbs(model, prompts, responses)).to.deep.equal(base);
    for (const [n, v] of model.adapters!.params) if (n.endsWith('lora_B')) v.assign(tf.randomNormal(v.shape, 0, 0.1, 'float32', 1));
    expect(await responseLogProbs(model, prompts, responses)).not.to.deep.equal(base);
    // responseLogProbs computes synchronously (only its read is awaited), so the adapters are off for the whole forward.
    expect(await model.withoutAdapters(() => responseLogProbs(model, prompts, responses))).to.deep.equal(base);
    model.dispose();
  });

  it('only the adapters are trainable, and A starts Kaiming-uniform (|A| <= 1/sqrt(in)) on the targeted modules only', () => {
    const model = loadModel(fixture('tiny-qwen2'));
    model.attachAdapters(createAdapters(model.config, { rank: 2, alpha: 4, targetModules: ['q_proj', 'down_proj'] }, 0));
    const names = [...model.trainableParams().keys()];
    expect(names).to.have.length(2 * 2 * model.config.numLayers);
    expect(names.every((n) => /\.(q_proj|down_proj)\.lora_[AB]$/.test(n))).to.equal(true);
    const a = model.trainableParams().get('model.layers.0.mlp.down_proj.lora_A')!;
    expect(a.shape).to.deep.equal([model.config.intermediateSize, 2]);
    const values = a.dataSync();
    expect(Math.max(...values.map(Math.abs))).to.be.at.most(1 / Math.sqrt(model.config.intermediateSize));
    expect(new Set(values).size).to.equal(values.length);
    model.dispose();
  });

  it('writes PEFT files that load back bit-exactly, with PEFT names and [r, in] / [out, r] shapes', async () => {
    const model = loadModel(fixture('tiny-llama-bf16'));
    const adapters = loadAdapters(model.config, fixture('lora-tiny-llama-bf16'));
    model.attachAdapters(adapters);
    const dir = tempDir();
    await writeAdapterFiles(dir, adapters, fixture('tiny-llama-bf16'));
    const written = readTensors(path.join(dir, 'adapter_model.safetensors'));
    const q = written.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')!;
    expect(q.shape).to.deep.equal([8, model.config.hiddenSize]);
    expect(written.get('base_model.model.model.layers.1.mlp.down_proj.lora_B.weight')!.shape).to.deep.equal([model.config.hiddenSize, 8]);
    const config = readJson<Record<string, unknown>>(path.join(dir, 'adapter_config.json'));
    expect(config).to.include({ peft_type: 'LORA', r: 8, lora_alpha: 16 });
    const again = loadAdapters(model.config, dir);
    for (const [n, v] of adapters.params) expectSameBits(again.params.get(n)!.dataSync() as Float32Array, v.dataSync() as Float32Array, n);
    again.dispose();
    model.dispose();
  });

  it('flowrl export merges a LoRA checkpoint into W + scale B A, and --adapter writes the PEFT directory', async () => {
    const out = tempDir();
    const merged = await flowrlInProcess(['export', fixture('lora-tiny-qwen2'), path.join(out, 'merged')]);
    expect(merged.status, merged.stderr).to.equal(0);
    const base = readTensors(fixture('tiny-qwen2', 'model.safetensors'));
    const lora = readTensors(fixture('lora-tiny-qwen2', 'adapter_model.safetensors'));
    const got = readTensors(path.join(out, 'merged', 'model.safetensors'));
    // An independent float64 merge of one weight: W + (16/8) * B A.
    const name = 'model.layers.1.self_attn.k_proj';
    const W = base.get(`${name}.weight`)!;
    const A = lora.get(`base_model.model.${name}.lora_A.weight`)!;
    const B = lora.get(`base_model.model.${name}.lora_B.weight`)!;
    const [rows, cols] = W.shape;
    const want = new Float64Array(rows * cols);
    for (let o = 0; o < rows; o++) {
      for (let i = 0; i < cols; i++) {
        let s = 0;
        for (let k = 0; k < 8; k++) s += B.data[o * 8 + k] * A.data[k * cols + i];
        want[o * cols + i] = W.data[o * cols + i] + 2 * s;
      }
    }
    expectClose(got.get(`${name}.weight`)!.data, want, 1e-6, 'merged k_proj');
    expectSameBits(got.get('model.norm.weight')!.data, base.get('model.norm.weight')!.data, 'norm unchanged');
    const cases = reference['tiny-qwen2'];
    const model = loadModel(path.join(out, 'merged'));
    const lp = await responseLogProbs(model, cases.map((c) => c.prompt_ids), cases.map((c) => c.response_ids));
    cases.forEach((c, i) => expectClose(lp[i], c.logprobs_t1, 1e-4, `merged case ${i}`));
    model.dispose();

    const adapter = await flowrlInProcess(['export', fixture('lora-tiny-qwen2'), path.join(out, 'adapter'), '--adapter']);
    expect(adapter.status, adapter.stderr).to.equal(0);
    const copied = readTensors(path.join(out, 'adapter', 'adapter_model.safetensors'));
    for (const [n, t] of lora) expectSameBits(copied.get(n)!.data, t.data, n);
  });

  it('flowrl score --adapter scores with the adapter', async () => {
    const dir = tempDir();
    // A base with a tokenizer (the countdown fixture's) and an adapter written for it.
    const modelDir = fixture('countdown', 'base-model');
    const model = loadModel(modelDir);
    const adapters = createAdapters(model.config, { rank: 2, alpha: 4, targetModules: ['v_proj'] }, 0);
    for (const [n, v] of adapters.params) if (n.endsWith('lora_B')) v.assign(tf.randomNormal(v.shape, 0, 0.5, 'float32', 2));
    model.attachAdapters(adapters);
    await writeAdapterFiles(dir, adapters, modelDir);
    const plain = await flowrlInProcess(['score', '--model', modelDir, '--prompt', '1 2', '--response', '3', '--json']);
    const adapted = await flowrlInProcess(['score', '--model', modelDir, '--prompt', '1 2', '--response', '3', '--json', '--adapter', dir]);
    expect(adapted.status, adapted.stderr).to.equal(0);
    const a = JSON.parse(adapted.stdout);
    const p = JSON.parse(plain.stdout);
    expect(a.logprobs[0]).not.to.equal(p.logprobs[0]);
    expectClose(a.logprobs, (await responseLogProbs(model, [a.prompt_ids], [a.response_ids]))[0], 1e-6, 'score --adapter');
    model.dispose();
  });

  describe('bad adapters: one message naming the file and tensor', () => {
    it('an adapter of another model (shapes)', () => {
      const model = loadModel(fixture('tiny-qwen2'));
      expectInputError(() => loadAdapters(model.config, fixture('lora-tiny-llama-bf16')), path.join('lora-tiny-llama-bf16', 'adapter_model.safetensors'), "tensor 'base_model.model.model.layers.");
      model.dispose();
    });

    it('target modules that do not match the tensors, and an unknown target module', () => {
      const model = loadModel(fixture('tiny-qwen2'));
      const dir = tempDir();
      fs.copyFileSync(fixture('lora-tiny-qwen2', 'adapter_model.safetensors'), path.join(dir, 'adapter_model.safetensors'));
      const config = readJson<Record<string, unknown>>(fixture('lora-tiny-qwen2', 'adapter_config.json'));
      fs.writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify({ ...config, target_modules: ['q_proj', 'v_proj'] }));
      expectInputError(() => loadAdapters(model.config, dir), 'adapter_model.safetensors', "tensor 'base_model.model.model.layers.0.mlp.down_proj.lora_A.weight' does not belong to a q_proj/v_proj adapter");
      fs.writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify({ ...config, target_modules: ['q_proj', 'qkv'] }));
      expectInputError(() => loadAdapters(model.config, dir), 'adapter_config.json', "target module 'qkv' is unknown");
      fs.writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify({ ...config, use_dora: true }));
      expectInputError(() => loadAdapters(model.config, dir), 'adapter_config.json', "'use_dora'");
      model.dispose();
    });
  });
});

describe('LoRA runs on the countdown task', function () {
  this.timeout(300000);
  const lora = (extra: Record<string, unknown> = {}) => ({ actor_rollout_ref: { model: { lora_rank: 8, lora_alpha: 32 }, actor: { optim: { lr: 3e-3 } } }, ...extra });
  const flowrl = { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'flowrl' } };

  async function train(file: string, overrides: string[]): Promise<void> {
    const host = await createHost(file, { overrides, quiet: true });
    await host.container.get<Trainer>(TOKENS.Trainer).fit();
    host.container.get<Worker>(TOKENS.Worker).dispose();
  }

  it('grpo with lora_rank 8 on a bfloat16 base with bfloat16 activations trains on one thread and on two: old log-probs agree with the update at every step, validation holds', async function () {
    if (!frozenBaseAvailable()) this.skip();
    const bf16 = { actor_rollout_ref: { model: { lora_rank: 8, lora_alpha: 32, base_dtype: 'bfloat16', base_compute_dtype: 'bfloat16' }, actor: { optim: { lr: 3e-3 } } } };
    // Two threads: the data-parallel replica shares the frozen base (its compute dtype with it: the
    // test above) and multiplies on oneDNN beside the main thread. Not held to raising validation
    // accuracy: on this tiny model 30 steps gave +0.039 (BLAS, one thread), +0.021 (two) and -0.005
    // (the compiled loop), against +0.073 on float32 activations on every path (docs/performance.md).
    for (const workers of [1, 2]) {
      const dir = tempDir();
      await train(writeCountdownConfig(dir, bf16), ['trainer.total_training_steps=30', 'trainer.test_freq=30', `engine.workers=${workers}`]);
      const metrics = readRunMetrics(path.join(dir, 'run'));
      const [before, after] = [0, 30].map((step) => metrics.find((m) => m.step === step)!['val/accuracy']);
      expect(after, `${workers} threads: ${before} -> ${after}`).to.be.at.least(before - 0.03);
      const steps = metrics.filter((m) => 'actor/ppo_kl' in m);
      expect(steps).to.have.length(30);
      for (const m of steps) expect(Math.abs(m['actor/ppo_kl']), `${workers} threads, step ${m.step} ppo_kl`).to.be.below(1e-4);
    }
  });

  for (const algorithm of ['grpo', 'flowrl']) {
    it(`${algorithm} with lora_rank 8 raises validation accuracy`, async () => {
      const dir = tempDir();
      await train(writeCountdownConfig(dir, lora(algorithm === 'flowrl' ? flowrl : {})), [`algorithm.name=${algorithm}`, 'trainer.total_training_steps=30', 'trainer.test_freq=30']);
      const metrics = readRunMetrics(path.join(dir, 'run'));
      const [before, after] = [0, 30].map((step) => metrics.find((m) => m.step === step)!['val/accuracy']);
      expect(after, `${before} -> ${after}`).to.be.greaterThan(before + 0.03);
      // The reference (adapters off) stays at the base while the adapted policy moves away.
      if (algorithm === 'flowrl') expect(Math.abs(metrics.find((m) => m.step === 30)!['actor/ref_kl'])).to.be.greaterThan(0.01);
    });
  }

  it('keeps one copy of the base (the reference is the base with adapters off), checkpoints only the adapter, resumes exactly, and flowrl eval takes its checkpoint', async () => {
    const common = ['trainer.save_freq=1', 'trainer.val_before_train=false', 'trainer.test_freq=-1', 'actor_rollout_ref.actor.optim.lr_warmup_steps=2'];
    const split = tempDir();
    const file = writeCountdownConfig(split, lora(flowrl));
    // This run's variables only: tfjs's registry is per process, and mocha runs other files in it first.
    const earlier = new Set(Object.keys(tf.engine().registeredVariables));
    const host = await createHost(file, { overrides: [...common, 'trainer.total_training_steps=1'], quiet: true });
    await host.container.get<Trainer>(TOKENS.Trainer).fit();
    // One base: outside the heap when the native addon can multiply it there (no base variable
    // at all), else one set of heap variables; never a second model for the reference.
    const variables = Object.keys(tf.engine().registeredVariables).filter((name) => !earlier.has(name));
    const count = (pattern: RegExp) => variables.filter((n) => pattern.test(n)).length;
    const lm = host.container.get<ActorRolloutRefWorker>(TOKENS.Worker).module.lm;
    const layers = lm.config.numLayers;
    if (frozenBaseAvailable()) {
      expect(count(/_proj\.weight#|embed_tokens\.weight#/), 'base projections on the heap').to.equal(0);
      expect([...lm.frozen.keys()]).to.have.length(1 + 5 * layers);
    } else {
      expect(count(/^model\.embed_tokens\.weight#/), 'embedding tables').to.equal(1);
      expect(count(/^model\.layers\.0\.mlp\.down_proj\.weight#/), 'down projections of layer 0').to.equal(1);
    }
    expect(count(/^model\.norm\.weight#/), 'final norms').to.equal(1);
    host.container.get<Worker>(TOKENS.Worker).dispose();
    const actorDir = path.join(split, 'run', 'checkpoints', 'global_step_1', 'actor');
    expect(fs.readdirSync(actorDir)).to.include.members(['adapter_config.json', 'adapter_model.safetensors', 'proj_z.safetensors', 'optimizer.safetensors']);
    expect(fs.readdirSync(actorDir)).not.to.include('model.safetensors');
    await train(file, [...common, 'trainer.total_training_steps=2']);
    const whole = tempDir();
    // The uninterrupted run also validates at its last step (validation draws from its own seed).
    await train(writeCountdownConfig(whole, lora(flowrl)), [...common, 'trainer.total_training_steps=2', 'trainer.test_freq=2']);
    const a = readRunMetrics(path.join(whole, 'run'));
    const b = readRunMetrics(path.join(split, 'run'));
    expect(b.map((m) => m.step)).to.deep.equal([1, 2]);
    const training = (m: Record<string, number>) => Object.fromEntries(Object.entries(withoutTiming(m)).filter(([key]) => !key.startsWith('val/')));
    expect(training(b[1])).to.deep.equal(training(a[1]));
    // flowrl eval of a LoRA checkpoint: the run's base plus the checkpoint's adapter, giving the
    // validation the run itself logged at that step.
    const evaluated = await flowrlInProcess(['eval', path.join(whole, 'run', 'checkpoints', 'global_step_2')]);
    expect(evaluated.status, evaluated.stderr).to.equal(0);
    expect(a[1]['val/accuracy']).to.be.a('number');
    expect(JSON.parse(evaluated.stdout.trim().split('\n').at(-1)!)['val/accuracy']).to.equal(a[1]['val/accuracy']);
  });

  it('bad LoRA settings end in exit 2 naming the key or file', async () => {
    const file = writeCountdownConfig(tempDir());
    const cases: [string[], string[]][] = [
      [['actor_rollout_ref.model.lora_adapter_path=' + fixture('lora-tiny-qwen2')], ["actor_rollout_ref.model.lora_adapter_path is set but actor_rollout_ref.model.lora_rank is 0"]],
      [['actor_rollout_ref.model.lora_rank=4', 'actor_rollout_ref.model.target_modules=[q_proj,qkv_proj]'], ['actor_rollout_ref.model.target_modules', "target module 'qkv_proj' is unknown"]],
      [['actor_rollout_ref.model.lora_rank=8', 'actor_rollout_ref.model.lora_adapter_path=' + fixture('lora-tiny-qwen2')], ['lora-tiny-qwen2', 'adapter_model.safetensors', "tensor 'base_model.model."]],
      [['actor_rollout_ref.model.lora_rank=2.5'], ['actor_rollout_ref.model.lora_rank must be a whole number >= 0']],
      [['actor_rollout_ref.model.lora_rank=4', 'actor_rollout_ref.model.base_compute_dtype=bfloat16'], ['actor_rollout_ref.model.base_compute_dtype is bfloat16, which needs a bfloat16 base', 'actor_rollout_ref.model.base_dtype to bfloat16 (it is float32)']],
    ];
    // A model whose full fine-tuning cannot fit the wasm heap: only its config.json is read.
    const big = tempDir();
    const shape = { ...readJson<Record<string, unknown>>(fixture('tiny-qwen2', 'config.json')), vocab_size: 100_000, hidden_size: 2048, num_attention_heads: 16, num_key_value_heads: 16 };
    fs.writeFileSync(path.join(big, 'config.json'), JSON.stringify(shape));
    const bigModel = ['actor_rollout_ref.model.path=' + big, 'actor_rollout_ref.model.tokenizer_path=' + fixture('countdown', 'base-model')];
    cases.push([bigModel, [big, 'the wasm heap, which stops at 4 GiB', 'lora_rank > 0']]);
    for (const [overrides, fragments] of cases) {
      const result = await flowrlInProcess(['train', file, 'trainer.total_training_steps=1', ...overrides]);
      expect(result.status, result.stderr).to.equal(2);
      for (const f of fragments) expect(result.stderr).to.include(f);
    }
  });
});
