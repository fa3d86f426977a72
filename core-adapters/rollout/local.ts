// rollout.name local: sampling in this process with the policy itself (and its data-parallel
// replicas), in rollout.generation_batch_size pieces. Its samples are exactly the policy's, so it
// reports no rollout_log_probs.
import { inject, injectable, optional } from 'inversify';
import type { Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import type { Rollout, RolloutPolicy, SamplingSettings } from '../contracts/index.js';
import { generateOnPool, sampleSeed, type SamplingOptions } from '../model/generate.js';
import { Rng } from '../random.js';
import type { TurnSampler } from './agent-loop.js';
import { MultiTurn } from './multi-turn.js';
import { TOKENS } from '../tokens.js';
import { sequencesFromSamples } from '../workers/sequences.js';

/** The in-process sampler (rollout.name local). */
@injectable()
export class LocalRollout implements Rollout {
  protected policy!: RolloutPolicy;

  constructor(
    @inject(TOKENS.Config) protected readonly config: Config,
    @inject(MultiTurn) @optional() protected readonly multiTurn?: MultiTurn,
  ) {}

  async attach(policy: RolloutPolicy): Promise<void> {
    this.policy = policy;
  }

  /** Sampling in progress: it reads the policy's variables as it goes, so an update must wait for it (dispatched). */
  private readonly sampling = new Set<Promise<Batch>>();

  generateSequences(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    const running = this.sample(prompts, sampling);
    this.sampling.add(running);
    const forget = () => void this.sampling.delete(running);
    running.then(forget, forget);
    return running;
  }

  /** Resolves once every sampling started so far has finished (the weights it reads may then change). */
  async dispatched(): Promise<void> {
    await Promise.allSettled([...this.sampling]);
  }

  private async sample(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    const chunk = this.config.actor_rollout_ref.rollout.generation_batch_size;
    if (!this.multiTurn?.enabled) return samplePolicy(this.policy, prompts, sampling, chunk);
    const policy = this.policy;
    // Each row keeps its single-turn stream for its first turn and derives one per later turn.
    const sample: TurnSampler = async (contexts, budgets, turn, rows) => {
      const first = sampling.firstRow ?? 0;
      const seeds = rows.map((row) => (turn ? Rng.deriveSeed(sampleSeed(sampling.seed, first + row, chunk), turn) : sampleSeed(sampling.seed, first + row, chunk)));
      const tokens: number[][] = [];
      for (let start = 0; start < contexts.length; start += chunk) {
        const end = Math.min(start + chunk, contexts.length);
        const generation = await generateOnPool(
          policy.module.lm,
          contexts.slice(start, end),
          { ...samplingOptions(policy, sampling), maxNewTokens: Math.max(...budgets.slice(start, end)), rowMaxNewTokens: budgets.slice(start, end), rowSeeds: seeds.slice(start, end) },
          policy.module.pool,
        );
        tokens.push(...generation.tokens);
      }
      return { tokens };
    };
    return await this.multiTurn.rollOut(prompts, sample, sampling.maxNewTokens, policy.padTokenId);
  }

  policyChanged(): void {
    // Sampling reads the policy's variables (and the pool its published copies) directly.
  }

  async dispose(): Promise<void> {}
}

/** Samples `prompts` with the policy in pieces of `chunk` rows (see sampleSeed for each row's stream). */
export async function samplePolicy(policy: RolloutPolicy, prompts: Batch, sampling: SamplingSettings, chunk: number): Promise<Batch> {
  const promptIds = prompts.column<number[]>('prompt_ids');
  const responses: number[][] = [];
  const first = sampling.firstRow ?? 0;
  for (let start = 0; start < promptIds.length; start += chunk) {
    const end = Math.min(start + chunk, promptIds.length);
    // Rows after the step's first (a rank's share) take the streams those rows have in one process.
    const seeding = first ? { rowSeeds: Array.from({ length: end - start }, (_, i) => sampleSeed(sampling.seed, first + start + i, chunk)) } : { seed: sampling.seed + start };
    const { tokens } = await generateOnPool(policy.module.lm, promptIds.slice(start, end), { ...samplingOptions(policy, sampling), ...seeding }, policy.module.pool);
    responses.push(...tokens);
  }
  const out = prompts.select([]);
  for (const [key, tensor] of Object.entries(sequencesFromSamples(promptIds, responses, sampling.maxNewTokens, policy.padTokenId))) out.set(key, tensor);
  return out;
}

/** The sampler's options for a policy and the run's sampling settings (seeding left to the caller). */
function samplingOptions(policy: RolloutPolicy, sampling: SamplingSettings): SamplingOptions {
  return {
    maxNewTokens: sampling.maxNewTokens,
    temperature: sampling.temperature,
    topP: sampling.topP,
    topK: sampling.topK,
    greedy: sampling.greedy,
    stopTokenIds: policy.stopTokenIds,
    padTokenId: policy.padTokenId,
  };
}
