// The FlowRL trainer: the core trainer unchanged, with FlowRL's requirements declared and checked.
import { injectable, injectFromBase } from 'inversify';
import { InputError, RLTrainer } from '../core-adapters/index.js';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLTrainer extends RLTrainer {
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
