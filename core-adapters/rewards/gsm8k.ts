// GSM8K scoring as verl's reward_score/gsm8k.py: the answer is the number after the last "#### "
// (strict) or the last number anywhere (flexible), looked for in the last 300 characters only.
import { InputError } from '../errors.js';
import { lastCharacters } from './text.js';
import { FINITE_NUMBER, oneOf, type GradedAnswer, type ScorerOptionRules } from './types.js';

export type Gsm8kMethod = 'strict' | 'flexible';

/** verl's keyword arguments of gsm8k.compute_score, by the same names. */
export interface Gsm8kScoreOptions {
  method?: Gsm8kMethod;
  /** Score of a correct answer. Default 1. */
  score?: number;
  /** Score of an extracted but wrong answer (no answer at all scores 0). Default 0. */
  format_score?: number;
}

export const GSM8K_OPTIONS: ScorerOptionRules = { method: oneOf('strict', 'flexible'), score: FINITE_NUMBER, format_score: FINITE_NUMBER };

/** The answer verl's extractor would take from a response, or undefined when there is none. */
export function extractGsm8kAnswer(solution: string, method: Gsm8kMethod = 'strict'): string | undefined {
  // verl asserts the method; a typo must not silently become another extraction.
  if (method !== 'strict' && method !== 'flexible') throw new InputError(`gsm8k method must be strict or flexible (got ${JSON.stringify(method)})`);
  // verl looks at the last 300 characters only (a speed shortcut, but it changes results, so keep it).
  const tail = lastCharacters(solution, 300);
  if (method === 'strict') {
    const matches = [...tail.matchAll(/#### (-?[0-9.,]+)/g)];
    if (matches.length === 0) return undefined;
    return matches[matches.length - 1][1].replaceAll(',', '').replaceAll('$', '');
  }
  // Flexible keeps commas (as verl does), so "1,000" does not match "1000".
  const numbers = [...tail.matchAll(/-?[0-9.,]+/g)].map((m) => m[0]);
  if (numbers.length === 0) return undefined;
  for (let i = numbers.length - 1; i >= 0; i--) {
    if (numbers[i] !== '' && numbers[i] !== '.') return numbers[i];
  }
  return numbers[0]; // every candidate was '.': verl's loop ends on the first one
}

function groundTruthText(groundTruth: unknown): string {
  if (typeof groundTruth === 'string') return groundTruth;
  if (typeof groundTruth === 'number' && Number.isFinite(groundTruth)) return String(groundTruth);
  throw new InputError(`gsm8k ground_truth must be a string or a number (got ${JSON.stringify(groundTruth)})`);
}

/** `score` (1) for the right number, `format_score` (0) for a wrong one, 0 when no answer can be extracted. */
export function scoreGsm8k(solution: string, groundTruth: unknown, options: Gsm8kScoreOptions = {}): GradedAnswer {
  const truth = groundTruthText(groundTruth);
  const answer = extractGsm8kAnswer(solution, options.method ?? 'strict');
  if (answer === undefined) return { score: 0, acc: false, pred: '' };
  const acc = answer === truth;
  return { score: acc ? (options.score ?? 1) : (options.format_score ?? 0), acc, pred: answer };
}
