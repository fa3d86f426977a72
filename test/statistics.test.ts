// The statistics behind flowrl compare: Student-t quantiles (closed forms, and reference values
// from scripts/t_quantile_reference.py, which integrates the density independently), t intervals,
// the crossed bootstrap (its resampling law, and coverage by seeded simulation), and compareRuns on
// synthetic run directories with hand-computed numbers.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { compareRuns, comparisonMarkdown, comparisonText } from '../core-adapters/report/comparison.js';
import { crossedBootstrap, mean, percentileInterval, quantileSorted, sampleStd, tCdf, tInterval, tQuantile } from '../core-adapters/report/statistics.js';
import { Rng } from '../core-adapters/random.js';
import { passAtK } from '../core-adapters/trainer/pass-at-k.js';
import { readValPrompts, VAL_PROMPTS_FILE, ValPromptLog } from '../core-adapters/trainer/val-prompts.js';
import { expectInputError, tempDir } from './helpers.js';

/** From scripts/t_quantile_reference.py (Simpson integration of the density, then bisection). */
const REFERENCE: Record<number, Record<number, number>> = {
  0.975: { 3: 3.182446, 4: 2.776445, 5: 2.570582, 7: 2.364624, 9: 2.262157, 19: 2.093024, 29: 2.04523 },
  0.995: { 3: 5.840909, 4: 4.604095, 5: 4.032143, 7: 3.499483, 9: 3.249836, 19: 2.860935, 29: 2.756386 },
};

