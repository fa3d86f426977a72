// What FlowRL's objective converges to, on a case solvable exactly: a softmax policy over K whole
// answers of different lengths, trained on the exact expectation over the answers (no sampling noise)
// with the objective exactly as implemented (computeFlowRLLoss). Each answer's log-prob is spread
// evenly over its tokens, so the per-token mean is log pi(y) / |y|, as in a language model.
//   - length_normalize true (the recipe): delta = 0 for every answer gives
//     log pi(y) = log pi_ref(y) + |y| * (beta * r(y) - log Z): a tilt by length among equal rewards;
//   - length_normalize false: pi(y) = pi_ref(y) * exp(beta * r(y)) / Z, the reference's ratios kept.
// Both with a learned log Z and with the group estimate (flowrl.log_z: group), and with on-policy
// (q = pi) or off-policy (q = pi_ref) weights over the answers.
import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { stopGradient } from '../core-adapters/index.js';
import { computeFlowRLLoss } from '../plugin/objective.js';

const REF = [0.3, 0.25, 0.2, 0.15, 0.1];
const LENGTHS = [2, 3, 4, 3, 5];
const REWARD = [1, 1, 1, 0, 0];
const BETA = 1;
const T = Math.max(...LENGTHS);

/** The analytic fixed point: pi(y) = pi_ref(y) * exp(n(y) * (beta r(y) - log Z)), log Z by bisection so that it sums to 1. */
function analyticFixedPoint(lengthNormalize: boolean): number[] {
  const scale = (k: number) => (lengthNormalize ? LENGTHS[k] : 1);
  const total = (logZ: number) => REF.reduce((s, p, k) => s + p * Math.exp(scale(k) * (BETA * REWARD[k] - logZ)), 0);
  let [lo, hi] = [-20, 20];
  for (let i = 0; i < 200; i++) {
    const mid = (lo + hi) / 2;
    if (total(mid) > 1) lo = mid;
    else hi = mid;
  }
  const logZ = (lo + hi) / 2;
  return REF.map((p, k) => p * Math.exp(scale(k) * (BETA * REWARD[k] - logZ)));
}

/** Trains logits (and a log Z) on the exact expected FlowRL loss; returns the policy. */
function train(options: { lengthNormalize: boolean; groupLogZ: boolean; onPolicy: boolean; explore?: number }): number[] {
  const K = REF.length;
  const tokenMask = tf.tensor2d(LENGTHS.flatMap((n) => Array.from({ length: T }, (_, t) => Number(t < n))), [K, T]);
  const tokenShare = tf.div(tokenMask, tf.tensor2d(LENGTHS, [K, 1]));
  const refLogProb = tf.mul(tf.log(tf.tensor2d(REF, [K, 1])), tokenShare) as tf.Tensor2D;
  const advantages = tf.mul(tf.tensor2d(REWARD, [K, 1]), tokenMask) as tf.Tensor2D;
  const logits = tf.variable(tf.zeros([K]));
  const logZ = tf.variable(tf.zeros([1]));
  const optimizer = tf.train.adam(0.1);
  const reduce = (x: tf.Tensor2D) => (options.lengthNormalize ? tf.div(tf.sum(x, 1), tf.tensor1d(LENGTHS)) : tf.sum(x, 1));
  for (let step = 0; step < 300; step++) {
    optimizer.minimize(() => {
      const logPi = tf.logSoftmax(logits) as tf.Tensor1D;
      const logProb = tf.mul(logPi.reshape([K, 1]), tokenShare) as tf.Tensor2D;
      // Rows weighted by the sampling distribution q (the loss is a plain mean over rows).
      // explore: the policy tempered to that temperature (flowrl.explore_temperature), as a proposal only.
      const q = options.onPolicy ? stopGradient(tf.softmax(tf.div(logits, options.explore ?? 1))) : tf.tensor1d(REF);
      let rowLogZ: tf.Tensor1D;
      if (options.groupLogZ) {
        // -E_q[residual without log Z], from the weights before this update (no gradient).
        const residual = tf.sub(tf.sub(reduce(logProb), tf.mul(tf.sum(advantages, 1).div(tf.tensor1d(LENGTHS)), BETA)), reduce(refLogProb));
        rowLogZ = tf.fill([K], -tf.sum(tf.mul(q, residual)).dataSync()[0]) as tf.Tensor1D;
      } else {
        rowLogZ = tf.tile(logZ, [K]) as tf.Tensor1D;
      }
      const { loss } = computeFlowRLLoss(
        { logProb, oldLogProb: logProb, refLogProb, advantages, responseMask: tokenMask as tf.Tensor2D, logZ: rowLogZ, rolloutWeights: tf.mul(q, K) as tf.Tensor1D },
        { beta: BETA, importanceSampling: false, lengthNormalize: options.lengthNormalize },
      );
      return loss;
    });
  }
  const policy = Array.from(tf.softmax(logits).dataSync());
  tf.dispose([tokenMask, tokenShare, refLogProb, advantages, logits, logZ]);
  optimizer.dispose();
  return policy;
}

function expectDistribution(actual: number[], expected: number[], tolerance: number): void {
  actual.forEach((p, k) => expect(Math.abs(p - expected[k]), `answer ${k}: ${p} vs ${expected[k]}`).to.be.below(tolerance));
}

describe('FlowRL fixed points on an exactly solvable case', function () {
  this.timeout(60_000);

  it('length-normalised (the recipe): converges to pi_ref * exp(|y| (beta r - log Z)), which tilts equal-reward answers by length', () => {
    const target = analyticFixedPoint(true);
    expectDistribution(train({ lengthNormalize: true, groupLogZ: false, onPolicy: true }), target, 2e-3);
    // The tilt is real: the correct answers' shares differ from the reference's restricted to them.
    const correctShare = (p: number[]) => p.slice(0, 3).map((x) => x / (p[0] + p[1] + p[2]));
    const refShare = correctShare(REF);
    expect(Math.max(...correctShare(target).map((s, k) => Math.abs(s - refShare[k])))).to.be.above(0.02);
  });

  it('without length normalisation: converges to pi_ref * exp(beta r) / Z, the reference restricted to equal rewards', () => {
    const target = analyticFixedPoint(false);
    const tilted = REF.map((p, k) => p * Math.exp(BETA * REWARD[k]));
    const Z = tilted.reduce((a, b) => a + b, 0);
    expectDistribution(target, tilted.map((x) => x / Z), 1e-9);
    expectDistribution(train({ lengthNormalize: false, groupLogZ: false, onPolicy: true }), target, 2e-3);
  });

  it('the group log Z and off-policy proposals (the reference, the policy at temperature 2) keep the same fixed points', () => {
    expectDistribution(train({ lengthNormalize: false, groupLogZ: true, onPolicy: true }), analyticFixedPoint(false), 2e-3);
    expectDistribution(train({ lengthNormalize: false, groupLogZ: false, onPolicy: true, explore: 2 }), analyticFixedPoint(false), 2e-3);
    expectDistribution(train({ lengthNormalize: false, groupLogZ: false, onPolicy: false }), analyticFixedPoint(false), 2e-3);
    expectDistribution(train({ lengthNormalize: true, groupLogZ: true, onPolicy: false }), analyticFixedPoint(true), 2e-3);
  });
});
