// Decoding's native kernels against independent references: the frozen products' small-row
// kernels on every instruction set this machine has (FLOWRL_NATIVE_ISA's levels), LoRA deltas
// added inside the product, and the batched sampler against generate.ts's sampleToken.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import * as tf from '@tensorflow/tfjs-core';
import { FrozenMatrix, toBfloat16 } from '../core-adapters/engine/frozen.js';
import { sampleRowsNatively } from '../core-adapters/engine/kernels.js';
import { addonPath, ISA_LEVELS, loadNativeKernels, splitFrozenProducts, type IsaLevel } from '../core-adapters/engine/native.js';
import { Worker } from 'node:worker_threads';
import { generate, GREEDY_TEMPERATURE, NonFiniteLogits, sampleToken, tokenLogProb, type KeptMass } from '../core-adapters/model/generate.js';
import { loadModel } from '../core-adapters/model/checkpoint.js';
import { loadAdapters } from '../core-adapters/model/lora.js';
import { Rng } from '../core-adapters/random.js';
import { enginePaths, expectClose, fixture, onEnginePath, restoreSharedMachine, withSharedMachine } from './helpers.js';
import os from 'node:os';

const nativePaths = enginePaths().filter((p) => p !== 'stock');

/** The instruction sets this machine runs, best first (capping never raises the level). */
function isaLevels(): IsaLevel[] {
  const isa = loadNativeKernels().kernels?.isa;
  if (!isa) return [];
  const best = isa('avx512');
  return ISA_LEVELS.slice(ISA_LEVELS.indexOf(best));
}

/** Runs fn on each instruction set, then puts the machine's own back. */
function onEachIsa(fn: (level: IsaLevel) => void): void {
  const isa = loadNativeKernels().kernels!.isa!;
  try {
    for (const level of isaLevels()) {
      expect(isa(level)).to.equal(level);
      fn(level);
    }
  } finally {
    isa('avx512');
  }
}

function randoms(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.next() * 2 - 1;
}

/** The values bfloat16 keeps (rounded to nearest even), as float32. */
function rounded(values: Float32Array): Float32Array {
  const bits = new Uint16Array(values.length);
  toBfloat16(values, bits);
  return Float32Array.from(bits, (b) => new Float32Array(new Uint32Array([b << 16]).buffer)[0]);
}

/** x W^T in float64 over W's float32 values. */
function reference(x: Float32Array, M: number, w: Float32Array, N: number, K: number): Float64Array {
  const out = new Float64Array(M * N);
  for (let m = 0; m < M; m++)
    for (let n = 0; n < N; n++) {
      let total = 0;
      for (let k = 0; k < K; k++) total += x[m * K + k] * w[n * K + k];
      out[m * N + n] = total;
    }
  return out;
}

