// A data-parallel replica of the policy (engine.workers > 1): a worker thread rebuilds the host
// from the run's resolved config, so the same Actor and Worker classes, plugins included, compute
// its shard of each micro-batch and its share of the rollouts.
import type { PPOActor, MicroBatchShare } from '../actor/ppo-actor.js';
import { Batch } from '../batch.js';
import type { ConfigTree } from '../config/defaults.js';
import type { Replica } from '../engine/thread-pool.js';
import { createHostFromTree } from '../host.js';
import { adoptFrozenBases } from '../model/checkpoint.js';
import { generate, type SamplingOptions } from '../model/generate.js';
import { TOKENS } from '../tokens.js';
import type { ActorRolloutRefWorker } from './actor-rollout-ref.js';

export type ActorTask =
  | { kind: 'actor-grads'; batch: ReturnType<Batch['toPlain']>; part: MicroBatchShare }
  | { kind: 'log-prob'; batch: ReturnType<Batch['toPlain']>; withEntropy: boolean }
  | { kind: 'ref-log-prob'; batch: ReturnType<Batch['toPlain']> }
  | { kind: 'generate'; prompts: number[][]; options: SamplingOptions };

export async function createActorReplica(args: { config: ConfigTree; frozenBases?: Parameters<typeof adoptFrozenBases>[0] }): Promise<Replica> {
  if (args.frozenBases) adoptFrozenBases(args.frozenBases);
  const host = await createHostFromTree(args.config, 'replica.yaml', { quiet: true, overrides: ['engine.workers=1'] });
  const worker = host.container.get<ActorRolloutRefWorker>(TOKENS.Worker);
  await worker.initReplica();
  const actor = host.container.get<PPOActor>(TOKENS.Actor);
  return {
    params: worker.module.params,
    run(task) {
      const t = task as ActorTask;
      switch (t.kind) {
        case 'generate':
          return { result: generate(worker.module.lm, t.prompts, t.options) };
        case 'log-prob':
          return { result: actor.computeLogProbHere(Batch.fromPlain(t.batch), { withEntropy: t.withEntropy }) };
        case 'ref-log-prob':
          return { result: worker.computeRefLogProbHere(Batch.fromPlain(t.batch)) };
        case 'actor-grads': {
          const { grads, metrics } = actor.microBatchGradients(Batch.fromPlain(t.batch), t.part);
          return { grads, result: metrics };
        }
      }
    },
  };
}
