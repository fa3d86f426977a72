import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import {
  createHost,
  loadModel,
  packSequences,
  readSftExamples,
  Rng,
  TextTokenizer,
  TOKENS,
  type Batch,
  type Config,
  type RewardShaper,
  type Trainer,
  type Worker,
} from '../core-adapters/index.js';
import { readHeader } from '../core-adapters/model/safetensors.js';
import { promptBatch } from '../core-adapters/workers/sequences.js';
import { FlowModel, flowPretrain, FlowRewardShaper, type FlowPretrainResult } from '../plugin/index.js';
import { flowDeviation, responseLatents } from '../plugin/rlfr/latents.js';
import { expectInputErrorAsync, fixture, flowrlInProcess, readRunMetrics, ROOT, tempDir, withoutTiming, writeCountdownConfig } from './helpers.js';

const COUNTDOWN = fixture('countdown');

/** The countdown fixture with grpo, small mini-batches and no validation. */
function writeConfig(dir: string, extra: Record<string, unknown> = {}): string {
  return writeCountdownConfig(dir, {
    plugins: [path.join(ROOT, 'plugin.json')],
    actor_rollout_ref: { actor: { ppo_mini_batch_size: 4 }, rollout: { val_kwargs: { n: 2 } } },
    algorithm: { name: 'grpo' },
    trainer: { seed: 5, val_before_train: false, test_freq: -1 },
    ...extra,
  });
}

const readMetrics = (dir: string) => readRunMetrics(path.join(dir, 'run'));

async function train(file: string, overrides: string[]): Promise<void> {
  const host = await createHost(file, { overrides, quiet: true });
  const trainer = host.container.get<Trainer>(TOKENS.Trainer);
  await trainer.fit();
  trainer.dispose();
}

