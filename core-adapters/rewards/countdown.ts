// Countdown scoring: the answer expression must use each given number exactly once and equal the
// target exactly (the same rules as the solver in data/countdown.ts).
import { evaluateExpression } from '../data/countdown.js';
import { InputError } from '../errors.js';
import type { GradedAnswer } from './types.js';

export interface CountdownScoreOptions {
  /** Score of a correct answer. Default 1. */
  correct?: number;
  /** Score of a wrong or missing answer. Default 0. */
  incorrect?: number;
  /** Score of a wrong answer given inside <answer></answer> tags (TinyZero's format_score is 0.1). Default: `incorrect`. */
  format?: number;
}

/** The expression a response proposes, and whether it came from <answer> tags. */
export function extractCountdownAnswer(solution: string): { expression: string; tagged: boolean } {
  const tagged = [...solution.matchAll(/<answer>([\s\S]*?)<\/answer>/g)];
  let candidate: string;
  if (tagged.length > 0) {
    candidate = tagged[tagged.length - 1][1];
  } else {
    const lines = solution.split('\n').filter((line) => line.trim() !== '');
    candidate = lines.length > 0 ? lines[lines.length - 1] : '';
  }
  // "3*4+5 = 17": the left-hand side is the expression.
  const expression = candidate.split('=')[0].trim();
  return { expression, tagged: tagged.length > 0 };
}

/** Some datasets store the ground truth as a JSON string. */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function readGroundTruth(groundTruth: unknown): { numbers: number[]; target: number } {
  const parsed = typeof groundTruth === 'string' ? parseJson(groundTruth) : groundTruth;
  const value = parsed as { numbers?: unknown; target?: unknown } | null;
  const numbers = value?.numbers;
  const target = value?.target;
  if (
    typeof value !== 'object' ||
    !Array.isArray(numbers) ||
    numbers.length === 0 ||
    !numbers.every((n) => Number.isSafeInteger(n)) ||
    !Number.isSafeInteger(target)
  ) {
    throw new InputError(`countdown ground_truth must be {numbers: integer[], target: integer} (got ${JSON.stringify(groundTruth)})`);
  }
  return { numbers: numbers as number[], target: target as number };
}

function sameMultiset(a: number[], b: number[]): boolean {
  if (a.length !== b.length) return false;
  const sortedA = [...a].sort((x, y) => x - y);
  const sortedB = [...b].sort((x, y) => x - y);
  return sortedA.every((x, i) => x === sortedB[i]);
}

/** Scores a countdown response: `{ score, acc, pred }` with pred the extracted expression. */
export function scoreCountdown(solution: string, groundTruth: unknown, options: CountdownScoreOptions = {}): GradedAnswer {
  const { numbers, target } = readGroundTruth(groundTruth);
  const correctScore = options.correct ?? 1;
  const incorrectScore = options.incorrect ?? 0;
  const formatScore = options.format ?? incorrectScore;

  const { expression, tagged } = extractCountdownAnswer(solution);
  const evaluated = evaluateExpression(expression);
  const acc = evaluated !== undefined && sameMultiset(evaluated.numbers, numbers) && evaluated.fraction.equalsInteger(target);
  const score = acc ? correctScore : tagged ? formatScore : incorrectScore;
  return { score, acc, pred: expression };
}
