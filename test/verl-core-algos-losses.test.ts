// The policy losses, loss aggregation and KL penalties against verl v0.9.0's own functions
// (test/fixtures/verl-core-algos: values and gradients with respect to log_prob that
// scripts/verl_core_algos_oracle.py recorded from verl/trainer/ppo/core_algos.py, in float64).
//
// Tolerance: |ours - verl| <= 1e-6 * max(1, |verl|) for every value, gradient entry and metric.
// Ours run in float32 on tfjs and the fixtures' float64 inputs are rounded to float32 first, so two
// kinds of case get a wider bound, each said where it is applied:
//  - token-sum losses: an unnormalised sum of up to 27 float32 products that cancel to about 1
//    (seq_adv: 2.2e-6 relative), so 3e-6;
//  - cispo's pg_clipfrac on token_adv: one token's ratio is exactly 1.2 in float64 (log 1.2 given,
//    on the clip bound, not counted by ratio != clip(ratio)) and one float32 ulp away from it here,
//    so the fraction may differ by that token (1/27); its loss and gradient are the same either way.
import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import {
  aggregateLoss,
  computeValueLoss,
  klPenalty,
  PolicyLossRegistry,
  reinforcePolicyLoss,
  seededSelection,
  vanillaPolicyLoss,
  type AggregateLossOptions,
  type PolicyLoss,
  type PolicyLossOptions,
} from '../core-adapters/algorithms/index.js';
import { KL_PENALTY_TYPES, LOSS_AGG_MODES, type KlPenaltyType, type LossAggMode } from '../core-adapters/config/choices.js';
import { InputError } from '../core-adapters/errors.js';
import { disposeMetrics, readMetrics, type PendingMetrics } from '../core-adapters/engine/readback.js';
import { fixture, readJson } from './helpers.js';

type Num = number | 'NaN' | 'Infinity' | '-Infinity';
type Matrix = Num[][];

/** The fixtures' numbers, with NaN and infinities written as strings. */
const num = (x: Num): number => (x === 'NaN' ? NaN : x === 'Infinity' ? Infinity : x === '-Infinity' ? -Infinity : x);
const flat = (m: Matrix): number[] => m.flat().map(num);
const t2 = (m: Matrix) => tf.tensor2d(flat(m), [m.length, m[0].length]);

/** How far `actual` is from `expected`, relative to max(1, |expected|); 0 for equal non-finite values. */
function relError(actual: number, expected: number): number {
  if (Object.is(actual, expected) || actual === expected || (Number.isNaN(actual) && Number.isNaN(expected))) return 0;
  return Math.abs(actual - expected) / Math.max(1, Math.abs(expected));
}

/** Collects the cases of one `it` that miss their bound, so a failure lists every one of them. */
class Misses {
  readonly lines: string[] = [];
  check(label: string, actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance: number): void {
    expect(actual.length, `${label}: length`).to.equal(expected.length);
    let worst = 0;
    let at = -1;
    for (let i = 0; i < expected.length; i++) {
      const e = relError(actual[i], expected[i]);
      if (!(e <= worst)) [worst, at] = [e, i];
    }
    if (!(worst <= tolerance)) this.lines.push(`${label}[${at}]: ${actual[at]} vs verl ${expected[at]} (relative ${worst.toExponential(2)} > ${tolerance})`);
  }
  done(): void {
    expect(this.lines, this.lines.join('\n')).to.deep.equal([]);
  }
}

const TOLERANCE = 1e-6;
const SUM_TOLERANCE = 3e-6;

interface PolicyInputs {
  old_log_prob: Matrix;
  log_prob: Matrix;
  advantages: Matrix;
  response_mask: Matrix;
  rollout_is_weights: Matrix;
}

interface VerlActorConfig {
  clip_ratio: number;
  clip_ratio_low: number | null;
  clip_ratio_high: number | null;
  clip_ratio_c: number;
  tau_pos: number;
  tau_neg: number;
  global_batch_info: { dp_size?: number; batch_num_tokens?: number; global_batch_size?: number; loss_scale_factor?: number | null };
  policy_loss: {
    clip_cov_ratio: number;
    clip_cov_lb: number;
    clip_cov_ub: number;
    kl_cov_ratio: number;
    ppo_kl_coef: number;
    dro_beta: number | null;
    rollout_correction: {
      rollout_is?: 'token' | 'sequence' | null;
      rollout_is_threshold?: number | string | null;
      rollout_is_batch_normalize?: boolean;
      rollout_rs?: string | null;
      rollout_rs_threshold?: number | string | null;
      loss_type?: 'ppo_clip' | 'reinforce';
    };
  };
}