describe('statistics', () => {
  describe('Student t', () => {
    it('matches the closed forms for 1 and 2 degrees of freedom', () => {
      for (const p of [0.6, 0.9, 0.975, 0.995]) {
        // df 1 is Cauchy: tan(π(p − ½)); df 2: (2p − 1) / √(2p(1 − p)).
        expect(tQuantile(p, 1)).to.be.closeTo(Math.tan(Math.PI * (p - 0.5)), 1e-9);
        expect(tQuantile(p, 2)).to.be.closeTo((2 * p - 1) / Math.sqrt(2 * p * (1 - p)), 1e-9);
      }
    });

    it('matches independently computed quantiles, and the normal for large df', () => {
      for (const [p, byDf] of Object.entries(REFERENCE)) {
        for (const [df, value] of Object.entries(byDf)) expect(tQuantile(Number(p), Number(df)), `p ${p}, df ${df}`).to.be.closeTo(value, 1e-6);
      }
      // Published tables: t_{0.975, 10} = 2.228, t_{0.975, 30} = 2.042; z_{0.975} = 1.959964.
      expect(tQuantile(0.975, 10)).to.be.closeTo(2.228, 5e-4);
      expect(tQuantile(0.975, 30)).to.be.closeTo(2.042, 5e-4);
      expect(tQuantile(0.975, 1e7)).to.be.closeTo(1.959964, 1e-5);
      expect(tQuantile(0.025, 4)).to.equal(-tQuantile(0.975, 4));
      expect(tCdf(tQuantile(0.9, 6), 6)).to.be.closeTo(0.9, 1e-12);
      expect(() => tQuantile(1, 3)).to.throw('0 < p < 1');
      expect(() => tQuantile(0.5, 0)).to.throw('df > 0');
    });

    it('gives mean ± t·s/√n, n/a for one value, and covers the mean 95 % of the time', () => {
      // [1, 2, 3]: mean 2, s 1, half-width t_{0.975, 2} / √3.
      const i = tInterval([1, 2, 3]);
      expect(i.mean).to.equal(2);
      expect(i.high! - 2).to.be.closeTo(4.302653 / Math.sqrt(3), 1e-6);
      expect(2 - i.low!).to.be.closeTo(4.302653 / Math.sqrt(3), 1e-6);
      expect(tInterval([0.4])).to.deep.equal({ mean: 0.4, low: null, high: null, n: 1 });
      expect(sampleStd([1, 2, 3])).to.equal(1);
      // Three normal draws per experiment, 4000 experiments.
      const rng = new Rng(7);
      let covered = 0;
      for (let e = 0; e < 4000; e++) {
        const { low, high } = tInterval([0, 1, 2].map(() => 5 + 2 * rng.normal()));
        if (low! <= 5 && 5 <= high!) covered++;
      }
      expect(covered / 4000).to.be.within(0.94, 0.96);
    });
  });

  describe('bootstrap', () => {
    it('percentile intervals interpolate between order statistics (type 7)', () => {
      expect(quantileSorted([1, 2, 3, 4], 0.025)).to.be.closeTo(1.075, 1e-12);
      expect(quantileSorted([1, 2, 3, 4], 0.975)).to.be.closeTo(3.925, 1e-12);
      const { low, high } = percentileInterval([4, 1, 3, 2]);
      expect(low).to.be.closeTo(1.075, 1e-12);
      expect(high).to.be.closeTo(3.925, 1e-12);
    });

    it('resamples rows and columns uniformly with replacement, the same for the same seed', () => {
      // Two columns: multiplicities (2,0), (1,1), (0,2) with probabilities ¼, ½, ¼; rows uniform.
      const [first, row] = crossedBootstrap(3, 2, (rows, w) => [w[0], rows[0]], { resamples: 4000, seed: 1 });
      const share = (values: number[], v: number) => values.filter((x) => x === v).length / values.length;
      expect(share(first, 2)).to.be.closeTo(0.25, 0.025);
      expect(share(first, 1)).to.be.closeTo(0.5, 0.025);
      for (const r of [0, 1, 2]) expect(share(row, r)).to.be.closeTo(1 / 3, 0.025);
      expect(crossedBootstrap(3, 2, (rows, w) => [w[0], rows[0]], { resamples: 50, seed: 1 })[0]).to.deep.equal(first.slice(0, 50));
    });

    it('covers about 95 % over prompts; with three seeds of seed-to-seed spread the t interval is needed', () => {
      // One seed, 60 prompts of paired 0/1 differences with mean 0.1: the bootstrap alone.
      const rng = new Rng(11);
      let covered = 0;
      const experiments = 300;
      for (let e = 0; e < experiments; e++) {
        const d = Array.from({ length: 60 }, () => (rng.next() < 0.3 ? 1 : 0) - (rng.next() < 0.2 ? 1 : 0));
        const [reps] = crossedBootstrap(1, 60, (_rows, w) => [d.reduce((s, v, p) => s + w[p] * v, 0) / 60], { resamples: 1000, seed: e });
        const { low, high } = percentileInterval(reps);
        if (low <= 0.1 && 0.1 <= high) covered++;
      }
      expect(covered / experiments).to.be.within(0.92, 0.98);
      // Three seeds whose differences vary (no prompt effect): resampling three seeds is too narrow.
      let bootstrapCovered = 0;
      let tCovered = 0;
      for (let e = 0; e < experiments; e++) {
        const perSeed = [0, 1, 2].map(() => 0.1 + 0.05 * rng.normal());
        const [reps] = crossedBootstrap(3, 1, (rows) => [mean(rows.map((s) => perSeed[s]))], { resamples: 500, seed: e });
        const b = percentileInterval(reps);
        if (b.low <= 0.1 && 0.1 <= b.high) bootstrapCovered++;
        const t = tInterval(perSeed);
        if (t.low! <= 0.1 && 0.1 <= t.high!) tCovered++;
      }
      expect(bootstrapCovered / experiments).to.be.below(0.85);
      expect(tCovered / experiments).to.be.within(0.92, 0.98);
    });
  });
});

interface PromptCounts {
  correct: number;
  distinct: number;
  entropy: number;
}

/** A run directory with config.yaml, metrics.jsonl (validation at steps 0 and 4) and val_prompts.jsonl for step 4. */
function writeRun(dir: string, seed: number, prompts: PromptCounts[], options: { k?: number; hashes?: string[]; valPrompts?: boolean } = {}): string {
  const k = options.k ?? 4;
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'config.yaml'), YAML.stringify({ algorithm: { name: 'grpo' }, trainer: { seed } }));
  const withCorrect = prompts.filter((p) => p.correct > 0);
  const validation = {
    'val/accuracy': mean(prompts.map((p) => p.correct / k)),
    'val/k': k,
    'val/pass@1': mean(prompts.map((p) => passAtK(k, p.correct, 1))),
    'val/pass@2': mean(prompts.map((p) => passAtK(k, p.correct, 2))),
    [`val/pass@${k}`]: mean(prompts.map((p) => passAtK(k, p.correct, k))),
    'val/pass@k': mean(prompts.map((p) => (p.correct > 0 ? 1 : 0))),
    'val/distinct_correct': mean(prompts.map((p) => p.distinct)),
    'val/correct_entropy': withCorrect.length ? mean(withCorrect.map((p) => p.entropy)) : 0,
  };
  const lines = [{ step: 0, ...validation, 'val/accuracy': 0.25 }, { step: 2, 'critic/score/mean': 0.1 }, { step: 4, ...validation }];
  fs.writeFileSync(path.join(dir, 'metrics.jsonl'), lines.map((l) => JSON.stringify(l) + '\n').join(''));
  if (options.valPrompts !== false) {
    const records = prompts.map((p, i) => JSON.stringify({ step: 4, prompt: i, hash: options.hashes?.[i] ?? `h${i}`, k, ...p }) + '\n');
    // A stale earlier step, as a real run has: only the final step's records are paired.
    fs.writeFileSync(path.join(dir, VAL_PROMPTS_FILE), prompts.map((_, i) => JSON.stringify({ step: 0, prompt: i, hash: `h${i}`, k, correct: 0, distinct: 0, entropy: 0 }) + '\n').join('') + records.join(''));
  }
  return dir;
}

