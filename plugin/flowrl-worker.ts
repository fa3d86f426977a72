// The FlowRL worker: the stock actor-rollout-ref worker with ProjZ attached to the policy module it
// hands the actor. ProjZ trains with the LM under the same AdamW; sampling and exports use the LM
// alone; checkpoints keep it as proj_z.safetensors beside the HF actor directory (the host saves
// and restores every head of the module, with its optimizer moments).
import { inject, injectable, injectFromBase } from 'inversify';
import { ActorRolloutRefWorker, samplePolicy, type ActorStepListener, type Batch, type CausalLM, type Metrics, type PolicyModule, type SamplingSettings } from '../core-adapters/index.js';
import { FLOWRL_REPLAY, type CorrectReplay } from './replay.js';
import { flowrlConfig, usesReplay } from './config.js';
import { PROJ_Z } from './flowrl-actor.js';
import { ProjZ } from './proj-z.js';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLWorker extends ActorRolloutRefWorker {
  @inject(FLOWRL_REPLAY) protected readonly replay!: CorrectReplay;

  /** With flowrl.replay_samples (or explore_temperature, which reads which prompts are solved), the batch's correct answers join the replay before the update. */
  override updateActor(batch: Batch, listeners: ActorStepListener[] = []): Metrics {
    if (usesReplay(flowrlConfig(this.config))) this.replay.record(batch);
    return super.updateActor(batch, listeners);
  }

  /**
   * Samples prompts with the reference policy (flowrl.reference_samples), in this thread: the frozen
   * initial weights, or with LoRA the base with its adapters off.
   */
  sampleReference(prompts: Batch, sampling: SamplingSettings): Batch {
    this.loadReference();
    const lm = this.module.lm.adapters ? this.module.lm : this.reference!;
    const policy = { module: { ...this.module, lm, pool: undefined }, stopTokenIds: this.stopTokenIds(), padTokenId: this.padTokenId, writeWeights: () => ({ adapter: false }) };
    return lm.withoutAdapters(() => samplePolicy(policy, prompts, sampling, this.config.actor_rollout_ref.rollout.generation_batch_size));
  }

  override saveCheckpoint(dir: string): void {
    super.saveCheckpoint(dir);
    if (usesReplay(flowrlConfig(this.config))) this.replay.save(dir);
  }

  override loadCheckpoint(dir: string): void {
    super.loadCheckpoint(dir);
    this.replay.load(dir);
  }

  protected override buildPolicyModule(lm: CausalLM): PolicyModule {
    const module = super.buildPolicyModule(lm);
    const flowrl = flowrlConfig(this.config);
    const head = new ProjZ(lm.config.hiddenSize, { layers: flowrl.proj_layer, dropout: flowrl.proj_dropout, seed: this.config.trainer.seed });
    module.heads.set(PROJ_Z, head);
    for (const [name, variable] of head.params) {
      module.params.set(name, variable);
      if (flowrl.log_z_lr_scale !== 1) module.optimizer.lrScale.set(name, flowrl.log_z_lr_scale);
    }
    return module;
  }
}
