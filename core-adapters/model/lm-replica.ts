// The language-model replica a pool thread builds (SFT, bench): the model from its config, weights
// from ThreadPool.publish; it computes gradient shards and samples.
import type { Replica, ReplicaSpec } from '../engine/thread-pool.js';
import type { CausalLM } from './causal-lm.js';
import { initWeights, modelFromWeights } from './checkpoint.js';
import { parseModelConfig } from './config.js';
import { generate, type SamplingOptions } from './generate.js';
import type { SequenceBatch } from './logprobs.js';
import { lossAndGradients } from './optim.js';
import { maskedNllOver } from './train-step.js';
import { readScalar } from '../engine/readback.js';

/** A worker's replica for language-model training and sampling (see engine/thread-pool.ts). */
export function createLanguageModelReplica(args: { modelConfig: Record<string, unknown> }): Replica {
  const config = parseModelConfig(args.modelConfig, 'replica model');
  const model = modelFromWeights(config, initWeights(config, 0));
  return {
    params: model.params,
    async run(task) {
      const t = task as { kind: 'lm-grads'; seq: SequenceBatch; denominator: number } | { kind: 'generate'; prompts: number[][]; options: SamplingOptions };
      if (t.kind === 'generate') return { result: await generate(model, t.prompts, t.options) };
      const { loss, grads } = lossAndGradients(() => maskedNllOver(model, t.seq, t.denominator), model.params);
      try {
        return { grads, result: await readScalar(loss, 'a replica loss') };
      } finally {
        loss.dispose();
      }
    },
  };
}

/** The replica spec for `model` (its config travels; weights come from ThreadPool.publish). */
export function languageModelReplicaSpec(model: CausalLM): ReplicaSpec {
  return { module: import.meta.url, factory: 'createLanguageModelReplica', args: { modelConfig: model.config.raw } };
}
