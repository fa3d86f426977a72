// The composition root: createHost as the CLI and users call it, whose worker may start replica
// threads (engine.workers > 1), and the replica such a thread builds. A thread rebuilds the host
// from the run's resolved config, so the same Actor and Worker classes, plugins included, compute
// its shard of each micro-batch and its share of the rollouts. It sits above host.ts: the host
// never names this module, it is told its URL (HostOptions.replicaEntry), so no import cycle.
import type { PPOActor, MicroBatchShare } from './actor/ppo-actor.js';
import { Batch } from './batch.js';
import type { ConfigTree } from './config/defaults.js';
import type { Replica } from './engine/thread-pool.js';
import { createHost as createHostWithoutThreads, createHostFromTree, type Host, type HostOptions } from './host.js';
import { adoptFrozenBases } from './model/checkpoint.js';
import { generate, type SamplingOptions } from './model/generate.js';
import { TOKENS } from './tokens.js';
import type { ActorRolloutRefWorker } from './workers/actor-rollout-ref.js';

/**
 * Builds the host for a config file: plugins loaded, bindings made, the engine initialised. Its
 * worker starts engine.workers - 1 replica threads, each built by createActorReplica below.
 */
export function createHost(configFile: string, options: HostOptions = {}): Promise<Host> {
  return createHostWithoutThreads(configFile, { replicaEntry: import.meta.url, ...options });
}

export type ActorTask =
  | { kind: 'actor-grads'; batch: ReturnType<Batch['toPlain']>; part: MicroBatchShare }
  | { kind: 'log-prob'; batch: ReturnType<Batch['toPlain']>; withEntropy: boolean; withSumPiSquared: boolean; temperature?: number }
  | { kind: 'ref-log-prob'; batch: ReturnType<Batch['toPlain']>; temperature?: number }
  | { kind: 'generate'; prompts: number[][]; options: SamplingOptions };

/** What a replica thread builds: the host (one thread) and its worker's replica of the policy. */
export async function createActorReplica(args: { config: ConfigTree; frozenBases?: Parameters<typeof adoptFrozenBases>[0] }): Promise<Replica> {
  if (args.frozenBases) adoptFrozenBases(args.frozenBases);
  const host = await createHostFromTree(args.config, 'replica.yaml', { quiet: true, overrides: ['engine.workers=1'] });
  const worker = host.container.get<ActorRolloutRefWorker>(TOKENS.Worker);
  await worker.initReplica();
  const actor = host.container.get<PPOActor>(TOKENS.Actor);
  return {
    params: worker.module.params,
    async run(task) {
      const t = task as ActorTask;
      switch (t.kind) {
        case 'generate':
          return { result: await generate(worker.module.lm, t.prompts, t.options) };
        case 'log-prob':
          return { result: await actor.computeLogProbHere(Batch.fromPlain(t.batch), { withEntropy: t.withEntropy, withSumPiSquared: t.withSumPiSquared, temperature: t.temperature }) };
        case 'ref-log-prob':
          return { result: await worker.computeRefLogProbHere(Batch.fromPlain(t.batch), t.temperature) };
        case 'actor-grads': {
          const { grads, metrics } = await actor.microBatchGradients(Batch.fromPlain(t.batch), t.part);
          return { grads, result: metrics };
        }
      }
    },
  };
}
