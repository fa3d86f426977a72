import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { passAtK } from '../core-adapters/trainer/pass-at-k.js';
import { readValPrompts } from '../core-adapters/trainer/val-prompts.js';
import { fixture, flowrlInProcess, ROOT, tempDir, withoutTiming } from './helpers.js';

const COUNTDOWN = fixture('countdown');

function config(dir: string, algorithm: string): string {
  const file = path.join(dir, `${algorithm}.yaml`);
  fs.writeFileSync(
    file,
    YAML.stringify({
      plugins: [path.join(ROOT, 'plugin.json')],
      data: {
        train_files: path.join(COUNTDOWN, 'data', 'train.jsonl'),
        val_files: path.join(COUNTDOWN, 'data', 'val.jsonl'),
        train_batch_size: 4,
        val_max_samples: 8,
        max_prompt_length: 32,
        max_response_length: 16,
      },
      actor_rollout_ref: { model: { path: path.join(COUNTDOWN, 'base-model') }, actor: { ppo_mini_batch_size: 4 }, rollout: { n: 4, val_kwargs: { n: 2, temperature: 1, do_sample: true } } },
      algorithm: { name: algorithm },
      trainer: { total_training_steps: 2, test_freq: 2, progress: false },
      engine: { workers: 1 },
    }),
  );
  return file;
}

