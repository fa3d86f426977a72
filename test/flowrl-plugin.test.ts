import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import {
  ActorRolloutRefWorker,
  createHost,
  loadModel,
  PPOActor,
  RLTrainer,
  TOKENS,
  type Host,
  type Trainer,
  type Worker,
} from '../core-adapters/index.js';
import { readHeader } from '../core-adapters/model/safetensors.js';
import { FlowRLActor, FlowRLTrainer, FlowRLWorker, OffPolicyRowsTrainer, OffPolicyRowsWorker } from '../plugin/index.js';
import { enginePaths, flowrlInProcess, onEnginePath, readRunMetrics, ROOT, tempDir, withoutTiming, writeCountdownConfig } from './helpers.js';

function writeConfig(dir: string): string {
  return writeCountdownConfig(dir, { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'flowrl' } });
}

const readMetrics = (dir: string) => readRunMetrics(path.join(dir, 'run'));

async function run(file: string, overrides: string[]): Promise<Host> {
  const host = await createHost(file, { overrides, quiet: true });
  await host.container.get<Trainer>(TOKENS.Trainer).fit();
  host.container.get<Worker>(TOKENS.Worker).dispose();
  return host;
}

describe('the FlowRL plugin in the host', function () {
  this.timeout(300000);

  it('binds FlowRLActor, FlowRLWorker and FlowRLTrainer for flowrl and the stock roles otherwise, around one trainer loop', async () => {
    const file = writeConfig(tempDir());
    const flowrl = await createHost(file, { skipEngine: true });
    expect(flowrl.container.get(TOKENS.Actor)).to.be.instanceOf(FlowRLActor);
    expect(flowrl.container.get(TOKENS.Worker)).to.be.instanceOf(FlowRLWorker);
    expect(flowrl.container.get(TOKENS.Trainer)).to.be.instanceOf(FlowRLTrainer);
    expect(flowrl.requirements).to.include({ advEstimator: 'grpo', useReference: true, useCritic: false });
    const grpo = await createHost(file, { overrides: ['algorithm.name=grpo'], skipEngine: true });
    expect(grpo.container.get<object>(TOKENS.Actor).constructor).to.equal(PPOActor);
    expect(grpo.container.get<object>(TOKENS.Worker).constructor).to.equal(ActorRolloutRefWorker);
    expect(grpo.container.get<object>(TOKENS.Trainer).constructor).to.equal(RLTrainer);
    expect(grpo.config.flowrl).to.deep.include({ beta: 15, proj_layer: 3, importance_weight_max: 10 });
    // Another algorithm with off-policy rows: the plugin's row worker and trainer, the host's actor.
    for (const key of ['flowrl.replay_samples=2', 'flowrl.explore_temperature=2', 'flowrl.reference_samples=1']) {
      const rows = await createHost(file, { overrides: ['algorithm.name=grpo', key], skipEngine: true });
      expect(rows.container.get<object>(TOKENS.Actor).constructor, key).to.equal(PPOActor);
      expect(rows.container.get<object>(TOKENS.Worker).constructor, key).to.equal(OffPolicyRowsWorker);
      expect(rows.container.get<object>(TOKENS.Trainer).constructor, key).to.equal(OffPolicyRowsTrainer);
    }
    // FlowRL's trainer adds no loop of its own.
    for (const method of ['fit', 'validate', 'trainStep'] as const) {
      expect(Object.prototype.hasOwnProperty.call(FlowRLTrainer.prototype, method), method).to.equal(false);
    }
  });

  it('trains on the countdown task: validation accuracy rises (GRPO advantages)', async () => {
    const dir = tempDir();
    await run(writeConfig(dir), ['trainer.total_training_steps=30', 'trainer.test_freq=30']);
    const metrics = readMetrics(dir);
    const before = metrics.find((m) => m.step === 0)!['val/accuracy'];
    const after = metrics.find((m) => m.step === 30)!['val/accuracy'];
    expect(after, `${before} -> ${after}`).to.be.greaterThan(before + 0.03);
    const step = metrics.find((m) => m.step === 5)!;
    for (const key of ['actor/log_z', 'actor/log_prob', 'actor/old_log_prob', 'actor/ref_log_prob', 'actor/log_reward', 'actor/importance_weight', 'actor/ppo_kl', 'actor/ref_kl', 'actor/final_loss', 'actor/grad_norm']) {
      expect(step, key).to.have.property(key);
    }
    // One mini-batch, one epoch: the on-policy shortcut makes every weight exactly 1.
    expect(step['actor/importance_weight']).to.equal(1);
  });

  it('log Z climbs to the value that zeroes the residual and the loss falls (raw-score rewards)', async () => {
    const dir = tempDir();
    await run(writeConfig(dir), ['trainer.total_training_steps=30', 'trainer.val_before_train=false', 'trainer.test_freq=-1', 'flowrl.reward_source=score']);
    const metrics = readMetrics(dir).filter((m) => m.step >= 1);
    const first = metrics[0];
    const last = metrics.slice(-10);
    const mean = (key: string) => last.reduce((s, m) => s + Math.abs(m[key]), 0) / last.length;
    // At the start log Z is ~0 while the target (beta times the mean score) is well above it.
    expect(first['actor/log_z_target'] - first['actor/log_z']).to.be.greaterThan(1);
    expect(mean('actor/residual')).to.be.lessThan(0.6 * Math.abs(first['actor/residual']));
    expect(last.reduce((s, m) => s + m['actor/final_loss'], 0) / last.length).to.be.lessThan(first['actor/final_loss']);
  });

  let lastCheckpoint = '';
  for (const enginePath of enginePaths()) {
    it(`resumes with ProjZ and its optimizer state intact (step 2 equals an uninterrupted run) (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        const common = ['trainer.save_freq=1', 'trainer.val_before_train=false', 'trainer.test_freq=-1', 'actor_rollout_ref.actor.ppo_mini_batch_size=4'];
        const whole = tempDir();
        await run(writeConfig(whole), [...common, 'trainer.total_training_steps=2']);
        const split = tempDir();
        const file = writeConfig(split);
        await run(file, [...common, 'trainer.total_training_steps=1']);
        const checkpoint = path.join(split, 'run', 'checkpoints', 'global_step_1', 'actor');
        expect([...readHeader(path.join(checkpoint, 'proj_z.safetensors')).tensors.keys()]).to.include('proj_z.net.0.weight');
        expect([...readHeader(path.join(checkpoint, 'optimizer.safetensors')).tensors.keys()]).to.include('m/proj_z.net.8.weight');
        expect([...readHeader(path.join(checkpoint, 'model.safetensors')).tensors.keys()].some((k) => k.includes('proj_z'))).to.equal(false);
        await run(file, [...common, 'trainer.total_training_steps=2']);
        const a = readMetrics(whole);
        const b = readMetrics(split);
        expect(b.map((m) => m.step)).to.deep.equal([1, 2]);
        // Two mini-batches per step: the second is off-policy, so the importance weights are exercised.
        expect(a[1]['actor/importance_weight']).to.not.equal(1);
        expect(withoutTiming(b[1])).to.deep.equal(withoutTiming(a[1]));
        lastCheckpoint = path.join(split, 'run', 'checkpoints', 'global_step_2');
      }));
  }

  it('exports the policy as a plain HF directory without any proj_z tensor that `flowrl generate` can use', async () => {
    const out = path.join(tempDir(), 'exported');
    const exported = await flowrlInProcess(['export', lastCheckpoint, out]);
    expect(exported.status, exported.stderr).to.equal(0);
    expect(fs.readdirSync(out).sort()).to.deep.equal(['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
    expect([...readHeader(path.join(out, 'model.safetensors')).tensors.keys()].some((k) => k.includes('proj_z'))).to.equal(false);
    loadModel(out).dispose();
    const generated = await flowrlInProcess(['generate', '--model', out, '--prompt', '3, 4, 5 -> 12=', '--greedy', '--max-new-tokens', '10', '--json']);
    expect(generated.status, generated.stderr).to.equal(0);
    expect(JSON.parse(generated.stdout).response_ids.length).to.be.within(1, 10);
  });
});
