// Policy losses by name (verl v0.9.0's register_policy_loss / get_policy_loss_fn in
// verl/trainer/ppo/core_algos.py): the registry, the options a run's config gives the losses, and
// the losses and aggregation themselves (policy-losses.ts, loss-aggregation.ts) re-exported.
import { InputError } from '../errors.js';
import type { Config } from '../config/load.js';
import type { AggregateLossOptions } from './loss-aggregation.js';
import { checkPolicyLossOptions, markReadsInputValues, VERL_POLICY_LOSSES, type PolicyLoss, type PolicyLossOptions } from './policy-losses.js';

export * from './loss-aggregation.js';
export * from './policy-losses.js';

/** What a registration may add to its loss. */
export interface PolicyLossTraits {
  /** Refuses options the loss cannot run with, as an InputError naming the key (the host calls it before a run). */
  check?: (options: PolicyLossOptions) => void;
  /**
   * The loss chooses tokens by its inputs' values (as clip_cov does): on a backend that cannot read
   * inside the gradient the actor computes them first and passes PolicyLossInput.host.
   */
  readsInputValues?: boolean;
}

/** Policy losses by name (verl's register_policy_loss), one registry per host, like the estimators. */
export class PolicyLossRegistry {
  private readonly losses = new Map<string, { fn: PolicyLoss; provider: string; traits: PolicyLossTraits }>();
  /** Who registrations come from now: 'core', or the plugin whose entry is running (the host sets it). */
  provider = 'core';

  /** A registry holding verl v0.9.0's losses (VERL_POLICY_LOSSES). */
  constructor() {
    for (const [name, fn] of VERL_POLICY_LOSSES) this.register(name, fn, { check: (options) => checkPolicyLossOptions(name, options) });
  }

  /** Adds a policy loss; another function under a taken name is an InputError naming both providers, the same one again a no-op. */
  register(name: string, fn: PolicyLoss, traits: PolicyLossTraits = {}): void {
    const existing = this.losses.get(name);
    if (existing && existing.fn !== fn) throw new InputError(`policy loss '${name}' from ${this.provider} is already registered by ${existing.provider}; pick another name`);
    this.losses.set(name, { fn, provider: existing?.provider ?? this.provider, traits: existing?.traits ?? traits });
    if (traits.readsInputValues) markReadsInputValues(fn);
  }

  /** The loss of this name (InputError naming `key` and listing the names if none). */
  get(name: string, key = 'actor_rollout_ref.actor.policy_loss.loss_mode'): PolicyLoss {
    const entry = this.losses.get(name);
    if (!entry) throw new InputError(`${key}: unknown policy loss '${name}'; available: ${this.names().join(', ')}`);
    return entry.fn;
  }

  /** Runs the loss's own check of its options (nothing for a loss registered without one). */
  check(name: string, options: PolicyLossOptions): void {
    this.get(name);
    this.losses.get(name)!.traits.check?.(options);
  }

  /** Who registered each loss ('core' or a plugin's name). */
  providers(): Map<string, string> {
    return new Map([...this.losses].map(([name, e]) => [name, e.provider]));
  }

  names(): string[] {
    return [...this.losses.keys()];
  }
}

/**
 * The options of actor_rollout_ref.actor as the losses read them: clip_ratio_low / high fall back
 * to clip_ratio when null (as every verl loss does), loss_scale_factor joins the mini-batch
 * denominators (verl's global_batch_info), policy_loss.* and tau_pos / tau_neg pass through.
 */
export function policyLossOptions(actor: Config['actor_rollout_ref']['actor'], globalBatchInfo: AggregateLossOptions = {}): PolicyLossOptions {
  const p = actor.policy_loss;
  const rc = p.rollout_correction;
  return {
    clipRatioLow: actor.clip_ratio_low ?? actor.clip_ratio,
    clipRatioHigh: actor.clip_ratio_high ?? actor.clip_ratio,
    clipRatioC: actor.clip_ratio_c,
    lossAggMode: actor.loss_agg_mode,
    globalBatchInfo: actor.loss_scale_factor === null ? globalBatchInfo : { ...globalBatchInfo, lossScaleFactor: actor.loss_scale_factor },
    tauPos: actor.tau_pos,
    tauNeg: actor.tau_neg,
    policyLoss: {
      clipCovRatio: p.clip_cov_ratio,
      clipCovLb: p.clip_cov_lb,
      clipCovUb: p.clip_cov_ub,
      klCovRatio: p.kl_cov_ratio,
      ppoKlCoef: p.ppo_kl_coef,
      droBeta: p.dro_beta,
      rolloutCorrection: {
        lossType: rc.loss_type,
        rolloutIs: rc.rollout_is,
        rolloutIsThreshold: rc.rollout_is_threshold,
        rolloutIsBatchNormalize: rc.rollout_is_batch_normalize,
        rolloutRs: rc.rollout_rs,
        rolloutRsThreshold: rc.rollout_rs_threshold,
      },
    },
  };
}
