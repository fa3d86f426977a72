// Truncated importance sampling for rollouts sampled by another engine (algorithm.rollout_correction):
// the weights and metrics by hand, the config key, and how the PPO and FlowRL actors apply them.
import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import path from 'node:path';
import {
  AdamW,
  Batch,
  loadModel,
  LrScheduler,
  resolveConfig,
  sequenceRolloutCorrection,
  tokenRolloutCorrection,
  type CausalLM,
  type Config,
  type ConfigTree,
  type Metrics,
  type MicroBatchShare,
  type PolicyModule,
} from '../core-adapters/index.js';
import { PPOActor } from '../core-adapters/actor/ppo-actor.js';
import { HOST_VERSION } from '../core-adapters/package-root.js';
import { pluginConfigLayer, readManifest } from '../core-adapters/plugins/manifest.js';
import { OVERRIDABLE_BINDINGS } from '../core-adapters/tokens.js';
import { miniBatchDenominators, vanillaPolicyLoss } from '../core-adapters/algorithms/policy-loss.js';
import { sequencesFromSamples } from '../core-adapters/workers/sequences.js';
import { FlowRLActor, PROJ_Z } from '../plugin/flowrl-actor.js';
import { computeFlowRLLoss } from '../plugin/objective.js';
import { disposeMetrics, type PendingMetrics } from '../core-adapters/engine/readback.js';
import { ProjZ } from '../plugin/proj-z.js';
import { expectClose, expectInputError, expectSameBits, fixture, ROOT, tempDir } from './helpers.js';

const KEY = 'algorithm.rollout_correction.tis_cap';
const USER_FILE = path.join(tempDir('flowrl-tis-'), 'run.yaml');

/** The resolved config (core and FlowRL plugin defaults) with `user` on top. */
function config(user: ConfigTree = {}, overrides: string[] = []): Config {
  const manifest = readManifest(path.join(ROOT, 'plugin.json'), HOST_VERSION, OVERRIDABLE_BINDINGS);
  return resolveConfig({ pluginDefaults: [pluginConfigLayer(manifest)], user, userFile: USER_FILE, overrides });
}

