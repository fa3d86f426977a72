// On-policy distillation (issue 50): the loss against a float64 PyTorch reference (every mode, both
// ways of training on it), the student's top-k log-probs through the fused head, the teachers'
// scores on hand-built sequences (in process and through flowrl serve), the refusals, and a short
// run where the student moves toward its teacher.
import * as tf from '@tensorflow/tfjs-core';
import { expect } from 'chai';
import { distillationLoss, type DistillationInput } from '../core-adapters/algorithms/distillation.js';
import type { DistillationLossMode } from '../core-adapters/algorithms/distillation.js';
import type { LossAggMode } from '../core-adapters/config/choices.js';
import { readMetrics } from '../core-adapters/engine/readback.js';
import { Batch } from '../core-adapters/batch.js';
import { resolveConfig, type Config } from '../core-adapters/config/load.js';
import type { ConfigTree } from '../core-adapters/config/defaults.js';
import { initModel, loadModel, saveModel } from '../core-adapters/model/checkpoint.js';
import { positionsFromMask, type CausalLM } from '../core-adapters/model/causal-lm.js';
import { gatheredLogProbs, scoreResponses } from '../core-adapters/model/logprobs.js';
import { TextTokenizer } from '../core-adapters/model/tokenizer.js';
import { TEACHER_LOG_PROBS, TEACHER_TOPK_IDS, TEACHER_TOPK_LOG_PROBS, Teachers } from '../core-adapters/distillation/teachers.js';
import { sequenceBatch } from '../core-adapters/workers/sequences.js';
import { expectClose, expectInputError, expectInputErrorAsync, fixture, flowrlInProcess, readJson, readRunMetrics, ROOT, tempDir, writeCountdownConfig } from './helpers.js';
import { startServer } from './serve-helpers.js';
import fs from 'node:fs';
import path from 'node:path';

const STUDENT = fixture('countdown', 'base-model');

/** A countdown-shaped model with other weights and the student's tokenizer: a teacher. */
async function writeTeacher(dir: string, seed: number): Promise<string> {
  const config = JSON.parse(fs.readFileSync(path.join(STUDENT, 'config.json'), 'utf8')) as Record<string, unknown>;
  const model = initModel(config as never, seed);
  try {
    await saveModel(model, dir, { tokenizerDir: STUDENT });
  } finally {
    model.dispose();
  }
  return dir;
}

/** Each sequence's token log-probs at T from one forward pass and a float64 log-softmax over the full logits: a path apart from the fused head. */
async function directLogProbs(model: CausalLM, ids: number[], from: number, temperature = 1): Promise<{ sampled: number[]; rows: Float64Array[] }> {
  const L = ids.length;
  const mask = new Int32Array(L).fill(1);
  const logits = tf.tidy(() => model.logits(model.forward({ ids: Int32Array.from(ids), batch: 1, attentionMask: mask, positions: positionsFromMask(mask, 1) }).hidden as tf.Tensor2D));
  const values = await logits.data();
  logits.dispose();
  const V = values.length / L;
  const rows: Float64Array[] = [];
  for (let p = from - 1; p < L - 1; p++) {
    const row = Float64Array.from(values.subarray(p * V, (p + 1) * V), (v) => v / temperature);
    const max = Math.max(...row);
    const lse = max + Math.log(row.reduce((a, v) => a + Math.exp(v - max), 0));
    rows.push(row.map((v) => v - lse));
  }
  return { sampled: rows.map((row, i) => row[ids[from + i]]), rows };
}

/** Hand-built rows: prompts left-padded, responses right-padded, as rollouts lay them out. */
function handBuiltBatch(rows: { prompt: number[]; response: number[]; source?: string }[]): Batch {
  const P = Math.max(...rows.map((r) => r.prompt.length));
  const R = Math.max(...rows.map((r) => r.response.length));
  const L = P + R;
  const ids = new Int32Array(rows.length * L);
  const attention = new Int32Array(rows.length * L);
  const responses = new Int32Array(rows.length * R);
  const mask = new Float32Array(rows.length * R);
  rows.forEach(({ prompt, response }, b) => {
    prompt.forEach((id, t) => {
      ids[b * L + P - prompt.length + t] = id;
      attention[b * L + P - prompt.length + t] = 1;
    });
    response.forEach((id, t) => {
      ids[b * L + P + t] = id;
      attention[b * L + P + t] = 1;
      responses[b * R + t] = id;
      mask[b * R + t] = 1;
    });
  });
  return new Batch({
    tensors: { input_ids: { shape: [rows.length, L], data: ids }, attention_mask: { shape: [rows.length, L], data: attention }, responses: { shape: [rows.length, R], data: responses }, response_mask: { shape: [rows.length, R], data: mask } },
    columns: { data_source: rows.map((r) => r.source ?? 'countdown'), extra_info: rows.map(() => ({})) },
  });
}