interface PolicyCase {
  name: string;
  loss_mode?: string;
  function?: 'compute_policy_loss_reinforce' | 'compute_policy_loss';
  input: string;
  loss_agg_mode: LossAggMode;
  rollout_is_weights: boolean;
  config?: VerlActorConfig;
  args?: { cliprange: number; cliprange_low: number | null; cliprange_high: number | null; clip_ratio_c: number };
  loss?: Num;
  grad_log_prob?: Matrix;
  metrics?: Record<string, Num>;
  error?: string;
  clip_cov_candidates?: [number, number][];
  clip_cov_selected?: [number, number][];
  clip_num?: number;
}

const policy = readJson<{ inputs: Record<string, PolicyInputs>; cases: PolicyCase[]; other_functions: PolicyCase[] }>(fixture('verl-core-algos', 'policy-losses.json'));

/** verl's batch-info keys in ours. */
function batchInfo(g: VerlActorConfig['global_batch_info']): AggregateLossOptions {
  return { dpSize: g.dp_size, batchNumTokens: g.batch_num_tokens, globalBatchSize: g.global_batch_size, lossScaleFactor: g.loss_scale_factor ?? undefined };
}

/** The options verl's ActorConfig gives a loss (verl's RolloutCorrectionConfig defaults where a key is absent). */
function optionsOf(c: PolicyCase): PolicyLossOptions {
  if (c.args) {
    const a = c.args;
    return { clipRatioLow: a.cliprange_low ?? a.cliprange, clipRatioHigh: a.cliprange_high ?? a.cliprange, clipRatioC: a.clip_ratio_c, lossAggMode: c.loss_agg_mode };
  }
  const cfg = c.config!;
  const p = cfg.policy_loss;
  const rc = p.rollout_correction;
  return {
    clipRatioLow: cfg.clip_ratio_low ?? cfg.clip_ratio,
    clipRatioHigh: cfg.clip_ratio_high ?? cfg.clip_ratio,
    clipRatioC: cfg.clip_ratio_c,
    lossAggMode: c.loss_agg_mode,
    globalBatchInfo: batchInfo(cfg.global_batch_info),
    tauPos: cfg.tau_pos,
    tauNeg: cfg.tau_neg,
    policyLoss: {
      clipCovRatio: p.clip_cov_ratio,
      clipCovLb: p.clip_cov_lb,
      clipCovUb: p.clip_cov_ub,
      klCovRatio: p.kl_cov_ratio,
      ppoKlCoef: p.ppo_kl_coef,
      droBeta: p.dro_beta,
      rolloutCorrection: {
        lossType: rc.loss_type ?? 'ppo_clip',
        rolloutIs: rc.rollout_is === undefined ? 'sequence' : rc.rollout_is,
        rolloutIsThreshold: rc.rollout_is_threshold === undefined ? 2.0 : rc.rollout_is_threshold,
        rolloutIsBatchNormalize: rc.rollout_is_batch_normalize ?? false,
        rolloutRs: rc.rollout_rs ?? null,
        rolloutRsThreshold: rc.rollout_rs_threshold ?? null,
      },
    },
  };
}

/** One loss on one case: its value, gradient with respect to logProb and pending metrics (or the error it throws). */
function gradPolicyCase(fn: PolicyLoss, c: PolicyCase, options: PolicyLossOptions): { value: number; grad: Float32Array; pending: PendingMetrics } {
  const inputs = policy.inputs[c.input];
  const [logProb, oldLogProb, advantages, responseMask] = [inputs.log_prob, inputs.old_log_prob, inputs.advantages, inputs.response_mask].map(t2) as tf.Tensor2D[];
  const tokenWeights = c.rollout_is_weights ? (t2(inputs.rollout_is_weights) as tf.Tensor2D) : undefined;
  let value = NaN;
  let pending: PendingMetrics = {};
  try {
    const grad = tf.grad((x: tf.Tensor) => {
      const r = fn({ logProb: x as tf.Tensor2D, oldLogProb, advantages, responseMask, tokenWeights }, options);
      value = r.loss.dataSync()[0];
      pending = r.metrics;
      return r.loss;
    })(logProb);
    const data = grad.dataSync() as Float32Array;
    grad.dispose();
    return { value, grad: data, pending };
  } catch (error) {
    disposeMetrics(pending);
    throw error;
  } finally {
    tf.dispose([logProb, oldLogProb, advantages, responseMask, ...(tokenWeights ? [tokenWeights] : [])]);
  }
}