describe('rollout correction (TIS)', () => {
  // Rows: two full ones and one of padding; old_log_probs at padding is junk that must not count.
  const old = [-1, -2, -0.5, -1, -3, -7];
  const rollout = [-1.5, -1, -0.5, -2, -3, 0];
  const mask = [1, 1, 1, 1, 1, 0];
  // old - rollout on valid tokens: 0.5, -1, 0, 1, 0.

  describe('tokenRolloutCorrection', () => {
    it('weights min(exp(old - rollout), C) per valid token, 1 at padding, and the three metrics', () => {
      const { weights, metrics } = tokenRolloutCorrection(old, rollout, mask, 2);
      expectClose(weights, [Math.exp(0.5), Math.exp(-1), 1, 2, 1, 1], 1e-7, 'weights');
      expect(metrics['rollout/logprob_diff_mean']).to.be.closeTo((0.5 + 1 + 0 + 1 + 0) / 5, 1e-12);
      expect(metrics['rollout/logprob_diff_max']).to.equal(1);
      // Only exp(1) = 2.72 exceeds 2.
      expect(metrics['rollout/tis_clipfrac']).to.be.closeTo(1 / 5, 1e-12);
    });

    it('a cap of null gives weights 1 and clipfrac 0, with the same diff metrics', () => {
      const { weights, metrics } = tokenRolloutCorrection(old, rollout, mask, null);
      expect([...weights]).to.deep.equal([1, 1, 1, 1, 1, 1]);
      expect(metrics).to.deep.equal({ 'rollout/logprob_diff_mean': 0.5, 'rollout/logprob_diff_max': 1, 'rollout/tis_clipfrac': 0 });
    });

    it('no valid token gives zero metrics, not NaN', () => {
      const { weights, metrics } = tokenRolloutCorrection([1, 2], [0, 0], [0, 0], 2);
      expect([...weights]).to.deep.equal([1, 1]);
      expect(metrics).to.deep.equal({ 'rollout/logprob_diff_mean': 0, 'rollout/logprob_diff_max': 0, 'rollout/tis_clipfrac': 0 });
    });
  });

  describe('sequenceRolloutCorrection', () => {
    it('weights min(exp(sum_t (old - rollout)), C) per row, 1 for an empty row, and the truncated fraction of rows', () => {
      // Rows of width 2: mismatches (0.5, -1), (1, 1.5) and an empty row.
      const seqOld = [-1, -2, -1, -0.5, -7, -7];
      const seqRollout = [-1.5, -1, -2, -2, 0, 0];
      const seqMask = [1, 1, 1, 1, 0, 0];
      const { weights, metrics } = sequenceRolloutCorrection(seqOld, seqRollout, seqMask, 3, 2);
      // Sums -0.5 and 2.5: exp(-0.5) and exp(2.5) = 12.2 truncated at 2.
      expectClose(weights, [Math.exp(-0.5), 2, 1], 1e-7, 'weights');
      expect(metrics).to.deep.equal({
        'rollout/logprob_diff_mean': (0.5 + 1 + 1 + 1.5) / 4,
        'rollout/logprob_diff_max': 1.5,
        'rollout/tis_clipfrac': 2 / 4,
        'rollout/tis_seq_clipfrac': 1 / 2,
      });
      const off = sequenceRolloutCorrection(seqOld, seqRollout, seqMask, 3, null);
      expect([...off.weights]).to.deep.equal([1, 1, 1]);
      expect(off.metrics['rollout/tis_seq_clipfrac']).to.equal(0);
    });
  });

  describe(`config key ${KEY}`, () => {
    it('defaults to 2 and takes a positive number or null, from the file or the command line', () => {
      expect(config().algorithm.rollout_correction.tis_cap).to.equal(2);
      expect(config({ algorithm: { rollout_correction: { tis_cap: null } } }).algorithm.rollout_correction.tis_cap).to.equal(null);
      expect(config({ algorithm: { rollout_correction: { tis_cap: 0.5 } } }).algorithm.rollout_correction.tis_cap).to.equal(0.5);
      expect(config({}, [`${KEY}=null`]).algorithm.rollout_correction.tis_cap).to.equal(null);
      expect(config({}, [`${KEY}=3`]).algorithm.rollout_correction.tis_cap).to.equal(3);
    });

    it('refuses 0, a negative number and a string, naming the key', () => {
      for (const bad of [0, -1, 'two']) {
        expectInputError(() => config({ algorithm: { rollout_correction: { tis_cap: bad } } }), `'${KEY}'`, 'a number > 0 or null');
      }
      expectInputError(() => config({}, [`${KEY}=0`]), 'command line', `'${KEY}'`);
    });
  });

  it('the vanilla policy loss multiplies each token loss by its weight before aggregation', () => {
    // Ratio 1: token losses -A = [-1, 3]; weighted [-2, 1.5]; token-mean -0.25.
    const value = tf.tidy(() => {
      const r = vanillaPolicyLoss(
        { logProb: tf.tensor2d([[-1, -2]]), oldLogProb: tf.tensor2d([[-1, -2]]), advantages: tf.tensor2d([[1, -3]]), responseMask: tf.ones([1, 2]) as tf.Tensor2D, tokenWeights: tf.tensor2d([[2, 0.5]]) },
        { clipRatioLow: 0.2, clipRatioHigh: 0.2, clipRatioC: 3, lossAggMode: 'token-mean' },
      );
      const v = r.loss.dataSync()[0];
      // The loss's metrics are kept scalars (actor/final_loss is the loss itself): disposed after reading it.
      disposeMetrics(r.metrics);
      return v;
    });
    expect(value).to.be.closeTo(-0.25, 1e-7);
  });

  it('the FlowRL objective multiplies each sequence weight by the engine factor (hand-computed)', () => {
    const beta = 15;
    const oldLp = [
      [-1, -2],
      [-0.5, 0],
    ];
    const rolloutLp = [
      [-1.2, -2.3],
      [-2, 0],
    ];
    const logProb = [
      [-0.9, -1.9],
      [-0.5, 0],
    ];
    const maskRows = [
      [1, 1],
      [1, 0],
    ];
    const engine = sequenceRolloutCorrection(oldLp.flat(), rolloutLp.flat(), maskRows.flat(), 2, 2);
    // Engine: row sums 0.5 and 1.5 -> exp(0.5) and min(exp(1.5), 2) = 2.
    expectClose(engine.weights, [Math.exp(0.5), 2], 1e-7, 'engine weights');
    // delta_b = logZ + mean log pi - beta A - mean log pi_ref; FlowRL's own w = exp(sum(log pi - old)) = exp(0.2), 1.
    const deltas = [0.5 + -1.4 - beta * 0.1 - -1, -0.2 + -0.5 - beta * -0.2 - -1];
    const own = [Math.exp(0.2), 1];
    const expected = (own[0] * Math.exp(0.5) * deltas[0] ** 2 + own[1] * 2 * deltas[1] ** 2) / 2;
    const inputs = () => ({
      logProb: tf.tensor2d(logProb),
      oldLogProb: tf.tensor2d(oldLp),
      refLogProb: tf.tensor2d([
        [-1, -1],
        [-1, 0],
      ]),
      advantages: tf.tensor2d([
        [0.1, 0.1],
        [-0.2, 0],
      ]),
      responseMask: tf.tensor2d(maskRows),
      logZ: tf.tensor1d([0.5, -0.2]),
      rolloutWeights: tf.tensor1d(engine.weights),
    });
    const value = tf.tidy(() => {
      const r = computeFlowRLLoss(inputs(), { beta });
      const v = r.loss.dataSync()[0];
      // The loss's metrics are kept scalars (actor/final_loss is the loss itself): disposed after reading it.
      disposeMetrics(r.metrics);
      return v;
    });
    expect(value).to.be.closeTo(expected, 1e-5 * expected);
    // The factor is a constant: d loss / d logZ_b = w_b c_b delta_b (2 / B).
    const grad = tf.tidy(() => {
      const t = inputs();
      let pending: PendingMetrics = {};
      const g = tf.grad((z: tf.Tensor) => {
        const r = computeFlowRLLoss({ ...t, logZ: z as tf.Tensor1D }, { beta });
        pending = r.metrics;
        return r.loss;
      })(t.logZ);
      disposeMetrics(pending);
      return g.dataSync() as Float32Array;
    });
    expectClose(grad, [own[0] * Math.exp(0.5) * deltas[0], own[1] * 2 * deltas[1]], 1e-5 * Math.abs(deltas[1]) * 2, 'd loss / d logZ');
  });

  describe('in the actors (tiny-qwen2, one micro-batch)', () => {
    let lm: CausalLM;
    before(() => {
      lm = loadModel(fixture('tiny-qwen2'));
    });
    after(() => lm.dispose());

    /** A module over lm whose optimizer steps at lr 0 (updatePolicy runs but changes nothing). */
    function policyModule(heads = new Map<string, ProjZ>()): PolicyModule {
      const params = new Map(lm.trainableParams());
      for (const head of heads.values()) for (const [name, v] of head.params) params.set(name, v);
      return {
        lm,
        heads,
        params,
        optimizer: new AdamW({ lr: 0, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0 }),
        lrScheduler: new LrScheduler({ lr: 0, warmupSteps: 0, minLrRatio: 0, numCycles: 0.5 }),
      };
    }

    /** Prompts with sampled responses, the actor's own old log-probs, per-row advantages (and ref = old). */
    async function rollouts(actor: PPOActor, responses: number[][]): Promise<Batch> {
      const R = 4;
      const batch = new Batch({ tensors: sequencesFromSamples([[5, 6, 7], [8, 9]], responses, R, 0) });
      const B = batch.size;
      const m = batch.tensor('response_mask').data;
      const oldLp = (await actor.computeLogProbHere(batch, { withEntropy: false })).logProbs;
      const advantages = Float32Array.from(m, (v, i) => v * (i < R ? 0.7 : -1.2));
      batch.set('old_log_probs', { shape: [B, R], data: oldLp });
      batch.set('ref_log_prob', { shape: [B, R], data: Float32Array.from(oldLp) });
      batch.set('advantages', { shape: [B, R], data: advantages });
      return batch;
    }

    /** The batch with rollout_log_probs = old - shift on valid tokens (0 at padding). */
    function withRollout(batch: Batch, shift: number): Batch {
      const out = batch.slice(0);
      const oldLp = batch.tensor('old_log_probs');
      const m = batch.tensor('response_mask').data;
      out.set('rollout_log_probs', { shape: oldLp.shape, data: Float32Array.from(oldLp.data, (v, i) => (m[i] ? v - shift : 0)) });
      return out;
    }

    async function lossAndGrads(actor: PPOActor, batch: Batch): Promise<{ metrics: Metrics; grads: Map<string, Float32Array> }> {
      const part: MicroBatchShare = { global: miniBatchDenominators(batch.tensor('response_mask')), share: 1, step: 0, onPolicy: false, firstRow: 0 };
      const { grads, metrics } = await actor.microBatchGradients(batch, part);
      const plain = new Map([...grads].map(([name, g]) => [name, Float32Array.from(g.dataSync() as Float32Array)]));
      tf.dispose([...grads.values()]);
      expect(metrics).to.have.length(1);
      return { metrics: metrics[0], grads: plain };
    }

    function expectScaled(actual: Map<string, Float32Array>, base: Map<string, Float32Array>, factor: number): void {
      for (const [name, g] of base) {
        const scale = Math.max(1e-3, ...g.map(Math.abs));
        expectClose(actual.get(name)!, g.map((v) => v * factor), 1e-5 * factor * scale, name);
      }
    }

    it('PPO: rollout_log_probs equal to old_log_probs leaves loss and gradients bit for bit; a constant shift scales them by min(exp(shift), C)', async () => {
      const actor = new PPOActor(config({ algorithm: { name: 'ppo' } }), vanillaPolicyLoss);
      actor.attach(policyModule());
      const batch = await rollouts(actor, [[10, 11, 12, 13], [14, 15]]);
      const base = await lossAndGrads(actor, batch);
      expect(base.metrics['actor/pg_loss']).to.not.equal(0);

      const same = await lossAndGrads(actor, withRollout(batch, 0));
      expect(same.metrics['actor/pg_loss']).to.equal(base.metrics['actor/pg_loss']);
      for (const [name, g] of base.grads) expectSameBits(same.grads.get(name)!, g, name);

      // Engine log-probs 0.3 below the trainer's: every weight is exp(0.3) = 1.35 < 2.
      const up = await lossAndGrads(actor, withRollout(batch, 0.3));
      expect(up.metrics['actor/pg_loss']).to.be.closeTo(Math.exp(0.3) * base.metrics['actor/pg_loss'], 1e-6 * Math.abs(base.metrics['actor/pg_loss']));
      expectScaled(up.grads, base.grads, Math.exp(0.3));
      // 0.5 above: exp(-0.5); 1 below: exp(1) truncated at 2.
      const down = await lossAndGrads(actor, withRollout(batch, -0.5));
      expect(down.metrics['actor/pg_loss']).to.be.closeTo(Math.exp(-0.5) * base.metrics['actor/pg_loss'], 1e-6 * Math.abs(base.metrics['actor/pg_loss']));
      const capped = await lossAndGrads(actor, withRollout(batch, 1));
      expect(capped.metrics['actor/pg_loss']).to.be.closeTo(2 * base.metrics['actor/pg_loss'], 1e-6 * Math.abs(base.metrics['actor/pg_loss']));
      expectScaled(capped.grads, base.grads, 2);
      // The PPO clip statistics are about pi / pi_old and do not move.
      expect(capped.metrics['actor/ppo_kl']).to.equal(base.metrics['actor/ppo_kl']);
      // The per-micro-batch weights tensor is released with the loss's other tensors.
      const tensors = tf.memory().numTensors;
      await lossAndGrads(actor, withRollout(batch, 0.3));
      expect(tf.memory().numTensors).to.equal(tensors);
    });

    it('PPO: tis_cap null trains as local sampling does; updatePolicy reports the metrics whenever rollout_log_probs exists', async () => {
      const off = new PPOActor(config({ algorithm: { name: 'ppo', rollout_correction: { tis_cap: null } } }), vanillaPolicyLoss);
      off.attach(policyModule());
      const batch = await rollouts(off, [[10, 11, 12, 13], [14, 15]]);
      const base = await lossAndGrads(off, batch);
      const skewed = await lossAndGrads(off, withRollout(batch, 1));
      expect(skewed.metrics['actor/pg_loss']).to.equal(base.metrics['actor/pg_loss']);
      for (const [name, g] of base.grads) expectSameBits(skewed.grads.get(name)!, g, name);

      const local = await off.updatePolicy(batch);
      expect(Object.keys(local).filter((k) => k.startsWith('rollout/'))).to.deep.equal([]);
      const metricsOff = await off.updatePolicy(withRollout(batch, 1));
      expect(metricsOff['rollout/logprob_diff_mean']).to.be.closeTo(1, 1e-6);
      expect(metricsOff['rollout/tis_clipfrac']).to.equal(0);

      const on = new PPOActor(config({ algorithm: { name: 'ppo' } }), vanillaPolicyLoss);
      on.attach(policyModule());
      const metricsOn = await on.updatePolicy(withRollout(batch, 1));
      expect(metricsOn['rollout/logprob_diff_mean']).to.be.closeTo(1, 1e-6);
      expect(metricsOn['rollout/logprob_diff_max']).to.be.closeTo(1, 1e-6);
      expect(metricsOn['rollout/tis_clipfrac']).to.equal(1);
    });

    it('FlowRL: the engine factor is exp of the summed mismatch truncated at C, multiplied into the sequence weight', async () => {
      const actor = new FlowRLActor(config({ algorithm: { name: 'flowrl' } }), vanillaPolicyLoss);
      const head = new ProjZ(lm.config.hiddenSize, { layers: 2, dropout: 0.1, seed: 3 });
      try {
        actor.attach(policyModule(new Map([[PROJ_Z, head]])));
        // Equal lengths (4 tokens), so a constant shift gives every row the same factor.
        const batch = await rollouts(actor, [[10, 11, 12, 13], [14, 15, 16, 17]]);
        const base = await lossAndGrads(actor, batch);
        const same = await lossAndGrads(actor, withRollout(batch, 0));
        expect(same.metrics['actor/final_loss']).to.equal(base.metrics['actor/final_loss']);
        for (const [name, g] of base.grads) expectSameBits(same.grads.get(name)!, g, name);

        // Shift 0.1 per token: exp(0.4) = 1.49 per row; shift 0.3: exp(1.2) = 3.3, truncated at 2.
        const up = await lossAndGrads(actor, withRollout(batch, 0.1));
        expect(up.metrics['actor/final_loss']).to.be.closeTo(Math.exp(0.4) * base.metrics['actor/final_loss'], 1e-5 * base.metrics['actor/final_loss']);
        expectScaled(up.grads, base.grads, Math.exp(0.4));
        const capped = await lossAndGrads(actor, withRollout(batch, 0.3));
        expect(capped.metrics['actor/final_loss']).to.be.closeTo(2 * base.metrics['actor/final_loss'], 1e-5 * base.metrics['actor/final_loss']);
        // FlowRL's own importance weight (pi / pi_old) is reported as before.
        expect(capped.metrics['actor/importance_weight']).to.equal(base.metrics['actor/importance_weight']);

        const metrics = await actor.updatePolicy(withRollout(batch, 0.3));
        expect(metrics['rollout/logprob_diff_mean']).to.be.closeTo(0.3, 1e-6);
        expect(metrics['rollout/tis_clipfrac']).to.equal(0);
        expect(metrics['rollout/tis_seq_clipfrac']).to.equal(1);
      } finally {
        head.dispose();
      }
    });
  });
});
