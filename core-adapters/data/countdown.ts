// The countdown task's datasets: problems drawn at random, kept when the solver (rewards/
// countdown-solver.ts) finds a solution, written as verl rows.
import path from 'node:path';
import { check, InputError } from '../errors.js';
import { Rng } from '../random.js';
import { MAX_COUNTDOWN_NUMBERS, reachableTargets, solveCountdown, type CountdownProblem } from '../rewards/countdown-solver.js';
import { writeRowsJsonl, type DataRow } from './rows.js';

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
