// FlowRL's later objectives (flowrl.log_z none, flowrl.reference, flowrl.level token) and the
// flowrl_token_level policy loss against the authors' own code on their fork, Xuekai-Zhu/verl_FlowRL,
// at the commits that introduced each (scripts/flowrl_fork_oracle.py ran it on the corpus in
// test/fixtures/flowrl-fork/reference.json): loss, d loss / d log pi and the metrics both log. Then
// the switches in a run: what they load, what they refuse, and that they train.
import { expect } from 'chai';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { createHost, TOKENS, type PolicyLoss, type PolicyLossOptions, type Trainer, type Worker } from '../core-adapters/index.js';
import { readMetrics, type PendingMetrics } from '../core-adapters/engine/readback.js';
import { computeFlowRLLoss, FlowRLActor, TOKEN_LEVEL_LOSS } from '../plugin/index.js';
import { expectClose, expectInputErrorAsync, fixture, readJson, readRunMetrics, ROOT, tempDir, writeCountdownConfig } from './helpers.js';

type Matrix = number[][];
type Value = number | 'NaN' | 'Infinity' | '-Infinity';

interface ForkCase {
  name: string;
  mask: Matrix;
  old: Matrix;
  log_prob: Matrix;
  ref: Matrix;
  adv: Matrix;
  rollout_is: Matrix;
}

interface ForkVariant {
  commit: string;
  function: string;
  variant: {
    reference: 'ref' | 'old' | 'none';
    level: 'sequence' | 'token';
    policy_loss?: string;
    clip_ratio_low?: number;
    clip_ratio_high?: number;
    loss_agg_mode?: PolicyLossOptions['lossAggMode'];
    rollout_is?: boolean;
    global_batch_info?: { dp_size?: number; batch_num_tokens?: number; global_batch_size?: number };
  };
  results: { loss: Value; grad: Matrix; metrics: Record<string, Value> }[];
}

const ref = readJson<{ beta: number; cases: ForkCase[]; variants: ForkVariant[] }>(fixture('flowrl-fork', 'reference.json'));

/** Our name for each fork metric that logs the same quantity. */
const SAME_METRIC: Record<string, string> = {
  'actor/log_prob': 'actor/log_prob',
  'actor/old_log_prob': 'actor/old_log_prob',
  'actor/ref_log_prob': 'actor/ref_log_prob',
  'actor/log_reward': 'actor/log_reward',
  'actor/final_loss': 'actor/final_loss',
  'actor/importance_weight': 'actor/importance_weight',
  'actor/ppo_kl': 'actor/ppo_kl',
  'actor/ref_kl': 'actor/ref_kl',
  'actor/residual_mean': 'actor/residual',
  'actor/clip_frac_total': 'actor/importance_weight_clipfrac',
  'actor/pg_clipfrac': 'actor/importance_weight_clipfrac',
};

/** Absolute tolerance scaled by the largest |expected| above 1 (float32 here, float64 there). */
function expectCloseScaled(actual: ArrayLike<number>, expected: number[], tolerance: number, label: string): void {
  expectClose(actual, expected, tolerance * Math.max(1, ...expected.map(Math.abs)), label);
}

/** A loss of log pi, its gradient and its metrics, read back. */
async function evaluate(loss: (logProb: tf.Tensor2D) => { loss: tf.Scalar; metrics: PendingMetrics }, logProb: Matrix): Promise<{ loss: number; grad: number[]; metrics: Record<string, number> }> {
  const lp = tf.tensor2d(logProb);
  let pending: PendingMetrics = {};
  const { value, grad } = tf.valueAndGrad((x: tf.Tensor) => {
    const out = loss(x as tf.Tensor2D);
    pending = out.metrics;
    return out.loss;
  })(lp);
  const result = { loss: (await value.data())[0], grad: Array.from(await grad.data()), metrics: await readMetrics(pending, 'metrics') };
  tf.dispose([lp, value, grad]);
  return result;
}

/** The plugin's registered flowrl_token_level, as a host that loaded the plugin holds it. */
async function registeredTokenLevelLoss(): Promise<PolicyLoss> {
  const file = writeCountdownConfig(tempDir(), { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'grpo' } });
  const host = await createHost(file, { skipEngine: true, overrides: [`actor_rollout_ref.actor.policy_loss.loss_mode=${TOKEN_LEVEL_LOSS}`] });
  expect(host.registries.policyLosses.providers().get(TOKEN_LEVEL_LOSS)).to.include('plugin flowrl');
  return host.container.get<PolicyLoss>(TOKENS.PolicyLoss);
}