/** A resolved config with distillation on (its teacher_models and distillation_loss merged in). */
function distillationConfig(dir: string, distillation: ConfigTree): Config {
  return resolveConfig({ user: { actor_rollout_ref: { model: { path: STUDENT } }, distillation: { enabled: true, ...distillation } } as ConfigTree, userFile: path.join(dir, 'config.yaml') });
}

const ROWS = [
  { prompt: [1, 5, 9, 6, 3], response: [7, 8, 4, 2] },
  { prompt: [1, 4, 11], response: [12, 13, 5, 6, 7, 2] },
  { prompt: [1, 3, 3, 3, 10, 15], response: [9] },
];

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

    /** The case's loss (and its metrics) of the student's logits z, built as the actor builds it. */
    const caseLoss = (c: ReferenceCase, z: tf.Tensor) => {
      const all = tf.logSoftmax(tf.div(z, ref.temperature)) as tf.Tensor3D;
      const pick = (ids: number[], width: number) => tf.sum(tf.mul(all.expandDims(2), tf.oneHot(tf.tensor3d(ids, [B, R, width], 'int32'), V)), -1);
      const sampled = tf.squeeze(pick(ref.sampled, 1), [2]) as tf.Tensor2D;
      const input: DistillationInput =
        c.mode === 'forward_kl_topk'
          ? { kind: 'topk', studentTopLogProbs: pick(ref.teacher_top_ids, k) as tf.Tensor3D, teacherTopLogProbs: tf.tensor3d(ref.teacher_top_log_probs, [B, R, k]) }
          : { kind: 'estimator', studentLogProbs: sampled, teacherLogProbs: tf.tensor2d(ref.teacher_sampled, [B, R]) };
      return distillationLoss(input, { logProb: sampled, oldLogProb: tf.tensor2d(ref.old_log_probs, [B, R]) }, tf.tensor2d(ref.mask, [B, R]), {
        lossMode: c.mode,
        lossMaxClamp: c.max_clamp,
        logProbMinClamp: c.min_clamp,
        usePolicyGradient: c.pg,
        clipRatioLow: 0.2,
        clipRatioHigh: 0.2,
        lossAggMode: c.agg,
      });
    };

    for (const c of ref.cases) {
      it(`${c.name}: the loss and its gradient on the student's logits`, async () => {
        const logits = tf.tensor3d(ref.logits, [B, R, V]);
        const before = tf.memory().numTensors;
        let metrics = {};
        const grad = tf.grad((z: tf.Tensor) => {
          const out = caseLoss(c, z);
          metrics = out.metrics;
          return out.loss;
        });
        const g = grad(logits);
        const read = await readMetrics(metrics, 'distillation test');
        expectClose(g.dataSync(), c.grad, 2e-5, 'gradient');
        const valid = c.token_losses.filter((_, i) => ref.mask[i] > 0);
        expect(read['distillation/loss_min']).to.be.closeTo(Math.min(...valid), 1e-5);
        expect(read['distillation/loss_max']).to.be.closeTo(Math.max(...valid), 1e-5);
        if (c.mode === 'forward_kl_topk') expect(read['distillation/teacher_mass']).to.be.within(0, 1);
        else expect(read['distillation/abs_loss']).to.be.closeTo(valid.reduce((a, v) => a + Math.abs(v), 0) / valid.length, 1e-5);
        if (c.pg) expect(read).to.have.property('distillation/pg_clipfrac');
        g.dispose();
        expect(tf.memory().numTensors, 'tensors left').to.equal(before);
        logits.dispose();
      });
    }

    it('the loss values themselves', () => {
      for (const c of ref.cases) {
        const value = tf.tidy(() => {
          const out = caseLoss(c, tf.tensor3d(ref.logits, [B, R, V]));
          tf.dispose(Object.values(out.metrics).filter((m): m is tf.Scalar => typeof m !== 'number'));
          return out.loss;
        });
        expect(value.dataSync()[0], c.name).to.be.closeTo(c.loss, 2e-5 * Math.max(1, Math.abs(c.loss)));
        value.dispose();
      }
    });
  });

  describe('the student\'s top-k log-probs, the teachers, and training', () => {
    let dir: string;
    let teacherDir: string;
    let student: CausalLM;
    let teacher: CausalLM;

    before(async () => {
      dir = tempDir('flowrl-distill-');
      teacherDir = await writeTeacher(path.join(dir, 'teacher'), 5);
      student = loadModel(STUDENT);
      teacher = loadModel(teacherDir);
    });

    after(() => {
      student?.dispose();
      teacher?.dispose();
    });

    it("gathers the student's log-probs at given ids through the fused head as the full log-softmax gives them", async () => {
      const batch = handBuiltBatch(ROWS);
      const seq = sequenceBatch(batch);
      const R = seq.responseLength;
      const k = 3;
      const ids = Int32Array.from({ length: seq.batch * R * k }, (_, i) => (i * 7 + 3) % 24);
      const got = tf.tidy(() => gatheredLogProbs(student, scoreResponses(student, seq, { temperature: 0.7 }).hidden, seq, ids, k, 0.7));
      const values = await got.data();
      got.dispose();
      for (const [b, row] of ROWS.entries()) {
        const direct = await directLogProbs(student, [...row.prompt, ...row.response], row.prompt.length, 0.7);
        direct.rows.forEach((full, t) => {
          // float32: relative to the value (log-probs reach -10 here, where 1e-5 absolute is below an ulp's few).
          for (let j = 0; j < k; j++) {
            const want = full[ids[(b * R + t) * k + j]];
            expect(values[(b * R + t) * k + j], `row ${b} token ${t} id ${ids[(b * R + t) * k + j]}`).to.be.closeTo(want, 1e-5 * Math.max(1, Math.abs(want)));
          }
        });
      }
    });

    it('scores hand-built sequences with the teacher: PG OPD\'s k1 reward is teacher minus student at each token (in process, and through flowrl serve in both dialects, top-k too)', async () => {
      const local = Teachers.fromConfig(distillationConfig(dir, { teacher_models: { t: { model_path: teacherDir, inference: { name: 'local' } } }, distillation_loss: { loss_mode: 'k1', use_policy_gradient: true } }), undefined, STUDENT)!;
      const batch = handBuiltBatch(ROWS);
      await local.score(batch);
      const R = batch.tensor('responses').shape[1];
      const teacherScores = batch.tensor(TEACHER_LOG_PROBS).data;
      const { server, url } = await startServer({ modelDir: teacherDir, tokenizer: TextTokenizer.load(teacherDir) });
      try {
        const served = Teachers.fromConfig(distillationConfig(dir, { teacher_models: { t: { model_path: teacherDir, inference: { name: 'vllm', urls: [url] } } }, distillation_loss: { loss_mode: 'forward_kl_topk', topk: 4 } }), undefined, STUDENT)!;
        const viaServer = handBuiltBatch(ROWS);
        await served.score(viaServer);
        expectClose(viaServer.tensor(TEACHER_LOG_PROBS).data, teacherScores, 1e-5, 'server vs in process');
        const topIds = viaServer.tensor(TEACHER_TOPK_IDS);
        expect(topIds.shape).to.deep.equal([ROWS.length, R, 4]);
        for (const [b, row] of ROWS.entries()) {
          const t = await directLogProbs(teacher, [...row.prompt, ...row.response], row.prompt.length);
          const s = await directLogProbs(student, [...row.prompt, ...row.response], row.prompt.length);
          row.response.forEach((_, i) => {
            // k1 = s - t, so the token's reward -k1 is t - s.
            expect(teacherScores[b * R + i] - s.sampled[i], `row ${b} token ${i}`).to.be.closeTo(t.sampled[i] - s.sampled[i], 1e-5);
            const ranked = [...t.rows[i].keys()].sort((x, y) => t.rows[i][y] - t.rows[i][x] || x - y).slice(0, 4);
            expect(Array.from(topIds.data.subarray((b * R + i) * 4, (b * R + i + 1) * 4))).to.deep.equal(ranked);
            expectClose(viaServer.tensor(TEACHER_TOPK_LOG_PROBS).data.subarray((b * R + i) * 4, (b * R + i + 1) * 4), ranked.map((id) => t.rows[i][id]), 1e-5, 'top-k log-probs');
          });
          // Padding past a response is 0.
          for (let i = row.response.length; i < R; i++) expect(teacherScores[b * R + i]).to.equal(0);
        }
        served.dispose();
        // SGLang's dialect (input_token_logprobs from logprob_start_len 0): the same scores and top-k.
        const viaSglang = Teachers.fromConfig(distillationConfig(dir, { teacher_models: { t: { model_path: teacherDir, inference: { name: 'sglang', urls: [url] } } }, distillation_loss: { loss_mode: 'forward_kl_topk', topk: 4 } }), undefined, STUDENT)!;
        const sglangBatch = handBuiltBatch(ROWS);
        await viaSglang.score(sglangBatch);
        expectClose(sglangBatch.tensor(TEACHER_LOG_PROBS).data, teacherScores, 1e-5, 'sglang vs in process');
        expect(Array.from(sglangBatch.tensor(TEACHER_TOPK_IDS).data)).to.deep.equal(Array.from(topIds.data));
        expectClose(sglangBatch.tensor(TEACHER_TOPK_LOG_PROBS).data, viaServer.tensor(TEACHER_TOPK_LOG_PROBS).data, 1e-6, 'sglang top-k vs vllm top-k');
        viaSglang.dispose();
      } finally {
        await server.close();
        local.dispose();
      }
    });

    it('refuses a teacher with another tokenizer (naming both directories and the first token that differs), k1 backpropagated directly, and bad teacher entries', async () => {
      const other = path.join(dir, 'other-tokenizer');
      fs.cpSync(teacherDir, other, { recursive: true });
      const json = JSON.parse(fs.readFileSync(path.join(other, 'tokenizer.json'), 'utf8')) as { model: { vocab: Record<string, number> } };
      const [a, b] = Object.keys(json.model.vocab).slice(5, 7);
      [json.model.vocab[a], json.model.vocab[b]] = [json.model.vocab[b], json.model.vocab[a]];
      fs.writeFileSync(path.join(other, 'tokenizer.json'), JSON.stringify(json));
      const teacherAt = (modelPath: string, extra: ConfigTree = {}) => distillationConfig(dir, { teacher_models: { t: { model_path: modelPath, inference: { name: 'local' } } }, ...extra });
      expectInputError(() => Teachers.fromConfig(teacherAt(other), undefined, STUDENT), 'distillation.teacher_models.t', other, STUDENT, JSON.stringify(a), 'not the student');
      expectInputError(() => Teachers.fromConfig(teacherAt(teacherDir, { distillation_loss: { loss_mode: 'k1' } }), undefined, STUDENT), 'loss_mode k1', 'use_policy_gradient');
      expectInputError(() => Teachers.fromConfig(distillationConfig(dir, {}), undefined, STUDENT), 'distillation.teacher_models is empty');
      expectInputError(() => Teachers.fromConfig(distillationConfig(dir, { teacher_models: { t: { model_path: teacherDir, inference: { name: 'vllm', gpu_memory_utilization: 0.5 } } } }), undefined, STUDENT), 'distillation.teacher_models.t.inference.gpu_memory_utilization');
      expectInputError(() => Teachers.fromConfig(distillationConfig(dir, { teacher_models: { t: { model_path: teacherDir, inference: { name: 'vllm' } } } }), undefined, STUDENT), 'distillation.teacher_models.t.inference.urls');
      expectInputError(() => Teachers.fromConfig(distillationConfig(dir, { teacher_models: { t: { model_path: teacherDir, inference: { name: 'trtllm' } } } }), undefined, STUDENT), 'inference.name', 'vllm, sglang, local');
      expectInputError(() => Teachers.fromConfig(distillationConfig(dir, { teacher_models: { t: { model_path: teacherDir, inference: { name: 'sglang' } } } }), undefined, STUDENT), 'inference.urls');
      const two = (keys: [string | null, string | null]) => distillationConfig(dir, { teacher_models: { first: { key: keys[0], model_path: teacherDir, inference: { name: 'local' } }, second: { key: keys[1], model_path: STUDENT, inference: { name: 'local' } } } });
      expectInputError(() => Teachers.fromConfig(two(['countdown', null]), undefined, STUDENT), 'teacher_models.second.key is required');
      expectInputError(() => Teachers.fromConfig(two(['countdown', 'countdown']), undefined, STUDENT), 'also first');
    });

    it('routes rows to several teachers by teacher_key (data_source), and names a row no teacher takes', async () => {
      const teachers = Teachers.fromConfig(
        distillationConfig(dir, { teacher_models: { math: { key: 'countdown', model_path: teacherDir, inference: { name: 'local' } }, self: { key: 'copy', model_path: STUDENT, inference: { name: 'local' } } } }),
        undefined,
        STUDENT,
      )!;
      try {
        const batch = handBuiltBatch(ROWS.map((r, i) => ({ ...r, source: i === 1 ? 'copy' : 'countdown' })));
        await teachers.score(batch);
        const R = batch.tensor('responses').shape[1];
        for (const [b, row] of ROWS.entries()) {
          const expected = await directLogProbs(b === 1 ? student : teacher, [...row.prompt, ...row.response], row.prompt.length);
          expectClose(batch.tensor(TEACHER_LOG_PROBS).data.subarray(b * R, b * R + row.response.length), expected.sampled, 1e-5, `row ${b}`);
        }
        await expectInputErrorAsync(teachers.score(handBuiltBatch([{ ...ROWS[0], source: 'gsm8k' }])), 'row 0', '"gsm8k"', '"countdown", "copy"');
      } finally {
        teachers.dispose();
      }
    });

    it('trains a student toward its teacher on two threads: forward KL over the top-k alone, the divergence falls step by step (metrics actor/distillation/*)', async () => {
      const run = tempDir('flowrl-distill-run-');
      const file = writeCountdownConfig(run, {
        actor_rollout_ref: { actor: { optim: { lr: 5e-3 }, ppo_micro_batch_size: 16 } },
        // Two threads: the worker replicas compute the distillation term on their rows too.
        engine: { workers: 2 },
        trainer: { total_training_steps: 4, val_before_train: false, test_freq: -1 },
        distillation: { enabled: true, teacher_models: { teacher: { model_path: teacherDir, inference: { name: 'local' } } }, distillation_loss: { loss_mode: 'forward_kl_topk', topk: 6, use_task_rewards: false } },
      });
      const result = await flowrlInProcess(['train', file]);
      expect(result.status, result.stderr).to.equal(0);
      const steps = readRunMetrics(path.join(run, 'run'));
      const losses = steps.map((m) => m['actor/distillation/loss']);
      expect(losses.every((v) => Number.isFinite(v) && v > 0)).to.equal(true);
      expect(losses[3], `divergence by step: ${losses.join(', ')}`).to.be.below(losses[0] * 0.8);
      for (const key of ['actor/distillation/teacher_mass', 'actor/distillation/student_mass', 'actor/distillation/loss_max', 'timing_s/teacher']) expect(steps[0], key).to.have.property(key);
      expect(steps[0]['actor/distillation/loss_min']).to.be.at.most(steps[0]['actor/distillation/loss_max']);
    });

    it("FlowRL's actor adds the term too: PG OPD (k1) beside FlowRL's objective and its task reward", async () => {
      const run = tempDir('flowrl-distill-flowrl-');
      const file = writeCountdownConfig(run, {
        plugins: [path.join(ROOT, 'plugin.json')],
        algorithm: { name: 'flowrl' },
        trainer: { total_training_steps: 2, val_before_train: false, test_freq: -1 },
        distillation: { enabled: true, teacher_models: { teacher: { model_path: teacherDir, inference: { name: 'local' } } }, distillation_loss: { loss_mode: 'k1', use_policy_gradient: true, distillation_loss_coef: 0.5 } },
      });
      const result = await flowrlInProcess(['train', file]);
      expect(result.status, result.stderr).to.equal(0);
      const steps = readRunMetrics(path.join(run, 'run'));
      for (const m of steps) {
        expect(m['actor/distillation/loss'], `step ${m.step}`).to.be.a('number').and.satisfy(Number.isFinite);
        expect(m['actor/distillation/abs_loss']).to.be.above(0);
        expect(m).to.have.property('actor/distillation/pg_clipfrac');
        // FlowRL's own terms are still there.
        expect(m).to.have.property('actor/log_z');
      }
    });
  });
});
