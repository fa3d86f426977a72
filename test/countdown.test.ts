import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { evaluateExpression } from '../core-adapters/rewards/countdown.js';
import { generateCountdown, readRows, writeCountdownDataset } from '../core-adapters/data/index.js';
import { reachableTargets, solveCountdown, type CountdownProblem } from '../core-adapters/rewards/countdown-solver.js';
import { Rng } from '../core-adapters/random.js';
import { expectInputError, tempDir } from './helpers.js';

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);

/** Every fully parenthesised expression over all the numbers: an enumeration independent of the solver. */
function allFullyParenthesised(numbers: number[]): string[] {
  if (numbers.length === 1) return [String(numbers[0])];
  const out: string[] = [];
  const full = (1 << numbers.length) - 1;
  for (let mask = 1; mask < full; mask++) {
    const left = numbers.filter((_, i) => mask & (1 << i));
    const right = numbers.filter((_, i) => !(mask & (1 << i)));
    for (const l of allFullyParenthesised(left)) {
      for (const r of allFullyParenthesised(right)) for (const op of '+-*/') out.push(`(${l}${op}${r})`);
    }
  }
  return out;
}

describe('countdown: evaluateExpression', () => {
  it('respects precedence and left associativity', () => {
    const cases: [string, number][] = [
      ['3+4*5', 23],
      ['(3+4)*5', 35],
      ['10-3-2', 5],
      ['10-(3-2)', 9],
      ['8/4/2', 1],
      ['8/(4/2)', 4],
      ['2*3+4*5-6/3', 24],
      [' ( 3 + 4 ) *\t5 ', 35],
      ['((7))', 7],
    ];
    for (const [text, value] of cases) expect(evaluateExpression(text)?.value, text).to.equal(value);
  });

  it('lists the integer literals in order of appearance', () => {
    expect(evaluateExpression('(10-3)*2+10')?.numbers).to.deep.equal([10, 3, 2, 10]);
    expect(evaluateExpression('007+1')?.numbers).to.deep.equal([7, 1]);
  });

  it('is exact: fractions stay fractions and big literals stay exact', () => {
    const tenths = evaluateExpression('(1/10+2/10)*10')!; // 3.0000000000000004 in doubles
    expect(tenths.fraction.equalsInteger(3)).to.equal(true);
    const half = evaluateExpression('7/2')!;
    expect([half.value, half.fraction.numerator, half.fraction.denominator]).to.deep.equal([3.5, 7n, 2n]);
    expect(half.fraction.equalsInteger(3)).to.equal(false);
    expect(evaluateExpression('99999999999999999999-99999999999999999998')!.fraction.equalsInteger(1)).to.equal(true);
    expect(evaluateExpression('6/(1-3/4)')!.fraction.equalsInteger(24)).to.equal(true);
  });

  it('returns undefined for syntax errors and division by zero', () => {
    for (const text of ['', '   ', '3+', '(3+4', '3+4)', '-3+4', '2*-3', '+3', '3.5+1', '1/0', '1/(2-2)', '0*(4/(2-2))', 'abc', '3 4', '2**3', '3+4=7', '3×4', 'Math.PI']) {
      expect(evaluateExpression(text), JSON.stringify(text)).to.equal(undefined);
    }
  });

  it('survives absurd nesting without throwing', () => {
    const deep = '('.repeat(200000) + '1' + ')'.repeat(200000);
    expect(() => evaluateExpression(deep)).not.to.throw();
  });
});