describe('RLFR flow rewards in the host', function () {
  this.timeout(600000);
  let pretrained: FlowPretrainResult;
  let pretrainConfig: Config;
  const workDir = tempDir();

  before(async () => {
    const file = writeConfig(workDir);
    const host = await createHost(file, {
      overrides: ['reward.flow.pretrain.total_steps=150', 'reward.flow.pretrain.lr=1e-3', `reward.flow.pretrain.output_dir=${path.join(workDir, 'flow-model')}`],
      quiet: true,
    });
    pretrainConfig = host.config;
    pretrained = await flowPretrain(host.config, () => {});
  });

  it('flow pretraining on the tiny countdown policy lowers the held-out loss and saves the field with its config', () => {
    expect(pretrained.heldOutAfter, `${pretrained.heldOutBefore} -> ${pretrained.heldOutAfter}`).to.be.lessThan(0.5 * pretrained.heldOutBefore);
    expect(fs.readdirSync(pretrained.outputDir).sort()).to.deep.equal(['flow_config.json', 'flow_model.safetensors']);
    const lm = loadModel(path.join(COUNTDOWN, 'base-model'));
    const model = FlowModel.load(pretrained.outputDir, lm);
    // 150 steps with a 10 % warm-up: the first runs at lr 0 and does not count as training.
    expect(model.config).to.deep.include({ trained_steps: 149, context_mode: 'token_post', latent_size: lm.config.hiddenSize, depth: 2 });
    // Two layers: 0.25 * 2 rounds (half to even) to 0, 0.5 * 2 = 1, 0.75 * 2 = 1.5 to 2, clamped to 1.
    expect(model.layers).to.deep.equal([0, 1]);
    model.dispose();
    lm.dispose();
  });

  it('reference responses deviate less from the pretrained flow than the same responses with their tokens shuffled', async () => {
    const lm = loadModel(path.join(COUNTDOWN, 'base-model'));
    const model = FlowModel.load(pretrained.outputDir, lm);
    const tokenizer = TextTokenizer.load(path.join(COUNTDOWN, 'base-model'));
    const examples = (await readSftExamples([path.join(COUNTDOWN, 'data', 'train.jsonl')], tokenizer, { responseKey: 'extra_info.response', keyName: 'k', maxPromptLength: 32, maxResponseLength: 16 })).slice(-64);
    const rng = new Rng(11);
    // Shuffle each response's tokens before its stop token (an answer-shaped but unnatural sequence).
    const shuffled = examples.map((e) => ({ prompt: e.prompt, response: [...rng.shuffle(e.response.slice(0, -1)), e.response.at(-1)!] }));
    const meanDeviation = async (set: typeof examples) => {
      const seq = packSequences(set.map((e) => e.prompt), set.map((e) => e.response), tokenizer.padTokenId ?? 0);
      const select = new Float32Array(seq.batch * seq.responseLength);
      set.forEach((e, b) => select.fill(1, b * seq.responseLength, b * seq.responseLength + e.response.length));
      const latents = await responseLatents(lm, seq, model.layers, 'token_post', select, 64);
      let total = 0;
      for (const [l, id] of model.layerIds.entries()) {
        const [x1, ctx] = [tf.tensor2d(latents.targets[l], [latents.rows, latents.size]), tf.tensor2d(latents.contexts[l], [latents.rows, latents.size])];
        total += (await flowDeviation(model.field, x1, ctx, id, new Rng(3))).reduce((a, b) => a + b, 0) / latents.rows;
        tf.dispose([x1, ctx]);
      }
      return total / model.layers.length;
    };
    const real = await meanDeviation(examples);
    const mixed = await meanDeviation(shuffled);
    expect(real, `reference ${real}, shuffled ${mixed}`).to.be.lessThan(0.9 * mixed);
    model.dispose();
    lm.dispose();
  });

  /** A host's worker and fresh flow shaper (no pretrained field), initialised. */
  async function freshShaper(overrides: string[]): Promise<{ shaper: FlowRewardShaper; worker: Worker }> {
    const host = await createHost(writeConfig(tempDir()), { overrides: ['reward.flow.enable=true', 'trainer.total_training_steps=10', ...overrides], quiet: true });
    const shapers = host.container.getAll<RewardShaper>(TOKENS.RewardShaper);
    expect(shapers).to.have.length(1);
    const worker = host.container.get<Worker>(TOKENS.Worker);
    await worker.init();
    await shapers[0].init!();
    return { shaper: shapers[0] as FlowRewardShaper, worker };
  }

  /** 16 rollouts of one prompt; every other one counts as correct. */
  async function halfCorrectBatch(worker: Worker): Promise<Batch> {
    const prompts = promptBatch([{ ids: [5, 6, 7, 4, 8], dataSource: 'x', groundTruth: null, extraInfo: {}, index: 0 }], 'p').repeat(16, true);
    const batch = await worker.generateSequences(prompts, { temperature: 1, topP: 1, topK: 0, greedy: false, maxNewTokens: 8, seed: 1 });
    const [B, R] = batch.tensor('responses').shape;
    const scores = new Float32Array(B * R);
    for (let b = 0; b < B; b += 2) scores[b * R] = 1;
    batch.set('token_level_scores', { shape: [B, R], data: scores });
    return batch;
  }

  it('at initialisation (no pretrained field) every flow reward is zero, and the field still learns online from correct rollouts', async () => {
    const { shaper, worker } = await freshShaper(['reward.flow.online.cadence=training_step']);
    expect(shaper.flowModel.trained).to.equal(false);
    const batch = await halfCorrectBatch(worker);
    const [B, R] = batch.tensor('responses').shape;
    const shaping = new Float32Array(B * R);
    const metrics = await shaper.shape(batch, shaping);
    expect(shaping.every((x) => x === 0)).to.equal(true);
    expect(metrics).to.deep.include({ 'flow/kept_tokens': 0, 'flow/reward_mean': 0, 'flow/correct_fraction': 0.5 });
    expect(await shaper.onActorStep(batch), 'training_step ignores actor steps').to.deep.equal({});
    const update = await shaper.afterUpdate();
    expect(update['flow/update_sequences']).to.equal(8);
    expect(update['flow/loss']).to.be.greaterThan(0);
    expect(shaper.flowModel.trained).to.equal(true);
    const after = new Float32Array(B * R);
    const next = await shaper.shape(batch, after);
    expect(next['flow/kept_tokens']).to.be.greaterThan(0);
    expect(after.some((x) => x < 0)).to.equal(true);
    // Padding never gets a reward.
    const mask = batch.tensor('response_mask').data;
    expect(after.every((x, i) => mask[i] === 1 || x === 0)).to.equal(true);

    // The reference's cadence: a step per actor mini-batch, the same latents (the same weights), and
    // the loss over all 16 sequences instead of the 8 correct ones: half of training_step's.
    const reference = await freshShaper([]);
    expect((await reference.shaper.shape(batch, new Float32Array(B * R)))['flow/kept_tokens']).to.equal(0);
    expect(await reference.shaper.afterUpdate(), 'actor_step ignores the end of the update').to.deep.equal({});
    const step = await reference.shaper.onActorStep(batch);
    expect(step['flow/update_sequences']).to.equal(8);
    expect(step['flow/loss']).to.be.closeTo(0.5 * update['flow/loss'], 1e-6 * update['flow/loss']);
    expect(reference.shaper.flowModel.trained).to.equal(true);

    // A warm-up's first step runs at lr 0: it changes nothing, so the field does not start rewarding.
    const warming = await freshShaper(['reward.flow.online.warmup_ratio=0.5']);
    expect(await warming.shaper.onActorStep(batch)).to.include({ 'flow/lr': 0, 'flow/update_sequences': 8 });
    expect(warming.shaper.flowModel.trained).to.equal(false);
    expect((await warming.shaper.shape(batch, new Float32Array(B * R)))['flow/kept_tokens']).to.equal(0);
    expect((await warming.shaper.onActorStep(batch))['flow/lr']).to.be.greaterThan(0);
    expect(warming.shaper.flowModel.trained).to.equal(true);
    batch.dispose();
    for (const { shaper: s, worker: w } of [{ shaper, worker }, reference, warming]) {
      s.dispose();
      w.dispose();
    }
  });

  it('with cadence actor_step the field takes one step per actor optimizer step (two mini-batches: two per training step)', async () => {
    const trainedSteps = async (cadence: string) => {
      const dir = tempDir();
      await train(writeConfig(dir), ['reward.flow.enable=true', `reward.flow.online.cadence=${cadence}`, 'trainer.total_training_steps=2', 'trainer.save_freq=-1']);
      return readMetrics(dir).map((m) => m['flow/trained_steps']);
    };
    // ppo_mini_batch_size 4 of train_batch_size 8: two actor steps per training step.
    expect(await trainedSteps('actor_step')).to.deep.equal([0, 2]);
    expect(await trainedSteps('training_step')).to.deep.equal([0, 1]);
  });

  for (const algorithm of ['grpo', 'flowrl']) {
    it(`${algorithm} + flow rewards trains and resumes with the field's weights and optimizer state restored`, async () => {
      // A constant online lr: the cosine schedule spans total_training_steps, which the split run changes.
      const flow = [
        `algorithm.name=${algorithm}`,
        'reward.flow.enable=true',
        `reward.flow.flow_model=${pretrained.outputDir}`,
        'reward.flow.online.warmup_ratio=0',
        'reward.flow.online.min_lr_ratio=1',
        'trainer.save_freq=1',
      ];
      const whole = tempDir();
      await train(writeConfig(whole), [...flow, 'trainer.total_training_steps=2']);
      const split = tempDir();
      const file = writeConfig(split);
      await train(file, [...flow, 'trainer.total_training_steps=1']);
      const flowDir = path.join(split, 'run', 'checkpoints', 'global_step_1', 'flow');
      expect(fs.readdirSync(flowDir).sort()).to.deep.equal(['flow_config.json', 'flow_model.safetensors', 'optimizer.safetensors', 'shaper_state.json']);
      expect([...readHeader(path.join(flowDir, 'optimizer.safetensors')).tensors.keys()]).to.include('m/final.out.weight');
      await train(file, [...flow, 'trainer.total_training_steps=2']);
      const a = readMetrics(whole);
      const b = readMetrics(split);
      expect(b.map((m) => m.step)).to.deep.equal([1, 2]);
      expect(withoutTiming(b[1])).to.deep.equal(withoutTiming(a[1]));
      const last = a.at(-1)!;
      expect(last['flow/trained_steps']).to.be.greaterThan(150);
      expect(last['flow/reward_mean']).to.be.lessThan(0);
      expect(a.some((m) => m['flow/kept_tokens'] > 0)).to.equal(true);
      for (const key of ['flow/score_mean', 'flow/kept_tokens', 'flow/reward_mean', 'flow/loss']) expect(last, key).to.have.property(key);
      // The field stays out of exports.
      const out = path.join(split, 'exported');
      const exported = await flowrlInProcess(['export', path.join(split, 'run', 'checkpoints', 'global_step_2'), out]);
      expect(exported.status, exported.stderr).to.equal(0);
      expect([...readHeader(path.join(out, 'model.safetensors')).tensors.keys()].some((k) => k.includes('flow') || k.includes('final.out'))).to.equal(false);
    });
  }

  it('with ppo and reinforce_plus_plus the flow penalties enter the token rewards (gae and the discounted return see them)', async () => {
    for (const algorithm of ['ppo', 'reinforce_plus_plus']) {
      const dir = tempDir();
      await train(writeConfig(dir, { critic: { optim: { lr: 1e-3 }, ppo_micro_batch_size: 64 } }), [
        `algorithm.name=${algorithm}`,
        'reward.flow.enable=true',
        `reward.flow.flow_model=${pretrained.outputDir}`,
        'trainer.total_training_steps=2',
      ]);
      for (const m of readMetrics(dir)) {
        expect(m['flow/reward_mean'], algorithm).to.be.lessThan(0);
        // Per response: outcome score plus the (negative) flow rewards.
        expect(m['critic/rewards/mean'], algorithm).to.be.closeTo(m['critic/score/mean'] + m['flow/reward_mean'], 1e-6);
      }
    }
  });

  it('flowrl flow-pretrain is a plugin command; bad flow settings exit 2 naming the key or file', async () => {
    const dir = tempDir();
    const file = writeConfig(dir, { reward: { flow: { pretrain: { total_steps: 3, output_dir: path.join(dir, 'fm') } } } });
    const ok = await flowrlInProcess(['flow-pretrain', file]);
    expect(ok.status, ok.stderr).to.equal(0);
    expect(ok.stdout).to.include('set reward.flow.flow_model');
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'fm', 'flow_config.json'), 'utf8')).trained_steps).to.equal(3);
    const listed = await flowrlInProcess(['plugins', file]);
    expect(listed.stdout).to.include('flowrl flow-pretrain CONFIG');
    const badNorm = await flowrlInProcess(['flow-pretrain', file, 'reward.flow.norm=zscore']);
    expect(badNorm.status).to.equal(2);
    expect(badNorm.stderr).to.include('reward.flow.norm');
    // flow_model is an input path: relative to the config file that sets it.
    const missing = writeConfig(dir, { reward: { flow: { enable: true, flow_model: 'no-such-field' } } });
    const badModel = await flowrlInProcess(['train', missing]);
    expect(badModel.status).to.equal(2);
    expect(badModel.stderr).to.include(path.join(dir, 'no-such-field'));
    expect(pretrainConfig.reward).to.have.nested.property('flow.context_mode', 'token_post');
  });

  it('rejects flow settings that can never reward or have the wrong type, naming the key', async () => {
    const dir = tempDir();
    const file = writeConfig(dir);
    await expectInputErrorAsync(createHost(file, { overrides: ['reward.flow.enable=true', 'reward.flow.online.enable=false'], skipEngine: true }), 'reward.flow', 'flow_model');
    await expectInputErrorAsync(createHost(file, { overrides: ['reward.flow.flow_model=3'], skipEngine: true }), 'reward.flow.flow_model');
    await expectInputErrorAsync(createHost(file, { overrides: ['reward.flow.pretrain.min_lr_ratio=-1'], skipEngine: true }), 'reward.flow.pretrain.min_lr_ratio');
    await expectInputErrorAsync(createHost(file, { overrides: ['reward.flow.context_mode=layer_post'], skipEngine: true }), 'reward.flow.context_mode', 'token_post');
  });
});
