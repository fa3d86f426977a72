import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { addColumns, rmsNorm, scaleColumns, Rng } from '../core-adapters/index.js';
import { addConstant, addSameShape, embed, headLogProbs, matmulConstant, siluMul } from '../core-adapters/engine/ops.js';
import { swiGluKernelsAvailable } from '../core-adapters/engine/kernels.js';
import { splitFrozenProducts } from '../core-adapters/engine/native.js';
import { enginePaths, expectClose, onEnginePath, rmsNormReference } from './helpers.js';

const rng = new Rng(7);
const randn = (shape: number[], scale = 1) => tf.tensor(Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => scale * rng.normal()), shape);

/** Gradients of sum(f(...) * probe) for the fast op and for a plain tfjs reference. */
function compareGradients(inputs: tf.Tensor[], fast: (...x: tf.Tensor[]) => tf.Tensor, plain: (...x: tf.Tensor[]) => tf.Tensor, tol = 1e-4) {
  const probe = tf.tidy(() => fast(...inputs)).shape;
  const weights = randn(probe);
  const objective = (f: (...x: tf.Tensor[]) => tf.Tensor) => (...x: tf.Tensor[]) => tf.sum(tf.mul(f(...x), weights));
  const fastValue = tf.tidy(() => fast(...inputs));
  const plainValue = tf.tidy(() => plain(...inputs));
  expectClose(fastValue.dataSync(), plainValue.dataSync(), tol, 'value');
  const fastGrads = tf.grads(objective(fast))(inputs);
  const plainGrads = tf.grads(objective(plain))(inputs);
  fastGrads.forEach((g, i) => expectClose(g.dataSync(), plainGrads[i].dataSync(), tol, `grad ${i}`));
  tf.dispose([weights, fastValue, plainValue, ...fastGrads, ...plainGrads]);
}

