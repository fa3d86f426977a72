// Every advantage estimator against verl v0.9.0's own outputs (test/fixtures/verl-core-algos,
// made by scripts/verl_core_algos_oracle.py from verl/trainer/ppo/core_algos.py; its README gives
// the format). Each case runs the estimator registered under verl's name on the case's inputs and
// compares advantages and returns at the valid tokens; at masked positions the host's convention
// is 0, where verl leaves whitened constants or suffix sums.
import { expect } from 'chai';
import {
  AdvantageEstimatorRegistry,
  computeOptimalTokenBaselineAdvantages,
  computeTirOptimalTokenBaselineAdvantages,
  TOKEN_BASELINE_DEFAULTS,
  type AdvantageInput,
  type AdvantageOutput,
} from '../core-adapters/algorithms/index.js';
import { fixture, readJson } from './helpers.js';

type Matrix = (number | string)[][];

interface Batch {
  token_level_rewards: Matrix;
  response_mask: Matrix;
  index: string[];
  values: Matrix;
  reward_baselines: (number | string)[];
  old_log_probs: Matrix;
  sum_pi_squared: Matrix;
  rollout_is_weights: Matrix;
  gdpo_scores?: Record<string, number[]>;
}

interface Case {
  name: string;
  estimator: string;
  input: string;
  mask_dtype: string;
  args: { gamma?: number; lam?: number; epsilon?: number; norm_adv_by_std_in_grpo?: boolean; handle_zero_tail?: boolean; uses?: string[] };
  config: { gamma?: number; norm_adv_by_std_in_grpo?: boolean; gdpo_reward_keys?: string[] | null; gdpo_reward_weights?: number[] | null } | null;
  advantages?: Matrix;
  returns?: Matrix;
  error?: string;
}

const FILE = readJson<{ inputs: Record<string, Batch>; cases: Case[] }>(fixture('verl-core-algos', 'advantages.json'));

/**
 * Cases not matched on purpose, by name, with why. Everything else must match.
 * verl's grpo_vectorized takes its group means and standard deviations from
 * verl/utils/groupwise.py:group_mean_std, which casts the scores to float32, then subtracts that
 * float32 mean from the float64 scores. Scores of 1000.0001, 1000.0002 and 999.9999 lose their
 * differences (verl gives 0.56, 1.12, -0.56 where its own grpo gives 0.22, 0.87, -1.08), and a
 * group of two equal scores 0.3 gets (0.3 - float32(0.3)) / (0 + 1e-6) = -0.0119 each instead of 0.
 * Here grpo_vectorized is grpo, in float64, as verl's docstring says it is; it matches everywhere else.
 */
const NOT_MATCHED: Record<string, string> = {
  'grpo_vectorized/large_scores/norm_adv_by_std_in_grpo=True': 'verl rounds the group statistics to float32 (group_mean_std); here float64, as grpo',
  'grpo_vectorized/large_scores/norm_adv_by_std_in_grpo=False': 'verl rounds the group mean to float32 (group_mean_std); here float64, as grpo',
  'grpo_vectorized/outcome_mixed/norm_adv_by_std_in_grpo=True': 'group e (0.3, 0.3): verl divides 0.3 - float32(0.3) by 1e-6 (-0.0119); here 0, as grpo',
};

/** A number of the fixture (NaN and the infinities are strings there). */
const num = (v: number | string): number => (typeof v === 'number' ? v : v === 'NaN' ? NaN : v === 'Infinity' ? Infinity : -Infinity);
/** A [B, T] matrix, row-major, in float64 as the fixture holds it. */
const flat = (m: Matrix): Float64Array => Float64Array.from(m.flat(), num);

/** The estimator input of a case: verl's keyword arguments and config under the host's names. */
function inputOf(c: Case): AdvantageInput {
  const batch = FILE.inputs[c.input];
  const uses = c.args.uses ?? [];
  const keyed = uses.includes('gdpo_scores');
  return {
    batch: batch.response_mask.length,
    length: batch.response_mask[0].length,
    tokenRewards: flat(batch.token_level_rewards),
    responseMask: flat(batch.response_mask),
    values: flat(batch.values),
    groupIds: batch.index,
    gamma: c.args.gamma ?? c.config?.gamma ?? 1,
    lam: c.args.lam ?? 1,
    // grpo_passk reads the flag from config; the others take it as an argument (default True).
    normByStd: c.args.norm_adv_by_std_in_grpo ?? c.config?.norm_adv_by_std_in_grpo ?? true,
    epsilon: c.args.epsilon ?? 1e-6,
    rewardBaselines: uses.includes('reward_baselines') ? batch.reward_baselines.map(num) : undefined,
    oldLogProbs: uses.includes('old_log_probs') ? flat(batch.old_log_probs) : undefined,
    sumPiSquared: uses.includes('sum_pi_squared') ? flat(batch.sum_pi_squared) : undefined,
    rolloutIsWeights: uses.includes('rollout_is_weights') ? flat(batch.rollout_is_weights) : undefined,
    rewardComponents: keyed ? new Map(Object.entries(batch.gdpo_scores!)) : undefined,
    gdpo: keyed ? { keys: c.config?.gdpo_reward_keys ?? null, weights: c.config?.gdpo_reward_weights ?? null } : undefined,
  };
}

