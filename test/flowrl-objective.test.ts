// The FlowRL objective and the ProjZ head against an independent float64 PyTorch reference
// (test/fixtures/flowrl/make_reference.py -> reference.json), plus ProjZ's PyTorch-default init and dropout.
import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { computeFlowRLLoss, type FlowRLInputs, type FlowRLOptions } from '../plugin/objective.js';
import { ProjZ } from '../plugin/proj-z.js';
import { Rng } from '../core-adapters/index.js';
import { disposeMetrics, readMetrics, type PendingMetrics } from '../core-adapters/engine/readback.js';
import { expectClose, fixture, readJson } from './helpers.js';

type Matrix = number[][];

interface ObjectiveCase {
  name: string;
  batch: number;
  length: number;
  inputs: { logProb: Matrix; oldLogProb: Matrix; refLogProb: Matrix; advantages: Matrix; responseMask: Matrix; logZ: number[] };
  options: Required<FlowRLOptions>;
  expected: {
    loss: number;
    grad_log_prob: Matrix;
    grad_log_z: number[];
    metrics: Record<string, number>;
    log_w: number[];
    weight: number[];
    delta: number[];
  };
}

interface ProjZCase {
  hidden: number;
  layers: number;
  batch: number;
  x: Matrix;
  g: number[];
  /** PyTorch layout: Linear weight [out, in]. */
  params: Record<string, { shape: number[]; values: number[] | Matrix }>;
  expected: { output: number[]; grad_x: Matrix; grad_params: Record<string, number[] | Matrix> };
}

interface Reference {
  objective: { cases: ObjectiveCase[] };
  proj_z: { cases: ProjZCase[] };
}

const ref = readJson<Reference>(fixture('flowrl', 'reference.json'));

const METRICS = [
  'actor/log_z',
  'actor/log_prob',
  'actor/old_log_prob',
  'actor/ref_log_prob',
  'actor/log_reward',
  'actor/importance_weight',
  'actor/ppo_kl',
  'actor/ref_kl',
  'actor/final_loss',
];

function flat(values: number | number[] | Matrix): number[] {
  return typeof values === 'number' ? [values] : (values as (number | number[])[]).flat();
}

/** Absolute tolerance `tolerance`, scaled up by the largest |expected| when that exceeds 1 (float32 relative precision). */
function expectCloseScaled(actual: ArrayLike<number>, expected: number[], tolerance: number, label: string): void {
  const scale = Math.max(1, ...expected.map(Math.abs));
  expectClose(actual, expected, tolerance * scale, label);
}

function expectFinite(values: ArrayLike<number>, label: string): void {
  for (let i = 0; i < values.length; i++) expect(Number.isFinite(values[i]), `${label}[${i}] = ${values[i]}`).to.equal(true);
}

type ObjectiveTensors = FlowRLInputs;

function objectiveTensors(c: ObjectiveCase): ObjectiveTensors {
  const i = c.inputs;
  return {
    logProb: tf.tensor2d(i.logProb),
    oldLogProb: tf.tensor2d(i.oldLogProb),
    refLogProb: tf.tensor2d(i.refLogProb),
    advantages: tf.tensor2d(i.advantages),
    responseMask: tf.tensor2d(i.responseMask),
    logZ: tf.tensor1d(i.logZ),
  };
}

function disposeAll(t: ObjectiveTensors): void {
  tf.dispose(Object.values(t));
}

