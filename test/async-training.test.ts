// The async trainer (trainer.v1.trainer_mode separate_async, issue 50) against flowrl serve: with
// threshold 0 it trains what the synchronous trainer trains; staleness stays within the threshold
// under drop and wait; a partial rollout keeps the tokens a weight update cut off, each with the
// version that drew it, and the off-policy correction reads those versions' log-probs.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { createHost, TOKENS, type Worker } from '../core-adapters/index.js';
import { Batch } from '../core-adapters/batch.js';
import { tokenRolloutCorrection } from '../core-adapters/algorithms/rollout-correction.js';
import { loadModel } from '../core-adapters/model/checkpoint.js';
import { responseLogProbs } from '../core-adapters/model/logprobs.js';
import { FlowrlServer } from '../core-adapters/rollout/serve.js';
import { installFaults } from '../core-adapters/rollout/serve-faults.js';
import { TOKEN_WEIGHT_VERSIONS } from '../core-adapters/rollout/server-rollout.js';
import { main } from '../core-adapters/cli/commands.js';
import { expectClose, fixture, readRunMetrics, ROOT, tempDir, writeCountdownConfig } from './helpers.js';

const BASE_MODEL = path.join(fixture('countdown'), 'base-model');
type Metrics = Record<string, number>;

function startServer(): FlowrlServer {
  const server = new FlowrlServer({ modelDir: BASE_MODEL, host: '127.0.0.1', port: 0, maxBatch: 64, maxQueue: 1024, maxBodyBytes: 1 << 24, logprobsMode: 'processed_logprobs', enableAdmin: true, weightsRoots: [os.tmpdir()] });
  installFaults(server);
  return server;
}

/** `flowrl train` in-process on a countdown config with these servers; returns each step's metrics. */
async function train(urls: string[], extra: Record<string, unknown>, overrides: string[]): Promise<Metrics[]> {
  const dir = tempDir();
  const { trainer, ...rest } = extra as { trainer?: Record<string, unknown> };
  const file = writeCountdownConfig(dir, {
    ...rest,
    data: { train_batch_size: 4 },
    actor_rollout_ref: { actor: { ppo_mini_batch_size: 4 }, rollout: { name: 'sglang', server: { urls, timeout_s: 60 } } },
    trainer: { total_training_steps: 3, test_freq: 3, ...trainer },
  });
  const original = { error: console.error, log: console.log };
  const errors: string[] = [];
  console.error = (...args: unknown[]) => errors.push(args.map(String).join(' '));
  console.log = () => {};
  let code: number;
  try {
    code = await main(['train', file, ...overrides]);
  } finally {
    Object.assign(console, original);
  }
  expect(code, errors.join('\n')).to.equal(0);
  return readRunMetrics(path.join(dir, 'run')).filter((m) => m.step > 0);
}

