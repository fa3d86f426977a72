// Choosing a scorer: built-ins by data_source (as verl's default_compute_score), or a user function
// named by custom_reward_function {path, name}.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Config } from '../config/load.js';
import { CORE_DEFAULTS } from '../config/defaults.js';
import { InputError, ScorerUnavailable, ScoringError } from '../errors.js';
import { isTree } from '../config/load.js';
import { CODE_SOURCES, codeSandboxLimits, parseCodeTests, ReusedRuns, SandboxFusionRunner, SandboxRunner, scoreCode, type CodeRunner } from './code.js';
import { COUNTDOWN_OPTIONS, countdownCorrectAnswers, scoreCountdown } from './countdown.js';
import { GSM8K_OPTIONS, scoreGsm8k } from './gsm8k.js';
import { MATH_DAPO_OPTIONS, scoreMath } from './math.js';
import { scoreMathReward } from './math-reward.js';
import { SandboxProcess } from './sandbox-process.js';
import { checkScorerOptions, type ScoreExtra, type ScoreResult, type Scorer, type ScorerOptionRules } from './types.js';

export type { ScoreResult, Scorer } from './types.js';

const GSM8K_SOURCES = new Set(['openai/gsm8k', 'gsm8k']);
// verl v0.9.0's default_compute_score: Hendrycks MATH sets to math_reward (0/1, last \boxed{}),
// DAPO's sets and AIME to math_dapo (+1/-1, "Answer:" lines).
const MATH_REWARD_SOURCES = new Set(['lighteval/MATH', 'DigitalLearningGmbH/MATH-lighteval', 'HuggingFaceH4/MATH-500']);
const MATH_DAPO_SOURCES = new Set(['math', 'math_dapo', 'math_dapo_reasoning']);

/** One scorer in a ScorerRegistry: the data_source values it scores, how, and who registered it. */
interface ScorerEntry {
  /** The data_source values, for listings ('countdown', 'gsm8k, openai/gsm8k', ...). */
  label: string;
  scores: (dataSource: string) => boolean;
  score: (solution: string, groundTruth: unknown, options: Record<string, unknown>, extraInfo?: Record<string, unknown>, dataSource?: string) => ScoreResult | Promise<ScoreResult>;
  /** Every correct answer, where the task can list them (for exact matching metrics). */
  correctAnswers?: (groundTruth: unknown) => string[] | undefined;
  /** Throws an InputError when a row's ground truth cannot be scored (checked when the data loads). */
  check?: (groundTruth: unknown) => void;
  /** The options it takes from reward_model.reward_kwargs.<data_source>; none when absent. */
  options?: ScorerOptionRules;
  provider: string;
}

/** The reward_model settings code scoring reads. */
export type RewardModelSettings = Pick<Config['reward_model'], 'code' | 'sandbox_fusion'>;

/**
 * Scorers by data_source (verl's default_compute_score), one registry per host: the built-ins
 * (countdown, gsm8k, math), then what plugins register through their PluginContext, by exact
 * data_source name. The reward manager and the dataset's check of each row read it.
 */
export class ScorerRegistry {
  private readonly entries: ScorerEntry[] = [];
  /** Who registrations come from now: 'core', or the plugin whose entry is running (the host sets it). */
  provider = 'core';
  private runner?: CodeRunner;

  /** `settings`: the run's reward_model section (code tests' limits, SandboxFusion); the defaults otherwise. */
  constructor(private readonly settings: RewardModelSettings = CORE_DEFAULTS.reward_model) {
    const code = (solution: string, groundTruth: unknown) => scoreCode(this.codeRunner(), solution, groundTruth, this.settings.code.score, this.settings.code.execution);
    this.entries.push(
      { label: 'countdown', scores: (source) => source === 'countdown', score: scoreCountdown, correctAnswers: countdownCorrectAnswers, options: COUNTDOWN_OPTIONS, provider: 'core' },
      { label: [...GSM8K_SOURCES].join(', '), scores: (source) => GSM8K_SOURCES.has(source), score: scoreGsm8k, options: GSM8K_OPTIONS, provider: 'core' },
      { label: [...MATH_REWARD_SOURCES].join(', '), scores: (source) => MATH_REWARD_SOURCES.has(source), score: scoreMathReward, provider: 'core' },
      { label: `${[...MATH_DAPO_SOURCES].join(', ')}, aime*`, scores: (source) => MATH_DAPO_SOURCES.has(source) || source.startsWith('aime'), score: scoreMath, options: MATH_DAPO_OPTIONS, provider: 'core' },
      { label: CODE_SOURCES.join(', '), scores: (source) => (CODE_SOURCES as readonly string[]).includes(source), score: code, check: parseCodeTests, provider: 'core' },
    );
  }

