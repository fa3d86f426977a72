// The FlowRL plugin (registered by plugin.json): with algorithm.name flowrl it rebinds the host's
// Actor, Worker and Trainer to the FlowRL variants; with any other algorithm it changes nothing.
import { ContainerModule } from 'inversify';
import { TOKENS, type PluginContext } from '../core-adapters/index.js';
import { FlowRLActor } from './flowrl-actor.js';
import { FlowRLTrainer } from './flowrl-trainer.js';
import { FlowRLWorker } from './flowrl-worker.js';

export const ALGORITHM = 'flowrl';

export default function flowrlPlugin(context: PluginContext): ContainerModule {
  return new ContainerModule(({ rebind }) => {
    if (context.config.algorithm.name !== ALGORITHM) return;
    rebind(TOKENS.Actor).to(FlowRLActor).inSingletonScope();
    rebind(TOKENS.Worker).to(FlowRLWorker).inSingletonScope();
    rebind(TOKENS.Trainer).to(FlowRLTrainer).inSingletonScope();
  });
}

export { FlowRLActor, PROJ_Z } from './flowrl-actor.js';
export { FlowRLWorker } from './flowrl-worker.js';
export { FlowRLTrainer } from './flowrl-trainer.js';
export { computeFlowRLLoss, type FlowRLInputs, type FlowRLOptions, type FlowRLResult } from './objective.js';
export { ProjZ, poolPromptStates, type ProjZOptions } from './proj-z.js';
export { flowrlConfig, type FlowRLConfig } from './config.js';
