// short-answers: a minimal third-party plugin. It adds no algorithm; it replaces the host's reward
// manager with one that scores as before and then charges short_answers.penalty_per_token for every
// response token, so any algorithm (grpo, ppo, flowrl, ...) is nudged towards shorter answers.
//
// A plugin imports the host only through its public surface. An installed package writes
// `from 'flowrl/core'`; inside the flowrl repository that module is ../../core-adapters/index.js.
import { ContainerModule, injectable, injectFromBase } from 'inversify';
import { NaiveRewardManager, TOKENS, type Batch, type Config, type PluginContext, type RewardResult } from '../../core-adapters/index.js';

/** This plugin's config section (its defaults come from plugin.json). */
export interface ShortAnswersConfig {
  /** Subtracted from a response's score for each of its tokens. */
  penalty_per_token: number;
}

/** The short_answers section of the resolved config (plugin.json declares the key and its range, and the host checks it). */
export function shortAnswersConfig(config: Config): ShortAnswersConfig {
  return config.short_answers as ShortAnswersConfig;
}

/**
 * The host's NaiveRewardManager with a length penalty. The constructor (config, tokenizer) is the
 * base class's, injected as declared there (injectFromBase); the base keeps them protected, so
 * this.config is the resolved run config.
 */
@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class ShortAnswersRewardManager extends NaiveRewardManager {
  override async compute(batch: Batch): Promise<RewardResult> {
    const result = await super.compute(batch);
    const { penalty_per_token: perToken } = shortAnswersConfig(this.config);
    const mask = batch.tensor('response_mask').data;
    const R = batch.tensor('responses').shape[1];
    let total = 0;
    for (let b = 0; b < batch.size; b++) {
      let length = 0;
      let last = -1;
      for (let t = 0; t < R; t++) {
        if (mask[b * R + t]) {
          length += 1;
          last = t;
        }
      }
      const penalty = perToken * length;
      total += penalty;
      // The base class puts each score on the last valid token; keep both views equal.
      result.scores[b] -= penalty;
      if (last >= 0) result.tokenLevelScores[b * R + last] -= penalty;
    }
    // Correctness stays the scorer's verdict: a long right answer is still right.
    result.metrics['reward/length_penalty/mean'] = total / Math.max(1, batch.size);
    return result;
  }
}

/** The entry point the host calls with the resolved config; the module rebinds one role. */
export default function shortAnswersPlugin(context: PluginContext): ContainerModule {
  shortAnswersConfig(context.config); // a bad penalty fails at start-up, naming the key
  return new ContainerModule(({ rebind }) => {
    rebind(TOKENS.RewardManager).to(ShortAnswersRewardManager).inSingletonScope();
  });
}
