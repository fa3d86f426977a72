import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { meanAndSpread } from '../core-adapters/cli/compare.js';
import { fixture, flowrlInProcess, ROOT, tempDir } from './helpers.js';

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

  it('mean ± spread uses the sample standard deviation', () => {
    expect(meanAndSpread([1, 2, 3])).to.equal('2.000 ± 1.000');
    expect(meanAndSpread([0.5])).to.equal('0.500 ± 0.000');
  });

  it('runs each config with the same seeds and writes one report and a table', async () => {
    const dir = tempDir();
    const out = path.join(dir, 'out');
    const run = await flowrlInProcess(['compare', config(dir, 'grpo'), config(dir, 'flowrl'), '--seeds', '2', '--out', out]);
    expect(run.status, run.stderr).to.equal(0);
    expect(fs.readdirSync(out).sort()).to.deep.equal(['flowrl-seed1', 'flowrl-seed2', 'grpo-seed1', 'grpo-seed2', 'report.html']);
    for (const name of ['grpo-seed2', 'flowrl-seed1']) {
      const saved = YAML.parse(fs.readFileSync(path.join(out, name, 'config.yaml'), 'utf8'));
      expect(saved.trainer.seed).to.equal(Number(name.at(-1)));
    }
    expect(run.stdout).to.match(/^grpo\s+\d\.\d{3} ± \d\.\d{3}/m);
    expect(run.stdout).to.match(/^flowrl\s+\d\.\d{3} ± \d\.\d{3}/m);
    const html = fs.readFileSync(path.join(out, 'report.html'), 'utf8');
    expect(html).to.include('grpo seed 2').and.to.include('flowrl seed 1');
  });
});