describe('flowrl compare', function () {
  this.timeout(300000);

  it('runs each config with the same seeds (from --first-seed) and writes one report and a table', async () => {
    const dir = tempDir();
    const out = path.join(dir, 'out');
    const run = await flowrlInProcess(['compare', config(dir, 'grpo'), config(dir, 'flowrl'), '--seeds', '2', '--first-seed', '2', '--out', out, '--baseline', 'flowrl']);
    expect(run.status, run.stderr).to.equal(0);
    expect(fs.readdirSync(out).sort()).to.deep.equal(['flowrl-seed2', 'flowrl-seed3', 'grpo-seed2', 'grpo-seed3', 'report.html']);
    for (const name of ['grpo-seed3', 'flowrl-seed2']) {
      const saved = YAML.parse(fs.readFileSync(path.join(out, name, 'config.yaml'), 'utf8'));
      expect(saved.trainer.seed).to.equal(Number(name.at(-1)));
    }
    // Means with 95 % t intervals over the two seeds, then the pair against the baseline given.
    expect(run.stdout).to.match(/^metric\s+grpo \(2 seeds\)\s+flowrl \(2 seeds\)$/m);
    for (const label of ['Avg@2 \\(accuracy\\)', 'pass@1', 'pass@2', 'distinct correct', 'correct entropy']) {
      expect(run.stdout).to.match(new RegExp(`^${label}(\\s+\\d\\.\\d{3} \\[-?\\d\\.\\d{3}, -?\\d\\.\\d{3}\\]){2}$`, 'm'));
    }
    expect(run.stdout).to.include('grpo - flowrl, paired over seeds 2, 3 and the same 8 validation prompts');
    expect(run.stdout).to.match(/^pass@2\s+[+-]\d\.\d{3}\s+\[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]\s+\[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]\s+(yes|no)$/m);
    // Per-prompt results at each validation step reproduce the metrics the run logged.
    for (const name of ['grpo-seed2', 'flowrl-seed3']) {
      const logged = fs.readFileSync(path.join(out, name, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((m) => 'val/accuracy' in m);
      expect(logged.map((m) => m.step)).to.deep.equal([0, 2]);
      for (const m of logged) {
        const records = [...readValPrompts(path.join(out, name), m.step)!.values()];
        expect(records.map((r) => r.prompt)).to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7]);
        const avg = (f: (r: (typeof records)[number]) => number) => records.reduce((s, r) => s + f(r), 0) / records.length;
        expect(avg((r) => r.correct / r.k)).to.be.closeTo(m['val/accuracy'], 1e-12);
        for (const j of [1, 2]) expect(avg((r) => passAtK(r.k, r.correct, j))).to.be.closeTo(m[`val/pass@${j}`], 1e-12);
        expect(avg((r) => r.distinct)).to.be.closeTo(m['val/distinct_correct'], 1e-12);
        const solved = records.filter((r) => r.correct > 0);
        expect(solved.length ? solved.reduce((s, r) => s + r.entropy, 0) / solved.length : 0).to.be.closeTo(m['val/correct_entropy'], 1e-12);
      }
    }
    const html = fs.readFileSync(path.join(out, 'report.html'), 'utf8');
    expect(html).to.include('grpo seed 3').and.to.include('flowrl seed 2');
    expect(html).to.include('<table id="comparison-summary">').and.to.include('<table id="comparison-paired">');
    expect(html).to.include('<section id="plot-pass-at-k-curve" class="plot">');

    // --resume after an interruption that lost one run: the finished runs train no more (their
    // step timings are kept byte for byte), the lost one trains again, and the table is the same.
    const metricsOf = (name: string) => fs.readFileSync(path.join(out, name, 'metrics.jsonl'), 'utf8');
    const kept = metricsOf('grpo-seed2');
    const lost = metricsOf('flowrl-seed3');
    fs.rmSync(path.join(out, 'flowrl-seed3'), { recursive: true });
    const resumed = await flowrlInProcess(['compare', config(dir, 'grpo'), config(dir, 'flowrl'), '--seeds', '2', '--first-seed', '2', '--out', out, '--baseline', 'flowrl', '--resume']);
    expect(resumed.status, resumed.stderr).to.equal(0);
    expect(metricsOf('grpo-seed2')).to.equal(kept);
    expect(metricsOf('flowrl-seed3')).to.not.equal(lost);
    const steps = (text: string) => text.trim().split('\n').map((l) => withoutTiming(JSON.parse(l)));
    expect(steps(metricsOf('flowrl-seed3'))).to.deep.equal(steps(lost));
    expect(resumed.stdout).to.equal(run.stdout);
  });

  it('--baseline must name a compared config, and config names must differ (exit 2, before any training)', async () => {
    const dir = tempDir();
    const out = path.join(dir, 'out');
    const run = await flowrlInProcess(['compare', config(dir, 'grpo'), config(dir, 'flowrl'), '--out', out, '--baseline', 'ppo']);
    expect(run.status).to.equal(2);
    expect(run.stderr).to.include("--baseline: 'ppo' is not one of the compared configs (grpo, flowrl)");
    expect(fs.existsSync(out)).to.equal(false);
    const other = path.join(dir, 'other');
    fs.mkdirSync(other);
    const twice = await flowrlInProcess(['compare', config(dir, 'grpo'), config(other, 'grpo'), '--out', out]);
    expect(twice.status).to.equal(2);
    expect(twice.stderr).to.include("two configs are named 'grpo'");
  });

  it('flowrl eval prints Avg@k and pass@j for every j on stderr, and the metrics as its one stdout line', async () => {
    const dir = tempDir();
    const run = await flowrlInProcess(['eval', config(dir, 'grpo'), `trainer.default_local_dir=${path.join(dir, 'run')}`, 'actor_rollout_ref.rollout.val_kwargs.n=4']);
    expect(run.status, run.stderr).to.equal(0);
    expect(run.stdout.trim().split('\n')).to.have.length(1);
    const metrics = JSON.parse(run.stdout);
    const lines = run.stderr.trim().split('\n');
    const first = lines.findIndex((l) => l === 'validation, k = 4 samples per prompt');
    expect(first).to.be.at.least(0);
    const row = (label: string) => lines.find((l) => l.startsWith(label + ' '))?.split(/\s+/).at(-1);
    expect(row('Avg@4 (mean accuracy over k samples)')).to.equal(metrics['val/accuracy'].toFixed(3));
    for (const j of [1, 2, 4]) expect(row(`pass@${j}`)).to.equal(metrics[`val/pass@${j}`].toFixed(3));
    expect(row('distinct correct per prompt')).to.equal(metrics['val/distinct_correct'].toFixed(3));
    // The matching metrics, exact on countdown (so no estimate note).
    expect(row('entropy over all correct')).to.equal(metrics['val/matching/entropy'].toFixed(3));
    expect(row('KL to reference over correct')).to.equal(metrics['val/matching/kl'].toFixed(3));
    expect(metrics['val/matching/exact']).to.equal(1);
    expect(run.stderr).to.not.include('an estimate');
    // flowrl eval leaves no per-prompt file behind (only fit writes one).
    expect(fs.existsSync(path.join(dir, 'run', 'val_prompts.jsonl'))).to.equal(false);
  });
});
