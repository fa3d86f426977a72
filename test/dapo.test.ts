// DAPO as verl's recipe runs it, beyond clip-higher (a policy-loss key): the overlong reward shaping
// of the dapo reward manager and dynamic sampling (algorithm.filter_groups), on the countdown task.
import { expect } from 'chai';
import path from 'node:path';
import { Batch, createHost, TOKENS, type RewardManager, type Trainer, type Worker } from '../core-adapters/index.js';
import { expectInputErrorAsync, readRunMetrics, ROOT, tempDir, writeCountdownConfig } from './helpers.js';
import { startServer } from './serve-helpers.js';

async function hostFor(overrides: string[]) {
  const dir = tempDir();
  return { dir, host: await createHost(writeCountdownConfig(dir), { overrides, quiet: true }) };
}

describe('DAPO: overlong reward shaping and dynamic sampling', function () {
  this.timeout(120_000);

  it("the dapo reward manager adds min(-(L - (max - len)) / len * factor, 0) to each score, as verl's dapo manager does; correctness stays the scorer's", async () => {
    // data.max_response_length 16 in the fixture config: the penalty grows over lengths 12..16.
    const { host } = await hostFor(['reward_model.reward_manager=dapo', 'reward_model.overlong_buffer.enable=true', 'reward_model.overlong_buffer.len=4', 'reward_model.overlong_buffer.penalty_factor=0.5', 'reward_model.overlong_buffer.log=true']);
    const rewards = host.container.get<RewardManager>(TOKENS.RewardManager);
    await rewards.init?.();
    const lengths = [1, 12, 13, 15, 16];
    const R = 16;
    const mask = new Float32Array(lengths.length * R);
    lengths.forEach((l, b) => mask.fill(1, b * R, b * R + l));
    const batch = new Batch({
      tensors: { responses: { shape: [lengths.length, R], data: new Int32Array(lengths.length * R).fill(5) }, response_mask: { shape: [lengths.length, R], data: mask } },
      columns: { data_source: lengths.map(() => 'countdown'), ground_truth: lengths.map(() => ({ target: 3, numbers: [1, 2] })), extra_info: lengths.map(() => ({})) },
    });
    const plain = await host.container.get<RewardManager>(TOKENS.RewardManager).compute(batch);
    // Expected from verl's formula: expected_len 12; exceed = L - 12; min(-exceed / 4 * 0.5, 0).
    const penalties = [0, 0, -0.125, -0.375, -0.5];
    const naive = (await hostFor([])).host.container.get<RewardManager>(TOKENS.RewardManager);
    await naive.init?.();
    const base = await naive.compute(batch);
    plain.scores.forEach((score, b) => expect(score, `length ${lengths[b]}`).to.be.closeTo(base.scores[b] + penalties[b], 1e-12));
    lengths.forEach((l, b) => expect(plain.tokenLevelScores[b * R + l - 1]).to.be.closeTo(base.scores[b] + penalties[b], 1e-6));
    expect(plain.correct).to.deep.equal(base.correct);
    expect(plain.metrics['reward/overlong_reward/mean']).to.be.closeTo(penalties.reduce((a, b) => a + b, 0) / 5, 1e-12);
    expect(plain.metrics['reward/overlong/mean']).to.be.closeTo(3 / 5, 1e-12);
  });

  it('dynamic sampling trains only on groups whose accuracy varies, drawing generation batches until train_batch_size are kept', async () => {
    const small = ['data.train_batch_size=2', 'actor_rollout_ref.actor.ppo_mini_batch_size=2', 'actor_rollout_ref.rollout.n=4', 'trainer.test_freq=0', 'trainer.val_before_train=false'];
    const { dir, host } = await hostFor([...small, 'algorithm.filter_groups.enable=true', 'algorithm.filter_groups.metric=acc', 'data.gen_batch_size=2', 'trainer.total_training_steps=2', 'actor_rollout_ref.actor.clip_ratio_high=0.28']);
    const trainer = host.container.get<Trainer>(TOKENS.Trainer);
    try {
      await trainer.fit();
    } finally {
      host.container.get<Worker>(TOKENS.Worker).dispose();
    }
    const steps = readRunMetrics(path.join(dir, 'run')).filter((m) => m.step > 0);
    expect(steps).to.have.length(2);
    for (const m of steps) {
      expect(m['train/num_gen_batches']).to.be.at.least(1);
      expect(m['train/kept_prompt_share']).to.be.within(0, 1).and.above(0);
      // Every kept group has both correct and wrong answers, so the batch's accuracy is strictly between;
      // the batch is train_batch_size x n = 8 responses, whichever generation batches they came from.
      expect(m['critic/accuracy']).to.be.above(0).and.below(1);
      expect((m['critic/accuracy'] * 8) % 1).to.be.closeTo(0, 1e-9);
    }
    // Generation batches of different prompt widths were joined (seed 3 needs more than one).
    expect(steps.some((m) => m['train/num_gen_batches'] > 1)).to.equal(true);
  });

  it('a bound on generation batches stops the run naming the key; bad settings exit 2 naming theirs', async () => {
    const small = ['data.train_batch_size=2', 'actor_rollout_ref.actor.ppo_mini_batch_size=2', 'actor_rollout_ref.rollout.n=4', 'trainer.test_freq=0', 'trainer.val_before_train=false'];
    const stopped = await hostFor([...small, 'algorithm.filter_groups.enable=true', 'algorithm.filter_groups.metric=acc', 'algorithm.filter_groups.max_num_gen_batches=1', 'data.gen_batch_size=1', 'trainer.total_training_steps=1']);
    const trainer = stopped.host.container.get<Trainer>(TOKENS.Trainer);
    try {
      await expectInputErrorAsync(trainer.fit(), 'algorithm.filter_groups.max_num_gen_batches', 'generation batches kept');
    } finally {
      stopped.host.container.get<Worker>(TOKENS.Worker).dispose();
    }
    for (const [overrides, fragment] of [
      [['algorithm.filter_groups.enable=true'], 'algorithm.filter_groups.metric is null'],
      [['algorithm.filter_groups.enable=true', 'algorithm.filter_groups.metric=seq_final_reward', 'algorithm.use_kl_in_reward=true'], 'seq_final_reward'],
      [['reward_model.overlong_buffer.enable=true'], "reward_model.reward_manager is 'naive'"],
    ] as const) {
      const { host } = await hostFor([...overrides]);
      await expectInputErrorAsync(host.container.get<Trainer>(TOKENS.Trainer).fit(), fragment);
    }
    await expectInputErrorAsync(hostFor(['algorithm.filter_groups.metric=accuracy']), "algorithm.filter_groups.metric' is 'accuracy'", 'acc, score');
    const { host } = await hostFor(['reward_model.reward_manager=dapo', 'reward_model.overlong_buffer.enable=true', 'reward_model.overlong_buffer.len=0']);
    await expectInputErrorAsync(host.container.get<RewardManager>(TOKENS.RewardManager).init!(), 'reward_model.overlong_buffer.len must be positive');
  });

  it("bypass mode (verl's apply_bypass_mode): the servers' log-probs are the old ones, no recomputing pass, and the loss is bypass_mode; local sampling is refused", async () => {
    const server = await startServer({ modelDir: path.join(ROOT, 'test', 'fixtures', 'countdown', 'base-model') });
    try {
      const small = ['data.train_batch_size=2', 'actor_rollout_ref.actor.ppo_mini_batch_size=2', 'actor_rollout_ref.rollout.n=4', 'trainer.test_freq=0', 'trainer.val_before_train=false', 'trainer.total_training_steps=1'];
      const { dir, host } = await hostFor([...small, 'actor_rollout_ref.rollout.name=sglang', `actor_rollout_ref.rollout.server.urls=[${server.url}]`, 'algorithm.rollout_correction.bypass_mode=true']);
      try {
        await host.container.get<Trainer>(TOKENS.Trainer).fit();
      } finally {
        host.container.get<Worker>(TOKENS.Worker).dispose();
      }
      const [step] = readRunMetrics(path.join(dir, 'run')).filter((m) => m.step === 1);
      expect(step).not.to.have.property('timing_s/old_log_prob');
      expect(step).not.to.have.property('actor/entropy');
      expect(Object.keys(step).some((k) => k.startsWith('rollout_corr/')), 'the bypass_mode loss ran').to.equal(true);
    } finally {
      await server.server.close();
    }
    const { host } = await hostFor(['algorithm.rollout_correction.bypass_mode=true']);
    await expectInputErrorAsync(host.container.get<Trainer>(TOKENS.Trainer).fit(), 'algorithm.rollout_correction.bypass_mode', 'rollout servers');
  });
});
