// The FlowRL plugin (registered by plugin.json). With algorithm.name flowrl it rebinds the host's
// Actor, Worker and Trainer to the FlowRL variants; with reward.flow.enable it contributes RLFR's
// flow rewards as a RewardShaper, with any algorithm; it always contributes `flowrl flow-pretrain`.
import { ContainerModule } from 'inversify';
import { TOKENS, type PluginContext } from '../core-adapters/index.js';
import { FlowRLActor } from './flowrl-actor.js';
import { FlowRLTrainer } from './flowrl-trainer.js';
import { FlowRLWorker } from './flowrl-worker.js';
import { flowrlConfig } from './config.js';
import { CorrectReplay, FLOWRL_REPLAY } from './replay.js';
import { flowRewardConfig } from './rlfr/config.js';
import { FlowPretrainCommand } from './rlfr/pretrain.js';
import { FlowRewardShaper } from './rlfr/shaper.js';

export const ALGORITHM = 'flowrl';

export default function flowrlPlugin(context: PluginContext): ContainerModule {
  return new ContainerModule(({ bind, rebind }) => {
    bind(TOKENS.Command).to(FlowPretrainCommand).inSingletonScope();
    if (flowRewardConfig(context.config).enable) bind(TOKENS.RewardShaper).to(FlowRewardShaper).inSingletonScope();
    if (context.config.algorithm.name !== ALGORITHM) return;
    rebind(TOKENS.Actor).to(FlowRLActor).inSingletonScope();
    rebind(TOKENS.Worker).to(FlowRLWorker).inSingletonScope();
    rebind(TOKENS.Trainer).to(FlowRLTrainer).inSingletonScope();
    bind(FLOWRL_REPLAY).toDynamicValue(() => new CorrectReplay(flowrlConfig(context.config).replay_capacity)).inSingletonScope();
  });
}

export { FlowRLActor, PROJ_Z } from './flowrl-actor.js';
export { FlowRLWorker } from './flowrl-worker.js';
export { FlowRLTrainer } from './flowrl-trainer.js';
export { computeFlowRLLoss, type FlowRLInputs, type FlowRLOptions, type FlowRLResult } from './objective.js';
export { ProjZ, poolPromptStates, type ProjZOptions } from './proj-z.js';
export { flowrlConfig, type FlowRLConfig } from './config.js';
export { CorrectReplay, FLOWRL_REPLAY } from './replay.js';
export { flowRewardConfig, type FlowRewardConfig } from './rlfr/config.js';
export { FlowModel, type FlowModelConfig } from './rlfr/flow-model.js';
export { FlowRewardShaper } from './rlfr/shaper.js';
export { flowPretrain, FlowPretrainCommand, type FlowPretrainResult } from './rlfr/pretrain.js';
