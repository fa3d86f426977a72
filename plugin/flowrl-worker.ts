// The FlowRL worker: the stock actor-rollout-ref worker (with the replay and reference sampling of
// off-policy-rows.ts) and ProjZ attached to the policy module it hands the actor. ProjZ trains with
// the LM under the same AdamW; sampling and exports use the LM alone; checkpoints keep it as
// proj_z.safetensors beside the HF actor directory (the host saves and restores every head of the
// module, with its optimizer moments).
import { injectable, injectFromBase } from 'inversify';
import type { CausalLM, PolicyModule } from '../core-adapters/index.js';
import { flowrlConfig } from './config.js';
import { PROJ_Z } from './flowrl-actor.js';
import { OffPolicyRowsWorker } from './off-policy-rows.js';
import { ProjZ } from './proj-z.js';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLWorker extends OffPolicyRowsWorker {
  protected override buildPolicyModule(lm: CausalLM): PolicyModule {
    const module = super.buildPolicyModule(lm);
    const flowrl = flowrlConfig(this.config);
    // Only the learned log Z has parameters.
    if (flowrl.log_z !== 'proj_z') return module;
    const head = new ProjZ(lm.config.hiddenSize, { layers: flowrl.proj_layer, dropout: flowrl.proj_dropout, seed: this.config.trainer.seed });
    module.heads.set(PROJ_Z, head);
    for (const [name, variable] of head.params) {
      module.params.set(name, variable);
      if (flowrl.log_z_lr_scale !== 1) module.optimizer.lrScale.set(name, flowrl.log_z_lr_scale);
    }
    return module;
  }
}