const counts = (correct: number[], entropy: number[] = []): PromptCounts[] => correct.map((c, i) => ({ correct: c, distinct: Math.min(c, 2), entropy: entropy[i] ?? 0 }));

describe('compareRuns', () => {
  let root: string;
  before(() => {
    root = tempDir('flowrl-compare-stats-');
    // Baseline a and config b, seeds 1 and 2, four prompts, k 4.
    writeRun(path.join(root, 'a-1'), 1, counts([4, 2, 0, 1], [0, Math.LN2, 0, 0]));
    writeRun(path.join(root, 'a-2'), 2, counts([3, 1, 0, 2]));
    writeRun(path.join(root, 'b-1'), 1, counts([4, 3, 1, 1], [0, Math.LN2, 0, 0]));
    writeRun(path.join(root, 'b-2'), 2, counts([4, 2, 1, 2], [Math.LN2, 0, 0, 0]));
  });
  const group = (name: string, seeds = [1, 2]) => ({ name, dirs: seeds.map((s) => path.join(root, `${name}-${s}`)) });

  it('gives each config its final metrics with t intervals over seeds, in display order', () => {
    const c = compareRuns([group('a'), group('b')], { resamples: 200 });
    expect(c.metrics.map((m) => m.label)).to.deep.equal(['Avg@4 (accuracy)', 'pass@1', 'pass@2', 'pass@4', 'distinct correct', 'correct entropy']);
    // a: accuracy 7/16 and 6/16; s = 0.0625/√2, half-width t_{0.975,1} · s/√2.
    const a = c.groups[0].final.get('val/accuracy')!;
    expect(a.mean).to.be.closeTo(0.40625, 1e-12);
    expect(a.high! - a.mean).to.be.closeTo(12.7062047 * 0.03125, 1e-6);
    expect(c.groups[0].before.get('val/accuracy')).to.deep.include({ mean: 0.25, n: 2 });
    expect(comparisonText(c)).to.include.members([
      'Avg@4 (accuracy)        0.406 [0.009, 0.803]      0.563 [0.563, 0.563]',
    ]);
    // Every metric at step 0 too, in a table of its own (accuracy is 0.25 there in every run).
    const text = comparisonText(c);
    const before = text.indexOf('at step 0, before training (the same seeds and prompts)');
    expect(before).to.be.greaterThan(text.indexOf('Avg@4 (accuracy)        0.406 [0.009, 0.803]      0.563 [0.563, 0.563]'));
    expect(text[before + 2]).to.equal('Avg@4 (accuracy)        0.250 [0.250, 0.250]      0.250 [0.250, 0.250]');
    expect(text[before + 3]).to.match(/^pass@1 {18}0\.\d{3} \[/);
    // A name longer than the column still leaves two spaces before the next.
    const long = comparisonText(compareRuns([{ name: 'reinforce_plus_plus_long', dirs: group('a').dirs }, group('b')], { resamples: 50 }));
    expect(long[1]).to.equal('metric                  reinforce_plus_plus_long (2 seeds)  b (2 seeds)');
  });

  it('pairs seeds and prompts: the difference, the per-seed t interval and a bootstrap interval around it', () => {
    const c = compareRuns([group('a'), group('b')], { resamples: 2000 });
    expect(c.pairs).to.have.length(1);
    const p = c.pairs[0];
    expect(p).to.include({ name: 'b', baseline: 'a', prompts: 4 });
    expect(p.seeds).to.deep.equal([1, 2]);
    const accuracy = p.metrics.find((m) => m.key === 'val/accuracy')!;
    // Per seed: 9/16 − 7/16 = 0.125 and 9/16 − 6/16 = 0.1875.
    expect(accuracy.difference).to.be.closeTo(0.15625, 1e-12);
    expect(accuracy.t.high! - accuracy.difference).to.be.closeTo(12.7062047 * 0.03125, 1e-6);
    expect(accuracy.t.low!).to.be.below(0);
    // Every per-prompt difference is 0 or +¼, so every resample lies in [0, ¼].
    expect(accuracy.bootstrap.low).to.be.within(0, accuracy.difference);
    expect(accuracy.bootstrap.high).to.be.within(accuracy.difference, 0.25);
    expect(accuracy.significant).to.equal(false);
    // Entropy: the mean over prompts with a correct sample; a: ln2/3 and 0, b: ln2/4 and ln2/4.
    const entropy = p.metrics.find((m) => m.key === 'val/correct_entropy')!;
    expect(entropy.difference).to.be.closeTo((Math.LN2 / 4 - Math.LN2 / 3 + Math.LN2 / 4) / 2, 1e-12);
    // The same for the same seed: deterministic.
    expect(compareRuns([group('a'), group('b')], { resamples: 2000 }).pairs[0].metrics[0].bootstrap).to.deep.equal(accuracy.bootstrap);
  });

  it('as Markdown (compare --markdown): the largest pass@j only, the base row from the baseline, bold where significant', () => {
    const c = compareRuns([group('a'), group('b')], { resamples: 2000 });
    const md = comparisonMarkdown(c);
    expect(md[0]).to.equal('|  | seeds | Avg@4 (accuracy) | pass@4 | distinct correct | correct entropy |');
    expect(md[2]).to.equal('| a | 2 | 0.406 [0.009, 0.803] | ' + md[2].split(' | ').slice(3).join(' | '));
    expect(md[4]).to.match(/^\| base policy \(step 0\) \| 2 \| 0\.250 \[0\.250, 0\.250\] \| /);
    const accuracy = c.pairs[0].metrics[0];
    const f = (v: number) => (v < 0 ? '−' : '+') + Math.abs(v).toFixed(3);
    expect(md[6]).to.equal('| config − a | Avg@4 (accuracy) | pass@4 | distinct correct | correct entropy |');
    expect(md[8].split(' | ')[1]).to.equal(`${f(accuracy.difference)} [${f(accuracy.bootstrap.low)}, ${f(accuracy.bootstrap.high)}] [${f(accuracy.t.low!)}, ${f(accuracy.t.high!)}]`);
    expect(md[8]).to.match(/^\| b \(seeds 1, 2\) \| /);
    // A significant difference is bold; one seed has no t interval.
    const dir = tempDir('flowrl-compare-md-');
    const groups = ['a', 'b'].map((name) => ({ name, dirs: [] as string[] }));
    for (const seed of [1, 2, 3]) {
      const base = Array.from({ length: 40 }, (_, p) => p % 4);
      groups[0].dirs.push(writeRun(path.join(dir, `a-${seed}`), seed, counts(base)));
      groups[1].dirs.push(writeRun(path.join(dir, `b-${seed}`), seed, counts(base.map((k, p) => k + (p % (seed + 1) === 0 ? 1 : 0)))));
    }
    expect(comparisonMarkdown(compareRuns(groups, { baseline: 'b' })).at(-1)).to.match(/^\| a \(seeds 1, 2, 3\) \| \*\*−0\.\d{3}\*\* \[−0\.\d{3}, −0\.\d{3}\] \[−0\.\d{3}, −0\.\d{3}\] \| /);
    const one = compareRuns([{ name: 'a', dirs: [groups[0].dirs[0]] }, { name: 'b', dirs: [groups[1].dirs[0]] }]);
    expect(comparisonMarkdown(one).at(-1)).to.match(/\] n\/a \| /);
  });

  it('with one seed and two prompts, the bootstrap interval spans the two prompt differences', () => {
    const dir = tempDir('flowrl-compare-one-');
    writeRun(path.join(dir, 'a-1'), 1, counts([1, 3]));
    writeRun(path.join(dir, 'b-1'), 1, counts([2, 1]));
    const c = compareRuns([{ name: 'a', dirs: [path.join(dir, 'a-1')] }, { name: 'b', dirs: [path.join(dir, 'b-1')] }]);
    const accuracy = c.pairs[0].metrics[0];
    // Resamples of two prompts: both the first (¼), one each, or both the second (−½).
    expect(accuracy.difference).to.be.closeTo(-0.125, 1e-12);
    expect(accuracy.bootstrap).to.deep.equal({ low: -0.5, high: 0.25 });
    expect(accuracy.t.low).to.equal(null);
    expect(comparisonText(c).join('\n')).to.match(/^Avg@4 \(accuracy\)\s+-0\.125\s+\[-0\.500, \+0\.250\]\s+n\/a \(one seed\)\s+no$/m);
  });

  it('calls a consistent difference over seeds and prompts significant, against the baseline given', () => {
    const dir = tempDir('flowrl-compare-sig-');
    const groups = ['a', 'b'].map((name) => ({ name, dirs: [] as string[] }));
    for (const seed of [1, 2, 3]) {
      const base = Array.from({ length: 40 }, (_, p) => p % 4);
      // b: one more correct sample on every (seed+1)-th prompt.
      const better = base.map((c, p) => c + (p % (seed + 1) === 0 ? 1 : 0));
      groups[0].dirs.push(writeRun(path.join(dir, `a-${seed}`), seed, counts(base)));
      groups[1].dirs.push(writeRun(path.join(dir, `b-${seed}`), seed, counts(better)));
    }
    const c = compareRuns(groups, { baseline: 'b' });
    const p = c.pairs[0];
    expect(p).to.include({ name: 'a', baseline: 'b', prompts: 40 });
    const accuracy = p.metrics[0];
    expect(accuracy.difference).to.be.below(0);
    expect(accuracy.bootstrap.high).to.be.below(0);
    expect(accuracy.t.high!).to.be.below(0);
    expect(accuracy.significant).to.equal(true);
    expect(comparisonText(c).join('\n')).to.match(/^Avg@4 \(accuracy\)\s+-0\.\d{3}\s+\[-0\.\d{3}, -0\.\d{3}\]\s+\[-0\.\d{3}, -0\.\d{3}\]\s+yes$/m);
  });

  it('skips a pair without per-prompt results or with other prompts, and names an unknown baseline', () => {
    const dir = tempDir('flowrl-compare-skip-');
    const a = writeRun(path.join(dir, 'a-1'), 1, counts([1, 2]));
    const bare = writeRun(path.join(dir, 'b-1'), 1, counts([1, 2]), { valPrompts: false });
    const other = writeRun(path.join(dir, 'c-1'), 1, counts([1, 2]), { hashes: ['h0', 'x'] });
    const c = compareRuns([{ name: 'a', dirs: [a] }, { name: 'b', dirs: [bare] }, { name: 'c', dirs: [other] }]);
    expect(c.pairs[0].skipped).to.equal(`no per-prompt validation results (val_prompts.jsonl) for step 4 in ${bare}`);
    expect(c.pairs[1].skipped).to.equal(`${other} validated other prompts or another k than ${a}`);
    expect(comparisonText(c)).to.include(`b - a: no paired comparison (${c.pairs[0].skipped})`);
    expectInputError(() => compareRuns([{ name: 'a', dirs: [a] }], { baseline: 'z' }), '--baseline', "'z'", 'a');
  });
});