describe('countdown: solveCountdown', () => {
  it('finds exactly the hand-enumerated solutions of small problems', () => {
    expect(solveCountdown([3, 4], 7)).to.deep.equal(['3+4', '4+3']);
    expect(solveCountdown([2, 2], 4)).to.deep.equal(['2*2', '2+2']);
    expect(solveCountdown([2, 3, 5], 10)).to.deep.equal(['2+3+5', '2+5+3', '3+2+5', '3+5+2', '5+2+3', '5+3+2']);
    expect(solveCountdown([2, 3, 4], 20)).to.deep.equal(['(2+3)*4', '(3+2)*4', '4*(2+3)', '4*(3+2)']);
    expect(solveCountdown([10, 3, 2], 9)).to.deep.equal(['10+2-3', '10-(3-2)', '10-3+2', '2+10-3', '2-(3-10)', '2-3+10']);
    expect(solveCountdown([7], 7)).to.deep.equal(['7']);
    expect(solveCountdown([7], 8)).to.deep.equal([]);
    expect(solveCountdown([1, 1], 5)).to.deep.equal([]);
  });

  it('prints minimal parentheses and lists each printed form once', () => {
    const sums = solveCountdown([3, 4, 5], 12);
    expect(sums).to.include('3+4+5');
    expect(sums.filter((s) => s.includes('('))).to.deep.equal([]);
    const quotients = solveCountdown([8, 4, 2], 4);
    expect(quotients).to.include.members(['8/(4/2)', '8/4*2', '2*8/4', '8/(4-2)']);
    expect(quotients).not.to.include('8/4/2');
    expect(quotients.filter((s) => s === '2*8/4')).to.have.length(1); // (2*8)/4 and 2*(8/4)
    expect(new Set(quotients).size).to.equal(quotients.length);
  });

  it('returns only correct solutions, sorted, on many random problems', () => {
    const rng = new Rng(11);
    let solved = 0;
    let checked = 0;
    for (let p = 0; p < 150; p++) {
      const numbers = Array.from({ length: 2 + rng.int(3) }, () => rng.int(13)); // zeros included
      const target = 1 + rng.int(60);
      const solutions = solveCountdown(numbers, target);
      if (solutions.length > 0) solved++;
      expect(solutions).to.deep.equal([...new Set(solutions)].sort());
      for (const solution of solutions) {
        checked++;
        const evaluated = evaluateExpression(solution);
        expect(evaluated, solution).not.to.equal(undefined);
        expect(evaluated!.fraction.equalsInteger(target), `${solution} = ${target}`).to.equal(true);
        expect(sorted(evaluated!.numbers), solution).to.deep.equal(sorted(numbers));
      }
    }
    expect(solved).to.be.greaterThan(30);
    expect(checked).to.be.greaterThan(1000);
  });

  it('reaches exactly the targets an independent brute force reaches', () => {
    const rng = new Rng(5);
    for (let p = 0; p < 12; p++) {
      const numbers = Array.from({ length: p < 9 ? 3 : 4 }, () => 1 + rng.int(12));
      const bruteTargets = new Set<number>();
      const treesPerTarget = new Map<number, number>();
      for (const text of allFullyParenthesised(numbers)) {
        const fraction = evaluateExpression(text)?.fraction;
        if (!fraction || fraction.denominator !== 1n || fraction.numerator < 1n || fraction.numerator > 100n) continue;
        const value = Number(fraction.numerator);
        bruteTargets.add(value);
        treesPerTarget.set(value, (treesPerTarget.get(value) ?? 0) + 1);
      }
      expect(reachableTargets(numbers, 1, 100), `${numbers}`).to.deep.equal(sorted([...bruteTargets]));
      for (let target = 1; target <= 100; target++) {
        const count = solveCountdown(numbers, target).length;
        // Distinct printed forms: at least one per reachable target, never more than the trees.
        if (bruteTargets.has(target)) expect(count, `${numbers} -> ${target}`).to.be.within(1, treesPerTarget.get(target)!);
        else expect(count, `${numbers} -> ${target}`).to.equal(0);
      }
    }
  });

  it('solves four numbers, each solution exact and using every number once', () => {
    for (const [numbers, target] of [[[1, 2, 3, 4], 24], [[7, 7, 7, 7], 1], [[13, 17, 19, 20], 50], [[3, 3, 8, 8], 24]] as [number[], number][]) {
      const solutions = solveCountdown(numbers, target);
      for (const solution of solutions) {
        const evaluated = evaluateExpression(solution)!;
        expect(evaluated.fraction.equalsInteger(target), solution).to.equal(true);
        expect([...evaluated.numbers].sort((a, b) => a - b), solution).to.deep.equal([...numbers].sort((a, b) => a - b));
      }
      if (numbers[0] === 3) expect(solutions).to.deep.equal(['8/(3-8/3)']);
      if (numbers[0] === 1) expect(solutions.length).to.be.greaterThan(10);
    }
  });

  it('rejects bad problems with InputErrors', () => {
    expectInputError(() => solveCountdown([], 5), 'countdown numbers', 'non-empty list');
    expectInputError(() => solveCountdown([1.5, 2], 3), 'countdown numbers');
    expectInputError(() => solveCountdown([-1, 2], 1), 'countdown numbers');
    expectInputError(() => solveCountdown([1, 2, 3, 4, 5, 6, 7], 1), 'at most 6 numbers');
    expectInputError(() => solveCountdown([1e6, 1e6, 1e6], 1), 'too large to solve exactly');
    expectInputError(() => solveCountdown([1, 2], 2.5), 'countdown target', 'integer');
  });
});

