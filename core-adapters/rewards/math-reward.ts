// MATH scoring as verl v0.9.0's reward_score/math_reward.py does (Hendrycks' MATH normalisation, via
// lm-evaluation-harness): the last \boxed{...} of the whole response, compared with the ground truth
// after strip_string; 1 or 0. verl routes lighteval/MATH, DigitalLearningGmbH/MATH-lighteval and
// HuggingFaceH4/MATH-500 here. Strings are handled as arrays of code points where verl indexes them,
// so characters outside the BMP count as Python counts them.
import { InputError } from '../errors.js';
import type { GradedAnswer } from './types.js';

/** Raised where verl's code would raise (an assert or an index out of range); callers fall back as verl does. */
class NormalisationFailed extends Error {}

/**
 * The last boxed answer with its wrapper ("\boxed{...}", "\boxed ...", or "\fbox{...}"), or undefined.
 * As in verl: a "\boxed " (with a space) anywhere wins and runs to the next '$'; otherwise the
 * braces are counted from the last "\boxed" (or "\fbox"), which need not be followed by '{'.
 */
export function lastBoxedOnly(text: string): string | undefined {
  if (text.includes('\\boxed ')) return '\\boxed ' + text.split('\\boxed ').at(-1)!.split('$')[0];
  let start = text.lastIndexOf('\\boxed');
  if (start < 0) start = text.lastIndexOf('\\fbox');
  if (start < 0) return undefined;
  let open = 0;
  for (let i = start; i < text.length; i++) {
    if (text[i] === '{') open++;
    if (text[i] === '}' && --open === 0) return text.slice(start, i + 1);
  }
  return undefined;
}

/** The content of "\boxed ..." or "\boxed{...}"; anything else (an "\fbox{...}") fails as verl's assert does. */
function removeBoxed(boxed: string): string {
  if (boxed.includes('\\boxed ')) {
    if (!boxed.startsWith('\\boxed ')) throw new NormalisationFailed('box error');
    return boxed.slice('\\boxed '.length);
  }
  if (!boxed.startsWith('\\boxed{') || !boxed.endsWith('}')) throw new NormalisationFailed('box error');
  return boxed.slice('\\boxed{'.length, -1);
}

/** "\frac12" -> "\frac{1}{2}", "\frac1{72}" -> "\frac{1}{72}"; unchanged when a shorthand is cut short. */
function fixFracs(text: string): string {
  const [head, ...rest] = text.split('\\frac');
  let out = head;
  for (const part of rest) {
    out += '\\frac';
    const chars = [...part];
    if (chars.length === 0) throw new NormalisationFailed('\\frac at the end'); // verl indexes substr[0]
    if (chars[0] === '{') {
      out += part;
      continue;
    }
    if (chars.length < 2) return text;
    const [a, b] = chars;
    const tail = chars.slice(2).join('');
    out += b !== '{' ? `{${a}}{${b}}${tail}` : `{${a}}${b}${tail}`;
  }
  return out;
}

/** "a/b" of two integers written canonically -> "\frac{a}{b}"; anything else unchanged. */
function fixSlash(text: string): string {
  const parts = text.split('/');
  if (parts.length !== 2) return text;
  const integer = /^(0|-?[1-9][0-9]*)$/; // verl keeps only what int() reads and str() writes back the same
  return integer.test(parts[0]) && integer.test(parts[1]) ? `\\frac{${parts[0]}}{${parts[1]}}` : text;
}

/** Units after "\text{ " dropped; two of them fail as verl's assert does. */
function removeRightUnits(text: string): string {
  if (!text.includes('\\text{ ')) return text;
  const splits = text.split('\\text{ ');
  if (splits.length !== 2) throw new NormalisationFailed('two \\text{ units');
  return splits[0];
}

/** "\sqrt3" -> "\sqrt{3}". */
function fixSqrt(text: string): string {
  if (!text.includes('\\sqrt')) return text;
  const [head, ...rest] = text.split('\\sqrt');
  let out = head;
  for (const part of rest) {
    const chars = [...part];
    if (chars.length === 0) throw new NormalisationFailed('\\sqrt at the end');
    out += chars[0] !== '{' ? `\\sqrt{${chars[0]}}${chars.slice(1).join('')}` : `\\sqrt${part}`;
  }
  return out;
}

/** Hendrycks' strip_string, step by step in verl's order. Throws NormalisationFailed where verl raises. */
export function stripString(answer: string): string {
  let s = answer.replaceAll('\n', '').replaceAll('\\!', '').replaceAll('\\\\', '\\');
  s = s.replaceAll('tfrac', 'frac').replaceAll('dfrac', 'frac');
  s = s.replaceAll('\\left', '').replaceAll('\\right', '');
  s = s.replaceAll('^{\\circ}', '').replaceAll('^\\circ', '');
  s = s.replaceAll('\\$', '');
  s = removeRightUnits(s);
  s = s.replaceAll('\\\\%', '').replaceAll('\\%', '');
  s = s.replaceAll(' .', ' 0.').replaceAll('{.', '{0.');
  if (s.length === 0) return s;
  if (s[0] === '.') s = '0' + s;
  const sides = s.split('=');
  if (sides.length === 2 && [...sides[0]].length <= 2) s = sides[1];
  s = fixSqrt(s);
  s = s.replaceAll(' ', '');
  s = fixFracs(s);
  if (s === '0.5') s = '\\frac{1}{2}';
  return fixSlash(s);
}

/** verl's is_equiv: equal after strip_string, or equal as written when normalising either fails. */
export function isEquivalentMath(a: string, b: string): boolean {
  try {
    return stripString(a) === stripString(b);
  } catch (e) {
    if (e instanceof NormalisationFailed) return a === b;
    throw e;
  }
}

/** verl compares with the ground truth as given: it must be text (a number is read as its decimal form). */
function groundTruthText(groundTruth: unknown): string {
  if (typeof groundTruth === 'string') return groundTruth;
  if (typeof groundTruth === 'number' && Number.isFinite(groundTruth)) return String(groundTruth);
  throw new InputError(`math ground_truth must be a string or a number (got ${JSON.stringify(groundTruth)})`);
}

/** 1 when the last boxed answer of the whole response equals the ground truth after strip_string, else 0. */
export function scoreMathReward(solution: string, groundTruth: unknown): GradedAnswer {
  const truth = groundTruthText(groundTruth);
  const boxed = lastBoxedOnly(solution);
  let pred = '';
  let acc = false;
  if (boxed !== undefined) {
    try {
      pred = removeBoxed(boxed);
      acc = isEquivalentMath(pred, truth);
    } catch (e) {
      if (!(e instanceof NormalisationFailed)) throw e; // verl prints the error and scores 0
    }
  }
  return { score: acc ? 1 : 0, acc, pred };
}
