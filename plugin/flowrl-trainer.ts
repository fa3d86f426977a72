// The FlowRL trainer: the core trainer unchanged, with FlowRL's requirements declared and checked,
// and the off-policy rows of its matching options (off-policy-rows.ts).
import { injectable, injectFromBase } from 'inversify';
import { InputError } from '../core-adapters/index.js';
import { OffPolicyRowsTrainer } from './off-policy-rows.js';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLTrainer extends OffPolicyRowsTrainer {
  /** FlowRL reads group-normalised (GRPO) advantages and the reference policy, and trains no critic. */
  override async setup(): Promise<void> {
    const r = this.requirements;
    if (r.advEstimator !== 'grpo') {
      throw new InputError(`algorithm.adv_estimator is '${r.advEstimator}'; flowrl's objective reads GRPO advantages (leave it null or set grpo)`);
    }
    if (!r.useReference) throw new InputError("plugin.json: algorithm flowrl must declare needs_reference_policy: true (its objective reads the reference policy)");
    await super.setup();
  }
}