const registry = new AdvantageEstimatorRegistry();

/** Runs a case's estimator; the token baselines also take verl's handle_zero_tail and epsilon arguments. */
function run(c: Case): AdvantageOutput {
  const input = inputOf(c);
  const options = { handleZeroTail: c.args.handle_zero_tail ?? TOKEN_BASELINE_DEFAULTS.handleZeroTail, epsilon: c.args.epsilon ?? TOKEN_BASELINE_DEFAULTS.epsilon };
  if (c.estimator === 'optimal_token_baseline') return computeOptimalTokenBaselineAdvantages(input, options);
  if (c.estimator === 'tir_optimal_token_baseline') return computeTirOptimalTokenBaselineAdvantages(input, options);
  return registry.get(c.estimator)(input);
}

/**
 * The largest error of `actual` against verl's `expected` at valid tokens, relative to max(1, |expected|)
 * (outputs are float32, which holds a return near 1000 only to ~6e-5); masked positions must be 0.
 */
function worstError(actual: Float32Array, expected: Matrix, mask: Float64Array): { error: number; at: number } {
  const want = flat(expected);
  let error = 0;
  let at = -1;
  for (let i = 0; i < want.length; i++) {
    const e = mask[i] !== 0 ? Math.abs(actual[i] - want[i]) / Math.max(1, Math.abs(want[i])) : Math.abs(actual[i]);
    if (!(e <= error)) {
      error = e;
      at = i;
    }
  }
  return { error, at };
}

describe('advantage estimators against verl v0.9.0', () => {
  it('the registry holds exactly verl v0.9.0\'s estimator names, and the fixtures cover each', () => {
    const verlNames = [
      'gae', 'grpo', 'grpo_vectorized', 'gdpo', 'grpo_passk', 'reinforce_plus_plus_baseline', 'rloo', 'opo',
      'reinforce_plus_plus', 'remax', 'gpg', 'rloo_vectorized', 'optimal_token_baseline', 'tir_optimal_token_baseline',
    ];
    expect(registry.names()).to.have.members(verlNames);
    expect([...new Set(FILE.cases.map((c) => c.estimator))]).to.have.members(verlNames);
    for (const name of Object.keys(NOT_MATCHED)) expect(FILE.cases.some((c) => c.name === name), name).to.equal(true);
  });

  it('every case matches to 1e-6 (relative above 1): advantages and returns at valid tokens, 0 where masked', () => {
    const failures: string[] = [];
    let checked = 0;
    for (const c of FILE.cases) {
      if (c.error) continue;
      const mask = flat(FILE.inputs[c.input].response_mask);
      const out = run(c);
      for (const [what, actual, expected] of [['advantages', out.advantages, c.advantages!], ['returns', out.returns, c.returns!]] as const) {
        const { error, at } = worstError(actual, expected, mask);
        const matched = error <= 1e-6;
        if (c.name in NOT_MATCHED) {
          // A deliberate difference must stay a difference, or the list is stale.
          if (what === 'advantages' && matched) failures.push(`${c.name}: listed as not matched, but matches`);
          continue;
        }
        if (!matched) failures.push(`${c.name} ${what}: error ${error} at ${at}`);
      }
      checked += 1;
    }
    expect(failures).to.deep.equal([]);
    expect(checked).to.equal(FILE.cases.filter((c) => !c.error).length);
  });

  it('the cases where verl raises raise here too (pass@k on a group of one)', () => {
    const errors = FILE.cases.filter((c) => c.error);
    expect(errors.length).to.be.greaterThan(0);
    for (const c of errors) {
      expect(c.error, c.name).to.match(/^ValueError: Pass@k requires at least 2 samples per group/);
      expect(() => run(c), c.name).to.throw(/needs at least 2 per prompt/);
    }
  });
});
