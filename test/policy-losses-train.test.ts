// Every registered policy loss trains: one actor update of the countdown model per loss (the loss
// chosen by actor_rollout_ref.actor.policy_loss.loss_mode, its keys read from the config), and one
// whole trainer step with a loss other than vanilla, so the name reaches the run from the config.
import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import path from 'node:path';
import {
  AdamW,
  Batch,
  createHost,
  loadModel,
  LrScheduler,
  PolicyLossRegistry,
  resolveConfig,
  TOKENS,
  type CausalLM,
  type ConfigTree,
  type PolicyModule,
  type Trainer,
  type Worker,
} from '../core-adapters/index.js';
import { PPOActor } from '../core-adapters/actor/ppo-actor.js';
import { sequencesFromSamples } from '../core-adapters/workers/sequences.js';
import { expectInputErrorAsync, fixture, readRunMetrics, tempDir, writeCountdownConfig } from './helpers.js';

/** Settings some losses need beyond the defaults (dro has no default beta). */
const EXTRA: Record<string, ConfigTree> = {
  dro: { policy_loss: { dro_beta: 0.5 } },
  clip_cov: { policy_loss: { clip_cov_ratio: 0.2, clip_cov_lb: -10, clip_cov_ub: 10 } },
  kl_cov: { policy_loss: { kl_cov_ratio: 0.2 } },
  bypass_mode: { policy_loss: { rollout_correction: { loss_type: 'reinforce', rollout_rs: 'token_k3', rollout_rs_threshold: 5 } } },
};

