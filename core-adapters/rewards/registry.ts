// Choosing a scorer: built-ins by data_source (as verl's default_compute_score), or a user function
// named by custom_reward_function {path, name}.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { InputError } from '../errors.js';
import { countdownCorrectAnswers, scoreCountdown } from './countdown.js';
import { scoreGsm8k } from './gsm8k.js';
import { scoreMath } from './math.js';
import type { ScoreExtra, ScoreResult, Scorer } from './types.js';

export type { ScoreResult, Scorer } from './types.js';

const GSM8K_SOURCES = new Set(['openai/gsm8k', 'gsm8k']);
const MATH_SOURCES = new Set([
  'math',
  'math_dapo',
  'math_dapo_reasoning',
  'lighteval/MATH',
  'DigitalLearningGmbH/MATH-lighteval',
  'HuggingFaceH4/MATH-500',
]);

/** The built-in scorers and the data_source values each one scores (verl's default_compute_score). */
const BUILT_IN_SCORERS: {
  scores: (dataSource: string) => boolean;
  score: (solution: string, groundTruth: unknown, options: Record<string, unknown>) => ScoreResult;
  /** Every correct answer, where the task can list them (for exact matching metrics). */
  correctAnswers?: (groundTruth: unknown) => string[] | undefined;
}[] = [
  { scores: (source) => source === 'countdown', score: scoreCountdown, correctAnswers: countdownCorrectAnswers },
  { scores: (source) => GSM8K_SOURCES.has(source), score: scoreGsm8k },
  { scores: (source) => MATH_SOURCES.has(source) || source.startsWith('aime'), score: scoreMath },
];

/**
 * The built-in scorer for a data_source, or undefined when there is none. `options` are the
 * scorer's settings (reward_model.reward_kwargs.<data_source>), e.g. countdown's correct/incorrect.
 */
export function defaultScorer(dataSource: string, options: Record<string, unknown> = {}): Scorer | undefined {
  const builtIn = BUILT_IN_SCORERS.find((entry) => entry.scores(dataSource));
  return builtIn && ((solution, groundTruth) => builtIn.score(solution, groundTruth, options));
}

/** Every correct answer text for a prompt of a built-in task that can list them; undefined otherwise. */
export function enumerateCorrectAnswers(dataSource: string, groundTruth: unknown): string[] | undefined {
  return BUILT_IN_SCORERS.find((entry) => entry.scores(dataSource))?.correctAnswers?.(groundTruth);
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

/**
 * A custom function in verl's shape: `(data_source, solution_str, ground_truth, extra_info)`.
 * It must return synchronously.
 */
export type CustomScoreFunction = (
  dataSource: string,
  solution: string,
  groundTruth: unknown,
  extraInfo?: Record<string, unknown>,
) => ScoreResult;

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
  return (solution, groundTruth, extraInfo, dataSource = '') => {
    const result: unknown = compute(dataSource, solution, groundTruth, extraInfo);
    if (result instanceof Promise) throw new InputError(`${configKey}.name: '${name}' in ${modulePath} must return a score, not a Promise`);
    try {
      scoreValue(result as ScoreResult);
    } catch (e) {
      throw new InputError(`${configKey}.name: '${name}' in ${modulePath}: ${(e as Error).message}`);
    }
    return result as ScoreResult;
  };
}
