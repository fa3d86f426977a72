import { expect } from 'chai';
import path from 'node:path';
import { frozenBaseAvailable } from '../core-adapters/engine/frozen.js';
import * as tf from '@tensorflow/tfjs-core';
import { AdamW, generate, loadModel, Rng } from '../core-adapters/index.js';
import { installWasmKernelOverrides, removeWasmKernelOverrides, writeTimeSlice } from '../core-adapters/engine/kernels.js';
import { addonPath, loadNativeKernels } from '../core-adapters/engine/native.js';
import { spawn } from 'node:child_process';
import { resolveThreadCount } from '../core-adapters/engine/thread-pool.js';
import { formatRlStep, type RlStepResult, type TorchRlStep } from '../core-adapters/cli/rl-step-bench.js';
import type { ContendedBench } from '../core-adapters/cli/bench.js';
import { engineBanner, initEngine, reinstallEngineKernels, wasmHeapExhausted } from '../core-adapters/engine/backend.js';
import { enginePaths, expectClose, fixture, flowrlInProcess, onEnginePath, runBuiltFlowrl, runNode, restoreSharedMachine, withSharedMachine, type EnginePath } from './helpers.js';

/** Kernel sets: none replaced (stock), the TypeScript overrides, and the two native paths. */
type Mode = 'stock' | 'typescript' | 'native-loop' | 'native-blas';

function install(mode: Mode): void {
  const loaded = loadNativeKernels();
  if (mode === 'stock') removeWasmKernelOverrides();
  else installWasmKernelOverrides(mode === 'typescript' ? undefined : mode === 'native-loop' ? loaded.loopOnly : loaded.kernels);
}

/** Runs f under each kernel set, then restores the engine's own choice. */
function underEach<T>(modes: Mode[], f: (mode: Mode) => T): Map<Mode, T> {
  const out = new Map<Mode, T>();
  try {
    for (const mode of modes) {
      install(mode);
      out.set(mode, f(mode));
    }
  } finally {
    reinstallEngineKernels();
  }
  return out;
}

/** x [..., M, K] @ w [..., K, N] (single matrices) in float64, from the tensors' current values. */
function referenceProduct(x: tf.Tensor, w: tf.Tensor): Float64Array {
  const [M, K, N] = [x.shape[x.rank - 2], x.shape[x.rank - 1], w.shape[w.rank - 1]];
  const [xs, ws] = [x.dataSync(), w.dataSync()];
  const out = new Float64Array(M * N);
  for (let m = 0; m < M; m++) for (let k = 0; k < K; k++) for (let n = 0; n < N; n++) out[m * N + n] += xs[m * K + k] * ws[k * N + n];
  return out;
}

function random(shape: number[], rng: Rng): tf.Tensor {
  return tf.tensor(Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng.normal()), shape);
}

interface Case {
  a: number[];
  b: number[];
  transposeA: boolean;
  transposeB: boolean;
}

// Shapes are given as stored (already transposed where the flag is set).
const CASES: Case[] = [
  { a: [7, 5], b: [5, 3], transposeA: false, transposeB: false },
  { a: [5, 7], b: [5, 3], transposeA: true, transposeB: false },
  { a: [7, 5], b: [3, 5], transposeA: false, transposeB: true },
  { a: [5, 7], b: [3, 5], transposeA: true, transposeB: true },
  { a: [1, 33], b: [33, 1], transposeA: false, transposeB: false },
  { a: [64, 129], b: [129, 65], transposeA: false, transposeB: false },
  { a: [4, 9, 6], b: [4, 6, 11], transposeA: false, transposeB: false },
  { a: [4, 9, 6], b: [4, 11, 6], transposeA: false, transposeB: true },
  { a: [4, 6, 9], b: [4, 6, 11], transposeA: true, transposeB: false },
  { a: [2, 3, 5, 4], b: [2, 3, 4, 7], transposeA: false, transposeB: false },
  { a: [2, 3, 5, 4], b: [2, 3, 7, 4], transposeA: false, transposeB: true },
];