/** One loss on one case: its value, gradient with respect to logProb and metrics, read after the gradient. */
async function runPolicyCase(fn: PolicyLoss, c: PolicyCase, options: PolicyLossOptions): Promise<{ value: number; grad: Float32Array; metrics: Record<string, number> }> {
  const { value, grad, pending } = gradPolicyCase(fn, c, options);
  return { value, grad, metrics: await readMetrics(pending, `${c.name} metrics`) };
}

/** Checks a case's value, gradient and metrics (verl's metric names; the deprecated function's without 'actor/'). */
async function checkPolicyCase(misses: Misses, fn: PolicyLoss, c: PolicyCase, options = optionsOf(c)): Promise<void> {
  const out = await runPolicyCase(fn, c, options);
  const valueTolerance = c.loss_agg_mode === 'token-sum' ? SUM_TOLERANCE : TOLERANCE;
  misses.check(`${c.name} loss`, [out.value], [num(c.loss!)], valueTolerance);
  misses.check(`${c.name} d loss / d log_prob`, out.grad, flat(c.grad_log_prob!), TOLERANCE);
  const expected = Object.entries(c.metrics ?? {}).map(([k, v]) => [c.args ? `actor/${k}` : k, num(v)] as const);
  expect(Object.keys(out.metrics).sort(), `${c.name}: metric names`).to.deep.equal(expected.map(([k]) => k).sort());
  for (const [key, value] of expected) {
    const onTheBound = c.loss_mode === 'cispo' && c.input === 'token_adv' && key === 'actor/pg_clipfrac';
    misses.check(`${c.name} ${key}`, [out.metrics[key]], [value], onTheBound ? 1 / 27 + TOLERANCE : TOLERANCE);
  }
}

describe("verl v0.9.0's policy losses (values, gradients and metrics from its own functions)", () => {
  const registry = new PolicyLossRegistry();
  const modes = [...new Set(policy.cases.map((c) => c.loss_mode!))];

  it('the fixtures cover every registered loss, and only those', () => {
    expect(modes.sort()).to.deep.equal(registry.names().sort());
    expect(registry.names()).to.deep.equal(['vanilla', 'dppo_tv', 'dppo_kl', 'gspo', 'sapo', 'gpg', 'clip_cov', 'kl_cov', 'geo_mean', 'dro', 'cispo', 'bypass_mode']);
  });

  for (const mode of modes) {
    it(mode, async () => {
      const misses = new Misses();
      const cases = policy.cases.filter((c) => c.loss_mode === mode);
      for (const c of cases) {
        const fn = registry.get(mode);
        const options = optionsOf(c);
        if (c.error) {
          // verl raises (dro without a positive dro_beta); ours refuses with the key's name, before and during a run.
          expect(() => registry.check(mode, options), c.name).to.throw(InputError, 'policy_loss.dro_beta');
          expect(() => gradPolicyCase(fn, c, options), c.name).to.throw(InputError, 'policy_loss.dro_beta');
          continue;
        }
        if (c.clip_cov_selected) {
          // verl's choice came from torch.randperm; the candidates it chose among and how many must be ours.
          const R = policy.inputs[c.input].log_prob[0].length;
          const flatIndex = ([row, col]: [number, number]) => row * R + col;
          options.select = (candidates, count) => {
            expect(candidates, `${c.name}: candidates`).to.deep.equal(c.clip_cov_candidates!.map(flatIndex));
            expect(count, `${c.name}: tokens to drop`).to.equal(Math.min(c.clip_num!, candidates.length));
            return c.clip_cov_selected!.map(flatIndex);
          };
        }
        await checkPolicyCase(misses, fn, c, options);
      }
      misses.done();
    });
  }

  it("compute_policy_loss_reinforce (bypass_mode's reinforce) and the deprecated compute_policy_loss (vanilla without weights)", async () => {
    const misses = new Misses();
    for (const c of policy.other_functions) await checkPolicyCase(misses, c.function === 'compute_policy_loss_reinforce' ? reinforcePolicyLoss : vanillaPolicyLoss, c);
    misses.done();
  });

  it("clip_cov's own choice is seeded: the same seed picks the same tokens, another seed others, never more than asked", () => {
    const candidates = Array.from({ length: 40 }, (_, i) => 3 * i);
    const pick = (seed: number) => [...seededSelection(seed)(candidates, 5)].sort((a, b) => a - b);
    expect(pick(7)).to.deep.equal(pick(7));
    expect(pick(7)).to.not.deep.equal(pick(8));
    expect(new Set(pick(7)).size).to.equal(5);
    for (const i of pick(7)) expect(candidates).to.include(i);
    expect(seededSelection(1)(candidates.slice(0, 3), 5)).to.have.length(3);
  });
});