describe("FlowRL's later objectives vs the authors' fork (Xuekai-Zhu/verl_FlowRL)", function () {
  this.timeout(120000);

  it('the fixture holds each variant the plugin offers, on the hostile cases', () => {
    const seen = ref.variants.map((v) => `${v.commit} ${v.variant.level} ${v.variant.reference}`);
    expect(seen).to.include.members(['4e335cfa sequence ref', '4e335cfa sequence old', '6e2ccf9e sequence none', '7476a833 token old', '307da4c9 token none', '972c5525 token old']);
    const far = ref.cases.find((c) => c.name === 'log-ratios past +-20')!;
    expect(far.log_prob[0][1] - far.old[0][1]).to.be.greaterThan(20);
    expect(far.log_prob[1][2] - far.old[1][2]).to.be.lessThan(-20);
    const token = ref.variants.find((v) => v.commit === '7476a833')!;
    expect(token.results.some((r) => (r.metrics['actor/clip_frac_high'] as number) > 0)).to.equal(true);
    expect(token.results.some((r) => (r.metrics['actor/clip_frac_low'] as number) > 0)).to.equal(true);
    expect(ref.cases.some((c) => c.mask.some((row) => row.every((m) => m === 0)))).to.equal(true);
    // Padded positions hold garbage, so a masked position that leaks in shows.
    expect(ref.cases.every((c) => c.mask.every((row, b) => row.every((m, t) => m === 1 || c.log_prob[b][t] === 1000)))).to.equal(true);
  });

  for (const v of ref.variants) {
    const agg = v.variant.loss_agg_mode;
    const what = v.variant.policy_loss
      ? `policy loss ${v.variant.policy_loss} (${agg}, clip ${v.variant.clip_ratio_low}/${v.variant.clip_ratio_high}${v.variant.rollout_is ? ', TIS weights' : ''}${Object.keys(v.variant.global_batch_info ?? {}).length ? ', mini-batch denominators' : ''})`
      : `flowrl.log_z none, reference ${v.variant.reference}, level ${v.variant.level}`;
    it(`${what} = ${v.commit} ${v.function}: loss, gradient and metrics on every case`, async () => {
      const registered = v.variant.policy_loss ? await registeredTokenLevelLoss() : undefined;
      const g = v.variant.global_batch_info ?? {};
      for (const [i, c] of ref.cases.entries()) {
        const expected = v.results[i];
        const tensors = { oldLogProb: tf.tensor2d(c.old), refLogProb: tf.tensor2d(c.ref), advantages: tf.tensor2d(c.adv), responseMask: tf.tensor2d(c.mask), rolloutIs: tf.tensor2d(c.rollout_is) };
        try {
          const got = await evaluate((logProb) => {
            if (registered) {
              const options: PolicyLossOptions = {
                clipRatioLow: v.variant.clip_ratio_low!,
                clipRatioHigh: v.variant.clip_ratio_high!,
                clipRatioC: 3,
                lossAggMode: agg!,
                globalBatchInfo: { dpSize: g.dp_size, batchNumTokens: g.batch_num_tokens, globalBatchSize: g.global_batch_size },
              };
              return registered({ logProb, oldLogProb: tensors.oldLogProb, advantages: tensors.advantages, responseMask: tensors.responseMask, tokenWeights: v.variant.rollout_is ? tensors.rolloutIs : undefined }, options);
            }
            return computeFlowRLLoss(
              { logProb, oldLogProb: tensors.oldLogProb, refLogProb: v.variant.reference === 'ref' ? tensors.refLogProb : undefined, advantages: tensors.advantages, responseMask: tensors.responseMask },
              { beta: ref.beta, reference: v.variant.reference, level: v.variant.level, clipRatioLow: v.variant.clip_ratio_low, clipRatioHigh: v.variant.clip_ratio_high, lossAggMode: agg },
            );
          }, c.log_prob);
          const label = `${c.name}`;
          // The fork's verl (972c5525) divides the seq-mean modes by every row; the host follows verl
          // v0.9.0's agg_loss, which counts only rows with a valid token. They differ only where a row has none.
          const rows = c.mask.length;
          const validRows = c.mask.filter((row) => row.some((m) => m > 0)).length;
          const scale = registered && agg!.startsWith('seq-mean') && g.global_batch_size === undefined ? rows / validRows : 1;
          expectCloseScaled([got.loss], [(expected.loss as number) * scale], 2e-6, `${label} loss`);
          expectCloseScaled(got.grad, expected.grad.flat().map((x) => x * scale), 2e-6, `${label} d loss / d log pi`);
          // The garbage at padded positions gets no gradient.
          c.mask.flat().forEach((m, k) => m === 0 && expect(got.grad[k], `${label} gradient at a padded position`).to.equal(0));
          let compared = 0;
          for (const [theirs, value] of Object.entries(expected.metrics)) {
            const ours = SAME_METRIC[theirs];
            if (!ours) continue;
            expect(got.metrics, `${label} logs ${ours}`).to.have.property(ours);
            expectCloseScaled([got.metrics[ours]], [value as number], 2e-6, `${label} ${ours} (theirs: ${theirs})`);
            compared++;
          }
          expect(compared, `${label}: metrics compared`).to.be.at.least(5);
          // No log Z: neither the head's metric nor its target.
          expect(got.metrics).to.not.have.property('actor/log_z');
        } finally {
          tf.dispose(Object.values(tensors));
        }
      }
    });
  }
});

