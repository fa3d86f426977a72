// Distribution matching over correct answers (val/matching/*): the measure against hand-computed
// values, countdown's listed correct set, and validation's exact figures against each answer scored
// directly under the policy and a different reference.
import { expect } from 'chai';
import path from 'node:path';
import fs from 'node:fs';
import * as tf from '@tensorflow/tfjs-core';
import { createHost, loadModel, NaiveRewardManager, scoreResponses, solveCountdown, TOKENS, type Trainer, type Worker } from '../core-adapters/index.js';
import { correctSetMatching, matchingMetrics } from '../core-adapters/trainer/matching.js';
import { readValPrompts } from '../core-adapters/trainer/val-prompts.js';
import { matchingTemperature } from '../core-adapters/trainer/trainer.js';
import { buildReport } from '../core-adapters/report/report.js';
import { fixture, flowrlInProcess, ROOT, tempDir, writeCountdownConfig } from './helpers.js';

describe('matching over correct answers', function () {
  this.timeout(120_000);

  it('KL, total variation, entropies and masses of a three-answer set match hand-computed values', () => {
    // pi over the set: 0.2, 0.1, 0.1 (mass 0.4 -> shares 1/2, 1/4, 1/4); pi_ref: 0.05, 0.05, 0.1 (mass 0.2 -> 1/4, 1/4, 1/2).
    const m = correctSetMatching([Math.log(0.2), Math.log(0.1), Math.log(0.1)], [Math.log(0.05), Math.log(0.05), Math.log(0.1)]);
    expect(m.mass).to.be.closeTo(0.4, 1e-12);
    expect(m.refMass).to.be.closeTo(0.2, 1e-12);
    m.shares.forEach((s, i) => expect(s).to.be.closeTo([0.5, 0.25, 0.25][i], 1e-12));
    // KL = 1/2 ln(2) + 1/4 ln(1) + 1/4 ln(1/2) = ln(2) / 4.
    expect(m.kl).to.be.closeTo(Math.log(2) / 4, 1e-12);
    expect(m.tv).to.be.closeTo(0.25, 1e-12);
    const h = -(0.5 * Math.log(0.5) + 2 * 0.25 * Math.log(0.25));
    expect(m.entropy).to.be.closeTo(h, 1e-12);
    expect(m.refEntropy).to.be.closeTo(h, 1e-12);
    // Equal distributions: no gap. Very small log-probs stay finite (log-sum-exp).
    const same = correctSetMatching([-800, -801], [-3, -4]);
    expect(same.kl).to.be.closeTo(0, 1e-12);
    expect(same.tv).to.be.closeTo(0, 1e-12);
    expect(same.mass).to.equal(0);
    const summary = matchingMetrics([
      { ...m, exact: true },
      { ...same, exact: false },
    ]);
    expect(summary['val/matching/kl']).to.be.closeTo(Math.log(2) / 8, 1e-12);
    expect(summary['val/matching/exact']).to.equal(0.5);
  });

  it("countdown's reward manager lists every solver answer with the eos token; a custom scorer lists none", async () => {
    const dir = tempDir();
    const host = await createHost(writeCountdownConfig(dir), { quiet: true });
    const manager = host.container.get<NaiveRewardManager>(TOKENS.RewardManager);
    const prompt = { ids: [4], dataSource: 'countdown', groundTruth: { numbers: [3, 1, 2], target: 6 }, extraInfo: {}, index: 0 };
    const listed = manager.correctResponses(prompt)!;
    expect(listed.map((r) => r.text)).to.deep.equal(solveCountdown([3, 1, 2], 6));
    expect(listed.map((r) => r.text)).to.include.members(['1+2+3', '3*2*1', '3+2+1']);
    for (const r of listed) expect(r.ids.at(-1), r.text).to.equal(2); // </s>
    const scorer = path.join(dir, 'scorer.mjs');
    fs.writeFileSync(scorer, 'export function compute_score() { return 1; }\n');
    const custom = await createHost(writeCountdownConfig(dir, { custom_reward_function: { path: scorer } }), { quiet: true });
    const customManager = custom.container.get<NaiveRewardManager>(TOKENS.RewardManager);
    await customManager.init();
    expect(customManager.correctResponses(prompt)).to.equal(undefined);
  });

  it('validation scores every listed answer under the policy and the reference at its own temperature, as scoring each directly does', async () => {
    const dir = tempDir();
    // The policy is the fixture's base; the reference another model with the same tokenizer (the
    // example's base). Two threads: the replicas load that reference on first use and score shards.
    // Rollouts at 1.5, validation at 0.7: both are scored at 0.7, so runs at any rollout temperature compare.
    const referenceDir = path.join(ROOT, 'examples', 'countdown', 'base-model');
    const T = 0.7;
    expect(matchingTemperature({ temperature: 0, do_sample: false }), 'greedy validation').to.equal(1);
    expect(matchingTemperature({ temperature: T, do_sample: true })).to.equal(T);
    const host = await createHost(writeCountdownConfig(dir), {
      overrides: [
        'algorithm.name=grpo',
        `actor_rollout_ref.ref.model_path=${referenceDir}`,
        'data.val_max_samples=6',
        'engine.workers=2',
        'actor_rollout_ref.rollout.temperature=1.5',
        `actor_rollout_ref.rollout.val_kwargs.temperature=${T}`,
      ],
      quiet: true,
    });
    const trainer = host.container.get<Trainer>(TOKENS.Trainer);
    const metrics = await trainer.evaluate();
    const worker = host.container.get<Worker>(TOKENS.Worker);
    expect(metrics['val/matching/exact']).to.equal(1);
    expect(metrics['val/matching/prompts']).to.equal(6);
    expect(metrics['val/matching/kl']).to.be.above(0);

    // Each listed answer scored directly: sequence log-prob = sum of token log-probs of prompt + answer + eos.
    const manager = host.container.get<NaiveRewardManager>(TOKENS.RewardManager);
    const policy = loadModel(fixture('countdown', 'base-model'));
    const reference = loadModel(referenceDir);
    const dataset = host.container.get<{ val: { ids: number[]; dataSource: string; groundTruth: unknown; extraInfo: Record<string, unknown>; index: number }[] }>(TOKENS.Dataset);
    const score = (model: typeof policy, prompt: number[], response: number[]) =>
      tf.tidy(() => {
        const L = prompt.length + response.length;
        const seq = { batch: 1, promptLength: prompt.length, responseLength: response.length, inputIds: Int32Array.from([...prompt, ...response]), attentionMask: new Int32Array(L).fill(1) };
        return tf.sum(scoreResponses(model, seq, { temperature: T }).logProbs).dataSync()[0];
      });
    let klTotal = 0;
    for (const prompt of dataset.val) {
      const answers = manager.correctResponses(prompt)!.filter((a) => a.ids.length <= 16);
      const m = correctSetMatching(
        answers.map((a) => score(policy, prompt.ids, a.ids)),
        answers.map((a) => score(reference, prompt.ids, a.ids)),
      );
      klTotal += m.kl;
    }
    expect(metrics['val/matching/kl']).to.be.closeTo(klTotal / dataset.val.length, 1e-4);
    policy.dispose();
    reference.dispose();
    worker.dispose();
  });

  it('without a listed correct set (a custom scorer) matching is estimated over the distinct correct samples, and flowrl eval says so', async () => {
    const dir = tempDir();
    const scorer = path.join(dir, 'scorer.mjs');
    // Correct: any response that starts with a digit.
    fs.writeFileSync(scorer, 'export function compute_score(_source, text) { return /^[0-9]/.test(text) ? 1 : 0; }\n');
    const file = writeCountdownConfig(dir, { custom_reward_function: { path: scorer } });
    const run = await flowrlInProcess(['eval', file, 'data.val_max_samples=8', 'algorithm.name=grpo']);
    expect(run.status, run.stderr).to.equal(0);
    const metrics = JSON.parse(run.stdout) as Record<string, number>;
    expect(metrics['val/matching/exact']).to.equal(0);
    expect(metrics['val/matching/prompts']).to.be.above(0);
    // The policy is its own reference before training.
    expect(metrics['val/matching/kl']).to.be.closeTo(0, 1e-6);
    expect(run.stderr).to.include('an estimate, biased low with few samples');
  });

  it('flowrl train writes each prompt\'s answers and shares to val_prompts.jsonl; at step 0 the policy is its reference', async () => {
    const dir = tempDir();
    const host = await createHost(writeCountdownConfig(dir), { overrides: ['algorithm.name=grpo', 'trainer.total_training_steps=1', 'trainer.test_freq=1', 'data.val_max_samples=4'], quiet: true });
    const trainer = host.container.get<Trainer>(TOKENS.Trainer);
    await trainer.fit();
    host.container.get<Worker>(TOKENS.Worker).dispose();
    const records = readValPrompts(path.join(dir, 'run'), 0)!;
    expect(records.size).to.equal(4);
    for (const record of records.values()) {
      const m = record.matching!;
      expect(m.exact).to.equal(true);
      expect(m.answers!.length).to.equal(m.shares.length);
      expect(m.kl).to.be.closeTo(0, 1e-6);
      m.shares.forEach((s, i) => expect(s).to.be.closeTo(m.ref_shares[i], 1e-4));
      expect(m.shares.reduce((a, b) => a + b, 0)).to.be.closeTo(1, 1e-3);
    }
    // The run's report draws the shares of the prompts' correct answers.
    const html = await buildReport([path.join(dir, 'run')]);
    expect(html.match(/<figure class="chart answer-shares"/g)).to.have.length(4);
    expect(html).to.include('reference (base)');
  });
});
