// verl's scoring convention: compute_score(data_source, solution_str, ground_truth, extra_info)
// returns a number or a dict with 'score' plus extra metrics.
import { InputError } from '../errors.js';

export type ScoreExtra = number | string | boolean;
/** What a scorer returns: a score, or a score with extra metrics (verl's dict form). */
export type ScoreResult = number | { score: number; [extra: string]: ScoreExtra };

/**
 * Scores one decoded response against its row's ground truth. Built-in scorers are already chosen
 * by data source and ignore `dataSource`; custom (verl-shaped) functions receive it first. A scorer
 * that runs something (code rewards run programs) returns a promise.
 */
export type Scorer = (solution: string, groundTruth: unknown, extraInfo?: Record<string, unknown>, dataSource?: string) => ScoreResult | Promise<ScoreResult>;

/** What a response was scored as: its score, whether it is correct, and the answer extracted from it. */
export interface GradedAnswer {
  score: number;
  acc: boolean;
  pred: string;
  [extra: string]: ScoreExtra;
}

/** What one scorer option allows: a check and the words for an error message. */
export interface OptionRule {
  allowed: string;
  ok: (value: unknown) => boolean;
}

/** A built-in scorer's options (reward_model.reward_kwargs.<data_source>), by name. */
export type ScorerOptionRules = Record<string, OptionRule>;

export const FINITE_NUMBER: OptionRule = { allowed: 'a finite number', ok: (v) => typeof v === 'number' && Number.isFinite(v) };
export const BOOLEAN: OptionRule = { allowed: 'true or false', ok: (v) => typeof v === 'boolean' };
export const oneOf = (...choices: string[]): OptionRule => ({ allowed: `one of ${choices.join(', ')}`, ok: (v) => typeof v === 'string' && choices.includes(v) });

/**
 * Checks a scorer's options against its rules; an unknown name or a value it does not allow is an
 * InputError naming `where` (the config key) and the option.
 */
export function checkScorerOptions(options: Record<string, unknown>, rules: ScorerOptionRules, where: string): void {
  for (const [name, value] of Object.entries(options)) {
    const rule = Object.hasOwn(rules, name) ? rules[name] : undefined;
    if (!rule) {
      const known = Object.keys(rules);
      throw new InputError(`${where}: unknown option '${name}' (${known.length ? `options: ${known.join(', ')}` : 'this scorer takes no options'})`);
    }
    if (!rule.ok(value)) throw new InputError(`${where}.${name} must be ${rule.allowed}; got ${JSON.stringify(value)}`);
  }
}