describe('decoding kernels', function () {
  if (!nativePaths.length) {
    it('need the native addon (not built here)', function () {
      this.skip();
    });
    return;
  }

  for (const enginePath of nativePaths) {
    it(`frozen products of 1 to 65 rows, float32 and bfloat16, split or not, equal the float64 product on every instruction set (${enginePath})`, () =>
      onEnginePath(enginePath, () => {
        loadNativeKernels().kernels!.setThreads(1);
        const random = randoms(7);
        // K: a tail after the last full vector, a plain width, and rows longer than X's chunk fits in L1.
        for (const K of [37, 896, 2500]) {
          const N = 301;
          const values = Float32Array.from({ length: N * K }, random);
          for (const dtype of ['float32', 'bfloat16'] as const) {
            const w = FrozenMatrix.fromFloat32(values, N, K, dtype);
            const exact = w.rowsFloat32();
            for (const M of [1, 5, 8, 13, 64, 65]) {
              const x = Float32Array.from({ length: M * K }, random);
              const expected = Array.from(reference(x, M, exact, N, K));
              const tolerance = 2e-6 * K;
              onEachIsa((level) => {
                const run = () => tf.tidy(() => Array.from(w.product(tf.tensor2d(x, [M, K])).dataSync()));
                expectClose(run(), expected, tolerance, `${level} ${dtype} M ${M} K ${K}`);
                expectClose(splitFrozenProducts(run), expected, tolerance, `${level} ${dtype} M ${M} K ${K} split`);
              });
            }
          }
        }
      }));

    it(`bfloat16 products of 256 rows and more (a prefill, a training backward: W converted in wide panels, several a product) equal the float64 products (${enginePath})`, () =>
      onEnginePath(enginePath, () => {
        loadNativeKernels().kernels!.setThreads(1);
        const random = randoms(13);
        // 16,384 columns: a wide panel holds 256 of W's 301 rows, so each product takes two, the second partial.
        const [M, N, K] = [256, 301, 16384];
        const w = FrozenMatrix.fromFloat32(Float32Array.from({ length: N * K }, random), N, K, 'bfloat16');
        const exact = w.rowsFloat32();
        const x = Float32Array.from({ length: M * K }, random);
        const dy = Float32Array.from({ length: M * N }, random);
        // Rows of the results checked in float64 (each row crosses every panel; all 256 would take a minute).
        const rows = [0, 1, 128, 255];
        const pick = (all: Float32Array | Int32Array | Uint8Array, width: number) => rows.flatMap((m) => Array.from(all.subarray(m * width, (m + 1) * width)));
        const forward = reference(Float32Array.from(pick(x, K)), rows.length, exact, N, K);
        // dy W: each checked row of dy times W.
        const backward = new Float64Array(rows.length * K);
        rows.forEach((m, i) => {
          for (let n = 0; n < N; n++) {
            const d = dy[m * N + n];
            for (let k = 0; k < K; k++) backward[i * K + k] += d * exact[n * K + k];
          }
        });
        const tolerance = 2e-6 * K;
        // Read outside tidy: tidy walks a returned array element by element looking for tensors.
        const values = (product: () => tf.Tensor) => {
          const y = tf.tidy(product);
          const out = y.dataSync();
          y.dispose();
          return out;
        };
        expectClose(pick(values(() => w.product(tf.tensor2d(x, [M, K]))), N), Array.from(forward), tolerance, 'forward');
        expectClose(pick(splitFrozenProducts(() => values(() => w.product(tf.tensor2d(x, [M, K])))), N), Array.from(forward), tolerance, 'forward split');
        expectClose(pick(values(() => w.productTransposed(tf.tensor2d(dy, [M, N]))), K), Array.from(backward), 2e-6 * N, 'backward');
      }));

    it(`bfloat16 activations (model.base_compute_dtype): forward, backward and fused-adapter products equal the float64 products of the rounded operand, on oneDNN and without it (${enginePath})`, () =>
      onEnginePath(enginePath, () => {
        const kernels = loadNativeKernels().kernels!;
        const random = randoms(17);
        const [N, K, rank, scale] = [150, 200, 4, 0.5];
        const w = FrozenMatrix.fromFloat32(Float32Array.from({ length: N * K }, random), N, K, 'bfloat16', 'bfloat16');
        const exact = w.rowsFloat32();
        const A = Float32Array.from({ length: K * rank }, random);
        const B = Float32Array.from({ length: rank * N }, random);
        const values = (product: () => tf.Tensor) => {
          const y = tf.tidy(product);
          const out = y.dataSync();
          y.dispose();
          return Array.from(out);
        };
        // oneDNN where it loads here (on bfloat16 instructions), then the products on the rounded activations without it.
        const onednn = kernels.bfloat16Products!().onednn;
        try {
          // Each instruction set's small-row kernels (the rows below oneDNN's, and every row without it).
          onEachIsa((level) => {
            for (const useOnednn of onednn ? [true, false] : [false]) {
              expect(kernels.bfloat16Products!(useOnednn).onednn, 'oneDNN in use').to.equal(useOnednn);
              // Decoding's few rows (the small-row kernels) and a prefill's many (oneDNN where it runs).
              for (const M of [3, 64, 65, 300]) {
                const label = `${level}, M ${M}${useOnednn ? ' on oneDNN' : ''}`;
                const x = Float32Array.from({ length: M * K }, random);
                const forward = reference(rounded(x), M, exact, N, K);
                const got = values(() => w.product(tf.tensor2d(x, [M, K])));
                expectClose(got, Array.from(forward), 1e-6 * K, `${label} forward`);
                // The rounding happened: float32 activations give products this far off.
                const unrounded = reference(x, M, exact, N, K);
                expect(Math.max(...got.map((v, i) => Math.abs(v - unrounded[i]))), `${label}: rounded`).to.be.above(1e-3);
                // The adapters see x whole: ((x A) * scale) B added to round(x) W^T.
                const withAdapters = Float64Array.from(forward);
                for (let m = 0; m < M; m++)
                  for (let j = 0; j < rank; j++) {
                    let t = 0;
                    for (let k = 0; k < K; k++) t += x[m * K + k] * A[k * rank + j];
                    for (let n = 0; n < N; n++) withAdapters[m * N + n] += t * scale * B[j * N + n];
                  }
                const fused = tf.tidy(() => {
                  const y = w.productWithAdapters(tf.tensor2d(x, [M, K]), [{ A: tf.tensor2d(A, [K, rank]), B: tf.tensor2d(B, [rank, N]), column: 0 }], scale);
                  expect(y, 'the fused kernel runs on this path').to.not.equal(undefined);
                  return Array.from(y!.dataSync());
                });
                expectClose(fused, Array.from(withAdapters), 1e-6 * K, `${label} with adapters`);
                const dy = Float32Array.from({ length: M * N }, random);
                const dyRounded = rounded(dy);
                const backward = new Float64Array(M * K);
                for (let m = 0; m < M; m++)
                  for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) backward[m * K + k] += dyRounded[m * N + n] * exact[n * K + k];
                expectClose(values(() => w.productTransposed(tf.tensor2d(dy, [M, N]))), Array.from(backward), 1e-6 * N, `${label} backward`);
              }
            }
          });
        } finally {
          kernels.bfloat16Products!(true);
        }
      }));

    it(`on a shared machine oneDNN's products run in column slices (a narrower last one) on twice the threads and equal the float64 products (${enginePath})`, async function () {
      const kernels = loadNativeKernels().kernels!;
      if (!kernels.bfloat16Products!().onednn) this.skip();
      await onEnginePath(enginePath, () => {
        const random = randoms(23);
        // Forward Y has 300 columns (slices of 128, 128, 44), backward 520 (4 x 128 + 8).
        const [M, N, K] = [64, 300, 520];
        const w = FrozenMatrix.fromFloat32(Float32Array.from({ length: N * K }, random), N, K, 'bfloat16', 'bfloat16');
        const exact = w.rowsFloat32();
        const x = Float32Array.from({ length: M * K }, random);
        const dy = Float32Array.from({ length: M * N }, random);
        const forward = reference(rounded(x), M, exact, N, K);
        const dyRounded = rounded(dy);
        const backward = new Float64Array(M * K);
        for (let m = 0; m < M; m++)
          for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) backward[m * K + k] += dyRounded[m * N + n] * exact[n * K + k];
        const values = (product: () => tf.Tensor) => {
          const y = tf.tidy(product);
          const out = Array.from(y.dataSync());
          y.dispose();
          return out;
        };
        const run = () =>
          splitFrozenProducts(() => [values(() => w.product(tf.tensor2d(x, [M, K]))), values(() => w.productTransposed(tf.tensor2d(dy, [M, N])))]);
        const before = kernels.sharedMachine!().partedProducts;
        const [sliced, slicedBack] = withSharedMachine('on', run);
        // Two cores or more split the products (one thread never does); both are checked either way.
        expect(kernels.sharedMachine!().partedProducts - before, 'products run in slices').to.equal(os.availableParallelism() > 1 ? 2 : 0);
        const [whole, wholeBack] = withSharedMachine('off', run);
        expect(kernels.sharedMachine!().partedProducts - before, 'none more when idle').to.equal(os.availableParallelism() > 1 ? 2 : 0);
        expectClose(sliced, Array.from(forward), 1e-6 * K, 'forward in slices');
        expectClose(slicedBack, Array.from(backward), 1e-6 * N, 'backward in slices');
        expectClose(whole, Array.from(forward), 1e-6 * K, 'forward whole');
        expectClose(wholeBack, Array.from(backward), 1e-6 * N, 'backward whole');
      });
    });

    it(`bfloat16-activation products from four threads at once (data-parallel workers) equal the same products on one (${enginePath})`, async () => {
      // The threads multiply the same shapes at the same steps (as data-parallel workers do; one
      // primitive shared by two threads at once gave wrong sums and crashes), their own values, and
      // return the sums; the shapes change every step (primitives made and evicted while others run).
      const source = `
        const { parentPort, workerData } = require('node:worker_threads');
        const addon = require(workerData.addon);
        addon.load(workerData.blas);
        const sums = [];
        for (let i = 0; i < 24; i++) {
          const M = 200 + ((i * 13) % 90), N = 256 + (i % 5) * 64, K = 256 + (i % 3) * 128;
          const x = Float32Array.from({ length: M * K }, (_, j) => Math.sin(j * 0.37 + workerData.seed + i));
          const w = Uint16Array.from({ length: N * K }, (_, j) => 0x3c00 + ((j * 131 + i) % 1024));
          const y = new Float32Array(M * N);
          addon.frozenMatmul(i % 2, M, i % 2 ? K : N, i % 2 ? N : K, x, 0, w, 0, y, 0, workerData.flags, 2);
          sums.push(y.reduce((a, b) => a + b, 0));
        }
        parentPort.postMessage(sums);`;
      const blas = enginePath === 'native-loop' ? [] : ['libopenblas.so.0'];
      const flags = (enginePath === 'native-loop' ? 0 : 1) | 2;
      const run = (seed: number) =>
        new Promise<number[]>((resolve, reject) => {
          const worker = new Worker(source, { eval: true, workerData: { addon: addonPath(), blas, flags, seed } });
          worker.once('message', (sums: number[]) => void worker.terminate().then(() => resolve(sums)));
          worker.once('error', reject);
        });
      // The addon's answer is the process's, workers' too: each way, alone against together.
      const shared = loadNativeKernels().kernels!.sharedMachine!;
      try {
        for (const mode of ['off', 'on'] as const) {
          shared(mode);
          const alone = [];
          for (const seed of [1, 2, 3, 4]) alone.push(await run(seed));
          const together = await Promise.all([1, 2, 3, 4].map(run));
          expect(together, `shared machine ${mode}`).to.deep.equal(alone);
        }
      } finally {
        restoreSharedMachine();
      }
    });

    it(`LoRA deltas added inside a frozen product equal x W^T + ((x A) * scale) B in float64 (${enginePath})`, () =>
      onEnginePath(enginePath, () => {
        const random = randoms(11);
        // Enough weights to be split into tasks (of 74-76 rows) that the adapters' blocks straddle.
        const [N, K, rank, scale] = [300, 256, 4, 1.5];
        const values = Float32Array.from({ length: N * K }, random);
        const w = FrozenMatrix.fromFloat32(values, N, K, 'float32');
        // Adapters side by side (q|k|v fused), with column blocks left without one.
        const blocks = [
          { column: 0, width: 32 },
          { column: 40, width: 100 },
          { column: 200, width: 96 },
        ];
        const factors = blocks.map(({ width }) => ({ A: Float32Array.from({ length: K * rank }, random), B: Float32Array.from({ length: rank * width }, random) }));
        for (const M of [1, 8, 70]) {
          const x = Float32Array.from({ length: M * K }, random);
          const expected = reference(x, M, values, N, K);
          blocks.forEach(({ column, width }, i) => {
            const { A, B } = factors[i];
            for (let m = 0; m < M; m++)
              for (let j = 0; j < rank; j++) {
                let t = 0;
                for (let k = 0; k < K; k++) t += x[m * K + k] * A[k * rank + j];
                for (let n = 0; n < width; n++) expected[m * N + column + n] += t * scale * B[j * width + n];
              }
          });
          const run = () =>
            tf.tidy(() => {
              const adapters = blocks.map(({ column, width }, i) => ({ A: tf.tensor2d(factors[i].A, [K, rank]), B: tf.tensor2d(factors[i].B, [rank, width]), column }));
              const y = w.productWithAdapters(tf.tensor2d(x, [M, K]), adapters, scale);
              expect(y, 'the fused kernel runs on this path').to.not.equal(undefined);
              return Array.from(y!.dataSync());
            });
          expectClose(run(), Array.from(expected), 1e-3, `M ${M}`);
          expectClose(splitFrozenProducts(run), Array.from(expected), 1e-3, `M ${M} split`);
        }
        // Under a tape (training) it is differentiable: the gradients of x, every A and every B
        // equal those of the product plus each delta built as tfjs ops.
        tf.tidy(() => {
          const M = 9;
          const x = tf.tensor2d(Float32Array.from({ length: M * K }, random), [M, K]);
          const factorTensors = factors.flatMap(({ A, B }, i) => [tf.tensor2d(A, [K, rank]), tf.tensor2d(B, [rank, blocks[i].width])]);
          const probe = tf.tensor2d(Float32Array.from({ length: M * N }, random), [M, N]);
          const asAdapters = (ab: tf.Tensor[]) => blocks.map(({ column }, i) => ({ A: ab[2 * i] as tf.Tensor2D, B: ab[2 * i + 1] as tf.Tensor2D, column }));
          const fused = (xi: tf.Tensor, ...ab: tf.Tensor[]) => {
            const y = w.productWithAdapters(xi as tf.Tensor2D, asAdapters(ab), scale);
            expect(y, 'the fused kernel runs under a tape').to.not.equal(undefined);
            return tf.sum(tf.mul(y!, probe));
          };
          const asOps = (xi: tf.Tensor, ...ab: tf.Tensor[]) => {
            const deltas = blocks.map(({ column, width }, i) => tf.pad(tf.matMul(tf.mul(tf.matMul(xi as tf.Tensor2D, ab[2 * i] as tf.Tensor2D), scale) as tf.Tensor2D, ab[2 * i + 1] as tf.Tensor2D), [[0, 0], [column, N - column - width]]));
            return tf.sum(tf.mul(tf.addN([w.product(xi as tf.Tensor2D), ...deltas]), probe));
          };
          const got = tf.grads(fused)([x, ...factorTensors]);
          const want = tf.grads(asOps)([x, ...factorTensors]);
          got.forEach((g, i) => expectClose(g.dataSync(), want[i].dataSync(), 1e-3, `gradient ${i === 0 ? 'x' : i % 2 ? `A${(i - 1) / 2}` : `B${(i - 2) / 2}`}`));
        });
      }));
  }

  for (const enginePath of nativePaths) {
    it(`decoding with the attention kernel (rotary, cache written in place, grouped heads, left padding) samples what recomputing every step samples, log-probs within 1e-4 (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        const kernels = enginePath === 'native-loop' ? loadNativeKernels().loopOnly! : loadNativeKernels().kernels!;
        const attend = kernels.decodeAttention!;
        let calls = 0;
        kernels.decodeAttention = (...a) => {
          calls++;
          attend(...a);
        };
        try {
          // 4 query heads over 2 kv heads; a frozen base with adapters, as a LoRA run decodes.
          const model = loadModel(fixture('tiny-qwen2'), { frozenBase: 'float32' });
          model.attachAdapters(loadAdapters(model.config, fixture('lora-tiny-qwen2')));
          const prompts = [[5, 9, 17, 3, 44, 2, 8], [12, 7], [30, 31, 32, 33]];
          for (const topP of [1, 0.9]) {
            const options = { maxNewTokens: 8, temperature: 0.9, topP, seed: 21, withLogProbs: true };
            const cached = await splitFrozenProducts(() => generate(model, prompts, options));
            const before = calls;
            const recomputed = await generate(model, prompts, { ...options, noCache: true });
            expect(calls, 'recomputing never runs the decode kernel').to.equal(before);
            expect(cached.tokens).to.deep.equal(recomputed.tokens);
            cached.logProbs!.forEach((row, b) => expectClose(row, recomputed.logProbs![b], 1e-4, `top-p ${topP} row ${b}`));
          }
          expect(calls, 'the kernel ran: one call per layer and decode step').to.equal(2 * 2 * 7);
          model.dispose();
        } finally {
          kernels.decodeAttention = attend;
        }
      }));
  }

  for (const enginePath of enginePaths()) {
    it(`a prefill run in chunks of columns (the cache written in place, grouped heads, left padding, LoRA) samples what one whole prefill samples (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        // A frozen base lives in the addon; the stock path keeps the weights on the heap.
        const model = loadModel(fixture('tiny-qwen2'), enginePath === 'stock' ? {} : { frozenBase: 'float32' });
        model.attachAdapters(loadAdapters(model.config, fixture('lora-tiny-qwen2')));
        const prompts = [[5, 9, 17, 3, 44, 2, 8, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29], [12, 7], [30, 31, 32, 33]];
        const options = { maxNewTokens: 8, temperature: 0.9, topP: 0.9, seed: 21, withLogProbs: true };
        const whole = await splitFrozenProducts(() => generate(model, prompts, options));
        // One column at a time, and a few: the chunks' attention scores [rows, heads, C, P] under each budget.
        for (const prefillScoreFloats of [1, 3 * 4 * 17 * 5]) {
          let chunked: Awaited<ReturnType<typeof generate>>;
          const profile = await tf.profile(async () => {
            chunked = await splitFrozenProducts(() => generate(model, prompts, { ...options, prefillScoreFloats }));
          });
          // Within the budget: a chunk attends over the prompt's slots, not the whole preallocated cache (17 + 8).
          if (prefillScoreFloats > 1) {
            const scores = profile.kernels.filter((k) => k.name === 'Softmax').map((k) => k.outputShapes[0]!.reduce((a, b) => a * b, 1));
            expect(Math.max(...scores), 'the largest attention scores').to.be.at.most(prefillScoreFloats);
          }
          expect(chunked!.tokens, `budget ${prefillScoreFloats}`).to.deep.equal(whole.tokens);
          chunked!.logProbs!.forEach((row, b) => expectClose(row, whole.logProbs![b], 1e-4, `budget ${prefillScoreFloats} row ${b}`));
        }
        model.dispose();
      }));
  }

  it("the addon's thread pool hands out back-to-back jobs of changing sizes, each exact, while another process keeps a core busy", async () => {
    await onEnginePath(nativePaths[0], async () => {
      const random = randoms(13);
      const K = 64;
      // Row counts of W that make different task counts, so a late worker meets a job of another size.
      const shapes = [7, 300, 41, 1000].map((N) => {
        const w = FrozenMatrix.fromFloat32(Float32Array.from({ length: N * K }, random), N, K, 'float32');
        const x = tf.tensor2d(Float32Array.from({ length: 3 * K }, random), [3, K]);
        const product = () => tf.tidy(() => w.product(x).dataSync() as Float32Array);
        return { w, x, product, expected: product() };
      });
      const busy = spawn(process.execPath, ['-e', 'for (;;);'], { stdio: 'ignore' });
      try {
        await new Promise((resolve) => setTimeout(resolve, 100));
        splitFrozenProducts(() => {
          for (let i = 0; i < 4000; i++) {
            const shape = shapes[i % shapes.length];
            const got = shape.product();
            for (let j = 0; j < got.length; j++) if (got[j] !== shape.expected[j]) expect.fail(`job ${i} (${shape.w.rows} rows): element ${j} is ${got[j]}, one thread gives ${shape.expected[j]}`);
          }
        });
      } finally {
        busy.kill('SIGKILL');
        for (const shape of shapes) shape.x.dispose();
      }
    });
  });

  it('the native sampler, split or not, draws the tokens sampleToken draws, with its log-probabilities and top-p kept mass; NaN rows are skipped', () =>
    onEnginePath(nativePaths[0], () => {
      const V = 5000;
      const random = randoms(3);
      const rows: Float32Array[] = [
        // Peaked, moderate, nearly flat.
        Float32Array.from({ length: V }, () => random() * 12),
        Float32Array.from({ length: V }, () => random() * 3),
        Float32Array.from({ length: V }, () => random() * 0.01),
        // One token and thousands below the top-p candidate bound whose mass top-p still needs
        // (sampleToken's fallback to sorting everything).
        Float32Array.from({ length: V }, (_, i) => (i === 17 ? 0 : -14.5)),
      ];
      // Enough logits (16 x 5000) that the split runs the rows on the pool's threads.
      rows.push(...rows, ...rows, ...rows);
      for (const temperature of [1, 0.7]) {
        for (const topP of [1, 0.9, 0.5, 0.999]) {
          for (let draw = 0; draw < 10; draw++) {
            const logits = tf.tensor2d(rows.flatMap((r) => Array.from(r)), [rows.length, V]);
            const seed = 1000 * draw + Math.round(topP * 1000);
            const skipped = draw % rows.length;
            // As decoding runs it (split over the cores) on even draws, on one thread on odd ones.
            const sample = () => sampleRowsNatively(logits, temperature, topP, (row) => (row === skipped ? NaN : new Rng(seed + row).next()));
            const native = draw % 2 ? sample() : splitFrozenProducts(sample);
            logits.dispose();
            expect(native, 'the addon samples').to.not.equal(undefined);
            rows.forEach((row, b) => {
              if (b === skipped) return;
              const kept: KeptMass = { logMass: 0 };
              const token = sampleToken(row, { maxNewTokens: 1, temperature, topP }, new Rng(seed + b), kept);
              const label = `T ${temperature} top-p ${topP} draw ${draw} row ${b}`;
              expect(native!.tokens[b], label).to.equal(token);
              expect(native!.logProbs[b], label).to.be.closeTo(tokenLogProb(row, token, temperature), 1e-9);
              expect(native!.keptLogMass[b], label).to.be.closeTo(kept.logMass, 1e-12);
            });
            expect(native!.tokens[skipped]).to.equal(0);
          }
        }
      }
    }));

  it('no logits and no temperature crash a sampler: NaN or infinite logits are a NonFiniteLogits (native, split or not, and JavaScript); a denormal temperature samples greedily', () =>
    onEnginePath(nativePaths[0], async () => {
      const V = 5000;
      const random = randoms(5);
      const good = Float32Array.from({ length: V }, () => random() * 4);
      const poisoned = [Float32Array.from(good, (v, i) => (i === 7 ? NaN : v)), Float32Array.from({ length: V }, () => NaN), Float32Array.from(good, (v, i) => (i === 3 ? Infinity : v))];
      for (const row of poisoned) {
        for (const topP of [1, 0.9]) {
          // Once a segmentation fault: with every probability NaN the nucleus was empty and its first entry read from NULL.
          const rows = [good, row, ...Array.from({ length: 14 }, () => good)];
          for (const split of [false, true]) {
            const logits = tf.tensor2d(rows.flatMap((r) => Array.from(r)), [rows.length, V]);
            const sample = () => sampleRowsNatively(logits, 1, topP, (b) => new Rng(b).next());
            try {
              expect(() => (split ? splitFrozenProducts(sample) : sample())).to.throw('non-finite logits');
            } finally {
              logits.dispose();
            }
          }
          expect(() => sampleToken(row, { maxNewTokens: 1, temperature: 1, topP }, new Rng(1))).to.throw(NonFiniteLogits);
        }
        expect(() => sampleToken(row, { maxNewTokens: 1, greedy: true }, new Rng(1))).to.throw(NonFiniteLogits);
      }
      // 1 / 5e-324 is infinite: the addon refuses it rather than multiplying logits by it.
      const logits = tf.tensor2d(Array.from(good), [1, V]);
      expect(() => sampleRowsNatively(logits, 5e-324, 0.9, () => 0.5)).to.throw('bad sizes');
      logits.dispose();
      for (const temperature of [1e-308, 5e-324, GREEDY_TEMPERATURE / 2]) {
        expect(sampleToken(good, { maxNewTokens: 1, temperature, topP: 0.9 }, new Rng(1)), `T ${temperature}`).to.equal(good.indexOf(Math.max(...good)));
      }
      expect(() => sampleToken(good, { maxNewTokens: 1, temperature: NaN }, new Rng(1))).to.throw(RangeError, 'temperature');
      const model = loadModel(fixture('tiny-qwen2'));
      try {
        const prompts = [[5, 9, 17], [12, 7]];
        const greedy = await generate(model, prompts, { maxNewTokens: 6, greedy: true, withLogProbs: true });
        expect(await generate(model, prompts, { maxNewTokens: 6, temperature: 1e-308, topP: 0.9, seed: 3, withLogProbs: true })).to.deep.equal(greedy);
      } finally {
        model.dispose();
      }
    }));
});