describe('every registered policy loss trains a countdown step', function () {
  this.timeout(120000);
  let lm: CausalLM;
  before(() => {
    lm = loadModel(fixture('countdown', 'base-model'));
  });
  after(() => lm.dispose());

  it('one actor update per loss: a finite loss and gradient norm, and the weights move (each from the same start)', async () => {
    const userFile = path.join(tempDir('flowrl-losses-'), 'run.yaml');
    const start = new Map([...lm.trainableParams()].map(([name, v]) => [name, tf.clone(v)]));
    // 4 countdown-like prompts x 2 responses of token ids (the vocabulary has 24), ragged.
    const prompts = [[1, 5, 6, 7], [1, 8, 9], [1, 10, 11, 12, 13], [1, 14]].flatMap((p) => [p, p]);
    const responses = [[3, 4, 5, 2], [6, 7], [8, 9, 10, 11], [12, 2], [13, 14, 15], [16], [17, 18, 19, 20], [21, 22, 2]];
    const R = 4;
    for (const name of new PolicyLossRegistry().names()) {
      const config = resolveConfig({
        user: {
          actor_rollout_ref: {
            actor: { policy_loss: { loss_mode: name }, ppo_mini_batch_size: 4, ppo_micro_batch_size: 8, use_kl_loss: true, kl_loss_type: 'low_var_kl+', ...EXTRA[name] },
            rollout: { n: 2 },
          },
          trainer: { seed: 5 },
        },
        userFile,
      });
      const module: PolicyModule = {
        lm,
        heads: new Map(),
        params: new Map(lm.trainableParams()),
        optimizer: new AdamW({ lr: 1e-2, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0 }),
        lrScheduler: new LrScheduler({ lr: 1e-2, warmupSteps: 0, minLrRatio: 0, numCycles: 0.5 }),
      };
      const actor = new PPOActor(config, new PolicyLossRegistry().get(name));
      actor.attach(module);
      const batch = new Batch({ tensors: sequencesFromSamples(prompts, responses, R, 0) });
      const B = batch.size;
      const mask = batch.tensor('response_mask').data;
      const old = (await actor.computeLogProbHere(batch, { withEntropy: false })).logProbs;
      // Rows alternate good and bad answers; the reference sits a little below the policy.
      batch.set('old_log_probs', { shape: [B, R], data: old });
      batch.set('ref_log_prob', { shape: [B, R], data: old.map((v) => v - 0.1) });
      batch.set('advantages', { shape: [B, R], data: Float32Array.from(mask, (m, i) => m * (Math.floor(i / R) % 2 ? -1 : 1)) });
      const before = tf.memory().numTensors;
      const metrics = await actor.updatePolicy(batch);
      module.optimizer.dispose();
      expect(tf.memory().numTensors, `${name}: tensors kept besides AdamW's`).to.equal(before);
      for (const key of ['actor/pg_loss', 'actor/grad_norm', 'actor/kl_loss']) expect(Number.isFinite(metrics[key]), `${name}: ${key} = ${metrics[key]}`).to.equal(true);
      expect(metrics['actor/grad_norm'], `${name}: a gradient`).to.be.greaterThan(0);
      const moved = [...lm.trainableParams()].some(([n, v]) => tf.tidy(() => tf.any(tf.notEqual(v, start.get(n)!)).dataSync()[0]) === 1);
      expect(moved, `${name}: the weights moved`).to.equal(true);
      if (name === 'bypass_mode') expect(metrics, name).to.have.property('rollout_corr/rollout_rs_token_k3_masked_fraction');
      if (name === 'clip_cov') expect(metrics['actor/pg_clipfrac'], `${name}: tokens dropped`).to.be.greaterThan(0);
      for (const [n, v] of lm.trainableParams()) v.assign(start.get(n)!);
    }
    tf.dispose([...start.values()]);
  });

  it('a trainer step with policy_loss.loss_mode gspo (verl\'s spelling; the old policy_loss: NAME still reads), and a key out of range stops the run naming it', async () => {
    const dir = tempDir();
    const file = writeCountdownConfig(dir, { actor_rollout_ref: { actor: { policy_loss: { loss_mode: 'gspo' } } } });
    const host = await createHost(file, { overrides: ['trainer.total_training_steps=1', 'trainer.val_before_train=false', 'trainer.test_freq=-1', 'trainer.save_freq=-1', 'data.train_batch_size=2'], quiet: true });
    expect(host.config.actor_rollout_ref.actor.policy_loss.loss_mode).to.equal('gspo');
    await host.container.get<Trainer>(TOKENS.Trainer).fit();
    host.container.get<Worker>(TOKENS.Worker).dispose();
    const [step] = readRunMetrics(path.join(dir, 'run'));
    expect(Number.isFinite(step['actor/pg_loss'])).to.equal(true);
    expect(step).to.have.property('actor/pg_clipfrac_lower', 0);
    const old = await createHost(file, { overrides: ['actor_rollout_ref.actor.policy_loss=cispo'], skipEngine: true, quiet: true });
    expect(old.config.actor_rollout_ref.actor.policy_loss.loss_mode).to.equal('cispo');
    await expectInputErrorAsync(createHost(file, { overrides: ['actor_rollout_ref.actor.policy_loss.loss_mode=dro'], skipEngine: true, quiet: true }), 'actor_rollout_ref.actor.policy_loss.dro_beta');
    await expectInputErrorAsync(createHost(file, { overrides: ['actor_rollout_ref.actor.policy_loss.loss_mode=vanilla', 'actor_rollout_ref.actor.clip_ratio_c=1'], skipEngine: true, quiet: true }), 'actor_rollout_ref.actor.clip_ratio_c', 'greater than 1');
    await expectInputErrorAsync(
      createHost(file, { overrides: ['actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode', 'actor_rollout_ref.actor.policy_loss.rollout_correction.rollout_rs=token_k9'], skipEngine: true, quiet: true }),
      'actor_rollout_ref.actor.policy_loss.rollout_correction.rollout_rs',
      'token_k9',
    );
    await expectInputErrorAsync(createHost(file, { overrides: ['actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0'], skipEngine: true, quiet: true }), 'actor_rollout_ref.actor.policy_loss.kl_cov_ratio');
    await expectInputErrorAsync(createHost(file, { overrides: ['actor_rollout_ref.actor.use_kl_loss=true', 'actor_rollout_ref.actor.kl_loss_type=full'], skipEngine: true, quiet: true }), 'actor_rollout_ref.actor.kl_loss_type', 'NotImplementedError');
    await expectInputErrorAsync(createHost(file, { overrides: ['actor_rollout_ref.actor.policy_loss.loss_mode=ppo3'], skipEngine: true, quiet: true }), 'actor_rollout_ref.actor.policy_loss.loss_mode', "'ppo3'", 'bypass_mode');
  });
});