describe('val_prompts.jsonl', () => {
  it('starts empty for a fresh run, keeps the records up to the resumed step, and reads one step', () => {
    const dir = tempDir('flowrl-val-prompts-');
    const record = { prompt: 0, hash: 'h', k: 2, correct: 1, distinct: 1, entropy: 0 };
    const log = new ValPromptLog(dir, { startStep: 0, resumed: false });
    log.append(0, [record, { ...record, prompt: 1 }]);
    log.append(5, [record]);
    log.append(10, [record]);
    new ValPromptLog(dir, { startStep: 5, resumed: true });
    expect(fs.readFileSync(log.file, 'utf8').trim().split('\n').map((l) => JSON.parse(l).step)).to.deep.equal([0, 0, 5]);
    expect([...readValPrompts(dir, 0)!.keys()]).to.deep.equal([0, 1]);
    expect(readValPrompts(dir, 10)!.size).to.equal(0);
    new ValPromptLog(dir, { startStep: 0, resumed: false });
    expect(fs.readFileSync(log.file, 'utf8')).to.equal('');
    expect(readValPrompts(tempDir(), 0)).to.equal(null);
    fs.writeFileSync(log.file, '{"step": 0, "prompt": 0, "k": 2}\n');
    expectInputError(() => readValPrompts(dir, 0), log.file, 'line 1', 'correct');
  });
});