// Broadcast batches: forward only (tfjs's own matMul gradient does not reduce a broadcast batch).
const BROADCAST: Case[] = [
  { a: [3, 5, 4], b: [4, 7], transposeA: false, transposeB: false },
  { a: [5, 4], b: [3, 4, 7], transposeA: false, transposeB: false },
  { a: [1, 5, 4], b: [3, 7, 4], transposeA: false, transposeB: true },
  { a: [2, 1, 4, 5], b: [2, 3, 4, 6], transposeA: true, transposeB: false },
];

describe('wasm kernel overrides (engine/kernels.ts)', function () {
  this.timeout(60000);
  const modes: Mode[] = ['stock', 'typescript', ...enginePaths().filter((p) => p !== 'stock') as Mode[]];

  before(function () {
    if (tf.getBackend() !== 'wasm') this.skip();
  });

  it('a tensor the 4 GiB heap cannot hold is refused with a message naming what to lower (tfjs would take the allocator\'s 0 as an address and overwrite the heap)', async () => {
    const run = await runNode(['--import', 'tsx', path.join('test', 'wasm-heap-check.ts')], 120_000);
    expect(run.status, run.stderr).to.equal(0);
    const r = JSON.parse(run.stdout.trim().split('\n').at(-1)!);
    expect(r.refused, 'refused with WasmHeapExhausted').to.equal(true);
    expect(r.wrapped, 'a 4 GiB tensor refused, not given the 16 bytes its wrapped size asks').to.equal(true);
    expect(r.held).to.be.within(6, 8);
    expect(r.message).to.include('the wasm engine ran out of memory (no room for a 512 MiB tensor').and.include('actor_rollout_ref.actor.ppo_micro_batch_size').and.include('data.max_response_length');
    expect(r.sum).to.deep.equal([4, 6]);
    // Other errors, and a kernel's crash with the heap far from full, are not called memory.
    expect(wasmHeapExhausted(new Error('memory access out of bounds'))).to.equal(undefined);
    expect(wasmHeapExhausted(new WebAssembly.RuntimeError('memory access out of bounds'))).to.equal(undefined);
  });

  /** 1e-3, or 1e-5 of the largest value where that is more (OpenBLAS's order of summation differs from XNNPACK's). */
  const gradientTolerance = (values: ArrayLike<number>) => Math.max(1e-3, 1e-5 * Array.from(values).reduce((m, v) => Math.max(m, Math.abs(v)), 0));

  it(`matMul forward and gradients equal the stock kernels (${modes.join(', ')})`, () => {
    const rng = new Rng(5);
    for (const c of [...CASES, ...BROADCAST]) {
      const withGradients = CASES.includes(c);
      const [a, b] = [random(c.a, rng), random(c.b, rng)];
      const results = underEach(modes, () => {
        const y = tf.matMul(a, b, c.transposeA, c.transposeB);
        const forward = { y: y.dataSync().slice(), shape: y.shape };
        y.dispose();
        if (!withGradients) return { ...forward, ga: new Float32Array(), gb: new Float32Array() };
        const f = (x: tf.Tensor, y: tf.Tensor) => tf.sum(tf.mul(tf.matMul(x, y, c.transposeA, c.transposeB), tf.sin(tf.matMul(x, y, c.transposeA, c.transposeB))));
        const { value, grads } = tf.valueAndGrads(f)([a, b]);
        const out = { ...forward, ga: grads[0].dataSync().slice(), gb: grads[1].dataSync().slice() };
        tf.dispose([value, ...grads]);
        return out;
      });
      const reference = results.get('stock')!;
      for (const mode of modes.slice(1)) {
        const got = results.get(mode)!;
        const label = `${mode} ${JSON.stringify(c)}`;
        expect(got.shape, label).to.deep.equal(reference.shape);
        expectClose(got.y, reference.y, 1e-4, label);
        // Gradients reach |139| here: float32 sums in another order differ by ~1e-5 of the largest.
        expectClose(got.ga, reference.ga, gradientTolerance(reference.ga), `${label} dA`);
        expectClose(got.gb, reference.gb, gradientTolerance(reference.gb), `${label} dB`);
      }
      tf.dispose([a, b]);
    }
  });

  it('fused matMul with a bias equals matMul + add, and sums over leading, middle and trailing axes equal the stock kernels', () => {
    const rng = new Rng(6);
    const [x, w, bias, t] = [random([13, 8], rng), random([6, 8], rng), random([6], rng), random([3, 5, 7, 2], rng)];
    const axes: (number | number[])[] = [0, 1, 2, 3, [0, 1], [1, 2], [2, 3], [0, 1, 2, 3], -1];
    const results = underEach(modes, (mode) => {
      // Stock wasm's _FusedMatMul adds the bias wrongly with transposeB (tfjs 4.22), so the
      // reference is the unfused product plus the bias.
      const fused = mode === 'stock' ? tf.add(tf.matMul(x, w, false, true), bias) : tf.fused.matMul({ a: x, b: w, transposeB: true, bias });
      const sums = axes.map((axis) => {
        const s = tf.sum(t, axis, axis === 1);
        const out = { data: s.dataSync().slice(), shape: s.shape };
        s.dispose();
        return out;
      });
      const out = { fused: fused.dataSync().slice(), sums };
      fused.dispose();
      return out;
    });
    const reference = results.get('stock')!;
    for (const mode of modes.slice(1)) {
      const got = results.get(mode)!;
      expectClose(got.fused, reference.fused, 1e-4, `${mode} fused`);
      got.sums.forEach((s, i) => {
        expect(s.shape, `${mode} sum axis ${JSON.stringify(axes[i])}`).to.deep.equal(reference.sums[i].shape);
        expectClose(s.data, reference.sums[i].data, 1e-4, `${mode} sum axis ${JSON.stringify(axes[i])}`);
      });
    }
    tf.dispose([x, w, bias, t]);
  });

  it('leaks no tensors and no wasm memory blocks across repeated overridden products', () => {
    const rng = new Rng(7);
    const [a, b] = [random([3, 16, 8], rng), random([3, 8, 16], rng)];
    const run = () => {
      const { value, grads } = tf.valueAndGrads((x: tf.Tensor, y: tf.Tensor) => tf.sum(tf.matMul(x, y, false, false)))([a, b]);
      tf.dispose([value, ...grads]);
      tf.tidy(() => {
        tf.sum(tf.matMul(a.reshape([48, 8]), b.reshape([24, 16]).slice([0, 0], [8, 16]).transpose(), false, true), 0);
      });
    };
    run();
    const before = { tensors: tf.memory().numTensors, blocks: (tf.backend() as unknown as { numDataIds(): number }).numDataIds() };
    for (let i = 0; i < 5; i++) run();
    expect(tf.memory().numTensors).to.equal(before.tensors);
    expect((tf.backend() as unknown as { numDataIds(): number }).numDataIds()).to.equal(before.blocks);
    tf.dispose([a, b]);
  });

  it(`after an in-place optimizer step or cache write the next product uses the new values (${modes.join(', ')})`, () => {
    // XNNPACK packs a plain 2-D product's right operand once per tensor; an in-place write must
    // not leave the old packing in use.
    const rng = new Rng(8);
    underEach(modes, (mode) => {
      const x = random([5, 12], rng);
      const w = tf.variable(random([12, 7], rng), true);
      const optimizer = new AdamW({ lr: 0.1 });
      for (let step = 0; step < 2; step++) {
        tf.matMul(x, w).dispose();
        const grad = random([12, 7], rng);
        optimizer.apply(new Map([['w', w]]), new Map([['w', grad]]));
        grad.dispose();
        const y = tf.matMul(x, w);
        expectClose(y.dataSync(), referenceProduct(x, w), 1e-4, `${mode} weight after step ${step + 1}`);
        y.dispose();
      }
      // A KV-cache buffer [1, 1, S, d] as the right operand of probs [1, 1, 1, S].
      const cache = tf.variable(tf.zeros([1, 1, 6, 4]), false) as unknown as tf.Tensor4D;
      const probs = random([1, 1, 1, 6], rng);
      for (let at = 0; at < 3; at++) {
        tf.matMul(probs, cache).dispose();
        const slice = random([1, 1, 1, 4], rng) as tf.Tensor4D;
        expect(writeTimeSlice(cache, slice, at)).to.equal(true);
        slice.dispose();
        const y = tf.matMul(probs, cache);
        expectClose(y.dataSync(), referenceProduct(probs, cache), 1e-4, `${mode} cache after write ${at + 1}`);
        y.dispose();
      }
      optimizer.dispose();
      tf.dispose([x, w, cache, probs]);
    });
  });

  it('KV-cache sampling writes its preallocated cache in place and leaks nothing', async () => {
    const model = loadModel(fixture('countdown', 'base-model'));
    const prompts = [[5, 6, 7], [8, 4]];
    const sample = async () => (await generate(model, prompts, { maxNewTokens: 6, temperature: 1, seed: 3 })).tokens;
    const first = await sample();
    const before = { tensors: tf.memory().numTensors, blocks: (tf.backend() as unknown as { numDataIds(): number }).numDataIds() };
    expect(await sample()).to.deep.equal(first);
    expect(tf.memory().numTensors).to.equal(before.tensors);
    expect((tf.backend() as unknown as { numDataIds(): number }).numDataIds()).to.equal(before.blocks);
    // Written in place: the cache returned by a decoding step is the buffer it was given.
    const out = tf.tidy(() => model.forward({ ids: Int32Array.from([5, 6]), batch: 1, attentionMask: Int32Array.from([1, 1]), positions: Int32Array.from([0, 1]), useCache: true, cacheCapacity: 4 }).cache!);
    const next = tf.tidy(() => model.forward({ ids: Int32Array.from([7]), batch: 1, attentionMask: Int32Array.from([1, 1, 1]), positions: Int32Array.from([2]), cache: out }).cache);
    expect(next).to.equal(undefined);
    const again = tf.tidy(() => model.forward({ ids: Int32Array.from([7]), batch: 1, attentionMask: Int32Array.from([1, 1, 1]), positions: Int32Array.from([2]), cache: out, useCache: true }).cache!);
    expect(again.keys[0]).to.equal(out.keys[0]);
    expect(again).to.include({ length: 3, capacity: 4 });
    tf.dispose([...out.keys, ...out.values]);
    model.dispose();
  });

  it(`names its engine path at start and answers the same on each (${enginePaths().join(', ')})`, async () => {
    const model = loadModel(fixture('countdown', 'base-model'));
    const expected: Record<EnginePath, string> = { stock: 'explicit-transpose matmuls', 'native-loop': 'native compiled loop', 'native-blas': 'native OpenBLAS' };
    const answers = new Set<string>();
    for (const enginePath of enginePaths()) {
      await onEnginePath(enginePath, async () => {
        const banner = engineBanner((await initEngine('wasm', { quiet: true })));
        expect(banner[0], enginePath).to.include(expected[enginePath]);
        // Chosen paths stay quiet about speed; only auto without a BLAS says what it costs.
        expect(banner, enginePath).to.have.length(1);
        answers.add(JSON.stringify((await generate(model, [[5, 6, 7, 4]], { maxNewTokens: 6, greedy: true })).tokens));
      });
    }
    expect([...answers], 'greedy answers on every path').to.have.length(1);
    model.dispose();
  });

  it('flowrl bench times a training step and sampling', async () => {
    const bench = await flowrlInProcess(['bench', '--steps', '1', '--json', '--workers', '1']);
    expect(bench.status, bench.stderr).to.equal(0);
    const result = JSON.parse(bench.stdout) as Record<string, unknown>;
    for (const key of ['train_step_ms', 'sample_tokens_per_s']) expect(result[key], key).to.be.a('number').and.to.be.greaterThan(0);
  });

  it('flowrl bench --model-config times a real shape with LoRA (random weights), the prefill and decode step against the limits, and refuses a bad dtype', async () => {
    const args = ['bench', '--model-config', 'test/fixtures/tiny-qwen2/config.json', '--lora-rank', '4', '--batch', '2', '--seq', '16', '--sample-prompts', '2', '--sample-tokens', '4', '--steps', '1', '--limits-mb', '8', '--matrix', '128', '--json'];
    const bench = await flowrlInProcess(args);
    expect(bench.status, bench.stderr).to.equal(0);
    const result = JSON.parse(bench.stdout) as Record<string, number | string>;
    const measured = ['train_step_ms', 'sample_tokens_per_s', 'peak_rss_mb', 'prefill_s', 'prefill_gflop_s', 'prefill_fraction_of_sgemm', 'decode_step_ms', 'decode_gb_s', 'decode_fraction_of_bandwidth', 'decode_gflop_s', 'decode_fraction_of_sgemm'];
    for (const key of measured) expect(result[key], key).to.be.a('number').and.to.be.greaterThan(0);
    // Every weight is read once per decode step: 4 bytes each (float32 base, adapters on the heap).
    expect(result.weights_read_mb).to.equal(Math.round((4 * (result.parameters as number)) / 1e6));
    // r (in + out) per adapted module: q 32+32, k and v 32+16, o 32+32, gate and up 32+64, down 64+32; two layers.
    expect(result.trainable_parameters).to.equal(2 * 4 * (64 + 48 + 48 + 64 + 96 + 96 + 96));
    expect(result.parameters).to.be.greaterThan(result.trainable_parameters as number);
    expect(result.base_dtype).to.equal(frozenBaseAvailable() ? 'float32' : 'heap');
    const bad = await flowrlInProcess([...args.slice(0, 3), '--base-dtype', 'float16']);
    expect(bad.status).to.equal(2);
    expect(bad.stderr).to.include('--base-dtype must be one of float32, bfloat16');
  });

  it('flowrl bench --rl-step times rollout, both log-prob passes and the update, each against the limits; bad sizes exit 2', async () => {
    const args = ['bench', '--model-config', 'test/fixtures/tiny-qwen2/config.json', '--rl-step', '--prompts', '2', '--samples', '2', '--prompt-tokens', '6', '--response-tokens', '5', '--lora-rank', '4', '--limits-mb', '8', '--matrix', '128', '--json'];
    const bench = await flowrlInProcess(args);
    expect(bench.status, bench.stderr).to.equal(0);
    const result = JSON.parse(bench.stdout) as { sequences: number; step_seconds: number; phases: { name: string; seconds: number; rate: number; fraction_of_limit: number; unit: string }[] };
    expect(result.sequences).to.equal(4);
    // Rollout against the limit that binds it (the bandwidth for few rows, the sgemm peak for many).
    expect(result.phases.map((p) => p.name)).to.deep.equal(['rollout', 'old_log_prob', 'ref_log_prob', 'update']);
    expect(['GB/s', 'GFLOP/s']).to.include(result.phases[0].unit);
    expect(result.phases.slice(1).map((p) => p.unit)).to.deep.equal(['GFLOP/s', 'GFLOP/s', 'GFLOP/s']);
    for (const p of result.phases) for (const key of ['seconds', 'rate', 'fraction_of_limit'] as const) expect(p[key], `${p.name} ${key}`).to.be.a('number').and.to.be.greaterThan(0);
    expect(result.step_seconds).to.be.closeTo(result.phases.reduce((s, p) => s + p.seconds, 0), 1e-9);
    // Each phase split into its time inside the native products and the rest (where the addon runs them).
    const split = result.phases as unknown as { seconds: number; products_s: number | null; products_gflop_s: number | null }[];
    if (frozenBaseAvailable()) for (const p of split) expect(p.products_s! > 0 && p.products_s! <= p.seconds && p.products_gflop_s! > 0, JSON.stringify(p)).to.equal(true);
    expect(formatRlStep(result as unknown as RlStepResult)).to.match(frozenBaseAvailable() ? /update +products +\d+\.\d s at +\d+ GFLOP\/s, the rest/ : /^(?![\s\S]*products)/);
    const bad = await flowrlInProcess([...args.slice(0, 4), '--prompts', '0']);
    expect([bad.status, bad.stderr.includes('--prompts')]).to.deep.equal([2, true]);
    // Against the PyTorch peer, each phase's ratio is ours over its seconds.
    const twice = Object.fromEntries(result.phases.map((p) => [p.name, p.seconds / 2])) as TorchRlStep['phases'];
    const table = formatRlStep(result as unknown as RlStepResult, { result: { phases: twice, step_seconds: result.step_seconds / 2, threads: 2, torch: '9.9' } });
    expect(table.split('\n').filter((l) => / 2\.00$/.test(l))).to.have.length(5);
    expect(formatRlStep(result as unknown as RlStepResult, { error: 'no torch' })).to.include('PyTorch comparison skipped: no torch');
  });

  it("flowrl bench refuses before building a shape whose full training cannot fit the 4 GiB wasm heap (Qwen2.5-0.5B without LoRA), --base-dtype without LoRA, and bfloat16 activations on a float32 base", async () => {
    const config = 'examples/local-hf-model/qwen2.5-0.5b-config.json';
    for (const extra of [[], ['--rl-step', '--lora-rank', '0']]) {
      const started = Date.now();
      const full = await flowrlInProcess(['bench', '--model-config', config, ...extra]);
      expect(full.status, full.stderr).to.equal(2);
      expect(full.stderr).to.match(/the weights, their gradients and AdamW's two moments take 7\.\d\d GiB of the wasm heap, which stops at 4 GiB; bench it with LoRA/);
      expect(Date.now() - started, 'refused before anything was built').to.be.below(20_000);
    }
    const ignored = await flowrlInProcess(['bench', '--model-config', 'test/fixtures/tiny-qwen2/config.json', '--base-dtype', 'bfloat16']);
    expect(ignored.status).to.equal(2);
    expect(ignored.stderr).to.include('--base-dtype bfloat16 applies to a frozen LoRA base; give --lora-rank > 0');
    const float32Base = await flowrlInProcess(['bench', '--model-config', 'test/fixtures/tiny-qwen2/config.json', '--lora-rank', '4', '--base-compute-dtype', 'bfloat16']);
    expect([float32Base.status, float32Base.stderr.includes('--base-compute-dtype bfloat16 needs a bfloat16 base: add --base-dtype bfloat16')]).to.deep.equal([2, true]);
  });

  it('flowrl bench --contend 1: the tiny bench idle and beside a busy process, every thread count beside it, the ratios; the busy process gone after', async () => {
    const bench = await flowrlInProcess(['bench', '--contend', '1', '--steps', '1', '--workers', '1', '--json']);
    expect(bench.status, bench.stderr).to.equal(0);
    const c = JSON.parse(bench.stdout) as ContendedBench;
    expect(c.contend).to.equal(1);
    for (const r of [c.idle, c.contended, ...c.by_workers]) for (const key of ['train_step_ms', 'sample_tokens_per_s'] as const) expect(r[key], key).to.be.a('number').and.greaterThan(0);
    expect(c.by_workers.map((r) => r.workers)).to.deep.equal(Array.from({ length: c.cores }, (_, i) => i + 1));
    expect(c.train_slowdown).to.be.closeTo(c.contended.train_step_ms / c.idle.train_step_ms, 1e-3);
    expect(c.train_vs_best).to.be.at.least(1);
    expect(c.sample_vs_best).to.be.at.most(1);
    expect(c.busy_pids).to.have.length(1);
    expect(() => process.kill(c.busy_pids[0], 0), 'the busy process has ended').to.throw();
    const bad = await flowrlInProcess(['bench', '--contend', '1', '--limits']);
    expect([bad.status, bad.stderr.includes('--contend applies to the tiny bench alone')]).to.deep.equal([2, true]);
  });

  it('flowrl bench --limits measures read bandwidth and sgemm peaks with the engine threads; without a BLAS it says so', async () => {
    const args = ['bench', '--limits', '--limits-mb', '8', '--matrix', '128', '--rounds', '1', '--json'];
    const [withBlas, noBlas] = await Promise.all([runBuiltFlowrl(args, 60000), runBuiltFlowrl(args, 60000, { FLOWRL_BLAS: 'none' })]);
    for (const run of [withBlas, noBlas]) {
      expect(run.status, run.stderr).to.equal(0);
      const limits = JSON.parse(run.stdout) as Record<string, number | string | null>;
      for (const key of ['read_gb_s', 'read_gb_s_one_thread', 'sgemm_loop_gflop_s']) expect(limits[key], key).to.be.a('number').and.to.be.greaterThan(0);
      expect(limits.threads).to.equal(resolveThreadCount('auto'));
      expect(limits.array_mb).to.equal(8);
    }
    const none = JSON.parse(noBlas.stdout) as Record<string, unknown>;
    expect([none.blas, none.sgemm_gflop_s]).to.deep.equal(['', null]);
    const blas = JSON.parse(withBlas.stdout) as Record<string, unknown>;
    if (blas.blas) expect(blas.sgemm_gflop_s).to.be.a('number').and.to.be.greaterThan(0);
    // The bfloat16 GEMM peak where oneDNN runs it on bfloat16 instructions; otherwise why not.
    const onednn = loadNativeKernels().kernels?.bfloat16Products?.();
    if (onednn?.onednn) expect([blas.bf16_gemm_gflop_s, blas.bf16_gemm]).to.satisfy(([rate, what]: [number, string]) => rate > 0 && what === onednn.detail);
    else expect([blas.bf16_gemm_gflop_s, blas.bf16_gemm]).to.deep.equal([null, onednn?.detail]);
    const off = await runBuiltFlowrl(args, 60000, { FLOWRL_ONEDNN: 'off' });
    expect((JSON.parse(off.stdout) as Record<string, unknown>).bf16_gemm).to.equal('FLOWRL_ONEDNN=off');
  });

  it('says so when the addon cannot load, and when no optimised BLAS is found (what it costs and how to install one)', async () => {
    const generateArgs = ['generate', '--model', 'test/fixtures/countdown/base-model', '--prompt', '3, 4, 5 -> 12=', '--greedy', '--max-new-tokens', '4'];
    const [missing, noBlas] = await Promise.all([
      runBuiltFlowrl(generateArgs, 60000, { FLOWRL_NATIVE_ADDON: '/nonexistent/flowrl_blas.node', FLOWRL_NATIVE: 'auto' }),
      runBuiltFlowrl(generateArgs, 60000, { FLOWRL_BLAS: '/nonexistent/libopenblas.so.0', FLOWRL_NATIVE: 'auto' }),
    ]);
    expect(missing.status, missing.stderr).to.equal(0);
    expect(missing.stderr).to.match(/native kernels unavailable/);
    expect(noBlas.status, noBlas.stderr).to.equal(0);
    expect(noBlas.stderr).to.include('native compiled loop');
    expect(noBlas.stderr).to.include('no optimised BLAS found: training runs about 2x slower');
    expect(noBlas.stderr).to.include('apt-get install libopenblas0-pthread');
    expect(noBlas.stdout).to.equal(missing.stdout);
  });
});

describe('a shared machine (native/pool.c: other processes keep cores busy)', function () {
  const kernels = loadNativeKernels().kernels;
  if (!kernels?.sharedMachine) {
    it('needs the native addon (not built here)', function () {
      this.skip();
    });
    return;
  }
  const shared = kernels.sharedMachine;
  const loop = loadNativeKernels().loopOnly!;

  it("the heap's products in parts, one BLAS thread each (rows, columns, a batch's whole products), equal the compiled loop, transposed or not, broadcast", () => {
    const rng = new Rng(5);
    const cases = [
      { M: 300, N: 70, K: 50, batch: 1, broadcast: false }, // rows, 4 parts
      { M: 20, N: 200, K: 33, batch: 1, broadcast: false }, // columns, 3 parts
      { M: 65, N: 130, K: 40, batch: 3, broadcast: false }, // each of 3 in 2 parts
      { M: 40, N: 40, K: 40, batch: 9, broadcast: true }, // 9 whole products, B shared
    ];
    const threadsBefore = kernels.setThreads(0);
    const before = shared().partedProducts;
    let calls = 0;
    try {
      kernels.setThreads(2);
      for (const { M, N, K, batch, broadcast } of cases)
        for (const ta of [0, 1])
          for (const tb of [0, 1]) {
            const A = Float32Array.from({ length: 3 + M * K * batch }, () => rng.next() * 2 - 1);
            const B = Float32Array.from({ length: 5 + K * N * (broadcast ? 1 : batch) }, () => rng.next() * 2 - 1);
            const product = (sgemm: typeof kernels.sgemm) => {
              const C = new Float32Array(2 + M * N * batch).fill(7);
              sgemm(ta, tb, M, N, K, A, 3, M * K, B, 5, broadcast ? 0 : K * N, C, 2, batch);
              return C;
            };
            const parted = withSharedMachine('on', () => product(kernels.sgemm));
            calls++;
            const label = `${M}x${N}x${K}, batch ${batch}, ta ${ta}, tb ${tb}`;
            expectClose(parted, product(loop.sgemm), 1e-5, label);
            expect([parted[0], parted[1]], `${label}: nothing before C's offset written`).to.deep.equal([7, 7]);
          }
    } finally {
      kernels.setThreads(threadsBefore);
    }
    // Only a BLAS is run in parts (the compiled loop has no threads of its own to wait for).
    expect(shared().partedProducts - before).to.equal(kernels.blas ? calls : 0);
    expect(kernels.setThreads(0), "the BLAS's threads put back").to.equal(threadsBefore);
  });

  it('a busy process makes the machine shared within seconds; FLOWRL_OVERSUBSCRIBE=on or off fixes the answer, and another value is refused', async () => {
    const busy = spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    try {
      shared('auto');
      let seen = shared();
      for (let i = 0; i < 40 && !seen.shared; i++) {
        await sleep(250);
        seen = shared();
      }
      expect(seen.shared, JSON.stringify(seen)).to.equal(true);
      expect(seen.othersCores).to.be.at.least(0.5);
      expect(withSharedMachine('off', () => shared().shared)).to.equal(false);
    } finally {
      busy.kill();
      restoreSharedMachine();
    }
    const script = `console.log(JSON.stringify(require(${JSON.stringify(addonPath())}).sharedMachine()))`;
    for (const mode of ['on', 'off'] as const) {
      const child = await runNode(['-e', script], 60_000, { FLOWRL_OVERSUBSCRIBE: mode });
      expect((JSON.parse(child.stdout) as { shared: boolean }).shared, `FLOWRL_OVERSUBSCRIBE=${mode}`).to.equal(mode === 'on');
    }
    // Ranks on one machine (a launcher's local size) keep the idle paths: each other's load is theirs.
    const asRank = `
      const { loadNativeKernels } = await import(${JSON.stringify(path.resolve('core-adapters/engine/native.ts'))});
      const shared = loadNativeKernels().kernels.sharedMachine;
      const { spawn } = await import('node:child_process');
      const busy = spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
      const look = async (tries) => {
        let seen = shared();
        for (let i = 0; i < tries && !seen.shared; i++) { await new Promise((r) => setTimeout(r, 250)); seen = shared(); }
        return seen;
      };
      const asLoaded = await look(8);
      shared('auto');
      const measured = await look(40);
      busy.kill();
      console.log(JSON.stringify({ asLoaded, measured }));`;
    const rank = await runNode(['--import', 'tsx', '--input-type=module', '-e', asRank], 60_000, { OMPI_COMM_WORLD_LOCAL_SIZE: '2', FLOWRL_OVERSUBSCRIBE: 'auto' });
    const seenByRank = JSON.parse(rank.stdout) as Record<'asLoaded' | 'measured', { shared: boolean }>;
    expect([seenByRank.asLoaded.shared, seenByRank.measured.shared], rank.stdout + rank.stderr).to.deep.equal([false, true]);
    const bad = await runBuiltFlowrl(['bench', '--steps', '1'], 60_000, { FLOWRL_OVERSUBSCRIBE: 'sometimes' });
    expect([bad.status, bad.stderr.trim()]).to.deep.equal([2, "flowrl bench: FLOWRL_OVERSUBSCRIBE must be auto, on or off; got 'sometimes'"]);
  });
});
