// The FlowRL trainer: the core trainer unchanged, with FlowRL's requirements declared and checked.
import { injectable, injectFromBase } from 'inversify';
import { InputError, RLTrainer } from '../core-adapters/index.js';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLTrainer extends RLTrainer {
  /** FlowRL reads group-normalised advantages and the reference policy, and trains no critic. */
  static readonly requirements = { advEstimator: 'grpo', useReference: true, useCritic: false };

  override async setup(): Promise<void> {
    const r = this.requirements;
    if (r.useCritic) throw new InputError(`algorithm flowrl trains no critic; algorithm.adv_estimator '${r.advEstimator}' needs one (use grpo)`);
    if (!r.useReference) throw new Error('flowrl needs the reference policy; its algorithm spec must declare needs_reference_policy');
    await super.setup();
  }
}