  /** Where code tests run: a SandboxFusion server when reward_model.sandbox_fusion.url is set, else the local sandbox (made on first use). */
  private codeRunner(): CodeRunner {
    if (this.runner) return this.runner;
    const { code, sandbox_fusion: fusion } = this.settings;
    const runner = fusion.url
      ? new SandboxFusionRunner(fusion.url, { timeoutS: code.timeout_s, memoryLimitMb: fusion.memory_limit_mb, maxConcurrent: fusion.max_concurrent })
      : new SandboxRunner(this.localSandbox());
    this.runner = code.reuse_runs > 0 ? new ReusedRuns(runner, code.reuse_runs) : runner;
    return this.runner;
  }

  /** The local sandbox, its bounds said once on stderr (whether each run has a cgroup, or why not). */
  private localSandbox(): SandboxProcess {
    const { code } = this.settings;
    const sandbox = new SandboxProcess({ limits: codeSandboxLimits(code), concurrency: code.concurrency ?? undefined });
    console.error(`[flowrl] code sandbox: ${sandbox.describeBounds()}`);
    return sandbox;
  }

  /**
   * Checks that a row can be scored: a scorer for its data_source, and a ground truth that scorer
   * reads. Otherwise an InputError starting with `where` (the file and row).
   */
  checkRow(where: string, dataSource: string, groundTruth: unknown): void {
    const entry = this.entries.find((e) => e.scores(dataSource));
    if (!entry) throw new InputError(`${where}: no scorer for data_source '${dataSource}' (registered: ${this.describe()}; or set custom_reward_function.path)`);
    try {
      entry.check?.(groundTruth);
    } catch (e) {
      if (e instanceof InputError) throw new InputError(`${where}: ${e.message}`);
      throw e;
    }
  }

  /**
   * Checks reward_model.reward_kwargs before any scoring: each entry names a data_source that has a
   * scorer and gives only options that scorer takes, with values it allows (an InputError naming the key).
   */
  checkRewardKwargs(kwargs: Record<string, unknown>): void {
    for (const [dataSource, options] of Object.entries(kwargs)) {
      if (!this.scorer(dataSource, options as Record<string, unknown>)) {
        throw new InputError(`reward_model.reward_kwargs.${dataSource}: no scorer for data_source '${dataSource}' (registered: ${this.describe()})`);
      }
    }
  }

  /**
   * Adds a scorer for `dataSource` (exact name). A name another provider scores already is an
   * InputError naming both; `correctAnswers`, where the task can list every correct answer, enables
   * the exact matching metrics.
   */
  register(dataSource: string, scorer: Scorer, options: { correctAnswers?: (groundTruth: unknown) => string[] | undefined } = {}): void {
    const taken = this.entries.find((e) => e.scores(dataSource));
    if (taken) throw new InputError(`scorer for data_source '${dataSource}' from ${this.provider} is already registered by ${taken.provider}`);
    this.entries.push({ label: dataSource, scores: (source) => source === dataSource, score: (solution, gt, _options, extraInfo, source) => scorer(solution, gt, extraInfo, source), correctAnswers: options.correctAnswers, provider: this.provider });
  }

  /**
   * The scorer for a data_source, or undefined when there is none. `options` are the scorer's
   * settings (reward_model.reward_kwargs.<data_source>), e.g. gsm8k's method and format_score; an
   * option the scorer does not take, or a value it does not allow, is an InputError naming the key.
   */
  scorer(dataSource: string, options: Record<string, unknown> = {}): Scorer | undefined {
    const entry = this.entries.find((e) => e.scores(dataSource));
    if (!entry) return undefined;
    const where = `reward_model.reward_kwargs.${dataSource}`;
    if (!isTree(options)) throw new InputError(`${where} must be a mapping of options; got ${JSON.stringify(options)}`);
    checkScorerOptions(options, entry.options ?? {}, where);
    return (solution, groundTruth, extraInfo) => entry.score(solution, groundTruth, options, extraInfo, dataSource);
  }

  /** Every correct answer text for a prompt of a task that can list them; undefined otherwise. */
  correctAnswers(dataSource: string, groundTruth: unknown): string[] | undefined {
    return this.entries.find((e) => e.scores(dataSource))?.correctAnswers?.(groundTruth);
  }

  /** The data_source values scored and who registered each scorer. */
  providers(): Map<string, string> {
    return new Map(this.entries.map((e) => [e.label, e.provider]));
  }

  /** The data_source values, for messages. */
  describe(): string {
    return this.entries.map((e) => e.label.split(', ')[0]).join(', ');
  }
}

const CORE_SCORERS = new ScorerRegistry();

/** The built-in scorer for a data_source, or undefined (ScorerRegistry.scorer on the built-ins). */
export function defaultScorer(dataSource: string, options: Record<string, unknown> = {}): Scorer | undefined {
  return CORE_SCORERS.scorer(dataSource, options);
}