describe('the later objectives in a run', function () {
  this.timeout(300000);

  function writeConfig(dir: string, extra: Record<string, unknown> = {}): string {
    return writeCountdownConfig(dir, { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'flowrl' }, ...extra });
  }

  it('reference old or none loads no reference policy and log_z none no ProjZ; ref keeps both', async () => {
    const file = writeConfig(tempDir());
    const paper = await createHost(file, { skipEngine: true });
    expect(paper.requirements.useReference).to.equal(true);
    for (const reference of ['old', 'none']) {
      const host = await createHost(file, { skipEngine: true, overrides: [`flowrl.reference=${reference}`, 'flowrl.log_z=none'] });
      expect(host.requirements.useReference, reference).to.equal(false);
      expect(host.container.get(TOKENS.Actor)).to.be.instanceOf(FlowRLActor);
    }
    // A KL loss still loads it, whatever flowrl.reference says.
    const kl = await createHost(file, { skipEngine: true, overrides: ['flowrl.reference=none', 'actor_rollout_ref.actor.use_kl_loss=true'] });
    expect(kl.requirements.useReference).to.equal(true);
  });

  it('level token without log_z none is refused, naming both keys', async () => {
    const file = writeConfig(tempDir());
    await expectInputErrorAsync(createHost(file, { skipEngine: true, overrides: ['flowrl.level=token'] }), 'flowrl.level token', 'flowrl.log_z none');
    await expectInputErrorAsync(createHost(file, { skipEngine: true, overrides: ['flowrl.reference=sometimes'] }), 'flowrl.reference');
  });

  it("the authors' final objective (token level, no reference, no log Z) trains on two threads: no proj_z, no reference, finite losses that move", async () => {
    const dir = tempDir();
    const file = writeConfig(dir);
    const host = await createHost(file, {
      quiet: true,
      overrides: ['engine.workers=2', 'flowrl.level=token', 'flowrl.reference=none', 'flowrl.log_z=none', 'actor_rollout_ref.actor.clip_ratio_high=0.28', 'trainer.total_training_steps=3', 'trainer.test_freq=-1', 'trainer.val_before_train=false'],
    });
    const worker = host.container.get<Worker>(TOKENS.Worker);
    await host.container.get<Trainer>(TOKENS.Trainer).fit();
    worker.dispose();
    const rows = readRunMetrics(path.join(dir, 'run'));
    expect(rows).to.have.length(3);
    for (const row of rows) {
      expect(row).to.not.have.property('actor/log_z');
      expect(row).to.not.have.property('actor/ref_kl');
      expect(Number.isFinite(row['actor/final_loss'])).to.equal(true);
      expect(row['actor/importance_weight']).to.be.within(0.8, 1.28);
    }
    expect(rows[2]['actor/final_loss']).to.not.equal(rows[0]['actor/final_loss']);
  });
});
