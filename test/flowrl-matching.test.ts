// The FlowRL options that make it match (examples/countdown/flowrl-matching.yaml): the replay of
// correct answers, rows from the reference policy, exploration at another temperature, the group log Z,
// ProjZ's own lr, and their checks.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { Batch, createHost, Rng, TextTokenizer, TOKENS, type Trainer, type Worker } from '../core-adapters/index.js';
import { scoreCountdown } from '../core-adapters/rewards/countdown.js';
import { CorrectReplay, FLOWRL_REPLAY, FlowRLWorker } from '../plugin/index.js';
import { expectInputError, expectInputErrorAsync, fixture, readRunMetrics, ROOT, tempDir, writeCountdownConfig } from './helpers.js';

function writeConfig(dir: string, extra: Record<string, unknown> = {}): string {
  return writeCountdownConfig(dir, { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'flowrl' }, ...extra });
}

/** A batch of rows (prompt, response, correct) as the trainer leaves it before the update. */
function rows(entries: [number[], number[], boolean][]): Batch {
  const R = Math.max(...entries.map(([, r]) => r.length));
  const responses = new Int32Array(entries.length * R);
  const mask = new Float32Array(entries.length * R);
  entries.forEach(([, r], b) => r.forEach((id, t) => ((responses[b * R + t] = id), (mask[b * R + t] = 1))));
  return new Batch({
    tensors: { responses: { shape: [entries.length, R], data: responses }, response_mask: { shape: [entries.length, R], data: mask } },
    columns: { prompt_ids: entries.map(([p]) => p), correct: entries.map(([, , c]) => c) },
  });
}