/** Splits a scorer's result into its score and its extra metrics; a non-finite or missing score is an error. */
export function scoreValue(result: ScoreResult): { score: number; extras: Record<string, ScoreExtra> } {
  if (typeof result === 'number') {
    if (!Number.isFinite(result)) throw new InputError(`reward score must be a finite number (got ${result})`);
    return { score: result, extras: {} };
  }
  if (typeof result !== 'object' || result === null || Array.isArray(result)) {
    throw new InputError(`reward score must be a number or an object with a numeric 'score' (got ${JSON.stringify(result) ?? typeof result})`);
  }
  const { score, ...rest } = result;
  if (typeof score !== 'number' || !Number.isFinite(score)) {
    throw new InputError(`reward score must be a number or an object with a numeric 'score' (got score ${JSON.stringify(score) ?? 'missing'})`);
  }
  const extras: Record<string, ScoreExtra> = {};
  for (const [key, value] of Object.entries(rest)) {
    if (value === null || value === undefined) continue; // a Python-style None means "no value"
    if (typeof value !== 'number' && typeof value !== 'string' && typeof value !== 'boolean') {
      throw new InputError(`reward extra '${key}' must be a number, string or boolean (got ${JSON.stringify(value)})`);
    }
    extras[key] = value;
  }
  return { score, extras };
}

/** One response's score, or 0 with why scoring it failed. */
export interface ResponseScore {
  score: number;
  extras: Record<string, ScoreExtra>;
  /** Scoring threw: its kind (a ScoringError's, else 'exception') and message. */
  error?: { kind: string; message: string };
}

/**
 * Scores one response so that nothing a response provokes stops a run: an error while scoring it
 * (a harness report the program forged, a value too deep to compare, a scorer's exception) makes
 * its score 0 with the error's kind. An InputError (a bad row or config, a custom scorer's result
 * that is not a score) or ScorerUnavailable (no sandbox) still stops: that is not the response's doing.
 */
export async function scoreResponse(scorer: Scorer, solution: string, groundTruth: unknown, extraInfo: Record<string, unknown> | undefined, dataSource: string): Promise<ResponseScore> {
  let result: ScoreResult;
  try {
    result = await scorer(solution, groundTruth, extraInfo, dataSource);
  } catch (e) {
    if (e instanceof InputError || e instanceof ScorerUnavailable) throw e;
    const error = e instanceof Error ? e : new Error(String(e));
    return { score: 0, extras: {}, error: { kind: error instanceof ScoringError ? error.kind : 'exception', message: `${error.name}: ${error.message}` } };
  }
  return scoreValue(result);
}

/**
 * A custom function in verl's shape: `(data_source, solution_str, ground_truth, extra_info)`,
 * returning a score or a promise of one.
 */
export type CustomScoreFunction = (
  dataSource: string,
  solution: string,
  groundTruth: unknown,
  extraInfo?: Record<string, unknown>,
) => ScoreResult | Promise<ScoreResult>;

/**
 * Imports `name` from the module at `path` (relative to the working directory; .js, .mjs, or .ts
 * under tsx) and wraps it as a Scorer that passes the Scorer's `dataSource` argument ('' if not
 * given) first, as verl does. Errors name `<configKey>.path` or `<configKey>.name`.
 */
export async function loadCustomScorer(modulePath: string, name: string, configKey = 'custom_reward_function'): Promise<Scorer> {
  if (typeof modulePath !== 'string' || modulePath === '') throw new InputError(`${configKey}.path: must be a non-empty string`);
  if (typeof name !== 'string' || name === '') throw new InputError(`${configKey}.name: must be a non-empty string`);
  const resolved = path.resolve(process.cwd(), modulePath);
  if (!fs.existsSync(resolved) || !fs.statSync(resolved).isFile()) {
    throw new InputError(`${configKey}.path: ${modulePath}: file not found`);
  }
  let module: Record<string, unknown>;
  try {
    module = (await import(pathToFileURL(resolved).href)) as Record<string, unknown>;
  } catch (e) {
    throw new InputError(`${configKey}.path: cannot import ${modulePath} (${(e as Error).message})`);
  }
  const fn = module[name];
  if (typeof fn !== 'function') {
    const exported = Object.keys(module).filter((key) => typeof module[key] === 'function');
    throw new InputError(
      `${configKey}.name: ${modulePath} has no exported function '${name}' (its exported functions: ${exported.length > 0 ? exported.join(', ') : 'none'})`,
    );
  }
  const compute = fn as CustomScoreFunction;
  const checked = (result: unknown): ScoreResult => {
    try {
      scoreValue(result as ScoreResult);
    } catch (e) {
      throw new InputError(`${configKey}.name: '${name}' in ${modulePath}: ${(e as Error).message}`);
    }
    return result as ScoreResult;
  };
  return (solution, groundTruth, extraInfo, dataSource = '') => {
    const result: unknown = compute(dataSource, solution, groundTruth, extraInfo);
    return result instanceof Promise ? result.then(checked) : checked(result);
  };
}