interface AggCase {
  name: string;
  input: string;
  loss_agg_mode: string;
  mask_dtype: string;
  kwargs: { dp_size?: number; batch_num_tokens?: number; global_batch_size?: number; loss_scale_factor?: number };
  loss?: Num;
  grad_loss_mat?: Matrix;
  error?: string;
}

const agg = readJson<{ inputs: Record<string, { loss_mat: Matrix; loss_mask: Matrix }>; cases: AggCase[] }>(fixture('verl-core-algos', 'agg-loss.json'));

describe("verl v0.9.0's agg_loss (five modes, global batch info, dp_size)", () => {
  it('the modes are verl v0.9.0\'s five, token-sum included', () => {
    expect([...LOSS_AGG_MODES].sort()).to.deep.equal([...new Set(agg.cases.filter((c) => !c.error).map((c) => c.loss_agg_mode))].sort());
  });

  it('every case: value and gradient with respect to the loss matrix', () => {
    const misses = new Misses();
    for (const c of agg.cases) {
      const inputs = agg.inputs[c.input];
      const options = batchInfo(c.kwargs);
      const run = () => {
        const [loss, mask] = [t2(inputs.loss_mat), t2(inputs.loss_mask)] as tf.Tensor2D[];
        let value = NaN;
        try {
          const grad = tf.grad((x: tf.Tensor) => {
            const out = aggregateLoss(x as tf.Tensor2D, mask, c.loss_agg_mode as LossAggMode, options);
            value = out.dataSync()[0];
            return out;
          })(loss);
          const data = grad.dataSync();
          grad.dispose();
          return { value, grad: data };
        } finally {
          tf.dispose([loss, mask]);
        }
      };
      if (c.error) {
        // An unknown mode, or dp_size > 1 without the global denominators: verl raises ValueError.
        expect(run, c.name).to.throw(c.error.includes('Invalid loss_agg_mode') ? 'unknown loss_agg_mode' : 'is required when dp_size > 1');
        continue;
      }
      const out = run();
      const expected = num(c.loss!);
      if (Number.isNaN(expected)) {
        // Deliberate departure: verl's 0/0 (no valid token) and its seq-mean modes' loss * mask (a NaN
        // or infinity at a masked position) give NaN; ours zero what is masked and count at least 1,
        // so a batch without valid tokens gives 0 and masked junk changes nothing. Gradients agree.
        expect(Number.isFinite(out.value), `${c.name}: finite`).to.equal(true);
        if (c.input === 'all_masked') expect(out.value, c.name).to.equal(0);
      } else misses.check(`${c.name} loss`, [out.value], [expected], TOLERANCE);
      misses.check(`${c.name} d loss / d loss_mat`, out.grad, flat(c.grad_loss_mat!), TOLERANCE);
    }
    misses.done();
  });

  it('masked junk (NaN, infinity) leaves every mode as on the same losses with it replaced by 0', () => {
    const inputs = agg.inputs.nonfinite_masked;
    const clean = inputs.loss_mat.map((row, b) => row.map((v, t) => (num(inputs.loss_mask[b][t]) ? v : 0)));
    for (const mode of LOSS_AGG_MODES) {
      const [a, b] = [inputs.loss_mat, clean].map((m) => tf.tidy(() => aggregateLoss(t2(m) as tf.Tensor2D, t2(inputs.loss_mask) as tf.Tensor2D, mode).dataSync()[0]));
      expect(a, mode).to.equal(b);
    }
  });
});

