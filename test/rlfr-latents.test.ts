import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { Rng } from '../core-adapters/index.js';
import { contextRows, flowDeviation, hookLayers } from '../plugin/rlfr/latents.js';
import { VelocityField } from '../plugin/rlfr/velocity-field.js';
import { expectClose } from './helpers.js';

describe('RLFR latents and deviations', () => {
  it('places hooks at round(p * L) with Python rounding, never past the last layer', () => {
    expect(hookLayers([0.25, 0.5, 0.75], 28)).to.deep.equal([7, 14, 21]);
    expect(hookLayers([0.25, 0.5, 0.75], 32)).to.deep.equal([8, 16, 24]);
    expect(hookLayers([0.25, 0.5, 0.75], 36)).to.deep.equal([9, 18, 27]);
    // 0.25 * 2 = 0.5 rounds to 0 and 0.75 * 2 = 1.5 to 2 (half to even); 1.0 * 2 clamps to 1.
    expect(hookLayers([0.25, 0.75, 1], 2)).to.deep.equal([0, 1, 1]);
    expect(hookLayers([0.25, 0.5, 0.75], 6)).to.deep.equal([2, 3, 4]);
  });

  it('pairs targets with their contexts per sequence (token_post, token_pre, identity)', () => {
    expect(Array.from(contextRows(2, 3, 'token_post'))).to.deep.equal([-1, 0, 1, -1, 3, 4]);
    expect(Array.from(contextRows(2, 3, 'token_pre'))).to.deep.equal([1, 2, -1, 4, 5, -1]);
    expect(Array.from(contextRows(1, 3, 'identity'))).to.deep.equal([0, 1, 2]);
  });

  it('with v = 0 the deviation is w(t) * mean_d (x1 - eps)^2, and t/(1-t) = 4 at t = 0.8', async () => {
    const field = new VelocityField({ latentSize: 3, width: 4, depth: 1, eps: 1e-6, seed: 1 });
    const x1 = tf.tensor2d([1, 2, 3, -1, 0, 2], [2, 3]);
    const context = tf.zerosLike(x1) as tf.Tensor2D;
    const deviation = await flowDeviation(field, x1, context, 0.5, new Rng(7));
    const rng = new Rng(7);
    const eps = Array.from({ length: 6 }, () => rng.normal());
    const x = [1, 2, 3, -1, 0, 2];
    const expected = [0, 1].map((r) => (4 * [0, 1, 2].reduce((s, j) => s + (x[r * 3 + j] - eps[r * 3 + j]) ** 2, 0)) / 3);
    expectClose(deviation, expected, 1e-4);
    tf.dispose([x1, context]);
    field.dispose();
  });
});
