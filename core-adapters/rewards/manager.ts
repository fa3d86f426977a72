// The naive reward manager (verl's NaiveRewardManager): decode each response, score it by its
// data_source (or with the configured custom scorer), and put the score on the last valid token.
import { inject, injectable, injectFromBase, optional } from 'inversify';
import { responseTokens, type Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import type { CorrectResponse, Metrics, PromptRecord, RewardManager, RewardResult } from '../contracts/index.js';
import { InputError } from '../errors.js';
import type { TextTokenizer } from '../model/tokenizer.js';
import { TOKENS } from '../tokens.js';
import { loadCustomScorer, ScorerRegistry, scoreResponse, scoreValue, type ResponseScore, type Scorer } from './registry.js';

/** The batch column where reward managers leave each response's scorer fields (score included, numbers and booleans as numbers). */
export const REWARD_EXTRA_INFO = 'reward_extra_info';

/** Whether a scored response counts as correct: the scorer's acc when it gives one, else a positive score. */
function isCorrect(result: ReturnType<typeof scoreValue>): boolean {
  return typeof result.extras.acc === 'boolean' ? result.extras.acc : result.score > 0;
}

/** Counts the responses whose scoring failed, by kind, and says so on stderr once per kind (with the first message). */
function countScoringErrors(results: ResponseScore[]): Map<string, number> {
  const counts = new Map<string, number>();
  const first = new Map<string, string>();
  for (const { error } of results) {
    if (!error) continue;
    counts.set(error.kind, (counts.get(error.kind) ?? 0) + 1);
    if (!first.has(error.kind)) first.set(error.kind, error.message);
  }
  for (const [kind, message] of first) console.error(`[flowrl] reward: ${counts.get(kind)} response(s) scored 0 because scoring failed (${kind}: ${message.slice(0, 300)})`);
  return counts;
}

/** verl's naive reward manager: each response scored alone by its data_source's scorer or the custom one. */
@injectable()
export class NaiveRewardManager implements RewardManager {
  private custom?: Scorer;
  /** The host's scorers (plugins' included); the built-ins alone when constructed outside a container. */
  @inject(TOKENS.ScorerRegistry) @optional() protected readonly scorers: ScorerRegistry = new ScorerRegistry();

  constructor(
    @inject(TOKENS.Config) protected readonly config: Config,
    @inject(TOKENS.Tokenizer) protected readonly tokenizer: TextTokenizer,
  ) {}

  async init(): Promise<void> {
    const { path, name } = this.config.custom_reward_function;
    if (path) this.custom = await loadCustomScorer(path, name);
    else this.scorers.checkRewardKwargs(this.config.reward_model.reward_kwargs);
  }

  private readonly builtIn = new Map<string, Scorer | undefined>();

  /** The scorer of a data_source: the custom one when set, else the registered one (InputError naming the data_source if none). */
  protected scorerFor(dataSource: string): Scorer {
    if (!this.custom && !this.builtIn.has(dataSource)) {
      const kwargs = this.config.reward_model.reward_kwargs as Record<string, Record<string, unknown> | undefined>;
      this.builtIn.set(dataSource, this.scorers.scorer(dataSource, kwargs[dataSource] ?? {}));
    }
    const scorer = this.custom ?? this.builtIn.get(dataSource);
    if (!scorer) {
      throw new InputError(`no scorer for data_source '${dataSource}'; set custom_reward_function.path (registered: ${this.scorers.describe()})`);
    }
    return scorer;
  }

  /** Response texts without padding or special tokens (a multi-turn response with its tool turns, as verl decodes it). */
  decodeResponses(batch: Batch): string[] {
    const responses = batch.tensor('responses');
    const mask = responseTokens(batch);
    const R = responses.shape[1];
    return Array.from({ length: batch.size }, (_, b) => {
      const ids: number[] = [];
      for (let t = 0; t < R; t++) if (mask[b * R + t]) ids.push(responses.data[b * R + t]);
      return this.tokenizer.decode(ids, true);
    });
  }

  /**
   * Every correct response to a prompt where its built-in task can list them (countdown), as the
   * policy would emit each: the answer's tokens and the eos token. Each is checked with the scorer in
   * use, so a prompt format the listed answers do not fit gives none. Undefined with a custom scorer,
   * a task that cannot list its answers, or a tokenizer without eos.
   */
  correctResponses(prompt: PromptRecord): CorrectResponse[] | undefined {
    const eos = this.tokenizer.eosTokenId;
    if (this.custom || eos === undefined) return undefined;
    const texts = this.scorers.correctAnswers(prompt.dataSource, prompt.groundTruth);
    if (!texts) return undefined;
    const scorer = this.scorerFor(prompt.dataSource);
    const correct = texts.filter((text) => {
      const result = scorer(text, prompt.groundTruth, prompt.extraInfo, prompt.dataSource);
      // Tasks that list their answers score them at once; a scorer that runs programs is not one.
      return !(result instanceof Promise) && isCorrect(scoreValue(result));
    });
    return correct.map((text) => ({ text, ids: [...this.tokenizer.encode(text, false), eos] }));
  }

  /** Scores every response (those that run programs concurrently, as the scorer's pool allows). */
  async compute(batch: Batch): Promise<RewardResult> {
    const texts = this.decodeResponses(batch);
    // The score sits on the last token of the response (verl's valid_response_length - 1).
    const mask = responseTokens(batch);
    const R = batch.tensor('responses').shape[1];
    const sources = batch.column<string>('data_source');
    const truths = batch.column('ground_truth');
    const infos = batch.column<Record<string, unknown>>('extra_info');
    const tokenLevelScores = new Float32Array(batch.size * R);
    const scores: number[] = [];
    const correct: boolean[] = [];
    const extraSums = new Map<string, number>();
    const extraInfo: Record<string, number>[] = [];
    const results = await Promise.all(texts.map((text, b) => scoreResponse(this.scorerFor(sources[b]), text, truths[b], infos[b], sources[b])));
    const errors = countScoringErrors(results);
    texts.forEach((_, b) => {
      const result = results[b];
      scores.push(result.score);
      correct.push(isCorrect(result));
      const fields: Record<string, number> = { score: result.score };
      for (const [k, v] of Object.entries(result.extras)) {
        if (typeof v === 'number' || typeof v === 'boolean') {
          extraSums.set(k, (extraSums.get(k) ?? 0) + Number(v));
          fields[k] = Number(v);
        }
      }
      extraInfo.push(fields);
      let last = -1;
      for (let t = 0; t < R; t++) if (mask[b * R + t]) last = t;
      if (last >= 0) tokenLevelScores[b * R + last] = result.score;
    });
    const metrics: Metrics = {};
    for (const [k, sum] of extraSums) metrics[`reward/${k}/mean`] = sum / Math.max(1, batch.size);
    for (const [kind, count] of errors) metrics[`reward/errors/${kind}`] = count;
    // verl's reward_extra_info, kept with the rows (filtering and concatenation carry it): gdpo reads it.
    batch.setColumn(REWARD_EXTRA_INFO, extraInfo);
    return { tokenLevelScores, scores, correct, metrics };
  }
}

/**
 * DAPO's reward manager (verl v0.9.0's reward_loop dapo manager; verl-recipe's dapo recipe): scores
 * as the naive one, then, with reward_model.overlong_buffer.enable, adds the overlong penalty
 *   min(-(length - (max_length - len)) / len * penalty_factor, 0)
 * to each score, max_length being data.max_response_length. Correctness (acc) stays the scorer's.
 */
@injectable()
@injectFromBase({ extendConstructorArguments: true, extendProperties: true })
export class DapoRewardManager extends NaiveRewardManager {
  override async init(): Promise<void> {
    await super.init();
    const o = this.config.reward_model.overlong_buffer;
    if (!o.enable) return;
    const max = this.config.data.max_response_length;
    // verl asserts both; a run stops before sampling instead.
    if (!(o.len > 0)) throw new InputError(`reward_model.overlong_buffer.len must be positive when overlong_buffer.enable is true; got ${o.len} (to turn the penalty off set enable false)`);
    if (o.len > max) throw new InputError(`reward_model.overlong_buffer.len (${o.len}) must be at most data.max_response_length (${max})`);
  }

  override async compute(batch: Batch): Promise<RewardResult> {
    const result = await super.compute(batch);
    const o = this.config.reward_model.overlong_buffer;
    if (!o.enable) return result;
    // verl's valid_response_length: tool turns of a multi-turn response count.
    const mask = responseTokens(batch);
    const R = batch.tensor('responses').shape[1];
    const expected = this.config.data.max_response_length - o.len;
    let penaltySum = 0;
    let penalised = 0;
    for (let b = 0; b < batch.size; b++) {
      let length = 0;
      let last = -1;
      for (let t = 0; t < R; t++) {
        if (!mask[b * R + t]) continue;
        length += 1;
        last = t;
      }
      const penalty = Math.min((-(length - expected) / o.len) * o.penalty_factor, 0);
      result.scores[b] += penalty;
      if (last >= 0) result.tokenLevelScores[b * R + last] += penalty;
      penaltySum += penalty;
      penalised += Number(penalty < 0);
    }
    if (o.log) {
      result.metrics['reward/overlong_reward/mean'] = penaltySum / Math.max(1, batch.size);
      result.metrics['reward/overlong/mean'] = penalised / Math.max(1, batch.size);
    }
    return result;
  }
}
