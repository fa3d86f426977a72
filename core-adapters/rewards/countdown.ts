// Countdown scoring: the answer expression must use each given number exactly once and equal the
// target exactly (the same rules as the solver in data/countdown.ts).
import { Fraction } from './fraction.js';
import { InputError } from '../errors.js';
import { solveCountdown } from './countdown-solver.js';
import { FINITE_NUMBER, type GradedAnswer, type ScorerOptionRules } from './types.js';

// Parsing: expr := term (('+' | '-') term)*, term := factor (('*' | '/') factor)*,
// factor := integer | '(' expr ')'. No unary minus and no decimals, so an accepted expression that
// uses each number once is exactly one of the trees the solver enumerates.

class ParseFailure extends Error {}

class ExpressionParser {
  private position = 0;
  readonly numbers: number[] = [];

  constructor(private readonly text: string) {}

  parseAll(): Fraction {
    const value = this.expression();
    this.skipSpace();
    if (this.position !== this.text.length) throw new ParseFailure();
    return value;
  }

  private skipSpace(): void {
    while (this.position < this.text.length && /\s/.test(this.text[this.position])) this.position++;
  }

  private peek(): string | undefined {
    this.skipSpace();
    return this.text[this.position];
  }

  private expression(): Fraction {
    let value = this.term();
    for (let op = this.peek(); op === '+' || op === '-'; op = this.peek()) {
      this.position++;
      const right = this.term();
      value = op === '+' ? value.add(right) : value.sub(right);
    }
    return value;
  }

  private term(): Fraction {
    let value = this.factor();
    for (let op = this.peek(); op === '*' || op === '/'; op = this.peek()) {
      this.position++;
      const right = this.factor();
      const next = op === '*' ? value.mul(right) : value.div(right);
      if (!next) throw new ParseFailure(); // division by zero
      value = next;
    }
    return value;
  }

  private factor(): Fraction {
    const next = this.peek();
    if (next === '(') {
      this.position++;
      const value = this.expression();
      if (this.peek() !== ')') throw new ParseFailure();
      this.position++;
      return value;
    }
    const digits = /^[0-9]+/.exec(this.text.slice(this.position, this.position + 400))?.[0];
    if (!digits || digits.length >= 400) throw new ParseFailure();
    this.position += digits.length;
    const literal = BigInt(digits);
    this.numbers.push(Number(literal));
    return new Fraction(literal);
  }
}

/**
 * Evaluates an arithmetic expression exactly (integers, + - * /, parentheses; no eval). Returns
 * undefined for a syntax error or a division by zero. `numbers` lists the integer literals in order;
 * `fraction` is the exact value, `value` its nearest double. Literals of 400+ digits count as syntax errors.
 */
export function evaluateExpression(text: string): { value: number; numbers: number[]; fraction: Fraction } | undefined {
  const parser = new ExpressionParser(text);
  try {
    const fraction = parser.parseAll();
    return { value: fraction.toNumber(), numbers: parser.numbers, fraction };
  } catch (e) {
    // RangeError: nesting deep enough to exhaust the stack is not an expression worth scoring.
    if (e instanceof ParseFailure || e instanceof RangeError) return undefined;
    throw e;
  }
}

export interface CountdownScoreOptions {
  /** Score of a correct answer. Default 1. */
  correct?: number;
  /** Score of a wrong or missing answer. Default 0. */
  incorrect?: number;
  /** Score of a wrong answer given inside <answer></answer> tags (TinyZero's format_score is 0.1). Default: `incorrect`. */
  format?: number;
}

export const COUNTDOWN_OPTIONS: ScorerOptionRules = { correct: FINITE_NUMBER, incorrect: FINITE_NUMBER, format: FINITE_NUMBER };

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

/** Enumerating more numbers than this is too slow for validation (5 numbers: ~10^5 expressions). */
const MAX_ENUMERATED_NUMBERS = 4;

/**
 * Every correct answer to a countdown problem as the solver prints it (minimal parentheses, each
 * ordering distinct), or undefined when the problem has too many numbers to list them at validation.
 */
export function countdownCorrectAnswers(groundTruth: unknown): string[] | undefined {
  const { numbers, target } = readGroundTruth(groundTruth);
  return numbers.length <= MAX_ENUMERATED_NUMBERS ? solveCountdown(numbers, target) : undefined;
}
