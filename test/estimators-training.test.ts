// One countdown training step with each advantage estimator verl v0.9.0 has beyond gae, grpo and
// reinforce_plus_plus (test/trainer.test.ts trains those): the trainer gives each what it reads
// (remax a greedy baseline per prompt, the optimal token baselines sum pi^2 from the actor, gdpo
// the scorer's fields) and the step updates the policy. Small on purpose: 2 prompts x 4 responses.
import { expect } from 'chai';
import path from 'node:path';
import { createHost, TOKENS, type Batch, type SamplingSettings, type Trainer, type Worker } from '../core-adapters/index.js';
import { expectInputErrorAsync, readRunMetrics, tempDir, writeCountdownConfig } from './helpers.js';

const ESTIMATORS = [
  'grpo_vectorized',
  'gdpo',
  'grpo_passk',
  'reinforce_plus_plus_baseline',
  'rloo',
  'opo',
  'remax',
  'gpg',
  'rloo_vectorized',
  'optimal_token_baseline',
  'tir_optimal_token_baseline',
];

/** The countdown fixture cut to 2 prompts x 4 responses, a wrong answer in tags scoring 0.1 so that scores vary. */
function smallConfig(dir: string): string {
  return writeCountdownConfig(dir, {
    data: { train_batch_size: 2, max_response_length: 10 },
    actor_rollout_ref: { rollout: { n: 4 }, actor: { ppo_mini_batch_size: 2 } },
    reward_model: { reward_kwargs: { countdown: { format: 0.1 } } },
  });
}

const ONE_STEP = ['trainer.total_training_steps=1', 'trainer.val_before_train=false', 'trainer.test_freq=-1'];

describe('every verl estimator trains a countdown step', function () {
  this.timeout(120000);

  for (const estimator of ESTIMATORS) {
    it(estimator, async () => {
      const dir = tempDir();
      const host = await createHost(smallConfig(dir), { quiet: true, overrides: [`algorithm.adv_estimator=${estimator}`, 'algorithm.gdpo_reward_keys=[score,acc]', ...ONE_STEP] });
      // What the trainer asks of the worker: sampling settings, and whether sum pi^2 came back.
      const worker = host.container.get<Worker>(TOKENS.Worker);
      const sampled: { rows: number; greedy: boolean }[] = [];
      const sums: Float32Array[] = [];
      const generate = worker.generateSequences.bind(worker);
      worker.generateSequences = (prompts: Batch, sampling: SamplingSettings) => (sampled.push({ rows: prompts.size, greedy: sampling.greedy }), generate(prompts, sampling));
      const logProb = worker.computeLogProb.bind(worker);
      worker.computeLogProb = async (batch, options) => {
        const out = await logProb(batch, options);
        if (out.sumPiSquared) sums.push(out.sumPiSquared);
        return out;
      };
      await host.container.get<Trainer>(TOKENS.Trainer).fit();
      worker.dispose();

      const [step] = readRunMetrics(path.join(dir, 'run'));
      expect(step.step).to.equal(1);
      expect(step['actor/grad_norm'], 'the policy moved').to.be.greaterThan(0);
      expect(Number.isFinite(step['actor/pg_loss'])).to.equal(true);
      // remax samples one greedy response per prompt beside the 8 sampled ones.
      expect(sampled, 'rollouts').to.deep.equal(estimator === 'remax' ? [{ rows: 8, greedy: false }, { rows: 2, greedy: true }] : [{ rows: 8, greedy: false }]);
      // The optimal token baselines get sum pi^2, a probability mass in (0, 1]; no other estimator pays for it.
      if (estimator.endsWith('optimal_token_baseline')) {
        expect(sums).to.have.length(1);
        expect(sums[0].every((v) => v > 0 && v <= 1 + 1e-6)).to.equal(true);
      } else expect(sums).to.have.length(0);
    });
  }

  it('settings an estimator cannot run without stop the run before loading, naming the key (exit 2)', async () => {
    const file = smallConfig(tempDir());
    await expectInputErrorAsync(createHost(file, { skipEngine: true, overrides: ['algorithm.adv_estimator=grpo_passk', 'actor_rollout_ref.rollout.n=1'] }), 'actor_rollout_ref.rollout.n', 'grpo_passk');
    await expectInputErrorAsync(createHost(file, { skipEngine: true, overrides: ['algorithm.adv_estimator=gdpo'] }), 'algorithm.gdpo_reward_keys');
    await expectInputErrorAsync(createHost(file, { skipEngine: true, overrides: ['algorithm.adv_estimator=gdpo', 'algorithm.gdpo_reward_keys=[score,acc]', 'algorithm.gdpo_reward_weights=[1]'] }), 'algorithm.gdpo_reward_weights');
    await expectInputErrorAsync(createHost(file, { skipEngine: true, overrides: ['algorithm.gdpo_reward_keys=score'] }), 'algorithm.gdpo_reward_keys', 'a list of strings');
    await expectInputErrorAsync(createHost(file, { skipEngine: true, overrides: ['algorithm.gdpo_reward_weights=[1,x]'] }), 'algorithm.gdpo_reward_weights', 'a list of numbers');
    await expectInputErrorAsync(createHost(file, { skipEngine: true, overrides: ['actor_rollout_ref.actor.calculate_sum_pi_squared=1'] }), 'actor_rollout_ref.actor.calculate_sum_pi_squared');
  });

  it('a gdpo key the scorer does not give stops the step naming the key and the fields it has', async () => {
    const dir = tempDir();
    const host = await createHost(smallConfig(dir), { quiet: true, overrides: ['algorithm.adv_estimator=gdpo', 'algorithm.gdpo_reward_keys=[score,format_reward]', ...ONE_STEP] });
    await expectInputErrorAsync(host.container.get<Trainer>(TOKENS.Trainer).fit(), "algorithm.gdpo_reward_keys: the scorer gives no 'format_reward'", 'score, acc');
    host.container.get<Worker>(TOKENS.Worker).dispose();
  });
});