describe('FlowRL objective vs the PyTorch reference (compute_flowrl)', () => {
  it('the fixture covers the cases it is meant to', () => {
    const names = ref.objective.cases.map((c) => c.name);
    expect(names).to.include.members(['mixed_padding', 'zero_mask_row', 'nonconstant_advantages', 'extreme_log_w', 'no_importance_sampling', 'beta5_cap3']);
    const extreme = ref.objective.cases.find((c) => c.name === 'extreme_log_w')!;
    expect(Math.max(...extreme.expected.log_w)).to.be.greaterThan(100);
    expect(Math.min(...extreme.expected.log_w)).to.be.lessThan(-25);
    const zero = ref.objective.cases.find((c) => c.name === 'zero_mask_row')!;
    expect(zero.inputs.responseMask.some((row) => row.every((m) => m === 0))).to.equal(true);
  });

  for (const c of ref.objective.cases) {
    it(`${c.name}: loss, d loss / d logProb, d loss / d logZ and every metric`, async () => {
      const t = objectiveTensors(c);
      try {
        const { loss, metrics: pending } = computeFlowRLLoss(t, c.options);
        const lossValue = loss.dataSync()[0];
        // The metrics are kept scalars (actor/final_loss is the loss itself), read and disposed here.
        const metrics = await readMetrics(pending, `${c.name} metrics`);
        loss.dispose();
        expectFinite([lossValue], 'loss');
        expectCloseScaled([lossValue], [c.expected.loss], 1e-5, `${c.name} loss`);

        for (const name of METRICS) {
          expect(metrics, `${c.name} metrics`).to.have.property(name);
          expectFinite([metrics[name]], name);
          expectCloseScaled([metrics[name]], [c.expected.metrics[name]], 1e-5, `${c.name} ${name}`);
        }
        for (const [name, value] of Object.entries(metrics)) expectFinite([value], `${c.name} ${name}`);

        let gradMetrics: PendingMetrics = {};
        const [gLp, gLz] = tf.grads((lp: tf.Tensor, lz: tf.Tensor) => {
          const r = computeFlowRLLoss({ ...t, logProb: lp as tf.Tensor2D, logZ: lz as tf.Tensor1D }, c.options);
          gradMetrics = r.metrics;
          return r.loss;
        })([t.logProb, t.logZ!]);
        disposeMetrics(gradMetrics);
        expect(gLp.shape).to.deep.equal([c.batch, c.length]);
        expect(gLz.shape).to.deep.equal([c.batch]);
        const gLpValues = gLp.dataSync();
        const gLzValues = gLz.dataSync();
        tf.dispose([gLp, gLz]);
        expectFinite(gLpValues, `${c.name} grad logProb`);
        expectFinite(gLzValues, `${c.name} grad logZ`);
        expectCloseScaled(gLpValues, flat(c.expected.grad_log_prob), 1e-4, `${c.name} grad logProb`);
        expectCloseScaled(gLzValues, c.expected.grad_log_z, 1e-4, `${c.name} grad logZ`);
      } finally {
        disposeAll(t);
      }
    });
  }

  it('the importance weight carries no gradient: d loss / d oldLogProb is all zeros', () => {
    for (const c of ref.objective.cases.filter((x) => x.options.importanceSampling)) {
      const t = objectiveTensors(c);
      try {
        let pending: PendingMetrics = {};
        const g = tf.grad((old: tf.Tensor) => {
          const r = computeFlowRLLoss({ ...t, oldLogProb: old as tf.Tensor2D }, c.options);
          pending = r.metrics;
          return r.loss;
        })(t.oldLogProb);
        disposeMetrics(pending);
        const values = g.dataSync();
        g.dispose();
        expectFinite(values, `${c.name} grad oldLogProb`);
        expect(Array.from(values).every((v) => v === 0), `${c.name} grad oldLogProb ${Array.from(values)}`).to.equal(true);
      } finally {
        disposeAll(t);
      }
    }
  });

  it("importanceWeightClip 'ppo' (the paper's text) clamps w to [1 - low, 1 + high] and reports the share clamped; 'cap' (the recipe) ignores those bounds", async () => {
    for (const c of ref.objective.cases.filter((x) => x.options.importanceSampling)) {
      const t = objectiveTensors(c);
      try {
        const [low, high] = [0.2, 0.28];
        const clamped = c.expected.log_w.map((lw) => Math.min(Math.max(Math.exp(lw), 1 - low), 1 + high));
        const expected = clamped.reduce((sum, w, b) => sum + w * c.expected.delta[b] ** 2, 0) / clamped.length;
        const ppo = computeFlowRLLoss(t, { ...c.options, importanceWeightClip: 'ppo', clipRatioLow: low, clipRatioHigh: high });
        expectCloseScaled([ppo.loss.dataSync()[0]], [expected], 1e-5, `${c.name} ppo loss`);
        const ppoMetrics = await readMetrics(ppo.metrics, `${c.name} ppo metrics`);
        const share = c.expected.log_w.filter((lw) => Math.exp(lw) < 1 - low || Math.exp(lw) > 1 + high).length / c.expected.log_w.length;
        expect(ppoMetrics['actor/importance_weight_clipfrac'], c.name).to.be.closeTo(share, 1e-6);
        const cap = computeFlowRLLoss(t, { ...c.options, importanceWeightClip: 'cap', clipRatioLow: low, clipRatioHigh: high });
        expectCloseScaled([cap.loss.dataSync()[0]], [c.expected.loss], 1e-5, `${c.name} cap loss`);
        disposeMetrics(cap.metrics);
        tf.dispose([ppo.loss, cap.loss]);
      } finally {
        disposeAll(t);
      }
    }
  });

  it('omitted options default to beta 15, weight max 10, importance sampling on', () => {
    const c = ref.objective.cases.find((x) => x.name === 'mixed_padding')!;
    expect(c.options).to.deep.equal({ beta: 15, importanceWeightMax: 10, importanceSampling: true });
    const t = objectiveTensors(c);
    try {
      const value = tf.tidy(() => {
        const r = computeFlowRLLoss(t);
        const v = r.loss.dataSync()[0];
        disposeMetrics(r.metrics);
        return v;
      });
      expectCloseScaled([value], [c.expected.loss], 1e-5, 'default-options loss');
    } finally {
      disposeAll(t);
    }
  });

  it('computing the loss in a tidy, or under a gradient, leaves the tensor count unchanged', () => {
    const all = ref.objective.cases.map(objectiveTensors);
    const before = tf.memory().numTensors;
    ref.objective.cases.forEach((c, k) => {
      const t = all[k];
      // The metrics are kept scalars the caller owns (actor/final_loss is the loss itself): disposed unread.
      let metrics: PendingMetrics = {};
      const loss = tf.tidy(() => {
        const r = computeFlowRLLoss(t, c.options);
        metrics = r.metrics;
        return r.loss;
      });
      loss.dispose();
      disposeMetrics(metrics);
      let pending: PendingMetrics = {};
      const grads = tf.grads((lp: tf.Tensor, lz: tf.Tensor) => {
        const r = computeFlowRLLoss({ ...t, logProb: lp as tf.Tensor2D, logZ: lz as tf.Tensor1D }, c.options);
        pending = r.metrics;
        return r.loss;
      })([t.logProb, t.logZ!]);
      tf.dispose(grads);
      disposeMetrics(pending);
    });
    expect(tf.memory().numTensors).to.equal(before);
    all.forEach(disposeAll);
  });
});