describe('fast tensor ops: values and gradients equal plain tfjs', () => {
  it('matmul by a constant gives only x a gradient', () => {
    const [x, c] = [randn([9, 6]), randn([6, 6])];
    const cT = tf.transpose(c);
    compareGradients([x], (xi) => matmulConstant(xi as tf.Tensor2D, c as tf.Tensor2D, cT as tf.Tensor2D), (xi) => tf.matMul(xi as tf.Tensor2D, c as tf.Tensor2D));
    tf.dispose([x, c, cT]);
  });

  it('column scaling and bias reduce over rows correctly', () => {
    const [x, w] = [randn([11, 4]), randn([4])];
    compareGradients([x, w], (a, b) => scaleColumns(a as tf.Tensor2D, b as tf.Tensor1D), (a, b) => tf.mul(a, b));
    compareGradients([x, w], (a, b) => addColumns(a as tf.Tensor2D, b as tf.Tensor1D), (a, b) => tf.add(a, b));
    tf.dispose([x, w]);
  });

  it('SwiGLU, same-shape add and add of a constant keep less for their gradients but give the same ones', () => {
    const [gate, up, c] = [randn([7, 5], 2), randn([7, 5]), randn([1, 5])];
    compareGradients([gate, up], (g, u) => siluMul(g as tf.Tensor2D, u as tf.Tensor2D), (g, u) => tf.mul(tf.mul(g, tf.sigmoid(g)), u));
    compareGradients([gate, up], (a, b) => addSameShape(a, b), (a, b) => tf.add(a, b));
    compareGradients([gate], (a) => addConstant(a, c), (a) => tf.add(a, c));
    tf.dispose([gate, up, c]);
  });

  it(`SwiGLU and its gradient against float64, across the native kernel's chunks and threads, NaN kept (${enginePaths().join(', ')})`, async () => {
    // 37 x 4001 spans five of the kernel's 32768-element chunks with a ragged tail; gates up to
    // +-40 reach sigmoid's saturation, where e^x is clamped.
    const [rows, cols] = [37, 4001];
    const gate = Float32Array.from({ length: rows * cols }, (_, i) => (i % 97 === 0 ? 40 * (2 * rng.next() - 1) : 4 * rng.normal()));
    gate[5] = NaN;
    const up = Float32Array.from({ length: rows * cols }, () => rng.normal());
    const dy = Float32Array.from({ length: rows * cols }, () => rng.normal());
    const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
    const value = Float64Array.from(gate, (g, i) => g * sigmoid(g) * up[i]);
    const dGate = Float64Array.from(gate, (g, i) => dy[i] * up[i] * sigmoid(g) * (1 + g * (1 - sigmoid(g))));
    const dUp = Float64Array.from(gate, (g, i) => dy[i] * g * sigmoid(g));
    // float32 rounding, relative to the size of the formula's terms (d gate cancels near g = -1.28).
    const big = (x: number) => Math.max(1, Math.abs(x));
    const scales = {
      value: (i: number) => big(gate[i]) * big(up[i]),
      dGate: (i: number) => big(dy[i]) * big(up[i]) * big(gate[i]) ** 2,
      dUp: (i: number) => big(dy[i]) * big(gate[i]),
    };
    const check = (actual: Float32Array, expected: Float64Array, scale: (i: number) => number, label: string) => {
      expect(Number.isNaN(actual[5]), `${label}: a NaN gate gives NaN`).to.equal(true);
      let worst = 0;
      for (let i = 0; i < expected.length; i++) if (i !== 5) worst = Math.max(worst, Math.abs(actual[i] - expected[i]) / scale(i));
      expect(worst, label).to.be.below(1e-6);
    };
    for (const enginePath of enginePaths()) {
      await onEnginePath(enginePath, () => {
        expect(swiGluKernelsAvailable(), `${enginePath}: the fused kernel runs`).to.equal(enginePath !== 'stock');
        for (const threads of ['one thread', 'split'] as const) {
          const run = <T>(f: () => T) => (threads === 'split' ? splitFrozenProducts(f) : f());
          const [g, u, d] = [tf.tensor2d(gate, [rows, cols]), tf.tensor2d(up, [rows, cols]), tf.tensor2d(dy, [rows, cols])];
          const before = tf.memory().numTensors;
          const y = run(() => tf.tidy(() => siluMul(g, u)));
          const [gg, gu] = run(() => tf.grads((a: tf.Tensor, b: tf.Tensor) => tf.sum(tf.mul(siluMul(a as tf.Tensor2D, b as tf.Tensor2D), d)))([g, u]));
          check(y.dataSync() as Float32Array, value, scales.value, `${enginePath} ${threads} value`);
          check(gg.dataSync() as Float32Array, dGate, scales.dGate, `${enginePath} ${threads} d gate`);
          // d up's NaN comes from the gate too; its other entries are plain products.
          check(gu.dataSync() as Float32Array, dUp, scales.dUp, `${enginePath} ${threads} d up`);
          tf.dispose([y, gg, gu]);
          expect(tf.memory().numTensors, `${enginePath}: no tensors left`).to.equal(before);
          tf.dispose([g, u, d]);
        }
      });
    }
  });

  it('rmsNorm matches its definition', () => {
    const [x, w] = [randn([5, 8], 3), randn([8])];
    const plain = (a: tf.Tensor, b: tf.Tensor) => tf.mul(tf.div(a, tf.sqrt(tf.add(tf.mean(tf.square(a), -1, true), 1e-6))), b);
    compareGradients([x, w], (a, b) => rmsNorm(a as tf.Tensor2D, b as tf.Tensor1D, 1e-6), plain);
    tf.dispose([x, w]);
  });

  it(`rmsNorm without a tape (the fused kernel, native where the addon is) equals the taped ops and float64, rows shared over threads (${enginePaths().join(', ')})`, async () => {
    // 301 x 901: many rows per task and a width that is no multiple of the kernel's 8 lanes.
    const [rows, width] = [301, 901];
    const x = Float32Array.from({ length: rows * width }, () => 3 * rng.normal());
    const weight = Float32Array.from({ length: width }, () => rng.normal());
    const expected = rmsNormReference(x, weight, rows, width, 1e-6);
    for (const enginePath of enginePaths()) {
      await onEnginePath(enginePath, () => {
        const [xt, wt] = [tf.tensor2d(x, [rows, width]), tf.tensor1d(weight)];
        // What rmsNorm computes under a tape, as tfjs ops (float32 sums: a few ulp of values up to ~12).
        const opsValue = tf.tidy(() => tf.mul(tf.mul(xt, tf.rsqrt(tf.add(tf.mean(tf.mul(xt, xt), -1, true), 1e-6))), wt));
        for (const split of [false, true]) {
          const fused = split ? splitFrozenProducts(() => rmsNorm(xt, wt, 1e-6)) : rmsNorm(xt, wt, 1e-6);
          expectClose(fused.dataSync(), expected, 2e-6, `${enginePath}${split ? ' split' : ''} against float64`);
          expectClose(fused.dataSync(), opsValue.dataSync(), 1e-5, `${enginePath}${split ? ' split' : ''} against the taped ops`);
          fused.dispose();
        }
        tf.dispose([xt, wt, opsValue]);
      });
    }
  });

  it('the fused head gives the same log-probs, entropies and gradients with its rows shared over threads', async () => {
    const [hidden, head] = [randn([37, 6]), randn([6, 50_000], 0.5)];
    const targets = Int32Array.from({ length: 37 }, () => rng.int(50_000));
    const parts = (h: tf.Tensor) => {
      const { logProbs, entropy } = headLogProbs(h as tf.Tensor2D, head as tf.Tensor2D, targets, 0.8, true);
      return tf.stack([logProbs, entropy!]);
    };
    const weights = randn([2, 37]);
    const run = () => {
      const value = tf.tidy(() => parts(hidden));
      const grad = tf.grad((h: tf.Tensor) => tf.sum(tf.mul(parts(h), weights)))(hidden);
      return [value.dataSync(), grad.dataSync(), tf.dispose([value, grad])] as const;
    };
    const [value, grad] = run();
    const [splitValue, splitGrad] = splitFrozenProducts(run);
    expectClose(splitValue, value, 0, 'log-probs and entropies');
    expectClose(splitGrad, grad, 0, 'gradient');
    tf.dispose([hidden, head, weights]);
  });

  it('embedding: a gather whose gradient is a scatter-add (repeated ids included)', () => {
    const table = randn([10, 4]);
    const ids = Int32Array.from([3, 1, 3, 9, 0, 3]);
    const oneHot = tf.oneHot(tf.tensor1d(ids, 'int32'), 10).toFloat();
    compareGradients([table], (t) => embed(t as tf.Tensor2D, ids), (t) => tf.matMul(oneHot, t as tf.Tensor2D));
    tf.dispose([table, oneHot]);
  });

  // Over 300k logits float32 sums drift by ~1e-3 in both implementations (checked against float64),
  // so the large case gets a looser bound; a wrong chunk offset would still be off by O(1).
  for (const [label, vocab, rows, tol] of [
    ['small vocabulary, one chunk', 17, 9, 2e-4],
    ['large vocabulary, many chunks', 300_000, 41, 5e-3],
  ] as const) {
    it(`fused head log-probs and entropy: ${label}`, function () {
      this.timeout(60000);
      const hidden = randn([rows, 6]);
      const head = randn([6, vocab], 0.5);
      const targets = Int32Array.from({ length: rows }, () => rng.int(vocab));
      const temperature = 0.7;
      const plainParts = (h: tf.Tensor, w: tf.Tensor) => {
        const logp = tf.logSoftmax(tf.div(tf.matMul(h as tf.Tensor2D, w as tf.Tensor2D), temperature));
        const picked = tf.sum(tf.mul(logp, tf.oneHot(tf.tensor1d(targets, 'int32'), vocab)), 1);
        const entropy = tf.neg(tf.sum(tf.mul(tf.exp(logp), logp), 1));
        return tf.stack([picked, entropy]);
      };
      const fastParts = (h: tf.Tensor, w: tf.Tensor) => {
        const { logProbs, entropy } = headLogProbs(h as tf.Tensor2D, w as tf.Tensor2D, targets, temperature, true);
        return tf.stack([logProbs, entropy!]);
      };
      compareGradients([hidden, head], fastParts, plainParts, tol);
      tf.dispose([hidden, head]);
    });
  }

  it('sum pi^2 rides along the log-prob pass (optimal_token_baseline): sum of softmax(z / T)^2 per row, log-probs unchanged, on every engine path; refused under a gradient', async () => {
    const [h, w] = [randn([7, 4]), randn([4, 13], 2)];
    const targets = Int32Array.from({ length: 7 }, () => rng.int(13));
    const probs = tf.tidy(() => tf.softmax(tf.div(tf.matMul(h as tf.Tensor2D, w as tf.Tensor2D), 0.6)).arraySync() as number[][]);
    const expected = probs.map((row) => row.reduce((a, p) => a + p * p, 0));
    for (const enginePath of enginePaths()) {
      await onEnginePath(enginePath, () => {
        const [plain, both, sums] = tf.tidy(() => {
          const out = headLogProbs(h as tf.Tensor2D, w as tf.Tensor2D, targets, 0.6, false, true);
          return [headLogProbs(h as tf.Tensor2D, w as tf.Tensor2D, targets, 0.6).logProbs, out.logProbs, out.sumPiSquared!];
        });
        expectClose(sums.dataSync(), expected, 1e-5, `${enginePath} sum pi^2`);
        expectClose(both.dataSync(), plain.dataSync(), 0, `${enginePath} log-probs`);
        tf.dispose([plain, both, sums]);
      });
    }
    expect(() => tf.grad((x: tf.Tensor) => tf.sum(headLogProbs(x as tf.Tensor2D, w as tf.Tensor2D, targets, 0.6, false, true).logProbs))(h)).to.throw(/only without gradients/);
    tf.dispose([h, w]);
  });

  it('leaves no tensors behind outside a gradient scope', () => {
    const [h, w] = [randn([5, 3]), randn([3, 11])];
    const before = tf.memory().numTensors;
    const out = tf.tidy(() => headLogProbs(h as tf.Tensor2D, w as tf.Tensor2D, Int32Array.from([1, 2, 3, 4, 5])).logProbs);
    out.dispose();
    expect(tf.memory().numTensors).to.equal(before);
    tf.dispose([h, w]);
  });
});
