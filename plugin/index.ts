// The FlowRL plugin (registered by plugin.json). With algorithm.name flowrl it rebinds the host's
// Actor, Worker and Trainer to the FlowRL variants; with another algorithm and off-policy rows
// (flowrl.replay_samples, reference_samples or explore_temperature) it rebinds the Worker and Trainer
// to the ones that make them, so a baseline gets the same rows as flowrl-matching; with
// reward.flow.enable it contributes RLFR's flow rewards as a RewardShaper, with any algorithm; it
// always contributes `flowrl flow-pretrain` and the policy loss flowrl_token_level (the authors' async
// branch's loss, for any algorithm).
import { ContainerModule } from 'inversify';
import { TOKENS, type PluginContext } from '../core-adapters/index.js';
import { FlowRLActor } from './flowrl-actor.js';
import { FlowRLTrainer } from './flowrl-trainer.js';
import { FlowRLWorker } from './flowrl-worker.js';
import { flowrlConfig, usesOffPolicyRows } from './config.js';
import { flowrlTokenLevelLoss } from './objective.js';
import { OffPolicyRowsTrainer, OffPolicyRowsWorker } from './off-policy-rows.js';
import { CorrectReplay, FLOWRL_REPLAY } from './replay.js';
import { flowRewardConfig } from './rlfr/config.js';
import { FlowPretrainCommand } from './rlfr/pretrain.js';
import { FlowRewardShaper } from './rlfr/shaper.js';

export const ALGORITHM = 'flowrl';
export const TOKEN_LEVEL_LOSS = 'flowrl_token_level';

export default function flowrlPlugin(context: PluginContext): ContainerModule {
  // The authors' async loss, usable as actor.policy_loss.loss_mode with any algorithm (registered
  // now: the host binds the policy loss before it loads the plugins' modules).
  context.registries.policyLosses.register(TOKEN_LEVEL_LOSS, flowrlTokenLevelLoss(flowrlConfig(context.config).beta));
  return new ContainerModule(({ bind, rebind }) => {
    bind(TOKENS.Command).to(FlowPretrainCommand).inSingletonScope();
    if (flowRewardConfig(context.config).enable) bind(TOKENS.RewardShaper).to(FlowRewardShaper).inSingletonScope();
    const flowrl = context.config.algorithm.name === ALGORITHM;
    if (!flowrl && !usesOffPolicyRows(flowrlConfig(context.config))) return;
    if (flowrl) rebind(TOKENS.Actor).to(FlowRLActor).inSingletonScope();
    rebind(TOKENS.Worker).to(flowrl ? FlowRLWorker : OffPolicyRowsWorker).inSingletonScope();
    rebind(TOKENS.Trainer).to(flowrl ? FlowRLTrainer : OffPolicyRowsTrainer).inSingletonScope();
    bind(FLOWRL_REPLAY).toDynamicValue(() => new CorrectReplay(flowrlConfig(context.config).replay_capacity)).inSingletonScope();
  });
}

export { FlowRLActor, PROJ_Z } from './flowrl-actor.js';
export { FlowRLWorker } from './flowrl-worker.js';
export { FlowRLTrainer } from './flowrl-trainer.js';
export { computeFlowRLLoss, flowrlTokenLevelLoss, type FlowRLInputs, type FlowRLOptions, type FlowRLResult } from './objective.js';
export { ProjZ, poolPromptStates, type ProjZOptions } from './proj-z.js';
export { flowrlConfig, usesOffPolicyRows, type FlowRLConfig } from './config.js';
export { OffPolicyRowsTrainer, OffPolicyRowsWorker } from './off-policy-rows.js';
export { CorrectReplay, FLOWRL_REPLAY } from './replay.js';
export { flowRewardConfig, type FlowRewardConfig } from './rlfr/config.js';
export { FlowModel, type FlowModelConfig } from './rlfr/flow-model.js';
export { FlowRewardShaper } from './rlfr/shaper.js';
export { flowPretrain, FlowPretrainCommand, type FlowPretrainResult } from './rlfr/pretrain.js';