/** Loads PyTorch-layout parameters into the head (Linear weights transposed to [in, out]). */
function loadProjZ(head: ProjZ, c: ProjZCase): void {
  expect([...head.params.keys()].sort()).to.deep.equal(Object.keys(c.params).sort());
  for (const [name, { shape, values }] of Object.entries(c.params)) {
    const variable = head.params.get(name)!;
    tf.tidy(() => {
      const torchValue = tf.tensor(values, shape);
      const value = shape.length === 2 ? tf.transpose(torchValue) : torchValue;
      expect(variable.shape, name).to.deep.equal(value.shape);
      variable.assign(value);
    });
  }
}

/** A gradient in the head's layout back to PyTorch's (Linear weights transposed). */
function torchLayout(grad: tf.Tensor): number[] {
  return Array.from(tf.tidy(() => (grad.rank === 2 ? tf.transpose(grad) : grad).dataSync()));
}

describe('ProjZ vs the PyTorch ProjZModule (eval mode)', () => {
  for (const c of ref.proj_z.cases) {
    it(`H=${c.hidden} L=${c.layers}: output, d/dx and d/dparams of sum(out * g)`, () => {
      const before = tf.memory().numTensors;
      const head = new ProjZ(c.hidden, { layers: c.layers, dropout: 0.1, seed: 1 });
      const x = tf.tensor2d(c.x);
      const g = tf.tensor1d(c.g);
      try {
        loadProjZ(head, c);
        const out = tf.tidy(() => head.forward(x, { training: false }));
        expect(out.shape).to.deep.equal([c.batch]);
        const outValues = out.dataSync();
        out.dispose();
        expectFinite(outValues, 'output');
        expectClose(outValues, c.expected.output, 1e-5, 'output');

        const gx = tf.grad((input: tf.Tensor) => tf.sum(tf.mul(head.forward(input as tf.Tensor2D, { training: false }), g)))(x);
        expectClose(gx.dataSync(), flat(c.expected.grad_x), 1e-5, 'grad x');
        gx.dispose();

        const variables = [...head.params.values()];
        const { value, grads } = tf.variableGrads(() => tf.sum(tf.mul(head.forward(x, { training: false }), g)) as tf.Scalar, variables);
        value.dispose();
        for (const [name, variable] of head.params) {
          const grad = grads[variable.name];
          expect(grad, `gradient of ${name}`).to.not.equal(undefined);
          expectClose(torchLayout(grad), flat(c.expected.grad_params[name]), 1e-5, `grad ${name}`);
        }
        tf.dispose(Object.values(grads));
      } finally {
        tf.dispose([x, g]);
        head.dispose();
      }
      expect(tf.memory().numTensors, 'tensors after dispose').to.equal(before);
    });
  }

  it('names and shapes follow the PyTorch Sequential, Linear weights as [in, out]', () => {
    const H = 6;
    const head = new ProjZ(H, { layers: 3, dropout: 0.1, seed: 1 });
    try {
      const shapes = Object.fromEntries([...head.params].map(([name, v]) => [name, v.shape]));
      expect(shapes).to.deep.equal({
        'proj_z.net.0.weight': [H, H],
        'proj_z.net.0.bias': [H],
        'proj_z.net.2.weight': [H],
        'proj_z.net.2.bias': [H],
        'proj_z.net.4.weight': [H, H],
        'proj_z.net.4.bias': [H],
        'proj_z.net.6.weight': [H],
        'proj_z.net.6.bias': [H],
        'proj_z.net.8.weight': [H, 1],
        'proj_z.net.8.bias': [1],
      });
    } finally {
      head.dispose();
    }
  });
});