describe('the async trainer (separate_async) on flowrl serve', function () {
  this.timeout(240_000);
  const servers: FlowrlServer[] = [];
  let urls: string[] = [];

  before(async () => {
    servers.push(startServer(), startServer());
    urls = await Promise.all(servers.map((s) => s.listen()));
  });
  after(() => Promise.all(servers.map((s) => s.close())));
  afterEach(() => Promise.all(urls.map((url) => fetch(`${url}/_flowrl/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ reset: true }) }))));

  it('with max_off_policy_threshold 0 it trains what the synchronous trainer trains, step for step, all staleness 0', async () => {
    const sync = await train(urls, {}, []);
    const async0 = await train(urls, { trainer: { v1: { trainer_mode: 'separate_async', sampler: { max_off_policy_threshold: 0, max_off_policy_strategy: 'wait' } } } }, []);
    expect(async0).to.have.length(sync.length);
    sync.forEach((s, i) => {
      const a = async0[i];
      // The same prompts, uids and seeds: the same samples, so the same rewards and lengths, and losses up to float rounding.
      for (const key of ['critic/score/mean', 'critic/accuracy', 'response_length/mean']) expect(a[key], `step ${s.step} ${key}`).to.equal(s[key]);
      expect(a['actor/pg_loss'], `step ${s.step} actor/pg_loss`).to.be.closeTo(s['actor/pg_loss'], 1e-5);
      expect([a['training/off_policy/trajectory_staleness_worst/max'], a['training/off_policy/trajectory_spans/max']]).to.deep.equal([0, 1]);
    });
    expect(async0.at(-1)!['val/accuracy']).to.equal(sync.at(-1)!['val/accuracy']);
  });

  for (const strategy of ['wait', 'drop'] as const) {
    it(`${strategy}: no trained group is older than max_off_policy_threshold 1, with one server slow`, async () => {
      await fetch(`${urls[1]}/_flowrl/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ delay_ms: 150 }) });
      const steps = await train(urls, { trainer: { total_training_steps: 4, test_freq: -1, val_before_train: false, v1: { trainer_mode: 'separate_async', sampler: { max_off_policy_threshold: 1, max_off_policy_strategy: strategy } } } }, []);
      expect(steps).to.have.length(4);
      for (const m of steps) {
        expect(m['training/off_policy/trajectory_staleness_worst/max'], `step ${m.step}`).to.be.at.most(1);
        expect(m['training/off_policy/trajectory_staleness/min']).to.be.at.least(0);
      }
      const oldest = Math.max(...steps.map((m) => m['training/off_policy/trajectory_staleness_worst/max']));
      if (strategy === 'wait') {
        // Groups launched ahead sample with older weights than they train with, and all are trained.
        expect(oldest).to.equal(1);
        expect(steps.at(-1)!['training/off_policy/dropped_groups']).to.equal(0);
      } else {
        // The threshold was met: a group trained one version old, or the slow server's groups dropped for age.
        expect(oldest === 1 || steps.at(-1)!['training/off_policy/dropped_groups'] > 0, `oldest ${oldest}, dropped ${steps.at(-1)!['training/off_policy/dropped_groups']}`).to.equal(true);
      }
    });
  }

  it('FlowRL trains in it: its trainer and objective over groups launched ahead (threshold 1, wait)', async () => {
    const steps = await train(urls, { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'flowrl' }, trainer: { total_training_steps: 2, test_freq: -1, val_before_train: false, v1: { trainer_mode: 'separate_async', sampler: { max_off_policy_threshold: 1, max_off_policy_strategy: 'wait' } } } }, []);
    expect(steps).to.have.length(2);
    for (const m of steps) {
      expect(m['actor/log_z'], `step ${m.step}`).to.be.a('number').and.satisfy(Number.isFinite);
      expect(m['training/off_policy/trajectory_staleness_worst/max']).to.be.at.most(1);
    }
  });

  it("a partial rollout: a weight update's abort keeps the tokens drawn so far with version 0, the rest come from version 1, and the TIS weights read each segment's log-probs; one cut before its first token is sent again, no server ejected", async () => {
    const dir = tempDir();
    const file = writeCountdownConfig(dir, {
      actor_rollout_ref: { rollout: { name: 'sglang', temperature: 1, server: { urls: [urls[0]], timeout_s: 60 } } },
      trainer: { v1: { trainer_mode: 'separate_async', partial_rollout: true } },
    });
    const host = await createHost(file, { quiet: true });
    const worker = host.container.get<Worker>(TOKENS.Worker);
    await worker.init();
    const prompt = [1, 5, 9, 6, 3, 4];
    const prompts = new Batch({ columns: { prompt_ids: [prompt], uid: ['p0'] } });
    const sampling = { temperature: 1, topP: 1, topK: -1, greedy: false, maxNewTokens: 24, seed: 5 };
    // Version 0 on the server.
    (await worker.generateSequences(prompts, sampling)).dispose();
    const engine = servers[0].engine;
    let steps = 0;
    let update: Promise<Batch> | undefined;
    engine.beforeStep = () => {
      if (++steps !== 4) return;
      // Mid-sample: the server pauses (aborting the running batch, as SGLang's pause_generation does),
      // the policy moves, and the next group's launch pushes the new weights, which resumes the server.
      void engine.pause('abort');
      for (const v of worker.module.params.values()) v.assign(v.mul(1.05));
      (worker as unknown as { rollout: { policyChanged(): void } }).rollout.policyChanged();
      update = worker.generateSequences(prompts, { ...sampling, seed: 6 });
    };
    let sampled: Batch;
    try {
      sampled = await worker.generateSequences(prompts, { ...sampling, maxNewTokens: 40 });
    } finally {
      engine.beforeStep = undefined;
    }
    (await update!).dispose();
    const versions = sampled.column<number[]>(TOKEN_WEIGHT_VERSIONS)[0];
    const R = sampled.tensor('responses').shape[1];
    const mask = sampled.tensor('response_mask').data;
    const tokens = Array.from(sampled.tensor('responses').data.subarray(0, R)).filter((_, t) => mask[t] > 0);
    const cut = versions.indexOf(1);
    expect(cut, `versions ${versions.join(',')}`).to.be.at.least(3);
    expect(versions.slice(0, cut).every((v) => v === 0) && versions.slice(cut).every((v) => v === 1)).to.equal(true);
    expect(versions).to.have.length(tokens.length);
    expect((sampled.meta.metrics as Metrics)['rollout/partial_resumed']).to.equal(1);
    // Each segment's engine log-probs are its version's: the base model's, then the moved policy's.
    const rollout = Array.from(sampled.tensor('rollout_log_probs').data.subarray(0, tokens.length));
    const base = loadModel(BASE_MODEL);
    const before = (await responseLogProbs(base, [prompt], [tokens], 1))[0];
    base.dispose();
    const after = (await responseLogProbs(worker.module.lm, [prompt], [tokens], 1))[0];
    expectClose(rollout.slice(0, cut), before.slice(0, cut), 1e-4, 'version 0 segment');
    expectClose(rollout.slice(cut), after.slice(cut), 1e-4, 'version 1 segment');
    expect(Math.max(...before.slice(0, cut).map((v, t) => Math.abs(v - after[t])))).to.be.above(1e-3);
    // The correction against the trainer's (version 1) log-probs: 1 where version 1 drew, the ratio where version 0 did.
    const old = Float32Array.from(after);
    const cap = 1e6;
    const { weights } = tokenRolloutCorrection(old, Float32Array.from(rollout), new Float32Array(tokens.length).fill(1), cap);
    expectClose(weights.slice(cut), new Array(tokens.length - cut).fill(1), 1e-3, 'version 1 weights');
    expectClose(weights.slice(0, cut), before.slice(0, cut).map((v, t) => Math.min(cap, Math.exp(after[t] - v))), 1e-3, 'version 0 weights');
    sampled.dispose();
    // Cut before its first token (a weight update's pause as the sample starts): sent again, no server ejected for it.
    let first = true;
    let second: Promise<Batch> | undefined;
    engine.beforeStep = () => {
      if (!first) return;
      first = false;
      void engine.pause('abort');
      (worker as unknown as { rollout: { policyChanged(): void } }).rollout.policyChanged();
      second = worker.generateSequences(prompts, { ...sampling, seed: 8 });
    };
    let redrawn: Batch;
    try {
      redrawn = await worker.generateSequences(prompts, { ...sampling, seed: 7 });
    } finally {
      engine.beforeStep = undefined;
    }
    (await second!).dispose();
    const m = redrawn.meta.metrics as Metrics;
    // Once for the pause, maybe again for the load's own pause-abort while it waited queued.
    expect(m['rollout/update_redraws']).to.be.at.least(1);
    expect([m['rollout/ejections'], m['rollout/retries']]).to.deep.equal([0, 0]);
    expect(new Set(redrawn.column<number[]>(TOKEN_WEIGHT_VERSIONS)[0])).to.deep.equal(new Set([2]));
    redrawn.dispose();
    worker.dispose();
    fs.rmSync(dir, { recursive: true, force: true });
  });
});
