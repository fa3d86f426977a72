// The countdown task's arithmetic (TinyZero, FlowRL): combine every given number exactly once with
// + - * / and parentheses to reach the target. The solver enumerates exactly the expressions the
// scorer's parser accepts (countdown.ts beside this file); the dataset generator (data/countdown.ts)
// keeps only problems it can solve.
import { check } from '../errors.js';

/** A countdown problem: reach `target` using each of `numbers` once with + - * / and parentheses. */
export interface CountdownProblem {
  numbers: number[];
  target: number;
}

// ---------------------------------------------------------------------------------------------
// Solving: every binary tree over every ordering of the numbers with every operator choice.

/** More numbers than this makes exhaustive enumeration impractical (6 numbers: ~31M trees). */
export const MAX_COUNTDOWN_NUMBERS = 6;

type Operator = '+' | '-' | '*' | '/';
const OPERATORS: readonly Operator[] = ['+', '-', '*', '/'];
const PRECEDENCE: Record<Operator, number> = { '+': 1, '-': 1, '*': 2, '/': 2 };
const ATOM_PRECEDENCE = 3;

/** A subexpression: its exact value as a reduced num/den (den > 0) and its printed form. */
interface Candidate {
  num: number;
  den: number;
  text: string;
  precedence: number;
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/**
 * Exact in doubles: checkNumbers bounds every numerator and denominator (and every product formed on
 * the way) by 2^(n-1) * prod(max(x, 1)) <= 2^53.
 */
function combine(op: Operator, a: Candidate, b: Candidate): [number, number] | undefined {
  let num: number;
  let den: number;
  switch (op) {
    case '+':
      num = a.num * b.den + b.num * a.den;
      den = a.den * b.den;
      break;
    case '-':
      num = a.num * b.den - b.num * a.den;
      den = a.den * b.den;
      break;
    case '*':
      num = a.num * b.num;
      den = a.den * b.den;
      break;
    case '/':
      if (b.num === 0) return undefined;
      num = a.num * b.den;
      den = a.den * b.num;
      if (den < 0) {
        num = -num;
        den = -den;
      }
      break;
  }
  const divisor = gcd(Math.abs(num), den);
  return [num / divisor, den / divisor];
}

/**
 * Prints `a op b` with the fewest parentheses that keep its value: a child binding more loosely
 * than the operator needs them, and so does a right child of equal precedence under - or /
 * (a-(b-c), a/(b*c)); a+(b-c) and a*(b/c) print without them.
 */
function render(op: Operator, a: Candidate, b: Candidate): string {
  const precedence = PRECEDENCE[op];
  const left = a.precedence < precedence ? `(${a.text})` : a.text;
  const rightNeedsParens = b.precedence < precedence || (b.precedence === precedence && (op === '-' || op === '/'));
  return left + op + (rightNeedsParens ? `(${b.text})` : b.text);
}

function checkNumbers(numbers: unknown): asserts numbers is number[] {
  check(
    Array.isArray(numbers) && numbers.length >= 1 && numbers.every((n) => Number.isSafeInteger(n) && n >= 0),
    'countdown numbers',
    `must be a non-empty list of non-negative integers (got ${JSON.stringify(numbers)})`,
  );
  check(numbers.length <= MAX_COUNTDOWN_NUMBERS, 'countdown numbers', `at most ${MAX_COUNTDOWN_NUMBERS} numbers can be solved exhaustively (got ${numbers.length})`);
  const bound = numbers.reduce((product: number, n: number) => product * Math.max(n, 1), 2 ** (numbers.length - 1));
  check(bound <= Number.MAX_SAFE_INTEGER, 'countdown numbers', `${JSON.stringify(numbers)} are too large to solve exactly`);
}

/**
 * Calls visit for every whole-problem tree `a op b` (a, b over complementary subsets, in both
 * orders) with its value, skipping divisions by zero. Subexpressions are memoised per subset of the
 * numbers and deduplicated by printed form (same text, same value).
 */
function forEachTree(numbers: number[], visit: (op: Operator, a: Candidate, b: Candidate, num: number, den: number) => void): void {
  const memo = new Map<number, Candidate[]>();
  const candidatesFor = (mask: number): Candidate[] => {
    const cached = memo.get(mask);
    if (cached) return cached;
    const byText = new Map<string, Candidate>();
    forEachSplit(mask, (op, a, b, num, den) => {
      const text = render(op, a, b);
      if (!byText.has(text)) byText.set(text, { num, den, text, precedence: PRECEDENCE[op] });
    });
    const list = [...byText.values()];
    memo.set(mask, list);
    return list;
  };
  const forEachSplit = (mask: number, each: typeof visit): void => {
    for (let left = (mask - 1) & mask; left > 0; left = (left - 1) & mask) {
      const rights = candidatesFor(mask ^ left);
      for (const a of candidatesFor(left)) {
        for (const b of rights) {
          for (const op of OPERATORS) {
            const value = combine(op, a, b);
            if (value) each(op, a, b, value[0], value[1]);
          }
        }
      }
    }
  };
  numbers.forEach((n, i) => memo.set(1 << i, [{ num: n, den: 1, text: String(n), precedence: ATOM_PRECEDENCE }]));
  forEachSplit((1 << numbers.length) - 1, visit);
}

/**
 * Every distinct way to write `target` from all the numbers (each once; + - * /; parentheses),
 * printed with minimal parentheses and sorted. Orderings count as distinct ('3+4' and '4+3').
 */
export function solveCountdown(numbers: number[], target: number): string[] {
  checkNumbers(numbers);
  check(Number.isSafeInteger(target), 'countdown target', `must be an integer (got ${JSON.stringify(target)})`);
  if (numbers.length === 1) return numbers[0] === target ? [String(target)] : [];
  const solutions = new Set<string>();
  forEachTree(numbers, (op, a, b, num, den) => {
    if (den === 1 && num === target) solutions.add(render(op, a, b));
  });
  return [...solutions].sort();
}

/** The positive integers in [low, high] that the numbers can make, ascending. */
export function reachableTargets(numbers: number[], low: number, high: number): number[] {
  checkNumbers(numbers);
  const reachable = new Set<number>();
  const keep = (num: number) => {
    if (num >= Math.max(low, 1) && num <= high) reachable.add(num);
  };
  if (numbers.length === 1) keep(numbers[0]);
  else forEachTree(numbers, (_op, _a, _b, num, den) => den === 1 && keep(num));
  return [...reachable].sort((x, y) => x - y);
}

// ---------------------------------------------------------------------------------------------