describe('countdown: generateCountdown', () => {
  it('writes verl rows for solvable problems, following the defaults', () => {
    const rows = generateCountdown({ count: 60, seed: 3 });
    expect(rows).to.have.length(60);
    rows.forEach((row, index) => {
      const { numbers, target } = row.reward_model.ground_truth as CountdownProblem;
      expect(row.data_source).to.equal('countdown');
      expect(row.ability).to.equal('math');
      expect(row.reward_model.style).to.equal('rule');
      expect(row.prompt).to.deep.equal([{ role: 'user', content: `Using the numbers ${numbers.join(', ')}, make ${target}.` }]);
      expect([3, 4]).to.include(numbers.length);
      for (const n of numbers) expect(n).to.be.within(1, 20);
      expect(target).to.be.within(1, 100);
      const solutions = solveCountdown(numbers, target).length;
      expect(solutions).to.be.greaterThan(0);
      expect(row.extra_info).to.deep.equal({ split: 'train', index, solutions });
    });
    expect(new Set(rows.map((r) => (r.reward_model.ground_truth as CountdownProblem).numbers.length)).size).to.equal(2);
  });

  it('is deterministic by seed', () => {
    expect(generateCountdown({ count: 20, seed: 42 })).to.deep.equal(generateCountdown({ count: 20, seed: 42 }));
    expect(generateCountdown({ count: 20, seed: 42 })).not.to.deep.equal(generateCountdown({ count: 20, seed: 43 }));
  });

  it('honours sizes, maxNumber, targetRange, promptTemplate and split', () => {
    const rows = generateCountdown({ count: 40, seed: 1, sizes: [2], maxNumber: 6, targetRange: [10, 30], promptTemplate: '{target} from [{numbers}]; {target}!', split: 'test' });
    for (const row of rows) {
      const { numbers, target } = row.reward_model.ground_truth as CountdownProblem;
      expect(numbers).to.have.length(2);
      for (const n of numbers) expect(n).to.be.within(1, 6);
      expect(target).to.be.within(10, 30);
      expect(row.prompt[0].content).to.equal(`${target} from [${numbers.join(', ')}]; ${target}!`);
      expect(row.extra_info?.split).to.equal('test');
    }
  });

  it('draws targets from the reachable ones, not from the whole range', () => {
    // Two numbers up to 3 reach at most 9, far below most of the range.
    const targets = generateCountdown({ count: 100, seed: 9, sizes: [2], maxNumber: 3, targetRange: [1, 1000] }).map(
      (row) => (row.reward_model.ground_truth as CountdownProblem).target,
    );
    expect(Math.max(...targets)).to.be.at.most(9);
    expect(new Set(targets).size).to.be.greaterThan(4);
  });

  it('rejects bad options with InputErrors naming the option', () => {
    expectInputError(() => generateCountdown({ count: -1, seed: 1 }), "countdown option 'count'");
    expectInputError(() => generateCountdown({ count: 1, seed: NaN }), "countdown option 'seed'");
    expectInputError(() => generateCountdown({ count: 1, seed: 1, sizes: [1] }), "countdown option 'sizes'");
    expectInputError(() => generateCountdown({ count: 1, seed: 1, sizes: [7] }), "countdown option 'sizes'");
    expectInputError(() => generateCountdown({ count: 1, seed: 1, maxNumber: 0 }), "countdown option 'maxNumber'");
    expectInputError(() => generateCountdown({ count: 1, seed: 1, sizes: [6], maxNumber: 1e4 }), "countdown option 'maxNumber'", 'too large');
    expectInputError(() => generateCountdown({ count: 1, seed: 1, targetRange: [5, 1] }), "countdown option 'targetRange'");
    expectInputError(() => generateCountdown({ count: 1, seed: 1, sizes: [2], maxNumber: 1, targetRange: [50, 60] }), "countdown option 'targetRange'", 'no reachable target');
  });
});

describe('countdown: writeCountdownDataset', () => {
  const key = ({ numbers, target }: CountdownProblem) => `${sorted(numbers)}=${target}`;

  it('writes train.jsonl and val.jsonl with disjoint problems', async () => {
    const dir = path.join(tempDir('flowrl-countdown-'), 'data');
    const files = writeCountdownDataset(dir, { train: 50, val: 20, seed: 7, sizes: [3] });
    expect(files).to.deep.equal({ train: path.join(dir, 'train.jsonl'), val: path.join(dir, 'val.jsonl') });
    expect(fs.readdirSync(dir).sort()).to.deep.equal(['train.jsonl', 'val.jsonl']);

    const train = await readRows(files.train);
    const val = await readRows(files.val);
    expect(train).to.deep.equal(generateCountdown({ count: 50, seed: 7, sizes: [3] }));
    expect(val).to.have.length(20);
    val.forEach((row, index) => expect(row.extra_info).to.include({ split: 'val', index }));
    const trainKeys = new Set(train.map((r) => key(r.reward_model.ground_truth as CountdownProblem)));
    const valKeys = val.map((r) => key(r.reward_model.ground_truth as CountdownProblem));
    expect(valKeys.filter((k) => trainKeys.has(k))).to.deep.equal([]);
    expect(new Set(valKeys).size).to.equal(valKeys.length);
  });

  it('fails cleanly, writing nothing, when too few distinct problems exist', () => {
    const dir = path.join(tempDir('flowrl-countdown-'), 'tiny');
    expectInputError(() => writeCountdownDataset(dir, { train: 10, val: 30, seed: 1, sizes: [2], maxNumber: 2, targetRange: [1, 4] }), 'validation problems');
    expect(fs.existsSync(dir)).to.equal(false);
  });
});