interface ValueLossCase {
  name: string;
  cliprange_value: number;
  loss_agg_mode: LossAggMode;
  kwargs: AggCase['kwargs'];
  vf_loss: Num;
  vf_clipfrac: Num;
  grad_vpreds: Matrix;
}

const misc = readJson<{ inputs: { value: { vpreds: Matrix; returns: Matrix; values: Matrix; response_mask: Matrix } }; value_loss: ValueLossCase[] }>(fixture('verl-core-algos', 'misc.json'));

describe("verl v0.9.0's compute_value_loss (the critic's, through the same aggregation)", () => {
  it('every case: value, clip fraction and the gradient with respect to vpreds', () => {
    const misses = new Misses();
    const v = misc.inputs.value;
    for (const c of misc.value_loss) {
      const [vpreds, returns, values, mask] = [v.vpreds, v.returns, v.values, v.response_mask].map(t2) as tf.Tensor2D[];
      let value = NaN;
      let clipfracScalar: tf.Scalar | undefined;
      const grad = tf.grad((x: tf.Tensor) => {
        const out = computeValueLoss(x as tf.Tensor2D, returns, values, mask, c.cliprange_value, c.loss_agg_mode, batchInfo(c.kwargs));
        [value, clipfracScalar] = [out.loss.dataSync()[0], out.clipfrac];
        return out.loss;
      })(vpreds);
      const clipfrac = clipfracScalar!.dataSync()[0];
      clipfracScalar!.dispose();
      misses.check(`${c.name} vf_loss`, [value], [num(c.vf_loss)], c.loss_agg_mode === 'token-sum' ? SUM_TOLERANCE : TOLERANCE);
      misses.check(`${c.name} vf_clipfrac`, [clipfrac], [num(c.vf_clipfrac)], TOLERANCE);
      misses.check(`${c.name} d vf_loss / d vpreds`, grad.dataSync(), flat(c.grad_vpreds), TOLERANCE);
      tf.dispose([vpreds, returns, values, mask, grad]);
    }
    misses.done();
  });
});

interface KlCase {
  name: string;
  function: 'kl_penalty' | 'kl_penalty_forward' | 'compute_rewards';
  input: string;
  kl_penalty?: string;
  value?: Matrix;
  grad_logprob?: Matrix;
  error?: string;
}

const kl = readJson<{ inputs: Record<string, { logprob: Matrix; ref_logprob: Matrix }>; cases: KlCase[] }>(fixture('verl-core-algos', 'kl.json'));

describe("verl v0.9.0's kl_penalty: estimators, '+' straight-through variants, full", () => {
  const cases = kl.cases.filter((c) => c.function !== 'compute_rewards');

  it('the names are verl\'s: kl, k1, abs, mse, k2, low_var_kl, k3, each with a \'+\', and full', () => {
    const names = new Set(cases.filter((c) => !c.kl_penalty!.startsWith('nonsense')).map((c) => c.kl_penalty!));
    expect([...KL_PENALTY_TYPES].sort()).to.deep.equal([...names].sort());
  });

  it('every case: the elementwise value and the gradient of its sum with respect to logprob', () => {
    const misses = new Misses();
    for (const c of cases) {
      const inputs = kl.inputs[c.input];
      // kl_penalty_forward is kl_penalty without the '+' handling: a name without '+' here.
      const type = c.kl_penalty as KlPenaltyType;
      const run = () => {
        const [lp, ref] = [t2(inputs.logprob), t2(inputs.ref_logprob)];
        try {
          const value = tf.tidy(() => klPenalty(lp, ref, type).dataSync());
          const grad = tf.grad((x: tf.Tensor) => tf.sum(klPenalty(x, ref, type)))(lp);
          const g = grad.dataSync();
          grad.dispose();
          return { value, grad: g };
        } finally {
          tf.dispose([lp, ref]);
        }
      };
      if (c.error) {
        // full (verl: NotImplementedError) is refused by name; an unknown name too.
        expect(run, c.name).to.throw(InputError, c.kl_penalty!.startsWith('full') ? 'not implemented, as in verl' : 'unknown kl_penalty');
        continue;
      }
      const out = run();
      misses.check(`${c.name} value`, out.value, flat(c.value!), TOLERANCE);
      misses.check(`${c.name} d sum / d logprob`, out.grad, flat(c.grad_logprob!), TOLERANCE);
    }
    misses.done();
  });
});