describe('ProjZ initialisation and dropout', () => {
  const H = 64;

  function snapshot(head: ProjZ): Map<string, Float32Array> {
    return new Map([...head.params].map(([name, v]) => [name, v.dataSync() as Float32Array]));
  }

  it('matches PyTorch defaults: Linear U(-1/sqrt(fan_in), 1/sqrt(fan_in)), LayerNorm weight 1 and bias 0', () => {
    const head = new ProjZ(H, { layers: 3, dropout: 0.1, seed: 7 });
    try {
      const bound = 1 / Math.sqrt(H); // every Linear has fan_in = H
      const std = 1 / Math.sqrt(3 * H); // the std of U(-bound, bound)
      const moments = (array: number[]) => {
        const mean = array.reduce((a, b) => a + b, 0) / array.length;
        return { mean, sd: Math.sqrt(array.reduce((a, b) => a + (b - mean) ** 2, 0) / array.length) };
      };
      // A 64-sample std has a ~6% standard error, so the H-sized vectors (hidden biases, the output
      // weight) are pooled (192 samples, ~3.3%) and only the H x H matrices are checked one by one.
      const pooled: number[] = [];
      for (const [name, values] of snapshot(head)) {
        const array = Array.from(values);
        if (Number(name.split('.')[2]) % 4 === 2) {
          // LayerNorm
          const expected = name.endsWith('weight') ? 1 : 0;
          expect(array.every((v) => v === expected), `${name} all ${expected}`).to.equal(true);
          continue;
        }
        expect(Math.max(...array.map(Math.abs)), `${name} within the bound`).to.be.at.most(bound);
        if (array.length >= H * H) {
          const { mean, sd } = moments(array);
          expect(Math.abs(sd / std - 1), `${name} std ${sd} vs ${std}`).to.be.at.most(0.15);
          expect(Math.abs(mean), `${name} mean`).to.be.at.most(0.1 * std);
        } else if (array.length >= H) {
          pooled.push(...array);
        }
      }
      expect(pooled.length).to.equal(3 * H);
      const { sd } = moments(pooled);
      expect(Math.abs(sd / std - 1), `pooled vectors std ${sd} vs ${std}`).to.be.at.most(0.15);
    } finally {
      head.dispose();
    }
  });

  it('the same seed gives the same weights, a different seed different ones', () => {
    const a = new ProjZ(H, { layers: 3, dropout: 0.1, seed: 3 });
    const b = new ProjZ(H, { layers: 3, dropout: 0.1, seed: 3 });
    const c = new ProjZ(H, { layers: 3, dropout: 0.1, seed: 4 });
    try {
      const [sa, sb, sc] = [a, b, c].map(snapshot);
      for (const [name, values] of sa) {
        expect(Array.from(sb.get(name)!), `${name} same seed`).to.deep.equal(Array.from(values));
        if (name.split('.')[2] !== '2' && name.split('.')[2] !== '6') {
          expect(Array.from(sc.get(name)!), `${name} different seed`).to.not.deep.equal(Array.from(values));
        }
      }
    } finally {
      [a, b, c].forEach((h) => h.dispose());
    }
  });

  it('training applies dropout: output depends on each row\'s stream and is reproducible for the same streams', () => {
    const head = new ProjZ(H, { layers: 3, dropout: 0.5, seed: 11 });
    const x = tf.tidy(() => tf.randomNormal([4, H], 0, 1, 'float32', 2) as tf.Tensor2D);
    const streams = (seed: number) => Array.from({ length: 4 }, (_, b) => Rng.derive(seed, b));
    try {
      const run = (options: { training: boolean; rowRngs?: Rng[] }) => Array.from(tf.tidy(() => head.forward(x, options).dataSync()));
      const eval1 = run({ training: false });
      const eval2 = run({ training: false });
      expect(eval1).to.deep.equal(eval2);
      const a = run({ training: true, rowRngs: streams(5) });
      const b = run({ training: true, rowRngs: streams(5) });
      const c = run({ training: true, rowRngs: streams(6) });
      expectFinite(a, 'training output');
      expect(a).to.deep.equal(b);
      expect(a).to.not.deep.equal(c);
      expect(a).to.not.deep.equal(eval1);
      // A row's output depends only on its own stream (what lets micro-batches be split).
      const rows23 = tf.tidy(() => x.slice([2, 0], [2, H]) as tf.Tensor2D);
      const alone = Array.from(tf.tidy(() => head.forward(rows23, { training: true, rowRngs: streams(5).slice(2) }).dataSync()));
      rows23.dispose();
      expectClose(alone, a.slice(2), 1e-6);
    } finally {
      x.dispose();
      head.dispose();
    }
  });
});
