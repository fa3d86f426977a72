// The countdown task (TinyZero, FlowRL): combine every given number exactly once with + - * / and
// parentheses to reach the target. The solver enumerates exactly the expressions the scorer's
// parser accepts (rewards/countdown.ts), and the generator keeps only solvable problems.
import path from 'node:path';
import { check, InputError } from '../errors.js';
import { Rng } from '../random.js';
import { writeRowsJsonl, type DataRow } from './rows.js';

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
// Generating datasets.

/** How writeCountdownDataset draws problems: counts, sizes, number and target ranges, seed. */
export interface CountdownOptions {
  count: number;
  seed: number;
  /** How many numbers a problem has, drawn uniformly from this list. Default [3, 4]. */
  sizes?: number[];
  /** Numbers are uniform in [1, maxNumber]. Default 20. */
  maxNumber?: number;
  /** The target is uniform over the reachable positive integers in this range. Default [1, 100]. */
  targetRange?: [number, number];
  /** {numbers} (joined by ', ') and {target} are filled in. */
  promptTemplate?: string;
  /** extra_info.split of the rows. Default 'train'. */
  split?: string;
}

export const DEFAULT_COUNTDOWN_PROMPT = 'Using the numbers {numbers}, make {target}.';

/** Give up on a draw after this many problems without a reachable target in range. */
const MAX_DRAW_ATTEMPTS = 1000;

type ProblemSettings = Required<Omit<CountdownOptions, 'count' | 'seed'>>;

function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function resolveSettings(options: Partial<CountdownOptions>): ProblemSettings {
  const where = (key: string) => `countdown option '${key}'`;
  const sizes = options.sizes ?? [3, 4];
  check(
    Array.isArray(sizes) && sizes.length > 0 && sizes.every((s) => Number.isInteger(s) && s >= 2 && s <= MAX_COUNTDOWN_NUMBERS),
    where('sizes'),
    `must be a non-empty list of integers in [2, ${MAX_COUNTDOWN_NUMBERS}] (got ${JSON.stringify(sizes)})`,
  );
  const maxNumber = options.maxNumber ?? 20;
  check(Number.isSafeInteger(maxNumber) && maxNumber >= 1, where('maxNumber'), `must be a positive integer (got ${JSON.stringify(maxNumber)})`);
  const targetRange = options.targetRange ?? [1, 100];
  check(
    Array.isArray(targetRange) && targetRange.length === 2 && targetRange.every(Number.isSafeInteger) && targetRange[0] <= targetRange[1] && targetRange[1] >= 1,
    where('targetRange'),
    `must be [low, high] integers with low <= high and high >= 1 (got ${JSON.stringify(targetRange)})`,
  );
  const promptTemplate = options.promptTemplate ?? DEFAULT_COUNTDOWN_PROMPT;
  check(typeof promptTemplate === 'string', where('promptTemplate'), 'must be a string');
  const split = options.split ?? 'train';
  check(typeof split === 'string' && split !== '', where('split'), 'must be a non-empty string');
  // Fail on a size/maxNumber combination the exact solver cannot take now, not midway through a dataset.
  const largest = Math.max(...sizes);
  check(
    2 ** (largest - 1) * maxNumber ** largest <= Number.MAX_SAFE_INTEGER,
    where('maxNumber'),
    `${maxNumber} is too large to solve ${largest}-number problems exactly`,
  );
  return { sizes, maxNumber, targetRange, promptTemplate, split };
}

function drawProblem(rng: Rng, settings: ProblemSettings): CountdownProblem {
  const [low, high] = settings.targetRange;
  for (let attempt = 0; attempt < MAX_DRAW_ATTEMPTS; attempt++) {
    const size = settings.sizes[rng.int(settings.sizes.length)];
    const numbers = Array.from({ length: size }, () => 1 + rng.int(settings.maxNumber));
    const targets = reachableTargets(numbers, low, high);
    if (targets.length > 0) return { numbers, target: targets[rng.int(targets.length)] };
  }
  throw new InputError(
    `countdown option 'targetRange': no reachable target in [${low}, ${high}] after ${MAX_DRAW_ATTEMPTS} draws (widen it or change maxNumber/sizes)`,
  );
}

/** One key per problem: the same numbers in any order with the same target are one problem. */
export function countdownProblemKey({ numbers, target }: CountdownProblem): string {
  return `${[...numbers].sort((x, y) => x - y).join(',')}=${target}`;
}

function countdownRow(problem: CountdownProblem, settings: ProblemSettings, split: string, index: number): DataRow {
  const content = settings.promptTemplate.replaceAll('{numbers}', problem.numbers.join(', ')).replaceAll('{target}', String(problem.target));
  return {
    data_source: 'countdown',
    prompt: [{ role: 'user', content }],
    ability: 'math',
    reward_model: { style: 'rule', ground_truth: { numbers: problem.numbers, target: problem.target } },
    extra_info: { split, index, solutions: solveCountdown(problem.numbers, problem.target).length },
  };
}

function checkCount(value: unknown, key: string): asserts value is number {
  check(isNonNegativeInteger(value), `countdown option '${key}'`, `must be a non-negative integer (got ${JSON.stringify(value)})`);
}

function checkSeed(value: unknown): asserts value is number {
  check(typeof value === 'number' && Number.isFinite(value), `countdown option 'seed'`, `must be a number (got ${JSON.stringify(value)})`);
}

/** `count` solvable problems drawn with a seeded Rng: same options, same rows. */
export function generateCountdown(options: CountdownOptions): DataRow[] {
  checkCount(options.count, 'count');
  checkSeed(options.seed);
  const settings = resolveSettings(options);
  const rng = new Rng(options.seed);
  return Array.from({ length: options.count }, (_, index) => countdownRow(drawProblem(rng, settings), settings, settings.split, index));
}

/**
 * Writes dir/train.jsonl (split 'train', the same rows as generateCountdown with this seed) and
 * dir/val.jsonl (split 'val'): distinct problems (same numbers as a multiset and same target count
 * as one) of which none is also a training problem.
 */
export function writeCountdownDataset(
  dir: string,
  options: { train: number; val: number; seed: number } & Partial<CountdownOptions>,
): { train: string; val: string } {
  checkCount(options.train, 'train');
  checkCount(options.val, 'val');
  checkSeed(options.seed);
  const settings = resolveSettings(options);
  const rng = new Rng(options.seed);

  const trainProblems = Array.from({ length: options.train }, () => drawProblem(rng, settings));
  const seen = new Set(trainProblems.map(countdownProblemKey));
  const valProblems: CountdownProblem[] = [];
  const maxDraws = 100 * options.val + MAX_DRAW_ATTEMPTS;
  for (let draws = 0; valProblems.length < options.val; draws++) {
    if (draws >= maxDraws) {
      throw new InputError(`countdown options: cannot find ${options.val} validation problems that are not training problems (too few distinct problems; raise maxNumber or widen targetRange)`);
    }
    const problem = drawProblem(rng, settings);
    if (seen.has(countdownProblemKey(problem))) continue;
    seen.add(countdownProblemKey(problem));
    valProblems.push(problem);
  }

  const files = { train: path.join(dir, 'train.jsonl'), val: path.join(dir, 'val.jsonl') };
  writeRowsJsonl(files.train, trainProblems.map((p, i) => countdownRow(p, settings, 'train', i)));
  writeRowsJsonl(files.val, valProblems.map((p, i) => countdownRow(p, settings, 'val', i)));
  return files;
}
