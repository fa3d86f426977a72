// Math scoring as verl v0.9.0's reward_score/math_dapo.py does (after Minerva / lm-eval-harness):
// extract the final answer, normalise it and the ground truth the same way, compare strings; +1 / -1.
// verl routes math_dapo, math, math_dapo_reasoning and aime* here.
import { InputError } from '../errors.js';
import { lastCharacters, PY_SPACE, pyIsDigit, pyStrip } from './text.js';
import { BOOLEAN, oneOf, type GradedAnswer, type ScorerOptionRules } from './types.js';

/**
 * 'minerva' (verl's default): the last "Answer: ..." line only. 'strict_box' (verl's
 * strict_box_verify): the last \boxed{...} of the last 100 characters, compared to the ground truth
 * without normalisation. 'boxed_or_answer' (not verl's; opt-in): the later of the last \boxed{...}
 * and the last "Answer:" line, normalised as minerva, so a boxed answer without an "Answer:" line counts.
 */
export type MathMethod = 'minerva' | 'strict_box' | 'boxed_or_answer';

export interface MathScoreOptions {
  method?: MathMethod;
  /** verl's own switch for strict_box; true is method 'strict_box'. */
  strict_box_verify?: boolean;
}

export const MATH_DAPO_OPTIONS: ScorerOptionRules = { method: oneOf('minerva', 'strict_box', 'boxed_or_answer'), strict_box_verify: BOOLEAN };

/** What verl reports as the prediction when no answer can be extracted. */
export const INVALID_ANSWER = '[INVALID]';

/** The content of the last \boxed{...} with balanced braces, and where it starts; undefined if none closes. */
export function lastBoxed(text: string): { content: string; start: number } | undefined {
  const opener = '\\boxed{';
  const start = text.lastIndexOf(opener);
  if (start < 0) return undefined;
  let depth = 0;
  for (let i = start + opener.length - 1; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return { content: text.slice(start + opener.length, i), start };
  }
  return undefined;
}

/** The last "Answer: ..." (case-insensitive, to the end of its line) and where it starts. */
// verl's (?i)Answer\s*:\s*([^\n]+) with Python's \s and case folding ('ſ' matches 's').
const ANSWER_LINE = new RegExp(`Answer${PY_SPACE}*:${PY_SPACE}*([^\\n]+)`, 'giu');

function lastAnswerLine(text: string): { content: string; start: number } | undefined {
  const matches = [...text.matchAll(ANSWER_LINE)];
  const last = matches[matches.length - 1];
  return last ? { content: last[1], start: last.index } : undefined;
}

// Applied in order, as plain (non-regex) replacements of every occurrence.
const SUBSTITUTIONS: [string, string][] = [
  ['an ', ''],
  ['a ', ''],
  ['.$', '$'],
  ['\\$', ''],
  ['\\ ', ''],
  [' ', ''],
  ['mbox', 'text'],
  [',\\text{and}', ','],
  ['\\text{and}', ','],
  ['\\text{m}', '\\text{}'],
];

// Units, filler words and TeX spacing that do not change the answer.
const REMOVED_EXPRESSIONS = [
  'square', 'ways', 'integers', 'dollars', 'mph', 'inches', 'hours', 'km', 'units', '\\ldots', 'sue',
  'points', 'feet', 'minutes', 'digits', 'cents', 'degrees', 'cm', 'gm', 'pounds', 'meters', 'meals',
  'edges', 'students', 'childrentickets', 'multiples', '\\text{s}', '\\text{.}', '\\text{\ns}',
  '\\text{}^2', '\\text{}^3', '\\text{\n}', '\\text{}', '\\mathrm{th}', '^\\circ', '^{\\circ}', '\\;',
  ',\\!', '{,}', '"', '\\dots',
];

/**
 * Normalises a final answer the way math_dapo's normalize_final_answer does: keep what follows the
 * last '=', drop units and spacing, unwrap $...$, \text{}, \textbf{}, \overline{} and \boxed{},
 * expand \frac12 and \sqrt2 shorthand, and drop thousands separators from plain integers.
 * ([^\n] stands for Python's '.', which does not match a newline.)
 */
export function normalizeFinalAnswer(answer: string): string {
  let text = answer.split('=').at(-1)!;
  for (const [before, after] of SUBSTITUTIONS) text = text.replaceAll(before, after);
  for (const expression of REMOVED_EXPRESSIONS) text = text.replaceAll(expression, '');

  text = text.replace(/([^\n]*?)\$([^\n]*?)\$([^\n]*)/gu, (_match, _before, inner: string) => `$${inner}$`);
  text = text.replace(/\\text\{([^\n]*?)\}/gu, (_match, inner: string) => inner);
  text = text.replace(/\\textbf\{([^\n]*?)\}/gu, (_match, inner: string) => inner);
  text = text.replace(/\\overline\{([^\n]*?)\}/gu, (_match, inner: string) => inner);
  text = text.replace(/\\boxed\{([^\n]*)\}/gu, (_match, inner: string) => inner);

  text = text.replace(/frac([^{])([^\n])/gu, (_match, numerator: string, denominator: string) => `frac{${numerator}}{${denominator}}`);
  text = text.replace(/sqrt([^{])/gu, (_match, radicand: string) => `sqrt{${radicand}}`);
  text = text.replaceAll('$', '');

  if (pyIsDigit(text.replaceAll(',', ''))) text = text.replaceAll(',', '');
  return pyStrip(text);
}

function groundTruthText(groundTruth: unknown): string {
  if (typeof groundTruth === 'string') return groundTruth;
  if (typeof groundTruth === 'number' && Number.isFinite(groundTruth)) return String(groundTruth);
  throw new InputError(`math ground_truth must be a string or a number (got ${JSON.stringify(groundTruth)})`);
}

/** +1 when the extracted answer matches the ground truth, else -1: `{ score, acc, pred }`. */
export function scoreMath(solution: string, groundTruth: unknown, options: MathScoreOptions = {}): GradedAnswer {
  const truth = groundTruthText(groundTruth);
  const method = options.strict_box_verify ? 'strict_box' : (options.method ?? 'minerva');
  if (!['minerva', 'strict_box', 'boxed_or_answer'].includes(method)) throw new InputError(`math method must be minerva, strict_box or boxed_or_answer (got ${JSON.stringify(method)})`);
  // The longest MATH-500 answer is 159 characters; verl looks at the last 300 only.
  const tail = lastCharacters(solution, 300);

  if (method === 'strict_box') {
    const boxed = lastBoxed(lastCharacters(tail, 100));
    const acc = boxed !== undefined && boxed.content === truth;
    return { score: acc ? 1 : -1, acc, pred: boxed?.content ?? '' };
  }

  const answerLine = lastAnswerLine(tail);
  const boxed = method === 'boxed_or_answer' ? lastBoxed(tail) : undefined;
  const extracted = boxed && (!answerLine || boxed.start > answerLine.start) ? boxed : answerLine;
  const pred = normalizeFinalAnswer(extracted?.content ?? INVALID_ANSWER);
  const acc = pred === normalizeFinalAnswer(truth);
  return { score: acc ? 1 : -1, acc, pred };
}
