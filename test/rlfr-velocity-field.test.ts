import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { AdamW, lossAndGradients, Rng } from '../core-adapters/index.js';
import { flowMatchingLoss, VelocityField } from '../plugin/rlfr/velocity-field.js';
import { enginePaths, onEnginePath } from './helpers.js';

describe('RLFR velocity field', function () {
  this.timeout(120000);

  it('predicts exactly zero at initialisation', () => {
    const field = new VelocityField({ latentSize: 6, width: 10, depth: 2, eps: 1e-6, seed: 1 });
    const rng = new Rng(2);
    const v = tf.tidy(() =>
      field.forward({
        x: tf.tensor2d(Float32Array.from({ length: 30 }, () => rng.normal()), [5, 6]),
        context: tf.tensor2d(Float32Array.from({ length: 30 }, () => rng.normal()), [5, 6]),
        t: [0.1, 0.5, 0.8, 0.9, 0.3],
        layer: [0.25, 0.5, 0.75, 0.25, 0.5],
      }),
    );
    expect(Array.from(v.dataSync()).every((x) => x === 0)).to.equal(true);
    v.dispose();
    field.dispose();
  });

  for (const enginePath of enginePaths()) {
    it(`rectified-flow training lowers the loss on latents that depend on their context (${enginePath})`, () =>
      onEnginePath(enginePath, () => {
        const d = 8;
        const N = 64;
        const rng = new Rng(3);
        const mixing = Float32Array.from({ length: d * d }, () => rng.normal() / Math.sqrt(d));
        const contextData = Float32Array.from({ length: N * d }, () => rng.normal());
        // x1 = context @ mixing: predictable from the context, so the field can learn the velocity.
        const [context, x1] = tf.tidy(() => {
          const c = tf.tensor2d(contextData, [N, d]);
          return [c, tf.matMul(c, tf.tensor2d(mixing, [d, d]))];
        });
        const layer = new Float32Array(N).fill(0.5);
        const mask = new Float32Array(N).fill(1);
        const field = new VelocityField({ latentSize: d, width: 32, depth: 2, eps: 1e-6, seed: 4 });
        const evaluate = () => {
          const loss = tf.tidy(() => flowMatchingLoss(field, x1 as tf.Tensor2D, context as tf.Tensor2D, layer, mask, new Rng(99)));
          const value = loss.dataSync()[0];
          loss.dispose();
          return value;
        };
        const before = evaluate();
        const optimizer = new AdamW({ lr: 3e-3, weightDecay: 0 });
        const trainRng = new Rng(5);
        for (let step = 0; step < 150; step++) {
          const { loss, grads } = lossAndGradients(() => flowMatchingLoss(field, x1 as tf.Tensor2D, context as tf.Tensor2D, layer, mask, trainRng), field.params);
          optimizer.apply(field.params, grads);
          tf.dispose([loss, ...grads.values()]);
        }
        const after = evaluate();
        expect(after, `${before} -> ${after}`).to.be.lessThan(0.6 * before);
        optimizer.dispose();
        field.dispose();
        tf.dispose([context, x1]);
      }));
  }
});