describe('FlowRL matching options', function () {
  this.timeout(300_000);

  it('the replay keeps distinct correct answers per prompt, drops the oldest past capacity, draws uniformly and round-trips through a checkpoint', () => {
    const replay = new CorrectReplay(2);
    replay.record(rows([
      [[5, 6], [7, 2], true],
      [[5, 6], [7, 2], true], // the same answer again
      [[5, 6], [8, 2], false], // wrong: not kept
      [[5, 6], [9, 2], true],
      [[4], [7, 2], true],
    ]));
    expect(replay.size([5, 6])).to.equal(2);
    expect(replay.size([4])).to.equal(1);
    expect(replay.size([3])).to.equal(0);
    expect(replay.draw([3], new Rng(1))).to.equal(undefined);
    replay.record(rows([[[5, 6], [10, 2], true]]));
    const rng = new Rng(7);
    const drawn = new Map<string, number>();
    for (let i = 0; i < 2000; i++) {
      const key = replay.draw([5, 6], rng)!.join(',');
      drawn.set(key, (drawn.get(key) ?? 0) + 1);
    }
    // [7, 2] was the oldest and is gone; the two left are drawn about equally often.
    expect([...drawn.keys()].sort()).to.deep.equal(['10,2', '9,2']);
    expect(drawn.get('9,2')! / 2000).to.be.closeTo(0.5, 0.05);
    const dir = tempDir();
    replay.save(dir);
    const restored = new CorrectReplay(2);
    restored.load(dir);
    expect(restored.size([5, 6])).to.equal(2);
    expect(restored.draw([4], new Rng(1))).to.deep.equal([7, 2]);
    fs.writeFileSync(path.join(dir, 'flowrl_replay.json'), '[{"prompt": [1], "responses": [[-1]]}]');
    expectInputError(() => restored.load(dir), 'flowrl_replay.json', 'entry 0');
  });

  it('replayed and reference rows (two threads): the set fractions per step, only correct answers replayed, the replay checkpointed, the group log Z centring each group', async () => {
    const dir = tempDir();
    // 24 prompts with many correct answers each: at 8 per step, every prompt comes back from step 4 on.
    const file = writeConfig(dir, { data: { train_files: path.join(ROOT, 'examples', 'countdown', 'collapse', 'prompts.jsonl') } });
    const host = await createHost(file, {
      overrides: ['flowrl.replay_samples=2', 'flowrl.reference_samples=1', 'flowrl.log_z=group', 'flowrl.reward_source=score', 'flowrl.length_normalize=false', 'trainer.total_training_steps=6', 'trainer.test_freq=-1', 'trainer.val_before_train=false', 'engine.workers=2'],
      quiet: true,
    });
    await host.container.get<Trainer>(TOKENS.Trainer).fit();
    const worker = host.container.get<Worker>(TOKENS.Worker);
    expect(worker).to.be.instanceOf(FlowRLWorker);
    const metrics = readRunMetrics(path.join(dir, 'run'));
    for (const m of metrics) {
      expect(m['flowrl/reference_fraction'], `step ${m.step}`).to.equal(1 / 8);
      expect(m['flowrl/replay_fraction']).to.be.at.most(2 / 8);
      // On-policy with the group estimate: each group's residuals sum to zero.
      expect(Math.abs(m['actor/residual']), `step ${m.step}`).to.be.below(1e-3);
    }
    expect(metrics[0]['flowrl/replay_fraction']).to.equal(0);
    expect(Math.max(...metrics.map((m) => m['flowrl/replay_fraction']))).to.be.above(0);
    // Every replayed answer in the checkpoint is a correct answer to its prompt.
    const saved = JSON.parse(fs.readFileSync(path.join(dir, 'run', 'checkpoints', 'global_step_6', 'flowrl_replay.json'), 'utf8')) as { prompt: number[]; responses: number[][] }[];
    const tokenizer = TextTokenizer.load(fixture('countdown', 'tokenizer'));
    expect(saved.length).to.be.above(0);
    const replay = host.container.get<CorrectReplay>(FLOWRL_REPLAY);
    for (const entry of saved) {
      const [numbers, target] = tokenizer.decode(entry.prompt, true).split('->').map((t) => t.trim().replace('=', ''));
      const problem = { numbers: numbers.split(',').map(Number), target: Number(target) };
      for (const response of entry.responses) expect(scoreCountdown(tokenizer.decode(response, true), problem).acc, tokenizer.decode(response, true)).to.equal(true);
      expect(replay.size(entry.prompt)).to.equal(entry.responses.length);
    }
    worker.dispose();
  });

  it('explore_temperature (two threads): rows of prompts already solved are drawn at it, the others and validation at their own temperatures; every log-prob at the rollout temperature', async () => {
    const dir = tempDir();
    // The 24 collapse prompts at 8 per step come back from step 4 on, many of them solved.
    const file = writeConfig(dir, { data: { train_files: path.join(ROOT, 'examples', 'countdown', 'collapse', 'prompts.jsonl') } });
    const host = await createHost(file, {
      overrides: ['flowrl.explore_temperature=2.5', 'trainer.total_training_steps=6', 'trainer.test_freq=6', 'trainer.val_before_train=false', 'engine.workers=2'],
      quiet: true,
    });
    const worker = host.container.get<Worker>(TOKENS.Worker);
    const replay = host.container.get<CorrectReplay>(FLOWRL_REPLAY);
    const calls: { temperature: number; solved: boolean[] }[] = [];
    const generate = worker.generateSequences.bind(worker);
    worker.generateSequences = (batch, sampling) => {
      calls.push({ temperature: sampling.temperature, solved: batch.column<number[]>('prompt_ids').map((p) => replay.size(p) > 0) });
      return generate(batch, sampling);
    };
    const config = host.container.get<{ actor_rollout_ref: { rollout: { temperature: number; val_kwargs: { temperature: number } } } }>(TOKENS.Config);
    await host.container.get<Trainer>(TOKENS.Trainer).fit();
    const training = calls.slice(0, -1);
    // Unsolved prompts at the rollout temperature, solved ones at 2.5, never mixed in one call.
    for (const call of training) {
      expect(call.solved.every((s) => s === (call.temperature === 2.5)), `a call at ${call.temperature}`).to.equal(true);
      expect([1, 2.5]).to.include(call.temperature);
    }
    expect(training.some((c) => c.temperature === 2.5)).to.equal(true);
    expect(calls.at(-1)!.temperature).to.equal(config.actor_rollout_ref.rollout.val_kwargs.temperature);
    expect(config.actor_rollout_ref.rollout.temperature).to.equal(1);
    const metrics = readRunMetrics(path.join(dir, 'run'));
    expect(metrics[0]['flowrl/explore_fraction']).to.equal(0);
    expect(Math.max(...metrics.map((m) => m['flowrl/explore_fraction']))).to.be.above(0);
    for (const m of metrics) {
      // Old and current log-probs are of the same (rollout-temperature) policy: one update leaves every weight 1.
      expect(m['actor/importance_weight'], `step ${m.step}`).to.equal(1);
    }
    worker.dispose();
  });

  it('grpo with replay and exploration (grpo-replay.yaml): the same off-policy rows, the GRPO loss, every old log-prob recomputed, the replay checkpointed', async () => {
    const dir = tempDir();
    const file = writeCountdownConfig(dir, { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'grpo' }, data: { train_files: path.join(ROOT, 'examples', 'countdown', 'collapse', 'prompts.jsonl') } });
    const host = await createHost(file, {
      overrides: ['flowrl.replay_samples=2', 'flowrl.explore_temperature=2', 'trainer.total_training_steps=6', 'trainer.test_freq=-1', 'trainer.val_before_train=false', 'engine.workers=1'],
      quiet: true,
    });
    const trainer = host.container.get<Trainer>(TOKENS.Trainer);
    await trainer.fit();
    trainer.dispose();
    const metrics = readRunMetrics(path.join(dir, 'run'));
    expect(metrics[0]['flowrl/replay_fraction']).to.equal(0);
    expect(Math.max(...metrics.map((m) => m['flowrl/replay_fraction']))).to.be.within(0.01, 2 / 8);
    expect(Math.max(...metrics.map((m) => m['flowrl/explore_fraction']))).to.be.above(0);
    for (const m of metrics) {
      // GRPO's loss, not trajectory balance; the ratio is 1 on replayed rows too (one mini-batch).
      expect(m, `step ${m.step}`).to.have.property('actor/pg_loss');
      expect(m, `step ${m.step}`).not.to.have.property('actor/log_z');
      expect(m['actor/ppo_kl'], `step ${m.step}`).to.be.below(1e-6);
    }
    const saved = JSON.parse(fs.readFileSync(path.join(dir, 'run', 'checkpoints', 'global_step_6', 'flowrl_replay.json'), 'utf8')) as { prompt: number[]; responses: number[][] }[];
    expect(saved.length).to.be.above(0);
  });

  it('log_z_lr_scale gives ProjZ its own lr; bad values and impossible combinations name the key', async () => {
    const dir = tempDir();
    const host = await createHost(writeConfig(dir), { overrides: ['flowrl.log_z_lr_scale=30'], skipEngine: true });
    const worker = host.container.get<FlowRLWorker>(TOKENS.Worker);
    await worker.initReplica();
    const scales = [...worker.module.params.keys()].map((name) => [name, worker.module.optimizer.lrScale.get(name) ?? 1] as const);
    for (const [name, scale] of scales) expect(scale, name).to.equal(name.startsWith('proj_z.') ? 30 : 1);
    worker.dispose();
    const cases: [string[], string][] = [
      [['flowrl.replay_samples=8'], 'flowrl.replay_samples + flowrl.reference_samples is 8'],
      [['flowrl.replay_samples=4', 'flowrl.reference_samples=4'], 'below actor_rollout_ref.rollout.n (8)'],
      [['flowrl.reference_samples=1', 'actor_rollout_ref.rollout.name=sglang', 'actor_rollout_ref.rollout.server.urls=[http://127.0.0.1:1]'], 'need actor_rollout_ref.rollout.name local'],
      // Checked by the host from plugin.json's declaration of each key.
      [['flowrl.log_z=mean'], "key 'flowrl.log_z' is 'mean'; allowed: proj_z, group"],
      [['flowrl.log_z_lr_scale=0'], "key 'flowrl.log_z_lr_scale' must be a number > 0"],
      [['flowrl.proj_dropout=1'], "key 'flowrl.proj_dropout' must be a number in [0, 1); got number 1"],
      [['reward.flow.pretrain.total_steps=2.5'], "key 'reward.flow.pretrain.total_steps' must be a whole number >= 1"],
      [['flowrl.replay_capacity=0'], 'flowrl.replay_capacity'],
      [['flowrl.explore_temperature=0'], "key 'flowrl.explore_temperature' must be a number > 0"],
      [['flowrl.explore_temperature=1.5', 'actor_rollout_ref.rollout.name=sglang', 'actor_rollout_ref.rollout.server.urls=[http://127.0.0.1:1]'], 'flowrl.explore_temperature needs actor_rollout_ref.rollout.name local'],
    ];
    for (const [overrides, message] of cases) {
      await expectInputErrorAsync(
        (async () => {
          const h = await createHost(writeConfig(tempDir()), { overrides, skipEngine: true });
          await h.container.get<Trainer>(TOKENS.Trainer).fit();
        })(),
        message,
      );
    }
  });
});
