// The FlowRL trainer: the core trainer unchanged, with FlowRL's requirements declared and checked,
// and the off-policy rows of its matching options (off-policy-rows.ts).
import { injectable, injectFromBase } from 'inversify';
import { InputError } from '../core-adapters/index.js';
import { flowrlConfig } from './config.js';
import { OffPolicyRowsTrainer } from './off-policy-rows.js';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLTrainer extends OffPolicyRowsTrainer {
  /** FlowRL reads group-normalised (GRPO) advantages and (flowrl.reference ref) the reference policy, and trains no critic. */
  override async setup(): Promise<void> {
    const r = this.requirements;
    if (r.advEstimator !== 'grpo') {
      throw new InputError(`algorithm.adv_estimator is '${r.advEstimator}'; flowrl's objective reads GRPO advantages (leave it null or set grpo)`);
    }
    if (flowrlConfig(this.config).reference === 'ref' && !r.useReference) {
      throw new InputError('plugin.json: algorithm flowrl must need the reference policy when flowrl.reference is ref (its objective reads it)');
    }
    await super.setup();
  }
}
