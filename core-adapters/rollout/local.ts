// rollout.name local: sampling in this process with the policy itself (and its data-parallel
// replicas), in rollout.generation_batch_size pieces. Its samples are exactly the policy's, so it
// reports no rollout_log_probs.
import { inject, injectable } from 'inversify';
import type { Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import type { Rollout, RolloutPolicy, SamplingSettings } from '../contracts/index.js';
import { generateOnPool } from '../model/generate.js';
import { TOKENS } from '../tokens.js';
import { sequencesFromSamples } from '../workers/sequences.js';

/** The in-process sampler (rollout.name local). */
@injectable()
export class LocalRollout implements Rollout {
  protected policy!: RolloutPolicy;

  constructor(@inject(TOKENS.Config) protected readonly config: Config) {}

  async attach(policy: RolloutPolicy): Promise<void> {
    this.policy = policy;
  }

  async generateSequences(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    return samplePolicy(this.policy, prompts, sampling, this.config.actor_rollout_ref.rollout.generation_batch_size);
  }

  policyChanged(): void {
    // Sampling reads the policy's variables (and the pool its published copies) directly.
  }

  async dispose(): Promise<void> {}
}

/** Samples `prompts` with the policy in pieces of `chunk` rows (see sampleSeed for each row's stream). */
export function samplePolicy(policy: RolloutPolicy, prompts: Batch, sampling: SamplingSettings, chunk: number): Batch {
  const promptIds = prompts.column<number[]>('prompt_ids');
  const responses: number[][] = [];
  for (let start = 0; start < promptIds.length; start += chunk) {
    const { tokens } = generateOnPool(
      policy.module.lm,
      promptIds.slice(start, start + chunk),
      {
        maxNewTokens: sampling.maxNewTokens,
        temperature: sampling.temperature,
        topP: sampling.topP,
        topK: sampling.topK,
        greedy: sampling.greedy,
        stopTokenIds: policy.stopTokenIds,
        padTokenId: policy.padTokenId,
        seed: sampling.seed + start,
      },
      policy.module.pool,
    );
    responses.push(...tokens);
  }
  const out = prompts.select([]);
  for (const [key, tensor] of Object.entries(sequencesFromSamples(promptIds, responses, sampling.maxNewTokens, policy.padTokenId))) out.set(key, tensor);
  return out;
}
