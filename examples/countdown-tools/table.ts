// The tables of README.md from the runs compare.sh leaves (seeds complete for all four configs).
// With tools the prompt carries the tool list, so `flowrl compare`'s per-prompt pairing (which
// checks that both runs validated the same prompt text) refuses tools against no tools; here the
// pairs are by seed and by problem (the same 256 validation problems in the same order).
//   npx tsx examples/countdown-tools/table.ts [RUNS_DIR]
import fs from 'node:fs';
import path from 'node:path';
import { crossedBootstrap, mean, percentileInterval, tInterval } from '../../core-adapters/report/statistics.js';

const runs = path.resolve(process.argv[2] ?? 'runs/countdown-tools');
const CONFIGS = ['grpo-no-tools', 'grpo-tools', 'flowrl-no-tools', 'flowrl-tools'];
const STEPS = 100;

type Line = Record<string, number>;
type PromptRecord = { step: number; prompt: number; k: number; correct: number; distinct: number };
const dirOf = (config: string, seed: number) => path.join(runs, `${config}-seed${seed}`);
const lines = (file: string) => fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Line);
const finished = (config: string, seed: number) => {
  const file = path.join(dirOf(config, seed), 'metrics.jsonl');
  return fs.existsSync(file) && lines(file).some((l) => l.step === STEPS && 'val/accuracy' in l);
};
// Every seed with all four runs finished (compare.sh's are 2-6).
const seeds = [...new Set(fs.readdirSync(runs).map((d) => /-seed(\d+)$/.exec(d)?.[1]).filter((s) => s !== undefined).map(Number))]
  .sort((a, b) => a - b)
  .filter((s) => CONFIGS.every((c) => finished(c, s)));
if (!seeds.length) throw new Error(`${runs}: no seed has all four runs finished`);

/** A run's validation lines at step 0 and at the end. */
const validation = (config: string, seed: number) => {
  const v = lines(path.join(dirOf(config, seed), 'metrics.jsonl')).filter((l) => 'val/accuracy' in l);
  return { before: v.find((l) => l.step === 0)!, after: v.find((l) => l.step === STEPS)! };
};
const cell = (values: number[]) => {
  const i = tInterval(values);
  return i.low === null ? i.mean.toFixed(3) : `${i.mean.toFixed(3)} [${i.low.toFixed(3)}, ${i.high!.toFixed(3)}]`;
};

console.log(`seeds ${seeds.join(', ')} (runs in ${path.relative(process.cwd(), runs) || runs}); mean [95 % t interval over seeds]\n`);
console.log('| config | accuracy before | accuracy after | pass@8 before | pass@8 after | distinct correct after | tool calls a trajectory, step 1 -> 100 |');
console.log('|---|---|---|---|---|---|---|');
for (const config of CONFIGS) {
  const v = seeds.map((s) => validation(config, s));
  const training = seeds.map((s) => lines(path.join(dirOf(config, s), 'metrics.jsonl')).filter((l) => 'agent_loop/tool_calls/mean' in l));
  const calls = training[0].length ? `${mean(training.map((t) => t[0]['agent_loop/tool_calls/mean'])).toFixed(2)} -> ${mean(training.map((t) => t[t.length - 1]['agent_loop/tool_calls/mean'])).toFixed(2)}` : '-';
  console.log(`| ${config} | ${cell(v.map((x) => x.before['val/accuracy']))} | ${cell(v.map((x) => x.after['val/accuracy']))} | ${cell(v.map((x) => x.before['val/pass@8']))} | ${cell(v.map((x) => x.after['val/pass@8']))} | ${cell(v.map((x) => x.after['val/distinct_correct']))} | ${calls} |`);
}

/** The final validation's per-problem records of a run, in problem order. */
const problems = (config: string, seed: number) =>
  fs.readFileSync(path.join(dirOf(config, seed), 'val_prompts.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as PromptRecord).filter((r) => r.step === STEPS).sort((a, b) => a.prompt - b.prompt);

console.log('\n| difference (after RL) | accuracy | pass@8 |');
console.log('|---|---|---|');
for (const [a, b] of [['grpo-tools', 'grpo-no-tools'], ['flowrl-tools', 'flowrl-no-tools'], ['flowrl-tools', 'grpo-tools'], ['flowrl-no-tools', 'grpo-no-tools']]) {
  const pairs = seeds.map((s) => [problems(a, s), problems(b, s)]);
  const n = pairs[0][0].length;
  const accuracy = (r: PromptRecord) => r.correct / r.k;
  const solved = (r: PromptRecord) => (r.correct > 0 ? 1 : 0);
  const cells = [accuracy, solved].map((value) => {
    const perSeed = pairs.map(([x, y]) => mean(x.map(value)) - mean(y.map(value)));
    // Seeds and problems resampled together (the crossed bootstrap flowrl compare uses).
    const [replicates] = crossedBootstrap(seeds.length, n, (rows, weights) => {
      let total = 0;
      for (const r of rows) {
        const [x, y] = pairs[r];
        let sum = 0;
        let count = 0;
        for (let j = 0; j < n; j++) {
          sum += weights[j] * (value(x[j]) - value(y[j]));
          count += weights[j];
        }
        total += sum / count;
      }
      return [total / rows.length];
    });
    const boot = percentileInterval(replicates);
    const t = tInterval(perSeed);
    const sign = (v: number) => `${v >= 0 ? '+' : ''}${v.toFixed(3)}`;
    return `${sign(t.mean)} (seeds ${perSeed.map(sign).join(', ')}; t ${t.low === null ? 'n/a' : `[${sign(t.low)}, ${sign(t.high!)}]`}; bootstrap [${sign(boot.low)}, ${sign(boot.high)}])`;
  });
  console.log(`| ${a} - ${b} | ${cells.join(' | ')} |`);
}
